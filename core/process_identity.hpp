// A process's identity on this host (pid and start time), for records that
// outlive the process that wrote them (a run's controller, a link's shaper).
#pragma once

#include <cstdint>
#include <string>

namespace tracr::core {

// This process's start time in clock ticks since boot (/proc), 0 when unknown.
int64_t self_start_ticks();
// A process's start time in clock ticks since boot (/proc/PID/stat field
// 22), 0 when unknown: with its pid, the process's identity.
int64_t process_start_ticks(int64_t pid);
// A POSIX shell command that prints the start ticks of process PID (the same
// field), for devices reached over SSH.
std::string start_ticks_shell(const std::string& pid);
// Whether a process (e.g. the controller that began a run, or that shaped a
// link) still exists on this host: the pid exists, is not a zombie and (when
// start_ticks > 0) started at that time, so a reused pid is not taken for it.
bool process_alive(int64_t pid, int64_t start_ticks);

}  // namespace tracr::core
