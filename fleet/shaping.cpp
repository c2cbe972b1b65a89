#include "fleet/shaping.hpp"
#include "core/log.hpp"
#include "core/token_bucket.hpp"
#include "core/user_error.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "fleet/ssh.hpp"

namespace tracr::fleet {

using namespace tracr::core;  // the floors below, by their short names

namespace fs = std::filesystem;
using settings::DeviceConfig;
using settings::LinkSpec;
using settings::Transport;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool is_ipv6(const std::string& a) {
  in6_addr x{};
  return ::inet_pton(AF_INET6, a.c_str(), &x) == 1;
}
bool is_ip(const std::string& a) {
  in_addr x{};
  return ::inet_pton(AF_INET, a.c_str(), &x) == 1 || is_ipv6(a);
}

// Where a device's tc and ip commands run: in its local network namespace,
// on this machine, or over SSH; as root or through `sudo -n`.
class ShapeHost {
 public:
  static Result<ShapeHost> open(const DeviceConfig& d, const std::string& devices_file, bool trust) {
    ShapeHost h;
    h.dev_ = &d;
    if (d.transport == Transport::ssh) {
      auto s = SshSession::connect(device_ssh_target(d, devices_file, trust));
      if (!s) return std::move(s.error());
      h.ssh_ = std::move(*s);
      h.where_ = h.ssh_->label();
    } else {
      h.where_ = d.netns.empty() ? "this machine" : "namespace " + d.netns;
    }
    // Privilege: root, or passwordless sudo.
    auto id = h.raw("id -u");
    if (id.status != 0) {
      std::error_code ec;  // `ip netns exec` on a namespace that is not there fails this way
      if (d.transport != Transport::ssh && !d.netns.empty() && !fs::exists("/run/netns/" + d.netns, ec))
        return make_error(Errc::config, fmt::format("device {}: network namespace {} does not exist: bring it up with "
                                                    "scripts/netns_testbed.sh up",
                                                    d.name, d.netns));
      return make_error(Errc::config, fmt::format("device {} ({}): `id -u` failed: {}", d.name, h.where_, id.text));
    }
    if (trim(id.text) != "0") {
      auto su = h.raw("sudo -n true");
      if (su.status != 0) {
        h.why_not_ = fmt::format("user is not root and `sudo -n` asks for a password or is not allowed ({})",
                                 su.text.empty() ? "no output" : su.text);
      } else {
        h.sudo_ = "sudo -n ";
      }
    }
    // tc and ip may sit outside a non-login PATH (/usr/sbin, /sbin).
    for (const char* tool : {"tc", "ip"}) {
      auto w = h.raw(fmt::format("for p in /usr/sbin/{0} /sbin/{0} /usr/bin/{0} /bin/{0}; do [ -x $p ] && echo $p && "
                                 "exit 0; done; command -v {0}",
                                 tool));
      const std::string path = trim(w.text);
      if (w.status != 0 || path.empty()) {
        if (h.why_not_.empty()) h.why_not_ = fmt::format("`{}` is not installed (Debian package iproute2)", tool);
      }
      (std::string(tool) == "tc" ? h.tc_ : h.ip_) = path;
    }
    return h;
  }

  // A shell command line as the device's user, stderr folded into stdout.
  CommandOutput raw(const std::string& cmd) {
    if (ssh_) {
      auto r = ssh_->run(cmd + " 2>&1");
      if (!r) return {-1, r.error().str()};
      return {r->exit_status, trim(r->out)};
    }
    return run_local_command(netns_exec_prefix(dev_->netns) + "sh -c " + shell_quote(cmd));
  }
  // tc or ip with privilege.
  CommandOutput tc(const std::string& args) { return priv(tc_ + " " + args); }
  CommandOutput ip(const std::string& args) { return raw(ip_ + " " + args); }
  CommandOutput priv(const std::string& cmd) {
    if (!ssh_ && !dev_->netns.empty()) {
      // `ip netns exec` itself needs root here.
      const std::string pre = ::geteuid() == 0 ? "" : "sudo -n ";
      return run_local_command(pre + netns_exec_prefix(dev_->netns) + cmd);
    }
    return raw(sudo_ + cmd);
  }

  // Empty when tc may be run, else why not.
  const std::string& why_not() const { return why_not_; }
  const std::string& sudo() const { return sudo_; }
  const std::string& where() const { return where_; }

