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

}  // namespace tracr::analysis
