#include "fleet/launcher.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "agent/cpu_limits.hpp"
#include "core/user_error.hpp"
#include "fleet/deploy.hpp"
#include "fleet/process.hpp"
#include "fleet/ssh.hpp"
#include "protocol/crypto.hpp"
#include "protocol/session.hpp"

namespace tracr::fleet {

using namespace tracr::core;  // the floors below, by their short names

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

class LocalProc : public AgentProc {
 public:
  LocalProc(ChildProcess p, std::string log) : p_(std::move(p)), log_(std::move(log)) {}
  ~LocalProc() override {
    if (!group_.empty()) ::rmdir(group_.c_str());
  }
  void set_group(std::string g) { group_ = std::move(g); }
  Status write(const std::string& s) override { return p_.write_stdin(s); }
  Result<std::string> read_line(int t) override { return p_.read_line(t); }
  int stop(int grace_ms) override {
    const int st = p_.stop(grace_ms);
    if (!group_.empty() && ::rmdir(group_.c_str()) == 0) group_.clear();  // empty once the agent is gone
    return st;
  }
  long pid() const override { return static_cast<long>(p_.pid()); }
  std::string log_tail() override {
    if (log_.empty()) return "";
    std::FILE* f = std::fopen(log_.c_str(), "r");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }

 private:
  ChildProcess p_;
  std::string log_;
  std::string group_;  // the quota cgroup this launcher put the agent in
};

class SshProc : public AgentProc {
 public:
  SshProc(std::unique_ptr<SshSession> s, std::unique_ptr<RemoteProcess> p, std::string log)
      : s_(std::move(s)), p_(std::move(p)), log_(std::move(log)) {}
  Status write(const std::string& d) override { return p_->write_stdin(d); }
  Result<std::string> read_line(int t) override { return p_->read_line(t); }
  int stop(int grace_ms) override {
    auto r = p_->stop(grace_ms);
    return r ? *r : -1;
  }
  long pid() const override { return static_cast<long>(p_->pid()); }
  std::string log_tail() override {
    auto t = s_->read_file_tail(log_, 4000);
    return t ? *t : p_->stderr_tail();
  }

 private:
  std::unique_ptr<SshSession> s_;
  std::unique_ptr<RemoteProcess> p_;
  std::string log_;
};

Result<std::unique_ptr<AgentProc>> start_local(const std::string& agent_path, const std::vector<std::string>& args,
                                               const std::string& log_path, const std::string& netns,
                                               double cpu_quota) {
  std::vector<std::string> argv = netns_exec_argv(netns);  // a namespaced test host
  argv.push_back(agent_path);
  argv.insert(argv.end(), args.begin(), args.end());
  // Local agents share this machine's cores: OpenMP threads that spin while
  // idle would steal them from the other agent and distort every timing.
  auto p = ChildProcess::spawn(argv, log_path, {"OMP_WAIT_POLICY=PASSIVE"});
  if (!p) return std::move(p.error());
  auto proc = std::make_unique<LocalProc>(std::move(*p), log_path);
  if (cpu_quota > 0) {
    // The quota group is made from here: an agent inside `ip netns exec`
    // sees a sysfs without the cgroup tree. The agent joins it at once,
    // before it has loaded its model.
    const char* env = std::getenv("TRACR_CGROUP_ROOT");
    auto group = agent::create_quota_group(cpu_quota, env && *env ? env : "/sys/fs/cgroup", proc->pid());
    Status st = group ? Status{} : Status(group.error());
    if (st) {
      proc->set_group(*group);
      std::ofstream f(*group + "/cgroup.procs");
      f << proc->pid();
      f.flush();
      if (!f) st = make_error(Errc::io, "cpu_quota: cannot move the agent into " + *group);
    }
    if (!st) {
      proc->stop(500);
      return std::move(st.error());
    }
  }
  return std::unique_ptr<AgentProc>(std::move(proc));
}

Result<std::unique_ptr<AgentProc>> start_ssh(const LaunchSpec& ls, const std::vector<std::string>& args,
                                             std::vector<StagedFile>* staged, std::string* config_yaml) {
  const DeviceConfig& dev = *ls.device;
  const SshTarget t = ls.ssh_target ? *ls.ssh_target : device_ssh_target(dev, ls.devices_file, ls.trust_new_hosts);
  const std::string log_name = ls.log_name.empty() ? "tracr-agent.log" : ls.log_name;
  auto s = SshSession::connect(t);
  if (!s) {
    std::string hint;
    if (s.error().code == Errc::host_key_unknown)
      hint = " (check the key, then pass --trust-new-hosts to record it in " + t.known_hosts_path + ")";
    return make_error(s.error().code, "device " + dev.name + ": " + s.error().message + hint);
  }
  std::string remote_path = ls.installed_path;
  if (remote_path.empty()) {
    auto d = deploy_agent(**s, ls.agent_path, dev.work_dir);
    if (!d) return make_error(d.error().code, "device " + dev.name + ": deploy: " + d.error().message);
    remote_path = d->remote_path;
  }
  // A loader error at start would say less, later: name what is missing now.
  auto missing = remote_missing_libraries(**s, remote_path);
  if (!missing) return make_error(missing.error().code, "device " + dev.name + ": ldd: " + missing.error().message);
  if (!missing->empty())
    return make_error(Errc::config, missing_libraries_message("device " + dev.name + " (" + (*s)->label() + ")",
                                                              remote_path, *missing));
  if (ls.experiment) {
    auto st = stage_files(**s, dev, agent_files(*ls.experiment, ls.role));
    if (!st) return std::move(st.error());
    *config_yaml = to_yaml(with_device_paths(*ls.experiment, *st));
    *staged = std::move(*st);
  }
  // The agent's stderr goes to a log beside it (tracrctl agents logs),
  // readable by the device's user only (0600, an older log's mode too).
  const std::string log = remote_path.substr(0, remote_path.rfind('/') + 1) + log_name;
  auto made = (*s)->run("(umask 077 && : >> " + shell_quote(log) + ") && chmod 600 " + shell_quote(log));
  if (!made || made->exit_status != 0)
    return make_error(Errc::remote, fmt::format("device {}: cannot create the agent's log {}: {}", dev.name, log,
                                                made ? made->err : made.error().message));
  std::string cmd = shell_quote(remote_path);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>> " + shell_quote(log);
  auto p = (*s)->start(cmd);
  if (!p) return make_error(p.error().code, "device " + dev.name + ": start agent: " + p.error().message);
  return std::unique_ptr<AgentProc>(new SshProc(std::move(*s), std::move(*p), log));
}

}  // namespace

