// `tracrctl results exits RUN [--thresholds T] [--measure M] [--csv FILE]`
// (#44): the offline threshold sweep of a run with early exits
// (analysis/exits.hpp), and the exited/sent summary `results show` prints.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <optional>

#include "analysis/plan.hpp"
#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::controller {

// thresholds: analysis::parse_thresholds text ("" = 0.5:0.99:0.01 and the
// run's own); measure "" = the run's. Error invalid_argument for a run
// without exits or bad options; csv: also written as tidy CSV.
Status print_exit_sweep(store::ResultsDb& db, int64_t run_id, const std::string& thresholds,
                        const std::string& measure, const std::string& csv);

// Whether run_id's experiment had exits.
bool has_exits(store::ResultsDb& db, int64_t run_id);
// `tracrctl plan` on a basis run with exits (#44): every (split, threshold)
// on the link `p` was planned for (analysis::plan_exits), the front and
// the choice printed: with max_latency_ms the most accurate pair within it,
// with min_accuracy the fastest pair that reaches it. `check` (--validate /
// --validate-on): runs whose offline sweeps measure every pair (each pair's
// median over them), against which the choice is judged: its measured
// latency and accuracy, the measured best under the same constraint, the
// planned latency's MAPE over the pairs.
Status print_exit_plan(store::ResultsDb& db, int64_t run_id, const analysis::Plan& p,
                       std::optional<double> max_latency_ms, std::optional<double> min_accuracy,
                       const std::vector<int64_t>& check = {});

// Per placement: frames that ended at an exit and frames that were sent,
// apart (count, rate, mean latency, accuracy). Nothing for a run without exits.
Status print_exit_summary(store::ResultsDb& db, int64_t run_id, std::FILE* out);

}  // namespace tracr::controller
