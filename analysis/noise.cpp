#include "analysis/noise.hpp"

#include <algorithm>
#include <random>

#include "protocol/stats.hpp"

namespace tracr::analysis {

namespace {

double resampled_median(const std::vector<int64_t>& v, std::mt19937_64& rng, std::vector<int64_t>& scratch) {
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  scratch.resize(v.size());
  for (auto& x : scratch) x = v[pick(rng)];
  return protocol::median_of(scratch);
}

}  // namespace

std::optional<MedianChange> median_change(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                          int resamples) {
  if (a.size() < kBootstrapMinFrames || b.size() < kBootstrapMinFrames || resamples < 1) return std::nullopt;
  std::vector<int64_t> sa = a, sb = b;
  const double ma = protocol::median_of(sa), mb = protocol::median_of(sb);
  if (ma <= 0) return std::nullopt;
  MedianChange c;
  c.change_pct = (mb - ma) / ma * 100.0;
  std::mt19937_64 rng(0x7472616372ULL);  // fixed: the same runs give the same interval
  std::vector<double> changes;
  changes.reserve(static_cast<size_t>(resamples));
  std::vector<int64_t> scratch;
  for (int i = 0; i < resamples; ++i) {
    const double ra = resampled_median(a, rng, scratch);
    const double rb = resampled_median(b, rng, scratch);
    if (ra > 0) changes.push_back((rb - ra) / ra * 100.0);
  }
  if (changes.empty()) return std::nullopt;
  std::sort(changes.begin(), changes.end());
  auto at = [&](double q) {
    const size_t i = static_cast<size_t>(q * static_cast<double>(changes.size() - 1) + 0.5);
    return changes[std::min(i, changes.size() - 1)];
  };
  c.lo_pct = at(0.025);
  c.hi_pct = at(0.975);
  return c;
}

}  // namespace tracr::analysis