AgentConn::AgentConn(const DeviceConfig* dev, wire::AgentRole role, std::unique_ptr<AgentProc> proc,
                     const std::vector<uint8_t>& secret)
    : dev_(dev),
      role_(role),
      proc_(std::move(proc)),
      in_(secret, wire::ControlDir::agent_to_controller),
      out_(secret, wire::ControlDir::controller_to_agent) {}

AgentConn::~AgentConn() { hb_.stop(); }

Status AgentConn::send(const std::string& kind, const std::map<std::string, std::string>& fields) {
  std::lock_guard<std::mutex> lock(send_mu_);
  auto st = proc_->write(out_.encode(kind, fields));
  if (!st) return make_error(st.error().code, fmt::format("{} agent on {}: cannot send {}: {}", wire::role_name(role_), dev_->name, kind,
                                                          st.error().message));
  return {};
}

void AgentConn::start_heartbeat(int period_ms) {
  // A failed write is the agent's exit or a dead connection: the event pump
  // and the heartbeat-loss check report those.
  hb_.start(period_ms, [this] { (void)send("HEARTBEAT", {}); });
}

int AgentConn::stop(int grace_ms) {
  hb_.stop();
  std::lock_guard<std::mutex> lock(send_mu_);
  return proc_->stop(grace_ms);
}

Error AgentConn::abandon(Errc code, const std::string& what) {
  const int status = stop(500);
  const std::string log = proc_->log_tail();
  return make_error(code, fmt::format("{} agent on {} {}{}; {}", wire::role_name(role_), dev_->name, what,
                                      status >= 0 ? fmt::format(" (exit status {})", status) : "",
                                      log.empty() ? "its log is empty" : "its log ends with:\n" + log));
}

// An agent that will not become ready is stopped; the error says how it
// ended and what its log says.
Result<wire::ControlMsg> AgentConn::wait_ready(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto give_up = [&](Errc code, const std::string& what) { return abandon(code, what); };
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return give_up(Errc::timeout, fmt::format("did not report READY within {} ms", timeout_ms));
    // Ctrl-C while it starts (loading a model can take a minute): stopped at
    // once, and said as what it is (#45 friction 8), not as the device failing.
    if (const int sig = SignalCatcher::signal()) {
      stop(200);
      return make_error(Errc::io, fmt::format("{} agent on {}: start interrupted by signal {}",
                                                     wire::role_name(role_), dev_->name, sig));
    }
    auto line = proc_->read_line(static_cast<int>(std::min<int64_t>(left, 250)));
    if (!line) {
      if (line.error().code == Errc::timeout || SignalCatcher::signal()) continue;
      return give_up(Errc::peer_closed, "exited before READY (" + line.error().message + ")");
    }
    auto m = decode(*line);
    if (!m) return give_up(m.error().code, "sent a line that is not an authenticated control line (" + m.error().message + ")");
    if (m->kind == "FAIL")
      return make_error(Errc::remote, fmt::format("{} agent on {} failed: {}", wire::role_name(role_), dev_->name, core::reported_error_text(m->get_or("error", "?"))));
    if (m->kind == "READY") return std::move(*m);
  }
}

