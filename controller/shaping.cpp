#include "controller/shaping.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "controller/process.hpp"
#include "controller/ssh.hpp"

namespace tracr::controller {

namespace fs = std::filesystem;
using settings::DeviceConfig;
using settings::LinkSpec;

namespace {

CommandOutput run(const std::string& cmd) { return run_local_command(cmd); }

std::string in_ns(const std::string& ns, const std::string& cmd) {
  return "/usr/sbin/ip netns exec " + shell_quote(ns) + " " + cmd;
}

// The interface in `ns` that routes to `peer`.
Result<std::string> route_dev(const std::string& ns, const std::string& peer) {
  auto o = run("/usr/sbin/ip -n " + shell_quote(ns) + " -o route get " + shell_quote(peer));
  const auto dev = o.text.find(" dev ");
  if (o.status != 0 || dev == std::string::npos)
    return make_error(Errc::config, fmt::format("namespace {}: no route to {} ({})", ns, peer, o.text));
  std::string d = o.text.substr(dev + 5);
  return d.substr(0, d.find(' '));
}

std::string rate_arg(double mbit) { return fmt::format("{}kbit", static_cast<long long>(std::llround(mbit * 1000))); }

// tc arguments for one direction of `l` leaving through an interface.
std::string qdisc_args(const LinkSpec& l, double mbit) {
  if (l.delay_ms > 0 || l.jitter_ms > 0 || l.loss_pct > 0) {
    std::string a = fmt::format("netem delay {}ms", l.delay_ms);
    if (l.jitter_ms > 0) a += fmt::format(" {}ms", l.jitter_ms);
    if (l.loss_pct > 0) a += fmt::format(" loss {}%", l.loss_pct);
    if (mbit > 0) a += " rate " + rate_arg(mbit);
    return a;
  }
  // tbf: a burst of at least 10 ms of traffic (and 4 KiB) so the rate holds at timer granularity.
  const long long burst = std::max(4096LL, std::llround(mbit * 1e6 / 8 / 100));
  return fmt::format("tbf rate {} burst {} latency 400ms", rate_arg(mbit), burst);
}

}  // namespace

Result<std::unique_ptr<LinkShaper>> LinkShaper::apply(const LinkSpec& link, const DeviceConfig& server,
                                                      const std::vector<const DeviceConfig*>& participants,
                                                      const std::string& state_dir) {
  auto sh = std::unique_ptr<LinkShaper>(new LinkShaper());
  if (!link.shaped()) return sh;
  auto in_a_namespace = [&](const DeviceConfig& d) -> Status {
    if (d.transport == settings::Transport::local && !d.netns.empty()) return {};
    return make_error(Errc::config,
                      fmt::format("link profile '{}': device {} is not in a network namespace; tracr applies link "
                                  "profiles with tc on the path between namespaced agents (devices with netns:). "
                                  "Shaping a real interface over SSH is not built yet",
                                  link.name, d.name));
  };
  TRACR_TRY(in_a_namespace(server));
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  std::vector<std::string> parts;
  // One qdisc per direction: on the participant's interface towards the
  // server (up) and on the server's towards each participant (down).
  for (const DeviceConfig* p : participants) {
    TRACR_TRY(in_a_namespace(*p));
    const std::pair<const DeviceConfig*, const DeviceConfig*> dirs[] = {{p, &server}, {&server, p}};
    for (const auto& [from, to] : dirs) {
      const double mbit = from == p ? link.up_mbit : link.down_mbit;
      if (mbit <= 0 && link.delay_ms <= 0 && link.jitter_ms <= 0 && link.loss_pct <= 0) continue;
      auto dev = route_dev(from->netns, to->connection().host);
      if (!dev) return std::move(dev.error());
      // Never replace someone else's shaping.
      auto cur = run(in_ns(from->netns, "/usr/sbin/tc qdisc show dev " + shell_quote(*dev) + " root"));
      static const char* kDefaults[] = {"noqueue", "pfifo_fast", "fq_codel", "mq", "pfifo", "fq"};
      bool is_default = cur.text.empty();
      for (const char* k : kDefaults)
        if (cur.text.rfind(std::string("qdisc ") + k + " ", 0) == 0) is_default = true;
      if (!is_default)
        return make_error(Errc::config, fmt::format("link profile '{}': interface {} in namespace {} already has a "
                                                    "root qdisc ({}); remove it first (tc qdisc del dev {} root)",
                                                    link.name, *dev, from->netns, cur.text, *dev));
      Shaped s{from->netns, *dev, (fs::path(state_dir) / (from->netns + "_" + *dev + ".shaping")).string()};
      {
        std::ofstream f(s.state_file, std::ios::trunc);
        f << "netns=" << s.netns << "\ndev=" << s.dev << "\npid=" << ::getpid() << "\nstart=" << self_start_ticks()
          << "\n";
      }
      const std::string args = qdisc_args(link, mbit);
      auto o = run(in_ns(from->netns, "/usr/sbin/tc qdisc add dev " + shell_quote(*dev) + " root " + args));
      if (o.status != 0) {
        fs::remove(s.state_file, ec);
        if (args.rfind("netem", 0) == 0 && o.text.find("unknown") != std::string::npos)
          return make_error(Errc::config,
                            fmt::format("link profile '{}' needs delay, jitter or loss, which need the kernel's netem "
                                        "qdisc, and this kernel has none (tc: {}). Use a rate-only profile; delay "
                                        "applied inside the agents is not built yet",
                                        link.name, o.text));
        return make_error(Errc::config, fmt::format("link profile '{}': tc on {} in namespace {} failed: {} (tc {})",
                                                    link.name, *dev, from->netns, o.text, args));
      }
      sh->shaped_.push_back(s);
      parts.push_back(fmt::format("{} on {} (ns {}): {}", from == p ? "up" : "down", *dev, from->netns, args));
    }
  }
  sh->text_ = "tc: " + fmt::format("{}", fmt::join(parts, "; "));
  return sh;
}

void LinkShaper::remove() {
  std::error_code ec;
  for (const auto& s : shaped_) {
    (void)run(in_ns(s.netns, "/usr/sbin/tc qdisc del dev " + shell_quote(s.dev) + " root"));
    fs::remove(s.state_file, ec);
  }
  shaped_.clear();
}

LinkShaper::~LinkShaper() { remove(); }

std::vector<std::string> sweep_stale_shaping(const std::string& state_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(state_dir, ec)) return removed;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    if (e.path().extension() != ".shaping") continue;
    std::ifstream f(e.path());
    std::string line, ns, dev;
    int64_t pid = 0, start = 0;
    while (std::getline(f, line)) {
      const auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
      if (k == "netns") ns = v;
      else if (k == "dev") dev = v;
      else if (k == "pid") pid = std::atoll(v.c_str());
      else if (k == "start") start = std::atoll(v.c_str());
    }
    if (process_alive(pid, start)) continue;  // another controller's live run
    if (!ns.empty() && !dev.empty())
      (void)run(in_ns(ns, "/usr/sbin/tc qdisc del dev " + shell_quote(dev) + " root"));
    fs::remove(e.path(), ec);
    removed.push_back(fmt::format("removed shaping on {} in namespace {} left by controller {}", dev, ns, pid));
  }
  return removed;
}

}  // namespace tracr::controller
