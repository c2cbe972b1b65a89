// `tracrctl devices check|setup` and `tracrctl agents deploy|status|logs|stop`.
#pragma once

#include <cstddef>
#include <string>
#include "protocol/error.hpp"

namespace tracr::controller {

// The options these commands share (controller/cli/cli.cpp fills them).
struct DevicesOptions {
  std::string devices = "config/devices_config.yaml";
  bool trust = false;     // --trust-new-hosts
  std::string agent;      // tracr-agent to deploy or compare ("" = next to tracrctl)
  size_t tail = 4000;     // agents logs: bytes per log
  // Where `agents start` recorded detached agents; "" = results/agents and
  // every directory in the index of directories it used (detached_dirs).
  std::string state_dir;
  bool devices_given = false;  // --devices was given (else devices check --experiment uses the experiment's)
  std::string experiment;      // devices check: the experiment whose files would be staged
  bool yes = false;            // devices setup: install without asking
  bool dry_run = false;        // devices setup: only print what would be installed
};

// Reachability, authentication, key permissions, architecture and agent
// version of every device. Fails when a device failed (exit 1) or with a bad
// devices file (exit 2).
Status cmd_devices_check(const DevicesOptions& opt);
// The agent's runtime Debian packages on every device (fleet/device_setup.hpp).
// Fails when a device failed (exit 1), or refused or with a bad devices file (exit 2).
Status cmd_devices_setup(const DevicesOptions& opt);
// verb: deploy | status | logs | stop. Fails when a device failed (exit 1) or
// with a bad devices file (exit 2).
Status cmd_agents(const std::string& verb, const DevicesOptions& opt);

}  // namespace tracr::controller
