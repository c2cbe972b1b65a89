// `tracrctl devices setup`: the Debian packages tracr-agent needs at run time,
// worked out from the controller's own agent (the shared libraries it links
// directly, `readelf -d`, resolved by `ldd`, owned per `dpkg -S`; apt brings
// what those need), checked on each device with `dpkg-query -W` and
// installed there with `apt-get install` (root directly, else `sudo -n`).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fleet/ssh.hpp"
#include "protocol/error.hpp"

namespace tracr::fleet {

struct RuntimePackages {
  std::vector<std::string> packages;  // sorted, unique, without architecture qualifier
  std::vector<std::string> libraries; // the directly linked libraries, as the ELF names them
  std::vector<std::string> unowned;   // "<library> (<path>)" that no Debian package holds here
};
// The packages holding the libraries agent_path links directly, on this
// machine. Errors: not_found (no such file), io (readelf or ldd failed),
// config (a linked library is not found here: the agent cannot run here either).
Result<RuntimePackages> agent_runtime_packages(const std::string& agent_path);

// Runs a shell command on a device: exit status and stdout (stderr apart).
using DeviceShell = std::function<Result<ExecResult>(const std::string& cmd, int timeout_ms)>;
DeviceShell ssh_shell(SshSession& session);
DeviceShell local_shell();  // this machine (transport local)

struct SetupPlan {
  bool root = false;                 // the login is root (apt-get runs directly)
  std::vector<std::string> missing;  // packages not installed there, sorted
  std::string command;               // the install command ("" when nothing is missing)
};
// Which of `packages` the device lacks (dpkg-query -W) and the command that
// installs them. Errors: config when the device has no dpkg-query (not a
// Debian-based system: say which), plus the shell's errors.
Result<SetupPlan> plan_setup(const DeviceShell& shell, const std::vector<std::string>& packages);
// The exact install command: `DEBIAN_FRONTEND=noninteractive apt-get install
// -y --no-install-recommends P...`, behind `sudo -n env` when not root.
std::string apt_install_command(const std::vector<std::string>& packages, bool root);
// Runs plan.command; error remote with the end of apt-get's output (and the
// sudo hint) when it fails.
Status apply_setup(const DeviceShell& shell, const SetupPlan& plan);

// `tracrctl devices setup` after its options are parsed.
struct SetupOptions {
  std::string devices = "config/devices_config.yaml";
  bool devices_given = false;  // --devices named it: it must exist
  std::string agent;  // the controller's agent (packages from its libraries)
  bool trust_new_hosts = false;
  bool yes = false;
  bool dry_run = false;
};
Status devices_setup(const SetupOptions& o);

}  // namespace tracr::fleet
