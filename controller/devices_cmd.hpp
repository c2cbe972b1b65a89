// `tracrctl devices check|setup` and `tracrctl agents deploy|status|logs|stop`.
#pragma once

#include <cstddef>
#include <string>

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

// The options these commands share (controller/cli.cpp fills them).
struct DevicesOptions {
  std::string devices = "config/devices_config.yaml";
  bool trust = false;     // --trust-new-hosts
  std::string agent;      // tracr-agent to deploy or compare ("" = next to tracrctl)
  size_t tail = 4000;     // agents logs: bytes per log
  std::string state_dir = "results/agents";  // detached agents started by `agents start`
  bool devices_given = false;  // --devices was given (else devices check --experiment uses the experiment's)
  std::string experiment;      // devices check: the experiment whose files would be staged
  bool yes = false;            // devices setup: install without asking
  bool dry_run = false;        // devices setup: only print what would be installed
};

// The devices file of these commands: a file named by --devices must exist
// (error not_found naming it, as `run` refuses an experiment's); only the
// default path, when absent, gives the embedded default.
Result<settings::DevicesConfig> load_devices_option(const std::string& path, bool given);

// Reachability, authentication, key permissions, architecture and agent
// version of every device. Returns 0 all good, 1 a device failed, 2 a bad devices file.
int cmd_devices_check(const DevicesOptions& opt);
// The agent's runtime Debian packages on every device (controller/device_setup.hpp).
// Returns 0 done or nothing to do, 1 a device failed, 2 refused or a bad devices file.
int cmd_devices_setup(const DevicesOptions& opt);
// verb: deploy | status | logs | stop. Returns 0, 1 when a device failed, 2 a bad devices file.
int cmd_agents(const std::string& verb, const DevicesOptions& opt);

}  // namespace tracr::controller
