// Detached SERVER agents: `tracrctl agents start` leaves a SERVER running
// (local or over SSH) with its secret in an owner-only file; later runs of the
// same model reuse it until `tracrctl agents stop`.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "agent/control.hpp"
#include "controller/deploy.hpp"
#include "controller/user_error.hpp"
#include "controller/staging.hpp"
#include "controller/launcher.hpp"
#include "controller/model_check.hpp"
#include "controller/process.hpp"
#include "controller/run.hpp"
#include "protocol/crypto.hpp"

namespace tracr::controller {

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

using agent::ControlCodec;
using agent::ControlDir;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string detached_state_path(const std::string& output_db, const std::string& device) {
  return (fs::path(output_db).parent_path() / "agents" / (device + ".state")).string();
}

Result<DetachedServer> read_detached(const std::string& path) {
  std::ifstream f(path);
  if (!f) return make_error(Errc::not_found, "no detached agent state at " + path);
  DetachedServer d;
  std::string line;
  while (std::getline(f, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto k = line.substr(0, eq);
    auto v = agent::pct_decode(line.substr(eq + 1));
    if (!v) return make_error(Errc::config, path + ": bad value for " + k);
    if (k == "device") d.device = *v;
    else if (k == "transport") d.transport = *v;
    else if (k == "endpoint") d.endpoint = *v;
    else if (k == "secret") d.secret_hex = *v;
    else if (k == "identity") d.identity = *v;
    else if (k == "log") d.log = *v;
    else if (k == "pid") d.pid = std::atol(v->c_str());
    else if (k == "start") d.start_ticks = std::atoll(v->c_str());
    else if (k.rfind("ready.", 0) == 0) d.ready[k.substr(6)] = *v;
  }
  if (d.endpoint.empty() || d.secret_hex.empty() || d.pid <= 0)
    return make_error(Errc::config, path + ": incomplete detached agent state");
  return d;
}

// Created owner-only (0600) from the start, never readable in between.
Status write_owner_only(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::io, fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  ::fchmod(fd, 0600);  // an existing file keeps its mode on O_TRUNC
  const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return make_error(Errc::io, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return {};
}

Status write_detached(const std::string& path, const DetachedServer& d) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  // The state holds the session secret: owner-only, like a private key.
  const std::string tmp = path + ".tmp";
  std::string text = "device=" + agent::pct_encode(d.device) + "\ntransport=" + agent::pct_encode(d.transport) +
                     "\nendpoint=" + agent::pct_encode(d.endpoint) + "\nsecret=" + d.secret_hex +
                     "\nidentity=" + agent::pct_encode(d.identity) + "\nlog=" + agent::pct_encode(d.log) +
                     "\npid=" + std::to_string(d.pid) + "\nstart=" + std::to_string(d.start_ticks) + "\n";
  for (const auto& [k, v] : d.ready) text += "ready." + agent::pct_encode(k) + "=" + agent::pct_encode(v) + "\n";
  TRACR_TRY(write_owner_only(tmp, text));
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io, "cannot write " + path + ": " + ec.message());
  return {};
}


namespace {

// Reads control lines from an agent's log, in order, until READY or FAIL.
Result<agent::ControlMsg> wait_ready_in_log(const std::function<Result<std::string>()>& read_log,
                                      const std::vector<uint8_t>& secret, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    auto text = read_log();
    if (text) {
      ControlCodec ctl(secret, ControlDir::agent_to_controller);
      size_t pos = 0, nl;
      while ((nl = text->find('\n', pos)) != std::string::npos) {
        const std::string line = text->substr(pos, nl - pos);
        pos = nl + 1;
        auto m = ctl.decode(line);
        if (!m) continue;  // stderr lines share the log
        if (m->kind == "FAIL") return make_error(Errc::remote, "agent failed: " + m->get_or("error", "?"));
        if (m->kind == "READY") return std::move(*m);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return make_error(Errc::timeout, "the detached agent did not report READY in time");
}

std::string read_local(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

int cmd_agents_start(const RunOptions& opt) {
  const bool trust = opt.trust_new_hosts;
  const std::string agent_path = opt.agent_path.empty() ? self_dir() + "/tracr-agent" : opt.agent_path;
  auto cfg = load_experiment(opt.experiment, opt.sets);
  if (!cfg) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(cfg.error()));
    return 2;
  }
  if (auto n = check_experiment_model(*cfg); !n) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(n.error()));
    return 2;
  }
  auto devices = load_experiment_devices(*cfg);
  if (!devices) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(devices.error()));
    return 2;
  }
  const DeviceConfig& server = devices->server();
  const std::string state = detached_state_path(cfg->output, server.name);
  if (auto old = read_detached(state);
      old && (old->transport != "local" || process_alive(old->pid, old->start_ticks))) {
    fmt::print("SERVER agent on {} already running (pid {}, {}); `tracrctl agents stop` first\n", server.name, old->pid,
               old->endpoint);
    return old->identity == server_identity(*cfg) ? 0 : 1;
  }
  std::vector<uint8_t> secret(32);
  if (auto rb = protocol::random_bytes(secret.data(), secret.size()); !rb) {
    // A predictable session secret would authenticate nothing.
    fmt::print(stderr, "tracrctl agents start: cannot draw the session secret: {}\n", user_text(rb.error()));
    return 1;
  }
  const std::string secret_hex = protocol::to_hex(secret.data(), secret.size());
  // The detached agent reads the effective experiment from a file beside its
  // secret (no layer profiling: it serves many runs).
  ExperimentConfig no_profile = *cfg;
  no_profile.record.layers = false;
  std::string config_yaml = agent_config_yaml(no_profile);
  std::vector<std::string> a = {"--role", "SERVER", "--bind",
                                fmt::format("tcp://{}:{}", server_bind_host(server), server.connection().port)};
  for (const auto& x : device_limit_args(server)) a.push_back(x);

  DetachedServer d;
  d.device = server.name;
  d.transport = std::string(transport_name(server.transport));
  d.identity = server_identity(*cfg);
  Result<agent::ControlMsg> ready = make_error(Errc::internal, "");
  if (server.transport == Transport::local) {
    const std::string dir = fs::path(state).parent_path().string();
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string secret_file = dir + "/" + server.name + ".secret";
    const std::string exp_file = dir + "/" + server.name + ".experiment.yaml";
    for (const auto& [file, text] : {std::pair{secret_file, secret_hex + "\n"}, std::pair{exp_file, config_yaml}})
      if (auto w = write_owner_only(file, text); !w) {
        fmt::print(stderr, "tracrctl agents start: {}\n", user_text(w.error()));
        return 1;
      }
    a.insert(a.end(), {"--experiment", exp_file});
    d.log = dir + "/" + server.name + ".log";
    std::vector<std::string> argv;
    if (!server.netns.empty()) argv = {"/usr/sbin/ip", "netns", "exec", server.netns};
    argv.push_back(agent_path);
    argv.insert(argv.end(), a.begin(), a.end());
    argv.insert(argv.end(), {"--secret-file", secret_file});
    auto pid = spawn_detached(argv, d.log, {"OMP_WAIT_POLICY=PASSIVE"});
    if (!pid) {
      fmt::print(stderr, "tracrctl agents start: {}\n", user_text(pid.error()));
      return 1;
    }
    d.pid = *pid;
    d.start_ticks = process_start_ticks(d.pid);
    ready = wait_ready_in_log([&]() -> Result<std::string> { return read_local(d.log); }, secret, 600000);
  } else {
    auto s = SshSession::connect(device_ssh_target(server, devices->source, trust));
    if (!s) {
      fmt::print(stderr, "tracrctl agents start: device {}: {}\n", server.name, user_text(s.error()));
      return 1;
    }
    auto dep = deploy_agent(**s, agent_path, server.work_dir);
    if (!dep) {
      fmt::print(stderr, "tracrctl agents start: device {}: deploy: {}\n", server.name, user_text(dep.error()));
      return 1;
    }
    auto missing = remote_missing_libraries(**s, dep->remote_path);
    if (missing && !missing->empty()) {
      fmt::print(stderr, "tracrctl agents start: {}\n",
                 missing_libraries_message("device " + server.name, dep->remote_path, *missing));
      return 1;
    }
    // The files a SERVER reads (model, weights): at the device's paths.
    const ExperimentConfig abs_cfg = agent_experiment(no_profile);
    auto staged = stage_files(**s, server, agent_files(abs_cfg, "SERVER"));
    if (!staged) {
      fmt::print(stderr, "tracrctl agents start: {}\n", user_text(staged.error()));
      return 1;
    }
    for (const auto& f : *staged) fmt::print("{}: {}\n", server.name, f.describe());
    config_yaml = to_yaml(with_device_paths(abs_cfg, *staged));
    const std::string dir = dep->remote_path.substr(0, dep->remote_path.rfind('/') + 1);
    const std::string secret_file = dir + server.name + ".secret";
    d.log = dir + server.name + "-detached.log";
    auto w = (*s)->run("umask 077 && cat > " + shell_quote(secret_file), secret_hex + "\n");
    if (!w || w->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot write the secret file\n", server.name);
      return 1;
    }
    const std::string exp_file = dir + server.name + ".experiment.yaml";
    auto we = (*s)->run("umask 077 && cat > " + shell_quote(exp_file), config_yaml);
    if (!we || we->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot write the experiment file\n", server.name);
      return 1;
    }
    a.insert(a.end(), {"--experiment", exp_file});
    std::string cmd = "setsid nohup " + shell_quote(dep->remote_path);
    for (const auto& x : a) cmd += " " + shell_quote(x);
    cmd += " --secret-file " + shell_quote(secret_file) + " > " + shell_quote(d.log) + " 2>&1 < /dev/null & p=$!; echo $p; " +
           start_ticks_shell("$p");
    auto r = (*s)->run(cmd);
    if (!r || r->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot start the agent: {}\n", server.name,
                 r ? r->err : r.error().str());
      return 1;
    }
    d.pid = std::atol(r->out.c_str());
    if (const auto nl = r->out.find('\n'); nl != std::string::npos) d.start_ticks = std::atoll(r->out.c_str() + nl + 1);
    ready = wait_ready_in_log([&]() { return (*s)->read_file_tail(d.log, 1u << 20); }, secret, 600000);
  }
  if (!ready) {
    fmt::print(stderr, "tracrctl agents start: {}: {}\n", server.name, user_text(ready.error()));
    return 1;
  }
  d.endpoint = ready->get_or("endpoint", "");
  if (server.transport != Transport::local) d.endpoint = reachable_endpoint(d.endpoint, server.connection().host);
  d.ready = ready->fields;
  d.secret_hex = secret_hex;
  if (auto st = write_detached(state, d); !st) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(st.error()));
    return 1;
  }
  fmt::print("SERVER agent on {} running detached: pid {}, {}, serving {}; runs of this model reuse it until "
             "`tracrctl agents stop`\n",
             server.name, d.pid, d.endpoint, cfg->model);
  return 0;
}