std::string agent_secret_line(const std::string& secret_hex) {
  return secret_hex + " clock_ms=" + std::to_string(protocol::hello_clock_ms(protocol::Security{})) + "\n";
}

Result<std::unique_ptr<AgentConn>> launch_agent(const LaunchSpec& s) {
  std::vector<std::string> args = {"--role", std::string(wire::role_name(s.role))};
  if (!s.config_yaml.empty()) args.insert(args.end(), {"--config", "stdin"});
  // The agent stops by itself when tracrctl goes silent (a partition leaves its stdin open).
  if (s.heartbeat_timeout_ms > 0) args.insert(args.end(), {"--heartbeat-timeout-ms", std::to_string(s.heartbeat_timeout_ms)});
  for (const auto& a : device_limit_args(*s.device)) args.push_back(a);
  args.insert(args.end(), s.args.begin(), s.args.end());
  Result<std::unique_ptr<AgentProc>> p = make_error(Errc::internal, "");
  std::vector<StagedFile> staged;
  std::string config_yaml = s.config_yaml;  // over SSH: with the device's paths
  const DeviceConfig& dev = *s.device;
  if (dev.transport == Transport::local) {
    const std::string dir = s.log_dir.empty() ? "." : s.log_dir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    p = start_local(s.agent_path, args, s.log_name.empty() ? std::string() : dir + "/" + s.log_name, dev.netns,
                    dev.cpu_quota.value_or(0));
  } else {
    p = start_ssh(s, args, &staged, &config_yaml);
  }
  if (!p) return std::move(p.error());
  auto conn = std::make_unique<AgentConn>(s.device, s.role, std::move(*p), s.secret);
  conn->set_staged(std::move(staged));
  if (auto w = conn->proc().write(agent_secret_line(protocol::to_hex(s.secret.data(), s.secret.size()))); !w)
    return conn->abandon(Errc::peer_closed, "exited before READY (could not take the session secret: " + w.error().message + ")");
  if (!config_yaml.empty())
    if (auto w = conn->send("CONFIG", {{"yaml", config_yaml}, {"profiles_known", s.profiles_known}}); !w)
      return conn->abandon(Errc::peer_closed, "exited before READY (could not take the experiment: " + w.error().message + ")");
  if (s.heartbeat_timeout_ms > 0) conn->start_heartbeat();
  return conn;
}

void run_concurrently(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::thread> ts;
  ts.reserve(n);
  for (size_t i = 0; i < n; ++i) ts.emplace_back([&fn, i] { fn(i); });
  for (auto& t : ts) t.join();
}

std::vector<ConcurrentLaunch> launch_concurrently(
    size_t n, const std::function<Result<std::unique_ptr<AgentConn>>(size_t)>& start) {
  std::vector<ConcurrentLaunch> out(n);
  std::vector<Clock::time_point> issued(n), started(n);
  run_concurrently(n, [&](size_t i) {
    issued[i] = Clock::now();
    out[i].conn = start(i);
    started[i] = Clock::now();
  });
  if (n == 0) return out;
  const auto first = *std::min_element(issued.begin(), issued.end());
  auto ms = [&](Clock::time_point t) { return std::chrono::duration<double, std::milli>(t - first).count(); };
  for (size_t i = 0; i < n; ++i) {
    out[i].issued_ms = ms(issued[i]);
    out[i].started_ms = ms(started[i]);
  }
  return out;
}

