// The agent's one clock for measured durations (steady, this process's own)
// and the span between two of its readings in nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace tracr::agent {

using Clock = std::chrono::steady_clock;

inline int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// From a reading kept as ns since the clock's epoch (FrameStats::last_segment_at_ns) to now.
inline int64_t ns_since(int64_t at_ns) {
  return ns_between(Clock::time_point(std::chrono::nanoseconds(at_ns)), Clock::now());
}

}  // namespace tracr::agent
