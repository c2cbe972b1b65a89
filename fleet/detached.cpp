#include "fleet/detached.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "wire/control.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "fleet/ssh.hpp"
#include "core/log.hpp"
#include "core/process_identity.hpp"
#include "core/user_error.hpp"

namespace tracr::fleet {

using namespace tracr::core;  // the floors below, by their short names

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

using wire::ControlCodec;
using wire::ControlDir;
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
    auto v = wire::pct_decode(line.substr(eq + 1));
    if (!v) return make_error(Errc::config, path + ": bad value for " + k);
    if (k == "device") d.device = *v;
    else if (k == "transport") d.transport = *v;
    else if (k == "endpoint") d.endpoint = *v;
    else if (k == "secret") d.secret_hex = *v;
    else if (k == "identity") d.identity = *v;
    else if (k == "log") d.log = *v;
    else if (k == "devices") d.devices_file = *v;
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
  std::string text = "device=" + wire::pct_encode(d.device) + "\ntransport=" + wire::pct_encode(d.transport) +
                     "\nendpoint=" + wire::pct_encode(d.endpoint) + "\nsecret=" + d.secret_hex +
                     "\nidentity=" + wire::pct_encode(d.identity) + "\nlog=" + wire::pct_encode(d.log) +
                     "\ndevices=" + wire::pct_encode(d.devices_file) +
                     "\npid=" + std::to_string(d.pid) + "\nstart=" + std::to_string(d.start_ticks) + "\n";
  for (const auto& [k, v] : d.ready) text += "ready." + wire::pct_encode(k) + "=" + wire::pct_encode(v) + "\n";
  TRACR_TRY(write_owner_only(tmp, text));
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io, "cannot write " + path + ": " + ec.message());
  return {};
}


// Reads control lines from an agent's log, in order, until READY or FAIL.
Result<wire::ControlMsg> wait_ready_in_log(const std::function<Result<std::string>()>& read_log,
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

namespace {

// Local processes started with `--secret-file` naming `secret_file` (the
// same file, however the path was written): a detached agent's own identity,
// for a state whose pid no longer names it (#46: a state file edited to
// point at a decoy). /proc/PID/cmdline, relative paths against /proc/PID/cwd.
std::vector<int64_t> local_agents_by_secret(const std::string& secret_file) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::exists(secret_file, ec)) return out;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    const std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::string> argv;
    for (size_t a = 0, b; a < cmd.size(); a = b + 1) {
      b = cmd.find('\0', a);
      if (b == std::string::npos) b = cmd.size();
      argv.push_back(cmd.substr(a, b - a));
    }
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] != "--secret-file") continue;
      fs::path arg(argv[i + 1]);
      if (arg.is_relative()) arg = fs::read_symlink(e.path() / "cwd", ec) / arg;
      if (fs::equivalent(arg, secret_file, ec)) out.push_back(std::stoll(name));
      break;
    }
  }
  return out;
}

