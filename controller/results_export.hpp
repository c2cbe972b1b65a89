// `tracrctl results export RUN... --csv FILE --summary-csv FILE`: several
// runs in one file each, as tidy CSV that pandas.read_csv reads directly
// (RFC 4180, a header row, one observation per row).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/results.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

// The frames of every run given, one row per frame, every column of the
// frames table (run_id tells the runs apart). Error not_found for an unknown
// run, io naming the file when it cannot be written.
Status export_frames_csv(ResultsDb& db, const std::vector<int64_t>& runs, const std::string& file);

// The per-split summaries of every run given, one row per run x split x
// stage (total and each summarised duration of record_fields.def), with the
// run's attributes and the split's counts, bytes and accuracy repeated on
// each of its rows. Durations in ms (median, nearest-rank p95, mean, min,
// max over the split's ok, non-warm-up frames). Errors as above.
Status export_summary_csv(ResultsDb& db, const std::vector<int64_t>& runs, const std::string& file);

// The header of export_summary_csv, in order.
const std::vector<std::string>& summary_csv_columns();

}  // namespace tracr::controller
