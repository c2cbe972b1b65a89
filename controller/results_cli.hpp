// `tracrctl results ...`: reading the results database back.
//
//   tracrctl results list    [--db PATH] [--limit N]
//   tracrctl results show    RUN [--db PATH]
//   tracrctl results compare RUN RUN [--db PATH]
//   tracrctl results export  RUN... (--csv FILE | --summary-csv FILE | --json FILE)... [--db PATH]
//
// RUN is a run id or `last`. The database is --db, else $TRACR_OUTPUT, else
// results/tracr.db. Times are printed in milliseconds (median and p95 over
// the ok, non-warm-up frames of each split), sizes in bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "controller/results.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

// `tracrctl results SUB ...` as controller/cli.cpp parsed it.
struct ResultsOptions {
  std::string sub;                      // list | show | compare | export | rm | schema | migrate
  std::string db;                       // "" = $TRACR_OUTPUT, else results/tracr.db
  std::vector<std::string> positional;  // RUN arguments
  std::vector<std::string> csv, json;   // export
  std::vector<std::string> summary_csv;  // export: per run x split x stage
  int limit = 0;                        // list
  bool markdown = false;                // schema
  bool wide = false;                    // show: every column of the per-split table
  std::string model, status, name;      // list filters ("" = any)
};
// Entry point of `tracrctl results`. Returns 0 on success, 1 when the
// database or run cannot be read, 2 on usage errors; messages go to stderr.
int cmd_results(const ResultsOptions& opt);

// Prints the per-split table of a run (as `results show` does, without the
// run header) to `out`; `tracrctl run` calls it at the end of a sweep.
// Errors from the database pass through (not_found for an unknown run).
// A RUN argument: a run id, or "last"/"latest". Error invalid_argument naming what was expected.
Result<int64_t> run_id_arg(ResultsDb& db, const std::string& s);
// wide: every column (all stage medians, failed/flagged, bytes, ratio);
// otherwise the table fits 120 columns.
Status print_split_table(ResultsDb& db, int64_t run_id, std::FILE* out = stdout, bool wide = false);

// Prints the run's link probes (nothing when it has none).
Status print_probe_table(ResultsDb& db, int64_t run_id, std::FILE* out = stdout);
// Per split, device, stage and source: median and p95 energy, each figure beside its source.
Status print_energy_table(ResultsDb& db, int64_t run_id, std::FILE* out = stdout);

// The aligned per-split table text for a set of summaries; the split with the
// lowest median total time is marked with '*'. cut_names: split k -> the name
// of layer k-1 (the last on the participant). Not wide: fits 120 columns
// (names longer than 14 characters keep their end); wide: every column.
// Top-1/top-5 accuracy columns appear when any split has labelled samples.
std::string format_split_table(const std::vector<SplitSummary>& rows, bool wide = false,
                               const std::map<int, std::string>& cut_names = {});

// Split k -> the name of layer k-1 (the last on the participant), from the
// run's layer profiles; empty when the run profiled none.
Result<std::map<int, std::string>> cut_names(ResultsDb& db, int64_t run_id);

// Writes the run's frames as CSV (RFC 4180, a header row, one row per frame).
// Error io naming the file when it cannot be written.
Status export_run_csv(ResultsDb& db, int64_t run_id, const std::string& file);
// Writes {"run": {...}, "devices": [...], "probes": [...], "summaries": [...],
// "stage_stats": [...], "accuracy": [...], "frames": [...], "frame_topk": [...],
// "outputs": [...], "layer_profiles": [...], "events": [...]} as JSON, every
// column of each. Error io naming the file.
Status export_run_json(ResultsDb& db, int64_t run_id, const std::string& file);

// Shared by every exporter: a JSON number (integral values as integers,
// non-finite as null), an RFC 4180 CSV field, and a file written whole
// (beside, then renamed; error io naming the file).
std::string json_num(double v);
std::string csv_field(const std::string& s);
Status write_file(const std::string& file, const std::string& text);

}  // namespace tracr::controller
