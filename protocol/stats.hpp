// The one percentile definition every tracr figure uses: exact median (mean
// of the two middle values for an even count) and nearest-rank p95 (the
// value at rank ceil(0.95 n) of the sorted values). Both sort `v` in place
// and return 0 for an empty vector; percentile_of is the same nearest rank
// at any percentile (the figures' p5, p25 and p75).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tracr::protocol {

template <class T>
double median_of(std::vector<T>& v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n % 2 == 1) return static_cast<double>(v[n / 2]);
  // Mean of the two middle values without overflow.
  const double a = static_cast<double>(v[n / 2 - 1]), b = static_cast<double>(v[n / 2]);
  return a + (b - a) / 2.0;
}

// Nearest rank at any percentile: the value at rank ceil(pct n / 100).
template <class T>
double percentile_of(std::vector<T>& v, int pct) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank, in integers (pct n / 100 rounded up).
  const size_t n = v.size();
  size_t rank = (static_cast<size_t>(pct) * n + 99) / 100;
  if (rank < 1) rank = 1;
  return static_cast<double>(v[rank - 1]);
}

template <class T>
double p95_of(std::vector<T>& v) {
  return percentile_of(v, 95);
}

}  // namespace tracr::protocol
