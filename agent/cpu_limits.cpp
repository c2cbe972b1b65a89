#include "agent/cpu_limits.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace tracr::agent {

namespace fs = std::filesystem;

namespace {

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) return make_error(Errc::io, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  f << text;
  f.flush();
  if (!f) return make_error(Errc::io, fmt::format("cannot write '{}' to {}: {}", text, path, std::strerror(errno)));
  return {};
}

bool has_v2_cpu(const std::string& root) {
  std::ifstream f(root + "/cgroup.controllers");
  std::string w;
  while (f >> w)
    if (w == "cpu") return true;
  return false;
}

// Removes empty tracr-agent-<pid> groups of agents that are gone.
void sweep_stale(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tracr-agent-", 0) != 0) continue;
    const long pid = std::atol(name.c_str() + 12);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::rmdir(e.path().c_str());
  }
}

// Pins this process to exactly `cpus`, each of which it must be allowed to
// use (a cpuset or an outer affinity may allow fewer than the host has).
Result<std::string> pin_to_cpus(const std::vector<int>& cpus) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return make_error(Errc::io, fmt::format("cpus: sched_getaffinity: {}", std::strerror(errno)));
  std::string may;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) may += (may.empty() ? "" : ",") + std::to_string(cpu);
  cpu_set_t want;
  CPU_ZERO(&want);
  std::string ids;
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
      return make_error(Errc::config, fmt::format("cpus: CPU {} asked, this process may use CPUs [{}]", cpu, may));
    CPU_SET(cpu, &want);
    ids += (ids.empty() ? "" : ",") + std::to_string(cpu);
  }
  if (sched_setaffinity(0, sizeof want, &want) != 0)
    return make_error(Errc::io, fmt::format("cpus: sched_setaffinity: {}", std::strerror(errno)));
  return fmt::format("affinity {} CPU(s) [{}] (cpus)", cpus.size(), ids);
}

}  // namespace

Result<std::string> apply_cpu_limits(const CpuLimits& l, const std::string& root, std::string* group) {
  group->clear();
  std::string what;
  if (l.cores > 0 && l.cpus.empty()) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
      return make_error(Errc::io, fmt::format("cpu_cores: sched_getaffinity: {}", std::strerror(errno)));
    if (CPU_COUNT(&allowed) < l.cores)
      return make_error(Errc::config, fmt::format("cpu_cores: {} CPUs asked, this process may use {}", l.cores,
                                                  CPU_COUNT(&allowed)));
    cpu_set_t want;
    CPU_ZERO(&want);
    std::string ids;
    for (int cpu = 0, n = 0; cpu < CPU_SETSIZE && n < l.cores; ++cpu)
      if (CPU_ISSET(cpu, &allowed)) {
        CPU_SET(cpu, &want);
        ids += (n++ ? "," : "") + std::to_string(cpu);
      }
    if (sched_setaffinity(0, sizeof want, &want) != 0)
      return make_error(Errc::io, fmt::format("cpu_cores: sched_setaffinity: {}", std::strerror(errno)));
    what = fmt::format("affinity {} CPU(s) [{}]", l.cores, ids);
  }
  if (!l.cpus.empty()) {
    auto pinned = pin_to_cpus(l.cpus);
    if (!pinned) return std::move(pinned.error());
    what = *pinned;
  }
  if (l.quota_cores > 0) {
    auto dir = create_quota_group(l.quota_cores, root, ::getpid());
    if (!dir) return std::move(dir.error());
    if (auto st = write_file(*dir + "/cgroup.procs", std::to_string(::getpid())); !st) {
      ::rmdir(dir->c_str());
      return make_error(st.error().code, "cpu_quota: " + st.error().message);
    }
    *group = *dir;
    what += fmt::format("{}cgroup {} quota {:.2f} core(s)", what.empty() ? "" : ", ", *dir, l.quota_cores);
  }
  return what;
}

Result<std::string> create_quota_group(double quota_cores, const std::string& root, long owner) {
  // The shortest period the kernel allows for this share (its quota must be
  // at least 1 ms): the slowdown is then even at the scale of one layer. With
  // a 100 ms period a 40 ms head runs at full speed and then stalls, and a
  // layer profiled alone gets a different speed from the same layer inside
  // a frame.
  const long period = std::clamp(static_cast<long>(std::lround(1000.0 / quota_cores)), 1000L, 1000000L);  // us
  const long quota = std::max(1000L, static_cast<long>(std::lround(quota_cores * period)));
  const std::string name = "tracr-agent-" + std::to_string(owner);
  std::string dir;
  std::error_code ec;
  const bool v2 = has_v2_cpu(root);
  if (v2) dir = root + "/" + name;
  else if (fs::exists(root + "/cpu/cpu.cfs_quota_us", ec)) dir = root + "/cpu/" + name;
  else
    return make_error(Errc::config, fmt::format("cpu_quota: no cgroup cpu controller under {} (neither v2 "
                                                "cgroup.controllers with cpu nor v1 cpu/cpu.cfs_quota_us)",
                                                root));
  sweep_stale(fs::path(dir).parent_path().string());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return make_error(Errc::io, fmt::format("cpu_quota: cannot create cgroup {}: {} (root or a delegated cgroup is "
                                            "needed)",
                                            dir, std::strerror(errno)));
  Status st = v2 ? write_file(dir + "/cpu.max", fmt::format("{} {}", quota, period))
                 : write_file(dir + "/cpu.cfs_period_us", std::to_string(period));
  if (st && !v2) st = write_file(dir + "/cpu.cfs_quota_us", std::to_string(quota));
  if (!st) {
    ::rmdir(dir.c_str());
    return make_error(st.error().code, "cpu_quota: " + st.error().message);
  }
  return dir;
}

void release_cpu_limits(const std::string& group) {
  if (group.empty()) return;
  const std::string parent = fs::path(group).parent_path().string();
  (void)write_file(parent + "/cgroup.procs", std::to_string(::getpid()));
  ::rmdir(group.c_str());
}

}  // namespace tracr::agent
