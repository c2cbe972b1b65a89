// `tracrctl report RUN [RUN ...] -o report.html [--figures DIR]`: one
// self-contained HTML file whose figures compare the runs given (SVG drawn
// from the data, no script and no network needed to open it), and with
// --figures each figure as SVG, PDF and CSV.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::analysis {

// The report's HTML: the figures of analysis/figures.hpp comparing every
// run, inlined as SVG, then per run its hardware identities and settings.
// Errors from the database pass through (not_found for an unknown run).
Result<std::string> render_report(store::ResultsDb& db, const std::vector<int64_t>& runs);

struct ReportOptions {
  std::vector<std::string> runs;  // run ids or "last" (at least one)
  std::string out;                // -o FILE.html ("" = no page)
  std::string figures;            // --figures DIR: every figure as SVG, PDF and CSV ("" = none)
  std::string db;                 // --db ("" = default_results_db())
};
// Returns 0 written, 1 a database or write error, 2 an unknown RUN or neither
// -o nor --figures.
int cmd_report(const ReportOptions& opt);

}  // namespace tracr::analysis
