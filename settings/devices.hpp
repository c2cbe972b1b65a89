// settings/: the devices file (devices_config.yaml, the schema of the Python
// tracr plus documented extensions), parsed and validated completely before
// anything starts (errors as config.hpp describes).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/error.hpp"
#include "settings/source.hpp"

namespace tracr::settings {

// ---------------------------------------------------------------------------
// Devices (devices_config.yaml)

enum class DeviceRole { server, participant };
// "SERVER" / "PARTICIPANT" (the Python tracr's device_type values).
std::string_view device_role_name(DeviceRole r);

enum class Transport { local, ssh };
std::string_view transport_name(Transport t);  // "local" / "ssh"

// One entry of a device's connection_params.
struct ConnectionParams {
  std::string host;       // IP or host name
  std::string user;       // SSH user (required for ssh transport)
  std::string pkey_fp;    // as written: a file name under pkeys/ or an absolute path
  std::string pkey_path;  // resolved path (see resolve_pkey); empty when pkey_fp is
  int port = 0;           // SERVER data port; 0 = ephemeral, reported by the agent
  int ssh_port = 22;
  bool is_default = false;  // `default: true`
  SourcePos pos;            // position of this entry
};

// Reserved extension: a modelled power draw (results label energy
// "modelled:<device>" when it is used; no meter is read).
struct PowerModel {
  double idle_w = 0;
  double busy_w = 0;
};

// Reserved extension: a link to emulate towards this device (tc netem/tbf).
struct LinkProfile {
  double rate_mbit = 0;  // 0 = unlimited
  double delay_ms = 0;
};

struct DeviceConfig {
  DeviceRole role = DeviceRole::participant;
  std::string name;  // unique; default "server", "participant", or "participant<N>" (N = position among
                     // participants, from 1)
  Transport transport = Transport::ssh;
  std::string work_dir = "~/.cache/tracr";  // agent directory on the device (ssh)
  std::string netns;  // transport local: run the agent in this network namespace (`ip netns exec`)
  std::optional<PowerModel> power_model;
  std::optional<LinkProfile> link_profile;
  // Emulating a slower device: its agent limits itself to this many cores of
  // CPU time (cgroup CPU quota) and/or to this many CPUs (affinity).
  std::optional<double> cpu_quota;
  std::optional<int> cpu_cores;
  // The planner's memory limit for this device (#43), in MB: a placement
  // whose segment here needs more (weights plus its largest live
  // activations) is not chosen. Not enforced on the device.
  std::optional<double> memory_mb;
  // Or pinned to these CPUs by number (affinity): several emulated devices on
  // one host kept off each other's CPUs (e.g. the SERVER on CPU 1, the
  // participants on CPU 0). Its count is the device's cpu_cores.
  std::vector<int> cpus;
  // Where its agent runs models: "cpu", "cuda", "cuda:N" ("" = auto: CUDA
  // when its LibTorch has it) and with how many LibTorch intra-op threads.
  std::string torch_device;
  std::optional<int> torch_threads;
  // The tracr-agent binary (on the controller) deployed to and run on this
  // device: one built for its architecture or against a CUDA LibTorch. ""
  // = the one beside tracrctl. Relative paths are against the devices file.
  std::string agent_path;
  // Files the experiment names that already exist on this device (ssh):
  // controller path (absolute, relative paths against the devices file) ->
  // path on the device. A file or directory under a declared directory maps
  // beneath its device path. Anything not declared is staged by content
  // hash into <work_dir>/data (fleet/staging.hpp).
  std::map<std::string, std::string> paths;
  std::vector<ConnectionParams> connections;  // never empty after loading
  SourcePos pos;

  // The selected connection: the one with `default: true`, or the only one.
  // Loading guarantees that exactly one is selectable.
  const ConnectionParams& connection() const;
};

struct DevicesConfig {
  std::string source;     // file path, or "<embedded default>"
  bool embedded = false;  // true when no file was found and the default is used
  std::vector<DeviceConfig> devices;
  // The experiment's `chain` (place_chain): the devices after each
  // PARTICIPANT in the order a frame passes them, the last one the SERVER.
  // Empty: the SERVER alone.
  std::vector<std::string> chain;

  // The SERVER device (loading guarantees exactly one).
  const DeviceConfig& server() const;
  // The PARTICIPANT devices in file order (loading guarantees at least one);
  // never a device of the chain.
  std::vector<const DeviceConfig*> participants() const;
  // By name; nullptr when absent.
  const DeviceConfig* find(std::string_view name) const;
  // Compact JSON for runs.devices_json: names, roles, transports, hosts,
  // users, ports, extensions. Never contains key material (only pkey_fp).
  std::string to_json() const;
};

// Text of the embedded default (config/devices_local.yaml has the same
// content): SERVER and PARTICIPANT, both transport: local on 127.0.0.1.
std::string_view embedded_devices_yaml();

// What the roles in a devices file must be: split inference (run, plan,
// agents) needs exactly one SERVER and at least one PARTICIPANT; split
// training places segments on devices by name and ignores roles.
enum class RoleCheck { inference, none };

// Parses a devices file. Error io when it cannot be read, config for every
// content problem (position, key, what was expected).
Result<DevicesConfig> load_devices(const std::string& path, RoleCheck roles = RoleCheck::inference);
// Like load_devices, but a file that does not exist gives the embedded
// default (DevicesConfig::embedded set). Other errors pass through.
Result<DevicesConfig> load_devices_or_default(const std::string& path, RoleCheck roles = RoleCheck::inference);
// The devices file of a command's --devices option: a file it named must
// exist (load_devices: error not_found naming it, as `run` refuses an
// experiment's); only the default path, when absent, gives the embedded
// default (load_devices_or_default).
Result<DevicesConfig> load_devices_option(const std::string& path, bool given);
// Parses devices YAML held in memory; `source` names it in messages and is
// the base for resolving pkey_fp.
Result<DevicesConfig> parse_devices(const std::string& text, const std::string& source,
                                    RoleCheck roles = RoleCheck::inference);

// Resolves pkey_fp: absolute paths and ~/ are taken as they are; a relative
// name is looked up in $TRACR_PKEYS_DIR if set, else in <root>/pkeys/ (root =
// the parent of the devices file's directory, i.e. the project root for
// config/devices_config.yaml) and then in <dir>/pkeys/ (the Python tracr's
// config/pkeys/); the first existing file wins, else the first candidate.
std::string resolve_pkey(const std::string& pkey_fp, const std::string& devices_file);

}  // namespace tracr::settings
