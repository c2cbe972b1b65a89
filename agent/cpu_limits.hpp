// Emulating a slower edge device: an agent limits its own CPU before it
// starts any thread, so a desktop can stand in for a Raspberry Pi-class
// PARTICIPANT. Quota through a cgroup of its own (v2 cpu.max, or v1
// cpu.cfs_quota_us), core count through CPU affinity.
#pragma once

#include <string>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::agent {

struct CpuLimits {
  double quota_cores = 0;  // 0 = none; else CPU time of this many cores per period
  int cores = 0;           // 0 = none; else the first N CPUs this process may use
  std::vector<int> cpus;   // or exactly these CPUs (by number); cores is ignored then
  bool any() const { return quota_cores > 0 || cores > 0 || !cpus.empty(); }
};

// Applies `l` to this process (call before any thread starts: affinity is
// per thread and inherited). cgroup_root is the cgroup file system
// ("/sys/fs/cgroup"; tests may point it elsewhere). On success *group is the
// cgroup directory created ("" when none) and the result describes what was
// applied. Errors name the file and the cause (e.g. not root, no cpu
// controller); nothing is left half-applied.
Result<std::string> apply_cpu_limits(const CpuLimits& l, const std::string& cgroup_root, std::string* group);
// Creates a quota group for `quota_cores` under cgroup_root, named after
// `owner` (a pid), without moving anything into it; returns its directory
// (write a pid to <dir>/cgroup.procs to join it). Errors name the file.
Result<std::string> create_quota_group(double quota_cores, const std::string& cgroup_root, long owner);
// Moves this process back to the parent cgroup and removes `group`.
void release_cpu_limits(const std::string& group);

}  // namespace tracr::agent
