// tracr-agent: one executable, role SERVER or PARTICIPANT.
//
// The controller starts it (a local process, or over SSH), writes the hex
// session secret as the first line of its standard input and then reads its
// standard output, where every line is an authenticated control message
// (wire/control.hpp): READY, HEARTBEAT (every second), PROFILE, FRAME,
// DONE, FAIL, LOG. The agent exits when its standard input closes, on a
// STOP line, or (--heartbeat-timeout-ms) when the controller's heartbeats
// stop, so a dead or partitioned controller never leaves agents behind.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tracr::agent {

// Entry point of tracr-agent; returns the process exit code.
int agent_main(int argc, char** argv);

}  // namespace tracr::agent
