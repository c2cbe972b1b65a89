#include "fleet/process.hpp"

#include "fleet/ssh.hpp"

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>
#include <sstream>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace tracr::fleet {

using namespace tracr::core;  // the floors below, by their short names

namespace {

// posix_spawn of argv[0] with this process's environment plus `env`; the
// file actions and attributes are consumed. Returns spawn's error number.
int spawn_and_release(pid_t& pid, const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      posix_spawn_file_actions_t& fa, posix_spawnattr_t& attr) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return rc;
}

}  // namespace

Result<ChildProcess> ChildProcess::spawn(const std::vector<std::string>& argv, const std::string& stderr_path,
                                         const std::vector<std::string>& env) {
  int inp[2], outp[2];
  if (pipe2(inp, O_CLOEXEC) != 0) return make_error(Errc::io, std::string("pipe: ") + std::strerror(errno));
  if (pipe2(outp, O_CLOEXEC) != 0) {
    ::close(inp[0]);
    ::close(inp[1]);
    return make_error(Errc::io, std::string("pipe: ") + std::strerror(errno));
  }
  // The child gets its own process group: a Ctrl-C at the terminal reaches
  // tracrctl, which then stops its agents in order, not the agents directly.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, inp[0], 0);
  posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
  if (!stderr_path.empty()) {
    // The log is the agent's own (it may name paths, peers and keys' files):
    // 0600, also when it exists already (O_CREAT keeps an old file's mode).
    posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    ::chmod(stderr_path.c_str(), 0600);
  }
  pid_t pid = -1;
  const int rc = spawn_and_release(pid, argv, env, fa, attr);
  ::close(inp[0]);
  ::close(outp[1]);
  if (rc != 0) {
    ::close(inp[1]);
    ::close(outp[0]);
    return make_error(Errc::io, "cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  ChildProcess c;
  c.pid_ = pid;
  c.in_ = inp[1];
  c.out_ = outp[0];
  return c;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept { *this = std::move(o); }
ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  std::swap(pid_, o.pid_);
  std::swap(in_, o.in_);
  std::swap(out_, o.out_);
  std::swap(buf_, o.buf_);
  std::swap(status_, o.status_);
  return *this;
}
ChildProcess::~ChildProcess() {
  if (pid_ > 0) stop(1000);
  close_stdin();
  if (out_ >= 0) ::close(out_);
}

Status ChildProcess::write_stdin(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(in_, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, std::string("write to child stdin: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

void ChildProcess::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

Result<std::string> ChildProcess::read_line(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return make_error(Errc::timeout, "no line from child within " + std::to_string(timeout_ms) + " ms");
    pollfd p{out_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno != EINTR) return make_error(Errc::io, std::strerror(errno));
    if (r <= 0) continue;
    char tmp[4096];
    ssize_t n = ::read(out_, tmp, sizeof tmp);
    if (n == 0) return make_error(Errc::peer_closed, "child closed its output");
    if (n > 0) buf_.append(tmp, static_cast<size_t>(n));
  }
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    pid_ = -1;
    return false;
  }
  return true;
}

int ChildProcess::stop(int grace_ms) {
  close_stdin();
  if (pid_ <= 0) return status_;
  auto wait_for = [&](int ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      if (!running()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return !running();
  };
  if (wait_for(grace_ms)) return status_;
  ::kill(pid_, SIGTERM);
  if (wait_for(1000)) return status_;
  ::kill(pid_, SIGKILL);
  wait_for(5000);
  return status_;
}

Result<pid_t> spawn_detached(const std::vector<std::string>& argv, const std::string& log_path,
                             const std::vector<std::string>& env) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  ::chmod(log_path.c_str(), 0600);  // an older log keeps its mode under O_CREAT
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  const int rc = spawn_and_release(pid, argv, env, fa, attr);
  if (rc != 0) return make_error(Errc::io, "cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

std::vector<std::string> netns_exec_argv(const std::string& ns) {
  if (ns.empty()) return {};
  return {"/usr/sbin/ip", "netns", "exec", ns};
}

std::string netns_exec_prefix(const std::string& ns) {
  const auto argv = netns_exec_argv(ns);
  std::string s;
  for (size_t i = 0; i < argv.size(); ++i) s += (i + 1 == argv.size() ? shell_quote(argv[i]) : argv[i]) + " ";
  return s;
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

CommandOutput run_local_command(const std::string& cmd) {
  CommandOutput o;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  const int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  while (!o.text.empty() && (o.text.back() == '\n' || o.text.back() == ' ')) o.text.pop_back();
  return o;
}

namespace {
std::atomic<int> g_caught{0};
void on_caught(int sig) {
  int expected = 0;
  g_caught.compare_exchange_strong(expected, sig);
}
}  // namespace

SignalCatcher::SignalCatcher() {
  struct sigaction sa {};
  sa.sa_handler = on_caught;
  sigemptyset(&sa.sa_mask);
  g_caught = 0;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGHUP, &sa, &old_hup_);
}

SignalCatcher::~SignalCatcher() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
}

int SignalCatcher::signal() { return g_caught.load(); }

}  // namespace tracr::fleet
