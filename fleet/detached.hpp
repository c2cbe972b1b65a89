// Detached SERVER agents: `tracrctl agents start` leaves a SERVER running
// (local or over SSH) with its secret in an owner-only file; later runs of the
// same model reuse it until `tracrctl agents stop`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "wire/control.hpp"
#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::fleet {

// A SERVER agent started by `tracrctl agents start`, outliving tracrctl.
// Its state (endpoint, pid, session secret) is kept owner-only in
// <dir of the experiment's output DB>/agents/<device>.state.
struct DetachedServer {
  std::string device, transport, endpoint, secret_hex, identity, log;
  // The devices file it was started from (absolute; "" in older states):
  // `agents stop` reaches an SSH device through it, whatever --devices says.
  std::string devices_file;
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
Result<wire::ControlMsg> wait_ready_in_log(const std::function<Result<std::string>()>& read_log,
                                            const std::vector<uint8_t>& secret, int timeout_ms);
// A local file's whole text ("" when unreadable).
std::string read_local(const std::string& path);

// tracrctl agents stop for detached agents recorded under `state_dir`.
int stop_detached_agents(const std::string& state_dir, bool trust_new_hosts, const std::string& devices_file);

// Watches a detached SERVER agent while a run uses it (#24: a dead one was
// found only by the participants' 60 s frame timeout, and the error blamed
// the PARTICIPANT). A thread checks its recorded identity (pid and start
// time) every `interval_ms`: on this machine for a local agent, over one SSH
// session (reached through its devices file) for a remote one. A check that
// cannot be made (SSH down) says nothing: only a check that finds another
// process, or none, under the pid counts.
class DetachedWatch {
 public:
  DetachedWatch(DetachedServer d, const settings::DevicesConfig& devices, bool trust_new_hosts, int interval_ms);
  ~DetachedWatch();
  DetachedWatch(const DetachedWatch&) = delete;
  DetachedWatch& operator=(const DetachedWatch&) = delete;
  // Why the agent counts as gone; "" while it runs (or cannot be checked).
  std::string gone() const;

 private:
  void loop(const settings::DevicesConfig& devices, bool trust);
  DetachedServer d_;
  int interval_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string gone_;
  std::thread thread_;
};

// Every state directory `agents start` used is listed, absolute, one a
// line, in this index, so that `agents stop` and `agents status` find
// agents whose experiment's output is outside results/ (#24):
// $XDG_STATE_HOME/tracr/detached-dirs, else ~/.local/state/tracr/detached-dirs.
std::string detached_index_path();
// Adds `dir` (made absolute) to the index unless it is there; error io
// naming the index.
Status remember_detached_dir(const std::string& dir);
// `given` (the --state-dir option) first, then the index's directories,
// each once (by canonical path). Directories the index lists that no longer
// exist are returned in `gone` and dropped from the index, and so are those
// that hold no state file any more.
std::vector<std::string> detached_dirs(const std::string& given, std::vector<std::string>* gone);

}  // namespace tracr::fleet