  // The interface and source address this device uses to reach `peer`.
  Result<std::pair<std::string, std::string>> route_to(const std::string& peer) {
    std::string addr = peer;
    if (!is_ip(peer)) {
      auto g = raw("getent ahosts " + shell_quote(peer));
      addr = g.text.substr(0, g.text.find_first_of(" \t\n"));
      if (g.status != 0 || !is_ip(addr))
        return make_error(Errc::config, fmt::format("device {} ({}): cannot resolve {} ({})", dev_->name, where_,
                                                    peer, g.text));
    }
    auto o = ip("-o route get " + shell_quote(addr));
    const auto d = o.text.find(" dev ");
    if (o.status != 0 || d == std::string::npos)
      return make_error(Errc::config, fmt::format("device {} ({}): no route to {} ({})", dev_->name, where_, addr, o.text));
    std::string dev = o.text.substr(d + 5);
    dev = dev.substr(0, dev.find(' '));
    std::string src;
    if (const auto s = o.text.find(" src "); s != std::string::npos) {
      src = o.text.substr(s + 5);
      src = src.substr(0, src.find(' '));
    }
    if (dev == "lo")
      return make_error(Errc::config,
                        fmt::format("device {} ({}) reaches {} over loopback; tracr shapes the interface between two "
                                    "agents and will not shape lo (it carries everything else on the machine). Put "
                                    "the agents in network namespaces (devices with netns:) or on separate hosts; on "
                                    "one machine, `sudo bash scripts/netns_testbed.sh up` makes two namespaces that "
                                    "`devices: config/devices_netns.yaml` names",
                                    dev_->name, where_, addr));
    return std::make_pair(dev, src.empty() ? addr : src);
  }

  // Whether the kernel has netem, tried in a throwaway network namespace.
  std::string netem() {
    auto o = priv("unshare -n " + tc_ + " qdisc add dev lo root netem delay 1ms");
    if (o.status == 0) return "yes";
    if (o.text.find("nknown") != std::string::npos) return "no (kernel has no sch_netem)";
    return "unknown (" + o.text + ")";
  }

 private:
  const DeviceConfig* dev_ = nullptr;
  std::unique_ptr<SshSession> ssh_;
  std::string where_, sudo_, why_not_, tc_ = "tc", ip_ = "ip";
};

std::string rate_arg(double mbit) { return fmt::format("{}kbit", static_cast<long long>(std::llround(mbit * 1000))); }

std::string state_path(const std::string& dir, const DeviceConfig& d, const std::string& dev) {
  return (fs::path(dir) / (d.name + "_" + (d.netns.empty() ? "" : d.netns + "_") + dev + ".shaping")).string();
}

// Shapes traffic leaving `dev` for `peer`: an htb class picks it out (a u32
// filter on the peer's address; the class itself does not limit), a tbf under
// it holds the rate, netem under that adds delay, jitter and loss. tbf and not
// htb holds the rate because htb lets a packet go whenever its bucket is not
// in debt: with the idle gaps between frames, a message of a few kB slips
// through at line speed. tbf sends a packet only when tokens for all of it
// are there (segmenting offloaded super-packets), so a small message takes
// its size over the rate, as on a real link.
Status add_qdiscs(ShapeHost& h, const std::string& dev, const std::string& peer, double mbit, const LinkSpec& l,
                  bool netem_delay, std::string* what) {
  const std::string d = shell_quote(dev);
  const bool v6 = is_ipv6(peer);
  std::vector<std::string> cmds = {
      "qdisc add dev " + d + " root handle 1: htb default 0",
      "class add dev " + d + " parent 1: classid 1:1 htb rate 100gbit ceil 100gbit",
      fmt::format("filter add dev {} parent 1: protocol {} prio 1 u32 match {} dst {}/{} flowid 1:1", d,
                  v6 ? "ipv6" : "ip", v6 ? "ip6" : "ip", peer, v6 ? 128 : 32),
  };
  std::string parent = "1:1";
  *what = "htb filter";
  if (mbit > 0) {
    const long long burst = tbf_burst_bytes(mbit);
    cmds.push_back(fmt::format("qdisc add dev {} parent 1:1 handle 10: tbf rate {} burst {} latency 400ms", d,
                               rate_arg(mbit), burst));
    parent = "10:";
    *what = fmt::format("tbf {} Mbit/s", mbit);
  }
  for (const auto& c : cmds) {
    auto o = h.tc(c);
    if (o.status != 0) return make_error(Errc::config, fmt::format("tc {} failed: {}", c, o.text));
  }
  const bool want_netem = (netem_delay && (l.delay_ms > 0 || l.jitter_ms > 0)) || l.loss_pct > 0;
  if (want_netem) {
    std::string a = "netem";
    if (netem_delay && (l.delay_ms > 0 || l.jitter_ms > 0)) {
      a += fmt::format(" delay {}ms", l.delay_ms);
      if (l.jitter_ms > 0) a += fmt::format(" {}ms", l.jitter_ms);
    }
    if (l.loss_pct > 0) a += fmt::format(" loss {}%", l.loss_pct);
    auto o = h.tc("qdisc add dev " + d + " parent " + parent + " handle 20: " + a);
    if (o.status != 0) {
      if (o.text.find("nknown") != std::string::npos)
        return make_error(Errc::config,
                          fmt::format("link profile '{}' needs {}, which needs the kernel's netem qdisc, and this "
                                      "kernel has none (tc: {}).{}",
                                      l.name, l.loss_pct > 0 ? "loss" : "delay or jitter", o.text,
                                      l.loss_pct > 0 ? " Loss has no agent-side emulation; use a profile without loss"
                                                     : " Set `link_delay: agent` to have the participant agent hold "
                                                       "each message for the delay, or use a rate-only profile"));
      return make_error(Errc::config, fmt::format("tc qdisc add ... {} failed: {}", a, o.text));
    }
    *what += " + " + a;
  }
  return {};
}

}  // namespace


