// tracrctl report RUN [RUN ...] -o report.html [--figures DIR].
#pragma once

#include <string>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::controller {

struct ReportOptions {
  std::vector<std::string> runs;  // run ids or "last" (at least one)
  std::string out;                // -o FILE.html ("" = no page)
  std::string figures;            // --figures DIR: every figure as PDF, SVG, PNG, CSV and script ("" = none)
  std::string size = "page";      // --size column|page
  bool log_y = false, linear_y = false;  // --log-y / --linear-y (neither: chosen per figure)
  std::vector<std::string> only;  // --only FIG,... (empty: every figure with data)
  std::string db;                 // --db ("" = default_results_db())
};
// Fails with a database or write error (exit 1), or an unknown RUN or neither
// -o nor --figures (exit 2).
Status cmd_report(const ReportOptions& opt);

}  // namespace tracr::controller
