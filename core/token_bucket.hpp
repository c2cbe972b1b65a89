// The token bucket tracr's tc tbf gives a rate: fleet/ applies it, analysis/
// models emulated links with it.
#pragma once

#include <cstdint>

namespace tracr::core {

// The bucket for `mbit` Mbit/s (1 ms of traffic, at least one full-size
// packet, in bytes): a message's first `burst` bytes leave at once after an
// idle gap, the rest at the rate.
int64_t tbf_burst_bytes(double mbit);

}  // namespace tracr::core
