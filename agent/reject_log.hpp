// Rejected messages, summarised for the control channel: a SERVER under a
// flood of junk sends at most one LOG line per period (1 s) with the count of
// each error kind since the previous line and the latest message as a
// sample, never one line (and one stored event) per junk message.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "protocol/error.hpp"

namespace tracr::agent {

class RejectionLog {
 public:
  using Clock = std::chrono::steady_clock;
  // `what` names the messages in the line: "1 rejected message(s): ...".
  explicit RejectionLog(std::string what = "rejected message(s)",
                        std::chrono::milliseconds period = std::chrono::seconds(1))
      : what_(std::move(what)), period_(period) {}
  // Counts one rejection under its code's name (auth_failed, replay, ...).
  void note(const Error& e);
  // The summary line when something was noted and the period since the
  // previous line has passed (the first line after a quiet spell is due at
  // once); nothing otherwise. Counting restarts after each line.
  std::optional<std::string> due(Clock::time_point now);
  // The pending summary whatever the period (at exit).
  std::optional<std::string> flush(Clock::time_point now);
  uint64_t lines() const { return lines_; }

 private:
  std::string what_;
  std::chrono::milliseconds period_;
  std::map<std::string, uint64_t> counts_;
  uint64_t total_ = 0;
  std::string latest_;
  std::optional<Clock::time_point> last_line_;
  uint64_t lines_ = 0;
};

}  // namespace tracr::agent
