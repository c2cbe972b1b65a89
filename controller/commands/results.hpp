// `tracrctl results ...`: reading the results database back.
//
//   tracrctl results list    [--db PATH] [--limit N]
//   tracrctl results show    RUN [--db PATH]
//   tracrctl results compare RUN RUN [--db PATH]
//   tracrctl results exits   RUN [--thresholds T] [--measure M] [--csv FILE] [--db PATH]
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

#include "store/results.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

// `tracrctl results SUB ...` as controller/cli/cli.cpp parsed it.
struct ResultsOptions {
  std::string sub;                      // list | show | compare | exits | export | rm | schema | migrate
  std::string db;                       // "" = $TRACR_OUTPUT, else results/tracr.db
  std::vector<std::string> positional;  // RUN arguments
  std::vector<std::string> csv, json;   // export
  std::vector<std::string> summary_csv;  // export: per run x split x stage
  int limit = 0;                        // list
  bool markdown = false;                // schema
  bool wide = false;                    // show: every column of the per-split table
  std::string model, status, name;      // list filters ("" = any)
  std::string thresholds, measure, exits_csv;  // exits: the sweep (controller/commands/results_exits.hpp)
};
// Entry point of `tracrctl results`. Returns 0 on success, 1 when the
// database or run cannot be read, 2 on usage errors; messages go to stderr.
Status cmd_results(const ResultsOptions& opt);

}  // namespace tracr::controller
