#include "controller/session/liveness.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace tracr::controller {

std::string log_tail_text(const std::string& tail) {
  if (tail.find_first_not_of(" \t\r\n") == std::string::npos)
    return "its log is empty: it wrote nothing before it exited (killed, out of memory, or it never started)";
  return "log tail:\n" + tail;
}

void AgentLiveness::launched(size_t agent, Clock::time_point at) { launched_.emplace(agent, at); }

void AgentLiveness::heard(size_t agent, Clock::time_point at) { heard_[agent] = at; }

std::optional<std::string> AgentLiveness::lost(size_t agent, const std::string& role, const std::string& device,
                                               Clock::time_point now) const {
  if (auto h = heard_.find(agent); h != heard_.end()) {
    if (now - h->second <= std::chrono::milliseconds(heartbeat_timeout_ms_)) return std::nullopt;
    return fmt::format("{} agent on {} lost: no control line (it sends a heartbeat every second) for {} ms "
                       "(heartbeat_timeout_ms); the agent or its connection is gone, and the agent stops by itself "
                       "once it has not heard from tracrctl for as long",
                       role, device, heartbeat_timeout_ms_);
  }
  auto l = launched_.find(agent);
  if (l == launched_.end()) return std::nullopt;
  const int limit = std::max(heartbeat_timeout_ms_, kStartLimitMs);
  if (now - l->second <= std::chrono::milliseconds(limit)) return std::nullopt;
  return fmt::format("{} agent on {} lost: not one control line from it in the {} ms since its launch (the start-up "
                     "limit: the larger of heartbeat_timeout_ms and {} ms); it did not start",
                     role, device, limit, kStartLimitMs);
}

std::optional<std::string> AgentLiveness::newly_lost(size_t agent, const std::string& role, const std::string& device,
                                                     Clock::time_point now) {
  if (declared_lost(agent)) return std::nullopt;
  auto why = lost(agent, role, device, now);
  if (why) declared_.insert(agent);
  return why;
}

}  // namespace tracr::controller