std::vector<ParticipantLink> participant_links(const std::optional<LinkSpec>& experiment_link,
                                               const settings::DevicesConfig& devices) {
  std::vector<ParticipantLink> out;
  for (const DeviceConfig* p : devices.participants()) {
    if (experiment_link) {
      out.push_back({p, *experiment_link});
    } else if (p->link_profile && (p->link_profile->rate_mbit > 0 || p->link_profile->delay_ms > 0)) {
      LinkSpec l;
      l.name = "device:" + p->name;
      l.up_mbit = l.down_mbit = p->link_profile->rate_mbit;
      l.delay_ms = p->link_profile->delay_ms;
      l.source = "link_profile of " + p->name + " in " + devices.source;
      out.push_back({p, l});
    }
  }
  return out;
}

namespace {

// Never replace someone else's shaping: the interface's root qdisc must be
// a kernel default.
Status check_root_free(ShapeHost& host, const DeviceConfig& dev, const std::string& ifname, const LinkSpec& link) {
  auto cur = host.tc("qdisc show dev " + shell_quote(ifname) + " root");
  static const char* kDefaults[] = {"noqueue", "pfifo_fast", "fq_codel", "mq", "pfifo", "fq"};
  bool is_default = cur.status == 0 && cur.text.find("qdisc ") == std::string::npos;
  for (const char* k : kDefaults)
    if (cur.text.rfind(std::string("qdisc ") + k + " ", 0) == 0) is_default = true;
  if (is_default) return {};
  return make_error(Errc::config,
                    fmt::format("link profile '{}': interface {} on {} ({}) already has a root qdisc ({}). "
                                "Another run may be shaping this link now (tracrctl results list --status "
                                "running), and tracr never replaces its shaping. If none is, remove it with: "
                                "{}tc qdisc del dev {} root",
                                link.name, ifname, dev.name, host.where(), cur.text,
                                dev.netns.empty() ? "" : "ip netns exec " + dev.netns + " ", ifname));
}

// What a later controller needs to remove this shaping if this one dies.
void write_state(const std::string& path, ShapeHost& host, const DeviceConfig& dev, const std::string& ifname) {
  std::ofstream f(path, std::ios::trunc);
  f << "device=" << dev.name << "\ntransport=" << settings::transport_name(dev.transport) << "\nnetns=" << dev.netns
    << "\ndev=" << ifname << "\nsudo=" << host.sudo() << "\npid=" << ::getpid() << "\nstart=" << self_start_ticks()
    << "\n";
}

}  // namespace