std::vector<std::string> device_limit_args(const DeviceConfig& dev) {
  std::vector<std::string> a;
  if (dev.cpu_quota) a.insert(a.end(), {"--cpu-quota", fmt::format("{}", *dev.cpu_quota)});
  // A local agent is put in its quota group by the launcher; it records the quota.
  if (dev.cpu_quota && dev.transport == settings::Transport::local) a.push_back("--cpu-quota-external");
  if (!dev.cpus.empty())
    a.insert(a.end(), {"--cpus", fmt::format("{}", fmt::join(dev.cpus, ","))});
  else if (dev.cpu_cores)
    a.insert(a.end(), {"--cpu-cores", std::to_string(*dev.cpu_cores)});
  // Where and on how many threads its models run.
  if (!dev.torch_device.empty()) a.insert(a.end(), {"--device", dev.torch_device});
  if (dev.torch_threads) a.insert(a.end(), {"--threads", std::to_string(*dev.torch_threads)});
  // Energy where the device has no meter: the devices file's power model.
  if (dev.power_model)
    a.insert(a.end(), {"--power-model", fmt::format("{},{}", dev.power_model->idle_w, dev.power_model->busy_w)});
  return a;
}

std::string device_agent_path(const DeviceConfig& dev, const std::string& fallback) {
  return dev.agent_path.empty() ? fallback : dev.agent_path;
}

Status check_device_agents(const settings::DevicesConfig& devices) {
  for (const auto& d : devices.devices) {
    if (!d.agent_path.empty() && ::access(d.agent_path.c_str(), X_OK) != 0)
      return make_error(Errc::config, fmt::format("{}: device '{}': agent {} is not an executable file here", devices.source,
                                                  d.name, d.agent_path));
    // A namespaced test host: its namespace must be there, and entering it
    // (`ip netns exec`) needs root (#45 item 7: these failed later as "`id -u` failed").
    if (d.transport != Transport::ssh && !d.netns.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists("/run/netns/" + d.netns, ec))
        return make_error(Errc::config, fmt::format("{}: device '{}': network namespace {} does not exist; expected it "
                                                    "up: bring it up with scripts/netns_testbed.sh up",
                                                    devices.source, d.name, d.netns));
      if (::geteuid() != 0)
        return make_error(Errc::config,
                          fmt::format("{}: device '{}' runs in network namespace {}, and entering one (ip netns exec) "
                                      "needs root; expected tracrctl run as root (e.g. sudo -s, then the README's "
                                      "PATH line)",
                                      devices.source, d.name, d.netns));
    }
    // Its key, before a run row or a login (#24: a missing key, a directory
    // or a file that is no key failed after the run row, as "unknown
    // libssh error").
    if (d.transport == Transport::ssh) {
      const auto& c = d.connection();
      auto st = check_private_key(c.pkey_path, "this device");
      if (!st)
        return make_error(Errc::config, fmt::format("{}: device '{}': pkey_fp '{}': {}",
                                                    c.pos.known() ? c.pos.str() : devices.source, d.name,
                                                    c.pkey_fp, st.error().message));
    }
  }
  return {};
}

DeviceConfig local_device(const std::string& name) {
  DeviceConfig d;
  d.name = name;
  d.role = DeviceRole::server;
  d.transport = Transport::local;
  ConnectionParams c;
  c.host = "127.0.0.1";
  c.is_default = true;
  d.connections.push_back(c);
  return d;
}

std::string server_bind_host(const DeviceConfig& dev) {
  return dev.transport == Transport::ssh ? "0.0.0.0" : dev.netns.empty() ? "127.0.0.1" : dev.connection().host;
}

std::string reachable_endpoint(const std::string& bound, const std::string& host) {
  auto colon = bound.rfind(':');
  if (colon == std::string::npos) return bound;
  return "tcp://" + host + bound.substr(colon);
}

std::string known_hosts_for(const std::string& devices_file) {
  std::error_code ec;
  const fs::path dir = fs::absolute(devices_file, ec).parent_path();
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    // A project (the Python tracr's layout too): config/ and pkeys/ side by side.
    if (fs::is_directory(p / "pkeys", ec) && fs::is_directory(p / "config", ec))
      return (p / "pkeys" / "known_hosts").lexically_normal().string();
    if (p == p.parent_path()) break;
  }
  return (dir / "pkeys" / "known_hosts").lexically_normal().string();
}

SshTarget device_ssh_target(const DeviceConfig& dev, const std::string& devices_file, bool trust_new_hosts) {
  const auto& c = dev.connection();
  SshTarget t;
  t.host = c.host;
  t.port = c.ssh_port;
  t.user = c.user;
  t.key_path = c.pkey_path;
  t.known_hosts_path = known_hosts_for(devices_file);
  if (const char* kh = std::getenv("TRACR_KNOWN_HOSTS")) t.known_hosts_path = kh;
  t.trust_on_first_use = trust_new_hosts;
  return t;
}

}  // namespace tracr::fleet
