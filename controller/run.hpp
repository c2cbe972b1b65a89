// `tracrctl run experiment.yaml`: brings up tracr-agent on the SERVER and
// PARTICIPANT devices (local processes or over SSH), runs the sweep, records
// everything in SQLite and prints the per-split table read back from it.
#pragma once

#include <string>
#include <vector>

#include "controller/config.hpp"
#include "controller/ssh.hpp"

namespace tracr::controller {

// The SSH target of a device: its default connection, its key, and the
// known_hosts file pkeys/known_hosts beside the devices file (or
// $TRACR_KNOWN_HOSTS).
SshTarget device_ssh_target(const DeviceConfig& dev, const std::string& devices_file, bool trust_new_hosts);

struct RunOptions {
  std::string experiment;       // experiment YAML
  std::string db;               // overrides experiment `output`
  bool show_config = false;     // print effective settings and exit
  bool trust_new_hosts = false; // SSH trust-on-first-use for unknown host keys
  bool in_process = false;      // PARTICIPANT runs tails itself, no sockets
  bool progress = true;
  std::string agent_path;       // tracr-agent; next to tracrctl when empty
  int heartbeat_timeout_ms = 5000;
};

// Returns the process exit code (0 on a completed run).
int run_experiment(const RunOptions& opt);
int cmd_run(const std::vector<std::string>& args);

}  // namespace tracr::controller