Result<std::unique_ptr<LinkShaper>> LinkShaper::apply(const DeviceConfig& server, const std::vector<ParticipantLink>& links,
                                                      const ShapingContext& ctx) {
  auto sh = std::unique_ptr<LinkShaper>(new LinkShaper());
  sh->ctx_ = ctx;
  bool any = false;
  for (const auto& pl : links) any = any || pl.link.shaped();
  if (!any) return sh;
  std::error_code ec;
  fs::create_directories(ctx.state_dir, ec);
  auto srv = ShapeHost::open(server, ctx.devices_file, ctx.trust_new_hosts);
  if (!srv) return std::move(srv.error());
  std::vector<std::string> parts, agent_parts;
  // Nothing stays applied when a later step fails.
  struct Undo {
    LinkShaper* s;
    bool armed = true;
    ~Undo() {
      if (armed) s->remove();
    }
  } undo{sh.get()};
  for (const auto& pl : links) {
    const LinkSpec& link = pl.link;
    if (!link.shaped()) continue;
    const DeviceConfig& p = *pl.participant;
    if (ctx.agent_delay && (link.delay_ms > 0 || link.jitter_ms > 0)) {
      sh->agent_delay_[p.name] = {link.delay_ms, link.jitter_ms};
      agent_parts.push_back(fmt::format("delay {} ms{} each way in {}'s delay relay", link.delay_ms,
                                  link.jitter_ms > 0 ? fmt::format(" +- {} ms", link.jitter_ms) : "", p.name));
    }
    auto part = ShapeHost::open(p, ctx.devices_file, ctx.trust_new_hosts);
    if (!part) return std::move(part.error());
    // The participant's interface and address towards the server, then the
    // server's interface towards that address.
    auto up = part->route_to(server.connection().host);
    if (!up) return std::move(up.error());
    auto down = srv->route_to(up->second);
    if (!down) return std::move(down.error());
    std::string server_addr = server.connection().host;
    if (!is_ip(server_addr)) {
      // The address the participant resolved (route_to resolved it there).
      auto g = part->raw("getent ahosts " + shell_quote(server_addr));
      server_addr = g.text.substr(0, g.text.find_first_of(" \t\n"));
    }
    struct Dir {
      ShapeHost* host;
      const DeviceConfig* dev;
      std::string ifname, peer;
      double mbit;
      const char* name;
    };
    Dir dirs[] = {{&*part, &p, up->first, server_addr, link.up_mbit, "up"},
                  {&*srv, &server, down->first, up->second, link.down_mbit, "down"}};
    for (auto& d : dirs) {
      const bool tc_delay = !ctx.agent_delay && (link.delay_ms > 0 || link.jitter_ms > 0);
      if (d.mbit <= 0 && !tc_delay && link.loss_pct <= 0) continue;
      if (!d.host->why_not().empty())
        return make_error(Errc::config,
                          fmt::format("link profile '{}': cannot shape {} ({}): {}. Log in as root or allow "
                                      "passwordless sudo for tc (`tracrctl devices check` shows this per device)",
                                      link.name, d.dev->name, d.host->where(), d.host->why_not()));
      TRACR_TRY(check_root_free(*d.host, *d.dev, d.ifname, link));
      Shaped s{*d.dev, d.ifname, state_path(ctx.state_dir, *d.dev, d.ifname)};
      write_state(s.state_file, *d.host, *d.dev, d.ifname);
      sh->shaped_.push_back(s);
      std::string what;
      if (auto st = add_qdiscs(*d.host, d.ifname, d.peer, d.mbit, link, !ctx.agent_delay, &what); !st)
        return make_error(Errc::config, fmt::format("link profile '{}' on {} ({}, {}): {}", link.name, d.dev->name,
                                                    d.host->where(), d.ifname, st.error().message));
      parts.push_back(fmt::format("{} {} on {} ({}) to {}", d.name, what, d.ifname, d.host->where(), d.peer));
    }
  }
  undo.armed = false;
  std::vector<std::string> text;
  if (!parts.empty()) text.push_back(fmt::format("tc: {}", fmt::join(parts, "; ")));
  if (!agent_parts.empty()) text.push_back(fmt::format("agent: {}", fmt::join(agent_parts, "; ")));
  sh->text_ = text.empty() ? "none" : fmt::format("{}", fmt::join(text, "; "));
  return sh;
}

