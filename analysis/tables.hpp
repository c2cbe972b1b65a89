// The tables `results show`, `run` and `models` print from stored results.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "store/results.hpp"

namespace tracr::analysis {

// Prints the per-split table of a run (as `results show` does, without the
// run header) to `out`; `tracrctl run` calls it at the end of a sweep.
// Errors from the database pass through (not_found for an unknown run).
// wide: every column (all stage medians, failed/flagged, bytes, ratio);
// otherwise the table fits 120 columns, and `width` columns when given (a
// narrower terminal): columns are left out, and a line names them.
Status print_split_table(store::ResultsDb& db, int64_t run_id, std::FILE* out = stdout, bool wide = false,
                         size_t width = 0);

// Prints the run's link probes (nothing when it has none).
Status print_probe_table(store::ResultsDb& db, int64_t run_id, std::FILE* out = stdout, size_t width = 0);
// Per split, device, stage and source: median and p95 energy, each figure beside its source.
Status print_energy_table(store::ResultsDb& db, int64_t run_id, std::FILE* out = stdout);

// The aligned per-split table text for a set of summaries; the split with the
// lowest median total time is marked with '*'. cut_names: split k -> the name
// of layer k-1 (the last on the participant). Not wide: fits 120 columns
// (names longer than 14 characters keep their end); wide: every column.
// Top-1/top-5 accuracy columns appear when any split has labelled samples.
// width > 0 (not wide): up MB/s, frames/s, total p95 and frames are left out
// in that order while the table is wider, and a line names them.
std::string format_split_table(const std::vector<store::SplitSummary>& rows, bool wide = false,
                               const std::map<int, std::string>& cut_names = {}, size_t width = 0);

// When a command changed the split or codec during the run (an adaptive
// switch, `commands:`), the timed frames in time order, per participant, cut
// into phases of one split, codec and policy: frame range, count, median and
// p95 total, and the median of the phase's last 8 frames (the conditions a
// switch at its end saw). "" when every frame ran as the sweep planned.
std::string format_phase_table(const std::vector<store::FrameRecord>& frames);

}  // namespace tracr::analysis
