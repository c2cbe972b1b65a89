// A device's memory need for the layers [a, b) it runs (#43 memory_mb), in
// bytes: the segment's weights (params x 4 B, float32) plus its largest live
// activations (a layer's input + output bytes; an empty segment holds its
// input). From layer profiles; shared by the two-tier and the chain planners.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tracr::analysis {

struct MemoryNeed {
  std::vector<double> weights{0.0};      // prefix sums of the layers' weight bytes
  std::vector<std::vector<double>> act;  // act[a][b - a]: max live bytes over layers [a, b)
  // layer_weights[i]: layer i's weight bytes; out_bytes[0] the input's bytes,
  // out_bytes[i + 1] layer i's output bytes.
  MemoryNeed(const std::vector<double>& layer_weights, const std::vector<double>& out_bytes) {
    for (double w : layer_weights) weights.push_back(weights.back() + w);
    const size_t n = out_bytes.size() - 1;
    act.resize(n + 1);
    for (size_t a = 0; a <= n; ++a) {
      act[a].push_back(out_bytes[a]);  // an empty segment passes its input on
      double mx = 0;
      for (size_t i = a; i < n; ++i) act[a].push_back(mx = std::max(mx, out_bytes[i] + out_bytes[i + 1]));
    }
  }
  double bytes(int a, int b) const {
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    const double w = ub < weights.size() && ua < weights.size() ? weights[ub] - weights[ua] : 0.0;
    return w + act[ua][ub - ua];
  }
};

}  // namespace tracr::analysis