std::vector<std::string> LinkShaper::remove() {
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& s : shaped_) {
    auto h = ShapeHost::open(s.device, ctx_.devices_file, ctx_.trust_new_hosts);
    CommandOutput o{-1, ""};
    if (h) o = h->tc("qdisc del dev " + shell_quote(s.dev) + " root");
    if (h && (o.status == 0 || o.text.find("No such file") != std::string::npos ||
              o.text.find("Cannot find device") != std::string::npos)) {
      fs::remove(s.state_file, ec);
    } else {
      left.push_back(fmt::format("could not remove shaping on {} of {} ({}); the next run retries (state file {})",
                                 s.dev, s.device.name, h ? o.text : user_text(h.error()), s.state_file));
    }
  }
  shaped_.clear();
  return left;
}

std::pair<double, double> LinkShaper::agent_delay(const std::string& participant) const {
  auto it = agent_delay_.find(participant);
  return it == agent_delay_.end() ? std::pair<double, double>{0, 0} : it->second;
}

LinkShaper::~LinkShaper() {
  for (const auto& line : remove()) TRACR_LOG(info, "tracrctl: {}", line);
}

std::string tc_capability(const DeviceConfig& d, const std::string& devices_file, bool trust) {
  auto h = ShapeHost::open(d, devices_file, trust);
  if (!h) return "tc: unknown (" + user_text(h.error()) + ")";
  if (!h->why_not().empty()) return "tc: no (" + h->why_not() + ")";
  return fmt::format("tc: yes ({}), netem: {}", h->sudo().empty() ? "root" : "sudo -n", h->netem());
}

std::vector<std::string> sweep_stale_shaping(const std::string& state_dir, const settings::DevicesConfig& devices,
                                             bool trust) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(state_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    if (e.path().extension() != ".shaping") continue;
    std::ifstream f(e.path());
    std::string line, name, transport, ns, dev;
    int64_t pid = 0, start = 0;
    while (std::getline(f, line)) {
      const auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
      if (k == "device") name = v;
      else if (k == "transport") transport = v;
      else if (k == "netns") ns = v;
      else if (k == "dev") dev = v;
      else if (k == "pid") pid = std::atoll(v.c_str());
      else if (k == "start") start = std::atoll(v.c_str());
    }
    if (process_alive(pid, start)) continue;  // another controller's live run
    if (transport == "local" && !ns.empty() && !fs::exists("/run/netns/" + ns, ec)) {
      // The namespace is gone, and its interfaces and qdiscs with it.
      fs::remove(e.path(), ec);
      out.push_back(fmt::format("forgot shaping on {} in namespace {} left by controller {}: the namespace no longer "
                                "exists",
                                dev, ns, pid));
      continue;
    }
    // The device as shaped: from the devices file (SSH needs its connection),
    // or as the state file describes a local one.
    std::optional<DeviceConfig> d;
    for (const auto& x : devices.devices)
      if (x.name == name && (transport != "local" || x.netns == ns)) d = x;
    if (!d && transport != "ssh") {
      d = DeviceConfig{};
      d->name = name.empty() ? "device" : name;
      d->transport = Transport::local;
      d->netns = ns;
    }
    if (!d) {
      out.push_back(fmt::format("shaping on {} of SSH device {} left by controller {} is still applied: the device is "
                                "not in {} (remove it there: tc qdisc del dev {} root; then delete {})",
                                dev, name, pid, devices.source, dev, e.path().string()));
      continue;
    }
    auto h = ShapeHost::open(*d, devices.source, trust);
    if (!h) {
      out.push_back(fmt::format("cannot remove shaping on {} of {} left by controller {}: {}", dev, name, pid,
                                user_text(h.error())));
      continue;
    }
    auto o = h->tc("qdisc del dev " + shell_quote(dev) + " root");
    if (o.status != 0 && o.text.find("No such file") == std::string::npos &&
        o.text.find("Cannot find device") == std::string::npos && o.text.find("Cannot open") == std::string::npos &&
        o.text.find("does not exist") == std::string::npos) {
      out.push_back(fmt::format("cannot remove shaping on {} of {} left by controller {}: {}", dev, name, pid, o.text));
      continue;
    }
    fs::remove(e.path(), ec);
    out.push_back(fmt::format("removed shaping on {} of {} ({}) left by controller {}", dev, name, h->where(), pid));
  }
  return out;
}

}  // namespace tracr::fleet
