// Detached SERVER agents: `tracrctl agents start` leaves a SERVER running
// (local or over SSH) with its secret in an owner-only file; later runs of the
// same model reuse it until `tracrctl agents stop`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "agent/control.hpp"
#include "protocol/error.hpp"

namespace tracr::fleet {

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

// Created owner-only (0600) from the start, never readable in between.
// Error io naming the file.
Status write_owner_only(const std::string& path, const std::string& text);
// Reads control lines from an agent's log (read_log gives its text so far),
// in order, until READY (returned) or FAIL (error remote); error timeout
// after timeout_ms.
Result<agent::ControlMsg> wait_ready_in_log(const std::function<Result<std::string>()>& read_log,
                                            const std::vector<uint8_t>& secret, int timeout_ms);
// A local file's whole text ("" when unreadable).
std::string read_local(const std::string& path);

// tracrctl agents stop for detached agents recorded under `state_dir`.
int stop_detached_agents(const std::string& state_dir, bool trust_new_hosts, const std::string& devices_file);

}  // namespace tracr::fleet
