// Child processes with pipes on stdin/stdout (local agents).
#pragma once

#include <csignal>

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/process_identity.hpp"
#include "protocol/error.hpp"

namespace tracr::fleet {

class ChildProcess {
 public:
  // Starts argv[0] with stdin and stdout piped; stderr goes to stderr_path
  // (inherited when empty).
  // `env` entries ("NAME=value") are added to this process's environment.
  static Result<ChildProcess> spawn(const std::vector<std::string>& argv, const std::string& stderr_path = {},
                                    const std::vector<std::string>& env = {});
  ChildProcess() = default;
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ~ChildProcess();

  Status write_stdin(const std::string& s);
  void close_stdin();
  // One line of stdout without the newline; timeout or peer_closed on EOF.
  Result<std::string> read_line(int timeout_ms);
  // Closes stdin, waits up to grace_ms, then SIGTERM, then SIGKILL.
  // Returns the exit status (128+signal when killed).
  int stop(int grace_ms = 2000);
  pid_t pid() const { return pid_; }
  bool running();

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
  int status_ = -1;
};

// Starts argv detached (new session, stdin /dev/null, stdout and stderr
// appended to log_path); returns its pid. The caller does not wait for it.
Result<pid_t> spawn_detached(const std::vector<std::string>& argv, const std::string& log_path,
                             const std::vector<std::string>& env = {});

// `ip netns exec NS`, spelled once (by absolute path): the argv that goes
// before a command run in network namespace NS, and the same as a /bin/sh
// prefix (NS quoted, a space after). Both empty when ns is empty.
std::vector<std::string> netns_exec_argv(const std::string& ns);
std::string netns_exec_prefix(const std::string& ns);

// Directory of the running executable.
std::string self_dir();

// While it lives, SIGINT, SIGTERM and SIGHUP are caught: the first one's
// number is kept (signal()), later ones are ignored; the previous handlers
// come back on destruction. One at a time per process.
class SignalCatcher {
 public:
  SignalCatcher();
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;
  // 0 until a signal arrived.
  static int signal();

 private:
  struct sigaction old_int_ {}, old_term_{}, old_hup_{};
};

// Runs `cmd` through /bin/sh on this machine, stderr folded into stdout.
// status is the exit code (-1 when it could not run or was killed); text is
// the output with trailing newlines and spaces removed.
struct CommandOutput {
  int status = -1;
  std::string text;
};
CommandOutput run_local_command(const std::string& cmd);

}  // namespace tracr::fleet
