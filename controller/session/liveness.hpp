// When run and train declare an agent lost (#24): an agent's heartbeat
// clock starts at its first control line. Before that line the agent is
// still starting (a CPU-limited device loading LibTorch takes seconds), and
// the start-up limit applies instead: the larger of heartbeat_timeout_ms and
// kStartLimitMs from its launch.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace tracr::controller {

inline constexpr int kStartLimitMs = 120000;

// What an agent that exited unexpectedly left in its log, for the failure
// message: "log tail:\n<text>", or a sentence saying the log is empty.
std::string log_tail_text(const std::string& tail);

class AgentLiveness {
 public:
  using Clock = std::chrono::steady_clock;
  explicit AgentLiveness(int heartbeat_timeout_ms) : heartbeat_timeout_ms_(heartbeat_timeout_ms) {}
  // The agent's launch (a later call for the same agent keeps the first).
  void launched(size_t agent, Clock::time_point at = Clock::now());
  // A control line arrived from it.
  void heard(size_t agent, Clock::time_point at = Clock::now());
  // Why the agent counts as lost at `now` (its role and device name the
  // message), or nullopt while it is alive or was never launched.
  std::optional<std::string> lost(size_t agent, const std::string& role, const std::string& device,
                                  Clock::time_point now = Clock::now()) const;
  // lost(), said once: the first call that finds the agent lost returns why
  // and declares it lost; later calls return nullopt.
  std::optional<std::string> newly_lost(size_t agent, const std::string& role, const std::string& device,
                                        Clock::time_point now = Clock::now());
  // Whether newly_lost() declared it lost (its connection may be dead, so
  // stopping it is given less time).
  bool declared_lost(size_t agent) const { return declared_.count(agent) > 0; }

 private:
  int heartbeat_timeout_ms_;
  std::map<size_t, Clock::time_point> launched_, heard_;
  std::set<size_t> declared_;
};

}  // namespace tracr::controller
