// SSH to devices over libssh: connect with a device's key, verify host keys
// against a known_hosts file, run commands, start long-running commands with
// piped stdin/stdout, and move files over SFTP.
//
// Every error names the device as user@host:port and carries a code from
// Errc (auth_refused, host_key_unknown, host_key_mismatch, key_permissions,
// unreachable, timeout, peer_closed, io, not_found, ...).
//
// Threading: a session and the processes started from it may be used from
// several threads (an internal mutex serialises libssh calls on the session),
// but work on many devices should use one session per device, each in its own
// thread; sessions share no state apart from libssh's one-time ssh_init and a
// lock around appending to a known_hosts file.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "protocol/error.hpp"

namespace tracr::fleet {

struct SshTarget {
  std::string host;
  int port = 22;
  std::string user;
  std::string key_path;             // private key (OpenSSH or PEM), mode 0600 or stricter
  std::string known_hosts_path;     // checked for the host key; empty: ~/.ssh/known_hosts
  bool trust_on_first_use = false;  // add an unknown host's key (never a changed one)
  int timeout_ms = 10000;           // connect, key exchange, auth and each blocking step

  // "user@host:port", as used in every error message.
  std::string label() const;
};

struct ExecResult {
  std::string out;          // remote stdout
  std::string err;          // remote stderr
  int exit_status = -1;     // exit code; 128+N when killed by signal N; -1 unknown
  std::string exit_signal;  // "TERM", "KILL", ... when killed by a signal
};

class SshSession;

namespace detail {
struct SessionCore;
struct ProcessState;
}  // namespace detail

// A command started with SshSession::start: stdin/stdout are piped, stderr is
// collected (last 64 KiB, see stderr_tail). Destroying a running process
// stops it (stop(1000)). Keeps its session's connection alive.
class RemoteProcess {
 public:
  ~RemoteProcess();
  RemoteProcess(const RemoteProcess&) = delete;
  RemoteProcess& operator=(const RemoteProcess&) = delete;

  // Sends bytes to the command's stdin. io when stdin was closed or the
  // channel failed.
  Status write_stdin(const std::string& data);
  // Sends EOF on stdin (idempotent).
  void close_stdin();
  // Next stdout line without its newline (a trailing "\r" is removed too).
  // Errors: timeout when no full line arrived within timeout_ms (buffered
  // data is kept for the next call); peer_closed when stdout ended (the
  // message then includes the exit status and the stderr tail).
  Result<std::string> read_line(int timeout_ms);
  // Exit status once the command has ended (128+N for signal N), without
  // blocking; nullopt while it runs.
  std::optional<int> exit_status();
  bool running() { return !exit_status().has_value(); }
  // Closes stdin and waits up to grace_ms for the command to exit; then
  // SIGTERM to the pid the command reported (and its process group), another
  // grace period, SIGKILL, and finally closes the channel. Returns the exit
  // status (128+N when killed by signal N; -1 when only closing the channel
  // ended it). Idempotent. Bounded on a dead connection: each signal step
  // waits at most max(grace_ms, 1 s) (and the target's timeout), and when a
  // signal cannot be sent in that time the channel is dropped and the error
  // is timeout (peer_closed when libssh already saw the connection end).
  Result<int> stop(int grace_ms = 2000);
  // Remote pid of the command (reported by the wrapper before exec).
  long pid() const;
  // The last 64 KiB the command wrote to stderr.
  std::string stderr_tail();
  const std::string& command() const;

 private:
  friend class SshSession;
  RemoteProcess(std::shared_ptr<detail::SessionCore> core, std::unique_ptr<detail::ProcessState> st);
  std::shared_ptr<detail::SessionCore> core_;
  std::unique_ptr<detail::ProcessState> st_;
};

class SshSession {
 public:
  // Connects, verifies the host key, authenticates with target.key_path.
  // Errors (each naming user@host:port): key_permissions (key readable or
  // writable by group/others; message says "chmod 600 <path>"), not_found
  // (no key file), invalid_argument (unreadable key or empty host/user),
  // unreachable (DNS, refused, no route, connect timeout; names the reason),
  // host_key_unknown (not in known_hosts and no trust_on_first_use),
  // host_key_mismatch (key changed, or a key of another type is known; never
  // overridden by trust_on_first_use), auth_refused (the server refused the
  // key; names user@host and the key path), io (known_hosts not writable).
  static Result<std::unique_ptr<SshSession>> connect(const SshTarget& target);
  ~SshSession();
  SshSession(const SshSession&) = delete;
  SshSession& operator=(const SshSession&) = delete;

  const SshTarget& target() const;
  std::string label() const { return target().label(); }

  // Runs cmd through the remote login shell (which must be POSIX-like: sh,
  // bash, dash, zsh, ksh; the command line is `echo TRACR_PID $$; cmd`, and
  // that first line is removed from the output), feeds stdin_data then EOF,
  // and collects stdout, stderr and the exit status. A non-zero exit status
  // is not an error. Errors: timeout after timeout_ms (the command's process
  // group is then killed by pid through a second channel, since sshd refuses
  // "signal" requests for root logins), io/peer_closed on channel or
  // connection failure. timeout_ms <= 0 uses target().timeout_ms.
  Result<ExecResult> run(const std::string& cmd, const std::string& stdin_data = "", int timeout_ms = 0);

  // Starts a long-running command as `echo TRACR_PID $$; exec cmd` in the
  // login shell, so cmd must be a simple command (redirections are fine) and
  // keeps the reported pid, which is also its process group (sshd runs each
  // session command in a new session). Errors: io/peer_closed when the
  // channel cannot be opened or the pid does not arrive within
  // target().timeout_ms.
  Result<std::unique_ptr<RemoteProcess>> start(const std::string& cmd);

  // Uploads local_path to remote_path atomically over SFTP: writes
  // remote_path.tmp-<random>, fsyncs it when the server supports
  // fsync@openssh.com, sets mode, renames it over remote_path (POSIX rename
  // where supported, else `mv -f` through the shell). The parent directory
  // must exist. Errors: not_found/io for the local file, io for SFTP failures
  // (the temporary file is removed).
  Status upload(const std::string& local_path, const std::string& remote_path, int mode = 0644);

  // Contents of a remote file over SFTP. Errors: not_found, io,
  // limit_exceeded when the file is larger than max_bytes.
  Result<std::string> read_file(const std::string& remote_path, size_t max_bytes = 16u << 20);
  // The last max_bytes of a remote file (whole file when smaller).
  Result<std::string> read_file_tail(const std::string& remote_path, size_t max_bytes = 64u << 10);

 private:
  explicit SshSession(std::shared_ptr<detail::SessionCore> core);
  std::shared_ptr<detail::SessionCore> core_;
};

// Quotes s for a POSIX shell: 'it'\''s'.
std::string shell_quote(const std::string& s);

// The private key at `path` is what SshSession::connect will accept: it
// exists (a symlink loop or a directory said as such), only its owner may
// read it, and libssh reads it as a private key without a passphrase.
// Nothing is sent anywhere. `who` names the device in the message.
Status check_private_key(const std::string& path, const std::string& who);

}  // namespace tracr::fleet
