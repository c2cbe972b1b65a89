// Whether a difference between two runs exceeds their own spread: a
// bootstrap interval of the change of the median, from the frames each run
// has (`results compare`).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tracr::analysis {

struct MedianChange {
  double change_pct = 0;        // (median(b) - median(a)) / median(a), in %
  double lo_pct = 0, hi_pct = 0;  // the 95 % bootstrap interval of that change (percentile method)
  bool exceeds_spread() const { return lo_pct > 0 || hi_pct < 0; }  // the interval leaves out 0
};

inline constexpr int kBootstrapResamples = 2000;
inline constexpr size_t kBootstrapMinFrames = 5;

// The change of the median from `a` to `b` with its interval: each run's
// values resampled with replacement `resamples` times (a fixed seed: the same
// runs give the same interval), the 2.5th and 97.5th percentiles of the
// resampled changes. nullopt when either side has fewer than
// kBootstrapMinFrames values or a's median is not positive.
std::optional<MedianChange> median_change(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                          int resamples = kBootstrapResamples);

}  // namespace tracr::analysis
