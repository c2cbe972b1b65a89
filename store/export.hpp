// A run's stored rows written out as CSV or JSON (`results export`).
#pragma once

#include <cstdint>
#include <string>

#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::store {

// Writes the run's frames as CSV (RFC 4180, a header row, one row per frame).
// Error io naming the file when it cannot be written.
Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file);
// Writes {"run": {...}, "devices": [...], "probes": [...], "summaries": [...],
// "stage_stats": [...], "accuracy": [...], "frames": [...], "frame_topk": [...],
// "outputs": [...], "layer_profiles": [...], "events": [...]} as JSON, every
// column of each. Error io naming the file.
Status export_run_json(ResultsDb& db, int64_t run_id, const std::string& file);

}  // namespace tracr::store
