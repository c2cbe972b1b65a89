// `tracrctl report RUN [RUN ...] -o report.html [--figures DIR]`: one
// self-contained HTML file whose figures compare the runs given (the SVGs
// matplotlib drew for --figures, inlined: no script and no network needed to
// open it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/figures.hpp"
#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::analysis {

// The report's HTML: the figures `figs` comparing every run, as
// write_figures drew them in `figures_dir` (DIR/<id>.svg inlined, its notes
// under it), then per run its hardware identities and settings. Errors from
// the database pass through (not_found for an unknown run); io when a
// figure's SVG cannot be read.
Result<std::string> render_report(store::ResultsDb& db, const std::vector<int64_t>& runs,
                                  const std::vector<Figure>& figs, const std::string& figures_dir);

}  // namespace tracr::analysis
