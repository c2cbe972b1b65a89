// What every agent and tracrctl report of themselves, and the hash the wire's
// identities use (hardware ids, model fingerprints).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tracr::wire {

// The agent's version, as `--version` prints and hardware identities record.
inline constexpr const char* kAgentVersion = "0.2.0";

// FNV-1a 64.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

}  // namespace tracr::wire