int stop_detached_agents(const std::string& state_dir, bool trust, const std::string& devices_file) {
  std::error_code ec;
  if (!fs::is_directory(state_dir, ec)) return 0;
  int bad = 0;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    if (e.path().extension() != ".state") continue;
    auto d = read_detached(e.path().string());
    if (!d) {
      fmt::print(stderr, "{}\n", user_text(d.error()));
      ++bad;
      continue;
    }
    // By identity only: the pid and the start time recorded when it started.
    // A bare pid from a file could name any process by now.
    if (d->start_ticks <= 0) {
      fmt::print(stderr,
                 "detached agent on {}: its state ({}) records no start time, so pid {} cannot be told from a "
                 "process that reused it; not signalled. Check it and stop it by hand, then delete the state file\n",
                 d->device, e.path().string(), d->pid);
      ++bad;
      continue;
    }
    bool was_running = true;
    if (d->transport == "local") {
      was_running = process_alive(d->pid, d->start_ticks);
      if (was_running) {
        ::kill(static_cast<pid_t>(d->pid), SIGTERM);
        for (int i = 0; i < 50 && process_alive(d->pid, d->start_ticks); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (process_alive(d->pid, d->start_ticks)) ::kill(static_cast<pid_t>(d->pid), SIGKILL);
      }
      fs::remove(fs::path(state_dir) / (d->device + ".secret"), ec);
      fs::remove(fs::path(state_dir) / (d->device + ".experiment.yaml"), ec);
    } else {
      auto devs = load_devices_or_default(devices_file);
      const DeviceConfig* dev = devs ? devs->find(d->device) : nullptr;
      if (!dev) {
        fmt::print(stderr, "detached agent on {}: device not in {}\n", d->device, devices_file);
        ++bad;
        continue;
      }
      auto s = SshSession::connect(device_ssh_target(*dev, devs->source, trust));
      if (!s) {
        fmt::print(stderr, "detached agent on {}: {}\n", d->device, user_text(s.error()));
        ++bad;
        continue;
      }
      const std::string pid = std::to_string(d->pid), ticks = std::to_string(d->start_ticks);
      const std::string base = d->log.substr(0, d->log.size() - std::string("-detached.log").size());
      auto r = (*s)->run("same() { [ \"$(" + start_ticks_shell(pid) + ")\" = " + ticks + " ]; }; if same; then kill " +
                         pid + "; i=0; while same && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; same && kill -9 " +
                         pid + "; echo stopped; else echo gone; fi; rm -f " + shell_quote(base + ".secret") + " " +
                         shell_quote(base + ".experiment.yaml"));
      if (!r) {
        fmt::print(stderr, "detached agent on {}: {}\n", d->device, user_text(r.error()));
        ++bad;
        continue;
      }
      was_running = r->out.find("stopped") != std::string::npos;
    }
    fs::remove(e.path(), ec);
    if (was_running) fmt::print("stopped the detached SERVER agent on {} (pid {})\n", d->device, d->pid);
    else fmt::print("the detached SERVER agent on {} (pid {}) had already ended; its state is removed\n", d->device, d->pid);
  }
  return bad ? 1 : 0;
}

}  // namespace tracr::controller
