// A run's stored rows written out as CSV or JSON (`results export`), and
// several runs in one file each as tidy CSV that pandas.read_csv reads
// directly (RFC 4180, a header row, one observation per row).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::store {

// Writes the run's frames as CSV (RFC 4180, a header row, one row per frame).
// Error io naming the file when it cannot be written.
Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file);
// Writes {"run": {...}, "devices": [...], "probes": [...], "summaries": [...],
// "stage_stats": [...], "accuracy": [...], "frames": [...], "frame_topk": [...],
// "outputs": [...], "model_layers": [...], "layer_profiles": [...], "segment_profiles": [...],
// "events": [...]} as JSON, every column of each. Error io naming the file.
Status export_run_json(ResultsDb& db, int64_t run_id, const std::string& file);

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

// Split k -> the name of layer k-1 (the last on the participant), from the
// run's layer profiles; empty when the run profiled none.
Result<std::map<int, std::string>> cut_names(ResultsDb& db, int64_t run_id);

}  // namespace tracr::store
