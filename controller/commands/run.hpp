// `tracrctl run experiment.yaml`: brings up tracr-agent on the SERVER and
// PARTICIPANT devices (local processes or over SSH), runs the sweep, records
// everything in SQLite and prints the per-split table read back from it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "settings/config.hpp"
#include "fleet/launcher.hpp"
#include "fleet/ssh.hpp"

namespace tracr::controller {

// The experiment as agents get it: paths made absolute (agents may run in
// another directory or on another machine with the same paths).
settings::ExperimentConfig agent_experiment(const settings::ExperimentConfig& cfg);
// to_yaml(agent_experiment(cfg)): what the CONFIG line and --experiment files hold.
std::string agent_config_yaml(const settings::ExperimentConfig& cfg);
// A name unique per run across databases and controllers: UTC time and 24
// random bits ("20261122T160000123Z-a1b2c3"); agent logs and checkpoint
// directories are named with it. Error when no random bytes can be drawn.
Result<std::string> new_run_stamp();
// What a SERVER agent must have been started with to serve this experiment.
std::string server_identity(const settings::ExperimentConfig& cfg);

struct RunOptions {
  std::string experiment;       // experiment YAML
  std::string db;               // overrides experiment `output`
  bool show_config = false;     // print effective settings and exit
  bool trust_new_hosts = false; // SSH trust-on-first-use for unknown host keys
  bool in_process = false;      // PARTICIPANT runs tails itself, no sockets
  bool progress = true;
  bool wide = false;            // the per-split table with every column (else it fits 120 columns)
  std::string agent_path;       // tracr-agent; next to tracrctl when empty
  bool probe_only = false;      // tracrctl link probe: measure each participant's link, run no frames
  std::vector<std::string> sets;  // --set key=value overrides, applied after the file and TRACR_* variables
};

// A SERVER agent started by `tracrctl agents start`, outliving tracrctl.
// Its state (endpoint, pid, session secret) is kept owner-only in
// <dir of the experiment's output DB>/agents/<device>.state.
struct DetachedServer {
  std::string device, transport, endpoint, secret_hex, identity, log;
  long pid = 0;
  int64_t start_ticks = 0;  // with pid, the process's identity (0: not recorded)
  // Its READY line's fields (hardware identity): runs that reuse the agent
  // record them as that run's SERVER device.
  std::map<std::string, std::string> ready;
};
std::string detached_state_path(const std::string& output_db, const std::string& device);
Result<DetachedServer> read_detached(const std::string& path);
Status write_detached(const std::string& path, const DetachedServer& d);

// tracrctl agents start EXPERIMENT.yaml [--trust-new-hosts] [--agent PATH] [--set K=V]...
// (experiment, trust_new_hosts, agent_path and sets of `opt`).
int cmd_agents_start(const RunOptions& opt);
// tracrctl agents stop for detached agents recorded under `state_dir`.
int stop_detached_agents(const std::string& state_dir, bool trust_new_hosts, const std::string& devices_file);

// tracrctl run / link probe (probe_only). Returns the process exit code: 0 completed, 1 failed, 2 configuration
// error, 128 + signal when interrupted (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
int run_experiment(const RunOptions& opt);
// One run of an already loaded experiment (its first link profile, if any);
// *run_id (when not null) gets the run's id once it exists.
int run_loaded(const RunOptions& opt, settings::ExperimentConfig cfg, int64_t* run_id);

}  // namespace tracr::controller
