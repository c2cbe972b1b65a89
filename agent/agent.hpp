// tracr-agent: one executable, role SERVER or PARTICIPANT.
//
// The controller starts it (a local process, or over SSH), writes the hex
// session secret as the first line of its standard input and then reads its
// standard output, where every line is an authenticated control message
// (agent/control.hpp): READY, HEARTBEAT (every second), PROFILE, FRAME,
// DONE, FAIL, LOG. The agent exits when its standard input closes, on a
// STOP line, or (--heartbeat-timeout-ms) when the controller's heartbeats
// stop, so a dead or partitioned controller never leaves agents behind.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tracr::agent {

// The agent's version, as --version prints and hardware identities record.
inline constexpr const char* kAgentVersion = "0.2.0";

// FNV-1a 64.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

// Entry point of tracr-agent; returns the process exit code.
int agent_main(int argc, char** argv);

}  // namespace tracr::agent