// SIGTERM, up to 5 s, then SIGKILL; whether it is gone.
bool stop_local_process(int64_t pid, int64_t ticks) {
  ::kill(static_cast<pid_t>(pid), SIGTERM);
  for (int i = 0; i < 50 && process_alive(pid, ticks); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (process_alive(pid, ticks)) ::kill(static_cast<pid_t>(pid), SIGKILL);
  for (int i = 0; i < 20 && process_alive(pid, ticks); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return !process_alive(pid, ticks);
}

// What stopping one detached agent came to: !ok = an error was logged (its
// state is kept); found = the agent found by its secret file, not its pid.
struct StopOutcome {
  bool ok = true;
  bool was_running = false;
  std::string found;
};

StopOutcome stop_local_agent(const DetachedServer& d, const std::string& state_dir, const std::string& state_file) {
  StopOutcome out;
  std::error_code ec;
  std::vector<std::pair<int64_t, int64_t>> targets;  // (pid, start ticks)
  if (process_alive(d.pid, d.start_ticks)) targets.push_back({d.pid, d.start_ticks});
  else
    for (int64_t pid : local_agents_by_secret((fs::path(state_dir) / (d.device + ".secret")).string())) {
      targets.push_back({pid, process_start_ticks(pid)});
      out.found += fmt::format("{}{}", out.found.empty() ? "" : ", ", pid);
    }
  bool alive = false;
  for (const auto& [pid, ticks] : targets) alive = !stop_local_process(pid, ticks) || alive;
  if (alive) {
    // Never forget a live agent: its state stays for another try.
    TRACR_LOG(error, "detached agent on {}: pid {} is still running after SIGKILL; its state {} is kept", d.device,
              targets.front().first, state_file);
    out.ok = false;
    return out;
  }
  out.was_running = !targets.empty();
  fs::remove(fs::path(state_dir) / (d.device + ".secret"), ec);
  fs::remove(fs::path(state_dir) / (d.device + ".experiment.yaml"), ec);
  return out;
}

StopOutcome stop_remote_agent(const DetachedServer& d, bool trust, const std::string& devices_file) {
  StopOutcome out;
  out.ok = false;
  // The devices file it was started from, else the one given.
  const std::string from = d.devices_file.empty() ? devices_file : d.devices_file;
  auto devs = load_devices_or_default(from);
  const DeviceConfig* dev = devs ? devs->find(d.device) : nullptr;
  if (!dev) {
    TRACR_LOG(error, "detached agent on {}: device not in {}{}", d.device, from,
              devs ? "" : " (" + user_text(devs.error()) + ")");
    return out;
  }
  auto s = SshSession::connect(device_ssh_target(*dev, devs->source, trust));
  if (!s) {
    TRACR_LOG(error, "detached agent on {}: {}", d.device, user_text(s.error()));
    return out;
  }
  const std::string pid = std::to_string(d.pid), ticks = std::to_string(d.start_ticks);
  const std::string base = d.log.substr(0, d.log.size() - std::string("-detached.log").size());
  // Not the recorded process: the agent started with this state's secret file, found by its command line.
  const std::string secret = shell_quote(base + ".secret");
  const std::string by_secret =
      "for q in /proc/[0-9]*; do [ \"$(tr '\\000' '\\n' < $q/cmdline 2>/dev/null | grep -A1 -x -- --secret-file | "
      "tail -n 1)\" = " + secret + " ] && echo ${q#/proc/}; done";
  auto r = (*s)->run("same() { [ \"$(" + start_ticks_shell(pid) + ")\" = " + ticks + " ]; }; if same; then kill " + pid +
                     "; i=0; while same && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; same && kill -9 " + pid +
                     "; echo stopped; else f=$(" + by_secret + "); if [ -n \"$f\" ]; then kill $f; sleep 1; "
                     "kill -9 $f 2>/dev/null; echo found $f; else echo gone; fi; fi; rm -f " + secret + " " +
                     shell_quote(base + ".experiment.yaml"));
  if (!r) {
    TRACR_LOG(error, "detached agent on {}: {}", d.device, user_text(r.error()));
    return out;
  }
  out.ok = true;
  out.was_running = r->out.find("stopped") != std::string::npos || r->out.find("found ") != std::string::npos;
  if (auto at = r->out.find("found "); at != std::string::npos) {
    out.found = r->out.substr(at + 6);
    out.found = out.found.substr(0, out.found.find('\n'));
  }
  return out;
}

}  // namespace

int stop_detached_agents(const std::string& state_dir, bool trust, const std::string& devices_file) {
  std::error_code ec;
  if (!fs::is_directory(state_dir, ec)) return 0;
  int bad = 0;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    if (e.path().extension() != ".state") continue;
    auto d = read_detached(e.path().string());
    if (!d) {
      TRACR_LOG(error, "{}", user_text(d.error()));
      ++bad;
      continue;
    }
    // By identity only: the pid and the start time recorded when it started.
    // A bare pid from a file could name any process by now.
    if (d->start_ticks <= 0) {
      TRACR_LOG(error,
                 "detached agent on {}: its state ({}) records no start time, so pid {} cannot be told from a "
                 "process that reused it; not signalled. Check it and stop it by hand, then delete the state file",
                 d->device, e.path().string(), d->pid);
      ++bad;
      continue;
    }
    const StopOutcome out = d->transport == "local" ? stop_local_agent(*d, state_dir, e.path().string())
                                                    : stop_remote_agent(*d, trust, devices_file);
    if (!out.ok) {
      ++bad;
      continue;
    }
    const bool was_running = out.was_running;
    const std::string& found = out.found;
    fs::remove(e.path(), ec);
    if (!found.empty())
      fmt::print("stopped the detached SERVER agent on {} (pid {}, found by its --secret-file: its state named pid {}, "
                 "which is not the agent)\n",
                 d->device, found, d->pid);
    else if (was_running) fmt::print("stopped the detached SERVER agent on {} (pid {})\n", d->device, d->pid);
    else fmt::print("the detached SERVER agent on {} (pid {}) had already ended; its state is removed\n", d->device, d->pid);
  }
  return bad ? 1 : 0;
}

