// `tracrctl report RUN [RUN ...] -o report.html`: one self-contained HTML
// file (Chart.js from Debian's libjs-chart.js inlined, no network needed to
// open it) with, per run: stacked time per split, bytes per split, energy per
// split with each figure's source, predicted against measured latency (the
// run's newest validated plan), split and link estimate over the run's
// frames, and the run's settings and hardware identities.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/results.hpp"
#include "protocol/error.hpp"

namespace tracr::analysis {

// Where Chart.js is read from (Debian's libjs-chart.js).
inline constexpr const char* kChartJsPath = "/usr/share/javascript/chart.js/chart.min.js";

// The report's HTML. Error not_found for an unknown run or a missing
// Chart.js (naming the package to install).
Result<std::string> render_report(store::ResultsDb& db, const std::vector<int64_t>& runs,
                                  const std::string& chartjs_path = kChartJsPath);

struct ReportOptions {
  std::vector<std::string> runs;  // run ids or "last" (at least one)
  std::string out;                // -o FILE.html
  std::string db = "results/tracr.db";
  std::string chartjs = kChartJsPath;
};
// Returns 0 written, 1 a database or write error, 2 an unknown RUN.
int cmd_report(const ReportOptions& opt);

}  // namespace tracr::analysis
