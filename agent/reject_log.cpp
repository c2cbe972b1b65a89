#include "agent/reject_log.hpp"

#include <fmt/format.h>

namespace tracr::agent {

void RejectionLog::note(const Error& e) {
  counts_[std::string(errc_name(e.code))]++;
  total_++;
  latest_ = e.str();
}

std::optional<std::string> RejectionLog::due(Clock::time_point now) {
  if (total_ == 0 || (last_line_ && now - *last_line_ < period_)) return std::nullopt;
  return flush(now);
}

std::optional<std::string> RejectionLog::flush(Clock::time_point now) {
  if (total_ == 0) return std::nullopt;
  std::string kinds;
  for (const auto& [name, n] : counts_) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", name, n);
  std::string line = last_line_
      ? fmt::format("{} {} in the last {:.1f} s: {}; latest: {}", total_, what_,
                    std::chrono::duration<double>(now - *last_line_).count(), kinds, latest_)
      : fmt::format("{} {}: {}; latest: {}", total_, what_, kinds, latest_);
  counts_.clear();
  total_ = 0;
  latest_.clear();
  last_line_ = now;
  lines_++;
  return line;
}

}  // namespace tracr::agent