std::string detached_index_path() {
  const char* xdg = std::getenv("XDG_STATE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/tracr/detached-dirs";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/state/tracr/detached-dirs";
}

namespace {

std::vector<std::string> read_index() {
  std::vector<std::string> out;
  std::ifstream f(detached_index_path());
  for (std::string line; std::getline(f, line);)
    if (!line.empty() && line[0] == '/') out.push_back(line);
  return out;
}

Status write_index(const std::vector<std::string>& dirs) {
  const std::string path = detached_index_path();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string text;
  for (const auto& d : dirs) text += d + "\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) return make_error(Errc::io, "cannot write " + tmp + ": " + std::strerror(errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io, "cannot write " + path + ": " + ec.message());
  return {};
}

std::string canonical_or_absolute(const std::string& dir) {
  std::error_code ec;
  auto c = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return ec ? fs::absolute(dir).lexically_normal().string() : c.string();
}

bool holds_state(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".state") return true;
  return false;
}

}  // namespace

Status remember_detached_dir(const std::string& dir) {
  const std::string abs = canonical_or_absolute(dir);
  auto dirs = read_index();
  for (const auto& d : dirs)
    if (d == abs) return {};
  dirs.push_back(abs);
  return write_index(dirs);
}

std::vector<std::string> detached_dirs(const std::string& given, std::vector<std::string>* gone) {
  std::vector<std::string> out{canonical_or_absolute(given)};
  std::vector<std::string> keep;
  std::error_code ec;
  const auto index = read_index();
  for (const auto& d : index) {
    if (!fs::is_directory(d, ec)) {
      if (gone) gone->push_back(d);
      continue;
    }
    if (!holds_state(d)) continue;  // its agents were stopped: forgotten
    keep.push_back(d);
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  if (keep != index) (void)write_index(keep);  // best effort: the listing is still right
  return out;
}

DetachedWatch::DetachedWatch(DetachedServer d, const settings::DevicesConfig& devices, bool trust, int interval_ms)
    : d_(std::move(d)), interval_ms_(std::max(interval_ms, 100)) {
  thread_ = std::thread([this, devices, trust] { loop(devices, trust); });
}

DetachedWatch::~DetachedWatch() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string DetachedWatch::gone() const {
  std::lock_guard<std::mutex> lk(mu_);
  return gone_;
}

void DetachedWatch::loop(const settings::DevicesConfig& devices, bool trust) {
  const std::string restart =
      "; its frames cannot be served. Start it again with `tracrctl agents start` (or `tracrctl agents stop` to "
      "forget it, and runs start their own SERVER)";
  const std::string pid = std::to_string(d_.pid), ticks = std::to_string(d_.start_ticks);
  std::unique_ptr<SshSession> ssh;
  const DeviceConfig* dev = nullptr;
  std::optional<DevicesConfig> own;
  if (d_.transport != "local") {
    if (!d_.devices_file.empty())
      if (auto o = load_devices_or_default(d_.devices_file)) own = *o;
    dev = own ? own->find(d_.device) : devices.find(d_.device);
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (cv_.wait_for(lk, std::chrono::milliseconds(interval_ms_), [&] { return stop_; })) return;
    }
    std::string why;
    if (d_.transport == "local") {
      if (d_.start_ticks > 0 && !process_alive(d_.pid, d_.start_ticks))
        why = fmt::format("the detached SERVER agent on {} (pid {}, {}) is gone: no process with its identity runs "
                          "here any more{}",
                          d_.device, d_.pid, d_.endpoint, restart);
    } else if (dev && d_.start_ticks > 0) {
      if (!ssh) {
        auto s = SshSession::connect(device_ssh_target(*dev, own ? own->source : devices.source, trust));
        if (s) ssh = std::move(*s);
      }
      if (ssh) {
        auto r = ssh->run("[ \"$(" + start_ticks_shell(pid) + ")\" = " + ticks + " ] && echo alive || echo gone");
        if (!r) ssh.reset();  // cannot tell: try a new session next time
        else if (r->out.find("gone") != std::string::npos)
          why = fmt::format("the detached SERVER agent on {} (pid {}, {}) is gone: {} runs no process with its "
                            "identity any more{}",
                            d_.device, d_.pid, d_.endpoint, ssh->label(), restart);
      }
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> lk(mu_);
      gone_ = why;
      return;
    }
  }
}

}  // namespace tracr::fleet
