#include "core/token_bucket.hpp"

#include <algorithm>
#include <cmath>

namespace tracr::core {

int64_t tbf_burst_bytes(double mbit) { return std::max<int64_t>(1600, std::llround(mbit * 1e6 / 8 / 1000)); }

}  // namespace tracr::core
