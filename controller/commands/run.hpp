// `tracrctl run experiment.yaml`: brings up tracr-agent on the SERVER and
// PARTICIPANT devices (local processes or over SSH), runs the sweep, records
// everything in SQLite and prints the per-split table read back from it.
#pragma once

#include <map>
#include <string>
#include <vector>
#include "protocol/error.hpp"

#include "settings/config.hpp"
#include "controller/session/agent_config.hpp"
#include "fleet/detached.hpp"
#include "fleet/launcher.hpp"
#include "fleet/ssh.hpp"

namespace tracr::controller {

struct RunOptions {
  std::string experiment;       // experiment YAML
  std::string again;            // --again RUN: a stored run's experiment instead (id, last, last-N; of --db)
  std::string db;               // overrides experiment `output`
  bool show_config = false;     // print effective settings and exit
  bool trust_new_hosts = false; // SSH trust-on-first-use for unknown host keys
  bool reprofile = false;       // time every profile anew (no reuse of the database's, #45 friction 2)
  bool in_process = false;      // PARTICIPANT runs tails itself, no sockets
  bool progress = true;
  bool wide = false;            // the per-split table with every column (else it fits 120 columns)
  std::string agent_path;       // tracr-agent; next to tracrctl when empty
  bool probe_only = false;      // tracrctl link probe: measure each participant's link, run no frames
  std::vector<std::string> sets;  // --set key=value overrides, applied after the file and TRACR_* variables
  bool codec_in_name = false;     // a run of a codec series: its name ends in "/CODEC" (NAME@LINK/CODEC)
  bool model_in_name = false;     // a run of a model series: "/MODEL" follows its name (NAME/MODEL@LINK/CODEC)
  bool size_in_name = false;      // a run of an input-size series: "/CxHxW" follows (NAME/MODEL/3x160x160@LINK/CODEC)
  std::string report;             // --report FILE.html: the report of the runs, written when every one completed
  int repeat = 1;                 // --repeat N: the whole series N times, each repetition's runs named "#k"
  int repetition = 0;             // this run's repetition (1-based; 0 = not repeated)
};

// tracrctl agents start EXPERIMENT.yaml [--trust-new-hosts] [--agent PATH] [--set K=V]...
// (experiment, trust_new_hosts, agent_path and sets of `opt`).
Status cmd_agents_start(const RunOptions& opt);
// tracrctl run / link probe (probe_only). Fails with a usage error (exit 2)
// for a configuration error, else with the run's failure (exit 1, or
// 128 + signal when a signal ended it: 130 SIGINT, 143 SIGTERM, 129 SIGHUP).
Status run_experiment(const RunOptions& opt);
// One run of an already loaded experiment (its first link profile, if any);
// *run_id (when not null) gets the run's id once it exists.
Status run_loaded(const RunOptions& opt, settings::ExperimentConfig cfg, int64_t* run_id);

}  // namespace tracr::controller
