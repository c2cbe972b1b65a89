#include "fleet/ssh.hpp"
#include "core/log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "fleet/process.hpp"
#include "protocol/crypto.hpp"

namespace tracr::fleet {

using Clock = std::chrono::steady_clock;

namespace detail {

// One libssh session. libssh is not thread-safe per session, so every call on
// `s` (and on channels of `s`) happens under `mu`; recursive because
// RemoteProcess::stop runs a command on the same session.
struct SessionCore {
  SshTarget target;
  std::string who;  // user@host:port
  ssh_session s = nullptr;
  std::recursive_mutex mu;
  std::atomic<int> waiting{0};  // threads blocked on mu (see read_line)
  ~SessionCore() {
    if (s) {
      ssh_disconnect(s);
      ssh_free(s);
    }
  }
};

// One exec channel: run() keeps it on the stack, RemoteProcess on the heap
// (its address is the callbacks' userdata, so it never moves).
struct ProcessState {
  ssh_channel ch = nullptr;
  ssh_channel_callbacks_struct cb{};
  std::string cmd;
  long pid = -1;  // from the "TRACR_PID <n>" line the wrapper prints first
  bool pid_line_done = false;
  std::string out;  // stdout not yet returned
  std::string err;  // stderr (capped at err_cap, keeping the end)
  size_t err_cap = SIZE_MAX;
  bool stdin_closed = false;
  bool stdout_eof = false;  // remote EOF and both libssh buffers drained
  bool exit_known = false;  // exit-status or exit-signal received
  bool closed = false;      // channel closed (by either side) or failed
  int status = -1;
  std::string exit_signal;
  std::string failure;  // libssh error that ended the channel

  bool finished() const { return exit_known || closed; }
};

}  // namespace detail

using detail::ProcessState;
using detail::SessionCore;

namespace {
// Locks a session; counts waiters so that a thread polling in slices
// (read_line) lets them in between slices.
class CoreLock {
 public:
  explicit CoreLock(SessionCore& c) : c_(c) {
    ++c_.waiting;
    c_.mu.lock();
    --c_.waiting;
  }
  ~CoreLock() { c_.mu.unlock(); }
  CoreLock(const CoreLock&) = delete;
  CoreLock& operator=(const CoreLock&) = delete;

 private:
  SessionCore& c_;
};
}  // namespace

namespace {

std::once_flag g_ssh_init;
// Appending to a known_hosts file from several sessions at once would
// interleave lines; trust-on-first-use is rare, one lock is enough.
std::mutex g_known_hosts_mu;

constexpr size_t kChunk = 32 * 1024;

int signal_number(const std::string& name) {
  static const struct {
    const char* n;
    int v;
  } table[] = {
      {"HUP", 1},  {"INT", 2},   {"QUIT", 3},  {"ILL", 4},   {"TRAP", 5},  {"ABRT", 6},  {"BUS", 7},   {"FPE", 8},
      {"KILL", 9}, {"USR1", 10}, {"SEGV", 11}, {"USR2", 12}, {"PIPE", 13}, {"ALRM", 14}, {"TERM", 15},
  };
  for (const auto& e : table)
    if (name == e.n) return e.v;
  return 0;
}

void on_exit_status(ssh_session, ssh_channel, int exit_status, void* userdata) {
  auto* p = static_cast<ProcessState*>(userdata);
  p->exit_known = true;
  p->status = exit_status;
}

void on_exit_signal(ssh_session, ssh_channel, const char* signal, int, const char*, const char*, void* userdata) {
  auto* p = static_cast<ProcessState*>(userdata);
  p->exit_known = true;
  p->exit_signal = signal ? signal : "";
  p->status = 128 + signal_number(p->exit_signal);
}

std::string ssh_err(SessionCore& c) {
  const char* e = ssh_get_error(c.s);
  return e && *e ? e : "unknown libssh error";
}

std::string short_cmd(const std::string& cmd) { return cmd.size() > 120 ? cmd.substr(0, 117) + "..." : cmd; }

// An error from a libssh call on an established session: peer_closed when
// the connection is gone, io otherwise.
Error session_error(SessionCore& c, const std::string& what) {
  if (!ssh_is_connected(c.s))
    return make_error(Errc::peer_closed,
                      fmt::format("connection to {} lost while trying to {}: {}", c.who, what, ssh_err(c)));
  return make_error(Errc::io, fmt::format("{} on {}: {}", what, c.who, ssh_err(c)));
}

// Sets the session's blocking timeout (used by libssh calls that take no
// timeout of their own, e.g. ssh_channel_get_exit_status).
void set_session_timeout(ssh_session s, long ms) {
  if (ms < 1) ms = 1;
  long sec = ms / 1000;
  long usec = (ms % 1000) * 1000;
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &sec);
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT_USEC, &usec);
}

int remaining_ms(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return d < 0 ? 0 : static_cast<int>(std::min<long long>(d, 1 << 30));
}

void append_capped(std::string& s, const char* p, size_t n, size_t cap) {
  s.append(p, n);
  if (s.size() > cap) s.erase(0, s.size() - cap);
}

// Opens a session channel on c and runs cmd on it.
Status open_exec(SessionCore& c, ProcessState& p, const std::string& cmd) {
  p.cmd = cmd;
  p.ch = ssh_channel_new(c.s);
  if (!p.ch) return session_error(c, "create a channel");
  ssh_callbacks_init(&p.cb);
  p.cb.userdata = &p;
  p.cb.channel_exit_status_function = on_exit_status;
  p.cb.channel_exit_signal_function = on_exit_signal;
  ssh_set_channel_callbacks(p.ch, &p.cb);
  if (ssh_channel_open_session(p.ch) != SSH_OK) return session_error(c, "open a session channel");
  if (ssh_channel_request_exec(p.ch, cmd.c_str()) != SSH_OK)
    return session_error(c, "execute `" + short_cmd(cmd) + "`");
  return {};
}

// Frees p's channel (closing it first when still open).
void release(SessionCore& c, ProcessState& p) {
  if (!p.ch) return;
  ssh_remove_channel_callbacks(p.ch, &p.cb);
  if (ssh_is_connected(c.s) && !ssh_channel_is_closed(p.ch)) ssh_channel_close(p.ch);
  ssh_channel_free(p.ch);
  p.ch = nullptr;
  p.closed = true;
}

// The wrapper's first stdout line, "TRACR_PID <n>", is consumed here and
// never shown to callers.
void take_pid_line(ProcessState& p) {
  if (p.pid_line_done) return;
  static const std::string kTag = "TRACR_PID ";
  auto nl = p.out.find('\n');
  if (nl == std::string::npos) {
    if (p.out.size() >= kTag.size() && p.out.compare(0, kTag.size(), kTag) != 0) p.pid_line_done = true;
    return;
  }
  p.pid_line_done = true;
  if (p.out.compare(0, kTag.size(), kTag) != 0) return;
  p.pid = std::strtol(p.out.c_str() + kTag.size(), nullptr, 10);
  p.out.erase(0, nl + 1);
}

// Command line that reports the login shell's pid, then runs cmd in it.
// sshd starts each session command in a new session (setsid), so that pid
// is also the process group of everything cmd starts. With exec_cmd the
// shell is replaced by cmd, which keeps the pid.
std::string wrap_with_pid(const std::string& cmd, bool exec_cmd) {
  return std::string("echo TRACR_PID $$ || exit 111; ") + (exec_cmd ? "exec " : "") + cmd;
}

// Signals the process group of pid (and pid itself when that fails) through
// a separate exec channel. sshd's own "signal" channel request is refused
// for sessions without privilege separation (root logins), so it is only
// sent in addition.
// Returns false when the kill command could not run at all (the channel did
// not open or the command did not finish within timeout_ms: the connection
// is probably dead).
bool kill_remote(SessionCore& c, ProcessState& p, const char* sig, int timeout_ms);

// Moves whatever arrived on p's channel into p.out / p.err, waiting up to
// timeout_ms (0: do not wait) for stdout data. Sets stdout_eof at EOF and
// closed (with failure) when the channel or connection failed.
void pump(SessionCore& c, ProcessState& p, int timeout_ms) {
  if (!p.ch || p.stdout_eof) return;
  char buf[16384];
  int n = ssh_channel_read_timeout(p.ch, buf, sizeof buf, 0, std::max(timeout_ms, 0));
  if (n == SSH_ERROR) {
    p.failure = ssh_err(c);
    p.stdout_eof = true;
    p.closed = true;
    return;
  }
  if (n > 0) p.out.append(buf, static_cast<size_t>(n));
  while ((n = ssh_channel_read_nonblocking(p.ch, buf, sizeof buf, 0)) > 0) p.out.append(buf, static_cast<size_t>(n));
  take_pid_line(p);
  while ((n = ssh_channel_read_nonblocking(p.ch, buf, sizeof buf, 1)) > 0)
    append_capped(p.err, buf, static_cast<size_t>(n), p.err_cap);
  if (ssh_channel_is_eof(p.ch)) p.stdout_eof = true;
  if (ssh_channel_is_closed(p.ch)) {
    // Remote closed: whatever is still buffered has been read above.
    p.stdout_eof = true;
    p.closed = true;
  }
}

// After stdout EOF: waits up to timeout_ms for exit-status/exit-signal or the
// channel's close. Returns p.finished().
bool wait_exit(SessionCore& c, ProcessState& p, int timeout_ms) {
  if (p.finished() || !p.ch) return true;
  set_session_timeout(c.s, timeout_ms);
  int rc = ssh_channel_get_exit_status(p.ch);
  set_session_timeout(c.s, c.target.timeout_ms);
  if (!p.exit_known && rc >= 0) {
    p.exit_known = true;
    p.status = rc;
  }
  if (ssh_channel_is_closed(p.ch)) p.closed = true;
  if (!ssh_is_connected(c.s)) {
    p.closed = true;
    if (p.failure.empty()) p.failure = ssh_err(c);
  }
  return p.finished();
}

// Waits until the command has exited (or the channel closed), reading its
// output meanwhile. Returns p.finished().
bool wait_finished(SessionCore& c, ProcessState& p, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (p.finished()) return true;
    int rem = remaining_ms(deadline);
    if (!p.stdout_eof) {
      pump(c, p, std::min(rem, 50));
    } else if (wait_exit(c, p, std::max(rem, 1))) {
      return true;
    }
    if (rem == 0) return p.finished();
  }
}

bool is_safe_shell_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("_@%+=:,./-", ch) != nullptr;
}

std::string random_hex(size_t bytes) {
  std::vector<uint8_t> b(bytes);
  if (!protocol::random_bytes(b.data(), b.size())) {
    // Only used for unique temporary names: time is an acceptable fallback.
    auto t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(t >> (8 * (i % 8)));
  }
  return protocol::to_hex(b.data(), b.size());
}

std::string expand_home(const std::string& path) {
  if (path.size() >= 2 && path[0] == '~' && path[1] == '/') {
    const char* home = std::getenv("HOME");
    if (home && *home) return std::string(home) + path.substr(1);
  }
  return path;
}

// Refuses a private key that group or others may read or write (as OpenSSH does).
Status check_key_file(const std::string& path, const std::string& who) {
  if (path.empty()) return make_error(Errc::invalid_argument, fmt::format("no private key given for {}", who));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return make_error(Errc::not_found, fmt::format("private key {} for {} does not exist", path, who));
    if (errno == ELOOP)
      return make_error(Errc::io, fmt::format("private key {} for {} is a loop of symbolic links", path, who));
    return make_error(Errc::io, fmt::format("cannot stat private key {} for {}: {}", path, who, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode))
    return make_error(Errc::invalid_argument,
                      fmt::format("private key {} for {} is a directory; expected a private key file", path, who));
  if (!S_ISREG(st.st_mode))
    return make_error(Errc::invalid_argument, fmt::format("private key {} for {} is not a regular file", path, who));
  if ((st.st_mode & 077) != 0)
    return make_error(Errc::key_permissions,
                      fmt::format("private key {} for {} has permissions {:04o}, which lets group or others "
                                  "access it; ssh refuses such keys. Fix it with: chmod 600 {}",
                                  path, who, st.st_mode & 07777, shell_quote(path)));
  return {};
}

using KeyPtr = std::unique_ptr<std::remove_pointer_t<ssh_key>, void (*)(ssh_key)>;

Result<KeyPtr> load_private_key(const std::string& path, const std::string& who) {
  TRACR_TRY(check_key_file(path, who));
  std::call_once(g_ssh_init, [] { ssh_init(); });
  ssh_key key = nullptr;
  if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK || !key)
    return make_error(Errc::invalid_argument,
                      fmt::format("cannot load private key {} for {} (not a private key, or protected by a "
                                  "passphrase, which is not supported)",
                                  path, who));
  return KeyPtr(key, ssh_key_free);
}

std::string key_fingerprint(ssh_key key) {
  unsigned char* hash = nullptr;
  size_t hlen = 0;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) != 0) return "?";
  char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
  std::string s = fp ? fp : "?";
  ssh_string_free_char(fp);
  ssh_clean_pubkey_hash(&hash);
  const char* type = ssh_key_type_to_char(ssh_key_type(key));
  return fmt::format("{} {}", type ? type : "?", s);
}

std::string server_key_fingerprint(SessionCore& c) {
  ssh_key k = nullptr;
  if (ssh_get_server_publickey(c.s, &k) != SSH_OK || !k) return "?";
  std::string s = key_fingerprint(k);
  ssh_key_free(k);
  return s;
}

std::string known_hosts_name(const SshTarget& t) {
  return t.port == 22 ? t.host : fmt::format("[{}]:{}", t.host, t.port);
}

void make_parent_dirs(const std::string& file) {
  auto slash = file.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return;
  std::string dir = file.substr(0, slash);
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0700);
}

Status verify_host_key(SessionCore& c) {
  const SshTarget& t = c.target;
  const std::string file = t.known_hosts_path.empty() ? "~/.ssh/known_hosts" : t.known_hosts_path;
  auto unknown_or_add = [&]() -> Status {
    if (!t.trust_on_first_use)
      return make_error(Errc::host_key_unknown,
                        fmt::format("host key of {} ({}) is not in {}; refusing to connect. Check the "
                                    "fingerprint on the device (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) "
                                    "and either add it (ssh-keyscan -p {} {} >> {}) or enable "
                                    "trust-on-first-use for this connection",
                                    c.who, server_key_fingerprint(c), file, t.port, t.host, file));
    std::lock_guard<std::mutex> lk(g_known_hosts_mu);
    // Another session may have added it meanwhile.
    auto again = ssh_session_is_known_server(c.s);
    if (again == SSH_KNOWN_HOSTS_OK) return {};
    if (again == SSH_KNOWN_HOSTS_CHANGED || again == SSH_KNOWN_HOSTS_OTHER)
      return make_error(Errc::host_key_mismatch,
                        fmt::format("host key of {} changed while connecting ({})", c.who, file));
    const std::string path = expand_home(file);
    make_parent_dirs(path);
    // The line libssh would append; written only when the file lacks it (two
    // devices on one host:port, or another process, may have recorded it).
    char* entry = nullptr;
    if (ssh_session_export_known_hosts_entry(c.s, &entry) != SSH_OK || !entry)
      return make_error(Errc::io, fmt::format("cannot read the host key of {} to record it: {}", c.who, ssh_err(c)));
    std::string line(entry);
    ssh_string_free_char(entry);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    {
      std::ifstream in(path);
      for (std::string l; std::getline(in, l);)
        if (l == line) return {};
    }
    std::ofstream out(path, std::ios::app);
    out << line << "\n";
    out.flush();
    if (!out) return make_error(Errc::io, fmt::format("cannot add the host key of {} to {}", c.who, file));
    TRACR_LOG(info, "tracrctl: trusted a new host: recorded the host key of {} ({}) in {}", known_hosts_name(t),
              server_key_fingerprint(c), file);
    return {};
  };
  switch (ssh_session_is_known_server(c.s)) {
    case SSH_KNOWN_HOSTS_OK:
      return {};
    case SSH_KNOWN_HOSTS_CHANGED:
      return make_error(Errc::host_key_mismatch,
                        fmt::format("host key of {} does not match {} (server now offers {}). This may be an "
                                    "attack (man in the middle) or the device was reinstalled; if you are sure "
                                    "it is the latter, remove the old entry with: ssh-keygen -R '{}' -f {}",
                                    c.who, file, server_key_fingerprint(c), known_hosts_name(t), file));
    case SSH_KNOWN_HOSTS_OTHER:
      return make_error(Errc::host_key_mismatch,
                        fmt::format("{} lists a key of another type for {} than the server offers ({}); this "
                                    "may be an attack. If the device's keys really changed, remove the old "
                                    "entry with: ssh-keygen -R '{}' -f {}",
                                    file, c.who, server_key_fingerprint(c), known_hosts_name(t), file));
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN:
      return unknown_or_add();
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      return make_error(Errc::io,
                        fmt::format("cannot check the host key of {} against {}: {}", c.who, file, ssh_err(c)));
  }
}

struct SftpHandle {
  sftp_session sftp = nullptr;
  ~SftpHandle() {
    if (sftp) sftp_free(sftp);
  }
};

Error sftp_error(SessionCore& c, sftp_session sftp, const std::string& what, const std::string& path) {
  int code = sftp ? sftp_get_error(sftp) : 0;
  Errc e = Errc::io;
  const char* reason = nullptr;
  switch (code) {
    case SSH_FX_NO_SUCH_FILE:
    case SSH_FX_NO_SUCH_PATH:
      e = Errc::not_found;
      reason = "no such file or directory";
      break;
    case SSH_FX_PERMISSION_DENIED:
      reason = "permission denied";
      break;
    case SSH_FX_FILE_ALREADY_EXISTS:
      reason = "file exists";
      break;
    default:
      break;
  }
  if (!ssh_is_connected(c.s)) e = Errc::peer_closed;
  return make_error(e, fmt::format("sftp {} {} on {}: {}", what, path, c.who, reason ? reason : ssh_err(c)));
}

Result<sftp_session> open_sftp(SessionCore& c) {
  sftp_session sftp = sftp_new(c.s);
  if (!sftp) return session_error(c, "start SFTP");
  if (sftp_init(sftp) != SSH_OK) {
    auto err = make_error(Errc::io, fmt::format("the SFTP subsystem is not available on {} ({}); enable "
                                                "'Subsystem sftp' in its sshd_config",
                                                c.who, ssh_err(c)));
    sftp_free(sftp);
    return err;
  }
  return sftp;
}

}  // namespace

std::string SshTarget::label() const {
  if (host.find(':') != std::string::npos) return fmt::format("{}@[{}]:{}", user, host, port);
  return fmt::format("{}@{}:{}", user, host, port);
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), is_safe_shell_char)) return s;
  std::string q = "'";
  for (char ch : s) {
    if (ch == '\'')
      q += "'\\''";
    else
      q += ch;
  }
  q += "'";
  return q;
}

// ---------------------------------------------------------------- SshSession

SshSession::SshSession(std::shared_ptr<SessionCore> core) : core_(std::move(core)) {}
SshSession::~SshSession() = default;

const SshTarget& SshSession::target() const { return core_->target; }

Result<std::unique_ptr<SshSession>> SshSession::connect(const SshTarget& target_in) {
  std::call_once(g_ssh_init, [] { ssh_init(); });
  SshTarget t = target_in;
  t.key_path = expand_home(t.key_path);
  if (t.timeout_ms <= 0) t.timeout_ms = 10000;
  const std::string who = t.label();
  if (t.host.empty() || t.user.empty())
    return make_error(Errc::invalid_argument, fmt::format("SSH target {} needs a host and a user", who));
  if (t.port <= 0 || t.port > 65535)
    return make_error(Errc::invalid_argument, fmt::format("SSH target {} has an invalid port", who));
  auto loaded = load_private_key(t.key_path, who);
  if (!loaded) return std::move(loaded.error());
  KeyPtr key_guard = std::move(*loaded);
  ssh_key key = key_guard.get();

  auto core = std::make_shared<SessionCore>();
  core->target = t;
  core->who = who;
  core->s = ssh_new();
  if (!core->s) return make_error(Errc::internal, "ssh_new failed");
  ssh_session s = core->s;
  unsigned int port = static_cast<unsigned int>(t.port);
  int no = 0, yes = 1;
  bool ok = ssh_options_set(s, SSH_OPTIONS_HOST, t.host.c_str()) == 0 &&
            ssh_options_set(s, SSH_OPTIONS_PORT, &port) == 0 &&
            ssh_options_set(s, SSH_OPTIONS_USER, t.user.c_str()) == 0 &&
            // Only what the target says: no ~/.ssh/config, no system known_hosts.
            ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no) == 0 &&
            ssh_options_set(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null") == 0 &&
            ssh_options_set(s, SSH_OPTIONS_NODELAY, &yes) == 0;
  if (ok && !t.known_hosts_path.empty())
    ok = ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, t.known_hosts_path.c_str()) == 0;
  if (!ok)
    return make_error(Errc::invalid_argument, fmt::format("invalid SSH options for {}: {}", who, ssh_err(*core)));
  set_session_timeout(s, t.timeout_ms);

  if (ssh_connect(s) != SSH_OK)
    return make_error(Errc::unreachable, fmt::format("cannot reach {}: {}", who, ssh_err(*core)));
  TRACR_TRY(verify_host_key(*core));

  switch (ssh_userauth_publickey(s, nullptr, key)) {
    case SSH_AUTH_SUCCESS:
      break;
    case SSH_AUTH_DENIED:
    case SSH_AUTH_PARTIAL:
      return make_error(Errc::auth_refused,
                        fmt::format("{}@{} refused the key {} ({}) for {}; is its public half in {}'s "
                                    "~/.ssh/authorized_keys on the device?",
                                    t.user, t.host, t.key_path, key_fingerprint(key), who, t.user));
    default:
      return make_error(Errc::peer_closed, fmt::format("authentication of {}@{} with key {} failed ({}): {}", t.user,
                                                       t.host, t.key_path, who, ssh_err(*core)));
  }
  return std::unique_ptr<SshSession>(new SshSession(std::move(core)));
}

namespace {
Result<ExecResult> run_on(SessionCore& c, const std::string& cmd, const std::string& stdin_data, int timeout_ms) {
  if (timeout_ms <= 0) timeout_ms = c.target.timeout_ms;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  CoreLock lk(c);
  ProcessState p;
  struct Guard {
    SessionCore& c;
    ProcessState& p;
    ~Guard() { release(c, p); }
  } guard{c, p};
  TRACR_TRY(open_exec(c, p, wrap_with_pid(cmd, false)));
  p.cmd = cmd;

  auto timed_out = [&]() -> Error {
    if (p.ch && !p.finished()) {
      // The pid line may still be on its way when the shell is slow to start.
      auto pid_deadline = Clock::now() + std::chrono::milliseconds(std::min(c.target.timeout_ms, 2000));
      while (p.pid < 0 && !p.pid_line_done && !p.stdout_eof && remaining_ms(pid_deadline) > 0) pump(c, p, 50);
      (void)kill_remote(c, p, "KILL", std::min(c.target.timeout_ms, std::max(timeout_ms, 1000)));
    }
    return make_error(Errc::timeout,
                      fmt::format("`{}` on {} did not finish within {} ms", short_cmd(cmd), c.who, timeout_ms));
  };
  size_t off = 0;
  while (off < stdin_data.size() && !p.stdout_eof) {
    if (remaining_ms(deadline) == 0) return timed_out();
    uint32_t window = ssh_channel_window_size(p.ch);
    if (window == 0) {
      pump(c, p, std::min(remaining_ms(deadline), 20));  // processes window adjustments too
      continue;
    }
    size_t n = std::min<size_t>({window, kChunk, stdin_data.size() - off});
    int w = ssh_channel_write(p.ch, stdin_data.data() + off, static_cast<uint32_t>(n));
    if (w == SSH_ERROR) return session_error(c, "write stdin of `" + short_cmd(cmd) + "`");
    off += static_cast<size_t>(w);
    pump(c, p, 0);
  }
  if (!p.stdout_eof) ssh_channel_send_eof(p.ch);
  while (!p.stdout_eof) {
    int rem = remaining_ms(deadline);
    if (rem == 0) return timed_out();
    pump(c, p, std::min(rem, 200));
  }
  if (!p.failure.empty() && !p.exit_known)
    return make_error(ssh_is_connected(c.s) ? Errc::io : Errc::peer_closed,
                      fmt::format("`{}` on {} failed: {}", short_cmd(cmd), c.who, p.failure));
  if (!wait_exit(c, p, std::max(remaining_ms(deadline), 1)) && remaining_ms(deadline) == 0) return timed_out();
  ExecResult r;
  r.out = std::move(p.out);
  r.err = std::move(p.err);
  r.exit_status = p.status;
  r.exit_signal = p.exit_signal;
  return Result<ExecResult>(std::move(r));
}
bool kill_remote(SessionCore& c, ProcessState& p, const char* sig, int timeout_ms) {
  bool ran = true;
  if (p.pid > 0) {
    // `kill -SIG -PGID` works in bash and dash (dash has no `--`). Opening
    // the channel blocks for the session timeout: bounded here too.
    set_session_timeout(c.s, timeout_ms);
    ran = run_on(c, fmt::format("kill -{0} -{1} 2>/dev/null || kill -{0} {1} 2>/dev/null", sig, p.pid), "", timeout_ms)
              .ok();
    set_session_timeout(c.s, c.target.timeout_ms);
  }
  if (p.ch && !p.finished() && ran) ssh_channel_request_send_signal(p.ch, sig);
  return ran;
}
}  // namespace

Result<ExecResult> SshSession::run(const std::string& cmd, const std::string& stdin_data, int timeout_ms) {
  return run_on(*core_, cmd, stdin_data, timeout_ms);
}

Result<std::unique_ptr<RemoteProcess>> SshSession::start(const std::string& cmd) {
  SessionCore& c = *core_;
  auto st = std::make_unique<ProcessState>();
  st->err_cap = 64 * 1024;
  CoreLock lk(c);
  Status s = open_exec(c, *st, wrap_with_pid(cmd, true));
  st->cmd = cmd;
  if (!s) {
    release(c, *st);
    return std::move(s.error());
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(c.target.timeout_ms);
  while (!st->pid_line_done && !st->stdout_eof && remaining_ms(deadline) > 0)
    pump(c, *st, std::min(remaining_ms(deadline), 50));
  std::unique_ptr<RemoteProcess> proc(new RemoteProcess(core_, std::move(st)));
  if (proc->st_->pid <= 0) {
    ProcessState& p = *proc->st_;
    std::string why = !p.pid_line_done && !p.stdout_eof
                          ? fmt::format("no pid line within {} ms", c.target.timeout_ms)
                          : (p.err.empty() ? "it did not report its pid" : "stderr: " + p.err);
    (void)proc->stop(0);
    return make_error(Errc::io, fmt::format("cannot start `{}` on {}: {}", short_cmd(cmd), c.who, why));
  }
  return Result<std::unique_ptr<RemoteProcess>>(std::move(proc));
}

Status SshSession::upload(const std::string& local_path, const std::string& remote_path, int mode) {
  SessionCore& c = *core_;
  std::ifstream in(local_path, std::ios::binary);
  if (!in) {
    struct stat st {};
    if (::stat(local_path.c_str(), &st) != 0 && errno == ENOENT)
      return make_error(Errc::not_found, fmt::format("cannot upload {} to {}: no such file", local_path, c.who));
    return make_error(Errc::io, fmt::format("cannot upload {} to {}: cannot open it for reading", local_path, c.who));
  }
  CoreLock lk(c);
  auto sftp_r = open_sftp(c);
  if (!sftp_r) return std::move(sftp_r.error());
  SftpHandle h{*sftp_r};
  const std::string tmp = remote_path + ".tmp-" + random_hex(6);
  sftp_file f = sftp_open(h.sftp, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (!f) return sftp_error(c, h.sftp, "create", tmp);
  auto fail = [&](Error e) -> Status {
    if (f) sftp_close(f);
    f = nullptr;
    if (ssh_is_connected(c.s)) sftp_unlink(h.sftp, tmp.c_str());
    return e;
  };
  std::vector<char> buf(kChunk);
  while (in) {
    // A caught SIGINT/SIGTERM/SIGHUP ends a long upload (#24: signals were
    // ignored during the long steps); the partial file is removed.
    if (const int sig = SignalCatcher::signal())
      return fail(make_error(Errc::io, fmt::format("upload of {} to {} interrupted by signal {}", local_path, c.who, sig)));
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    auto n = in.gcount();
    if (n <= 0) break;
    if (sftp_write(f, buf.data(), static_cast<size_t>(n)) != n) return fail(sftp_error(c, h.sftp, "write", tmp));
  }
  if (in.bad()) return fail(make_error(Errc::io, fmt::format("reading {} for upload to {} failed", local_path, c.who)));
  if (sftp_extension_supported(h.sftp, "fsync@openssh.com", "1") && sftp_fsync(f) != 0)
    return fail(sftp_error(c, h.sftp, "fsync", tmp));
  int rc = sftp_close(f);
  f = nullptr;
  if (rc != 0) return fail(sftp_error(c, h.sftp, "close", tmp));
  if (sftp_chmod(h.sftp, tmp.c_str(), static_cast<mode_t>(mode)) != 0) return fail(sftp_error(c, h.sftp, "chmod", tmp));
  // SFTPv3 rename (OpenSSH) refuses an existing target; replace it with
  // rename(2) through the shell then, which is atomic as well.
  if (sftp_rename(h.sftp, tmp.c_str(), remote_path.c_str()) != 0) {
    auto mv = run_on(c, "mv -f " + shell_quote(tmp) + " " + shell_quote(remote_path), "", 0);
    if (!mv) return fail(mv.error());
    if (mv->exit_status != 0)
      return fail(
          make_error(Errc::io, fmt::format("cannot move {} over {} on {}: {}", tmp, remote_path, c.who, mv->err)));
  }
  return {};
}

namespace {
Result<std::string> read_remote(SessionCore& c, const std::string& path, size_t max_bytes, bool tail) {
  CoreLock lk(c);
  auto sftp_r = open_sftp(c);
  if (!sftp_r) return std::move(sftp_r.error());
  SftpHandle h{*sftp_r};
  sftp_file f = sftp_open(h.sftp, path.c_str(), O_RDONLY, 0);
  if (!f) return sftp_error(c, h.sftp, "open", path);
  struct FileGuard {
    sftp_file f;
    ~FileGuard() { sftp_close(f); }
  } fg{f};
  uint64_t size = 0;
  if (sftp_attributes a = sftp_fstat(f)) {
    size = a->size;
    sftp_attributes_free(a);
  }
  if (size > max_bytes) {
    if (!tail)
      return make_error(Errc::limit_exceeded,
                        fmt::format("{} on {} has {} bytes, more than the {} allowed", path, c.who, size, max_bytes));
    if (sftp_seek64(f, size - max_bytes) != 0) return sftp_error(c, h.sftp, "seek", path);
  }
  std::string out;
  std::vector<char> buf(kChunk);
  while (out.size() < max_bytes) {
    size_t want = std::min(buf.size(), max_bytes - out.size());
    ssize_t n = sftp_read(f, buf.data(), want);
    if (n < 0) return sftp_error(c, h.sftp, "read", path);
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  if (!tail && out.size() == max_bytes) {
    char extra;
    if (sftp_read(f, &extra, 1) > 0)
      return make_error(Errc::limit_exceeded,
                        fmt::format("{} on {} is larger than the {} bytes allowed", path, c.who, max_bytes));
  }
  return out;
}
}  // namespace

Result<std::string> SshSession::read_file(const std::string& remote_path, size_t max_bytes) {
  return read_remote(*core_, remote_path, max_bytes, false);
}

Result<std::string> SshSession::read_file_tail(const std::string& remote_path, size_t max_bytes) {
  return read_remote(*core_, remote_path, max_bytes, true);
}

// ------------------------------------------------------------- RemoteProcess

RemoteProcess::RemoteProcess(std::shared_ptr<SessionCore> core, std::unique_ptr<ProcessState> st)
    : core_(std::move(core)), st_(std::move(st)) {}

RemoteProcess::~RemoteProcess() {
  if (!st_) return;
  if (!st_->finished()) (void)stop(1000);
  CoreLock lk(*core_);
  release(*core_, *st_);
}

long RemoteProcess::pid() const { return st_->pid; }
const std::string& RemoteProcess::command() const { return st_->cmd; }

std::string RemoteProcess::stderr_tail() {
  CoreLock lk(*core_);
  pump(*core_, *st_, 0);
  return st_->err;
}

Status RemoteProcess::write_stdin(const std::string& data) {
  SessionCore& c = *core_;
  ProcessState& p = *st_;
  const auto deadline = Clock::now() + std::chrono::milliseconds(c.target.timeout_ms);
  CoreLock lk(c);
  if (p.stdin_closed)
    return make_error(Errc::io, fmt::format("stdin of `{}` on {} was closed", short_cmd(p.cmd), c.who));
  if (!p.stdout_eof) pump(c, p, 0);
  if (!p.ch || p.finished())
    return make_error(Errc::peer_closed, fmt::format("`{}` on {} has exited ({})", short_cmd(p.cmd), c.who,
                                                     p.exit_known ? fmt::format("exit status {}", p.status)
                                                                  : std::string("channel closed")));
  size_t off = 0;
  while (off < data.size()) {
    if (remaining_ms(deadline) == 0)
      return make_error(Errc::timeout, fmt::format("`{}` on {} did not read its stdin within {} ms", short_cmd(p.cmd),
                                                   c.who, c.target.timeout_ms));
    uint32_t window = ssh_channel_window_size(p.ch);
    if (window == 0) {
      if (p.stdout_eof)
        wait_exit(c, p, 20);
      else
        pump(c, p, 20);
      if (p.finished())
        return make_error(Errc::peer_closed,
                          fmt::format("`{}` on {} exited before reading its stdin", short_cmd(p.cmd), c.who));
      continue;
    }
    size_t n = std::min<size_t>({window, kChunk, data.size() - off});
    int w = ssh_channel_write(p.ch, data.data() + off, static_cast<uint32_t>(n));
    if (w == SSH_ERROR) return session_error(c, "write stdin of `" + short_cmd(p.cmd) + "`");
    off += static_cast<size_t>(w);
  }
  return {};
}

void RemoteProcess::close_stdin() {
  CoreLock lk(*core_);
  if (st_->stdin_closed) return;
  st_->stdin_closed = true;
  if (st_->ch && !st_->closed && ssh_is_connected(core_->s)) ssh_channel_send_eof(st_->ch);
}

Result<std::string> RemoteProcess::read_line(int timeout_ms) {
  SessionCore& c = *core_;
  ProcessState& p = *st_;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  for (;;) {
    {
      CoreLock lk(c);
      auto nl = p.out.find('\n');
      if (nl != std::string::npos) {
        std::string line = p.out.substr(0, nl);
        p.out.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return line;
      }
      if (p.stdout_eof) {
        if (!p.out.empty()) {
          std::string line;
          line.swap(p.out);
          return line;
        }
        wait_exit(c, p, 200);
        std::string status = p.exit_known ? fmt::format("exit status {}", p.status)
                                          : (p.failure.empty() ? std::string("no exit status") : p.failure);
        std::string tail = p.err.size() > 2000 ? p.err.substr(p.err.size() - 2000) : p.err;
        return make_error(Errc::peer_closed, fmt::format("`{}` on {} closed its stdout ({}){}{}", short_cmd(p.cmd),
                                                         c.who, status, tail.empty() ? "" : "; stderr: ", tail));
      }
      int rem = remaining_ms(deadline);
      if (rem == 0)
        return make_error(Errc::timeout,
                          fmt::format("no line from `{}` on {} within {} ms", short_cmd(p.cmd), c.who, timeout_ms));
      // Short slices so that other threads get the session in between.
      pump(c, p, std::min(rem, 50));
    }
    for (int i = 0; i < 1000 && c.waiting.load() > 0; ++i) std::this_thread::yield();
  }
}

std::optional<int> RemoteProcess::exit_status() {
  CoreLock lk(*core_);
  ProcessState& p = *st_;
  if (!p.finished()) {
    if (!p.stdout_eof) pump(*core_, p, 0);
    if (p.stdout_eof) wait_exit(*core_, p, 1);
  }
  if (!p.finished()) return std::nullopt;
  return p.status;
}

Result<int> RemoteProcess::stop(int grace_ms) {
  SessionCore& c = *core_;
  ProcessState& p = *st_;
  CoreLock lk(c);
  if (!p.ch || p.finished()) return p.status;
  close_stdin();
  if (wait_finished(c, p, grace_ms)) return p.status;
  if (!ssh_is_connected(c.s))
    return make_error(Errc::peer_closed, fmt::format("connection to {} lost while stopping `{}`; it exits when "
                                                     "its stdin closes",
                                                     c.who, short_cmd(p.cmd)));
  // Each remote step is bounded by the grace too (at least 5 s: the kill
  // runs in a login shell, whose start-up files alone can take a second on a
  // loaded device): on a connection that went silent (a partition; TCP has
  // not noticed yet) opening a channel to signal would otherwise wait the
  // session timeout per signal, and that connection is given up after the
  // first attempt.
  const int step = std::min(c.target.timeout_ms, std::max(grace_ms, 5000));
  for (const char* sig : {"TERM", "KILL"}) {
    if (!kill_remote(c, p, sig, step)) {
      set_session_timeout(c.s, step);
      release(c, p);
      set_session_timeout(c.s, c.target.timeout_ms);
      return make_error(Errc::timeout, fmt::format("{} did not answer within {} ms while stopping `{}` (connection "
                                                   "down?); it exits when its stdin closes or, for tracr-agent, once "
                                                   "it has heard nothing for its heartbeat timeout",
                                                   c.who, step, short_cmd(p.cmd)));
    }
    if (wait_finished(c, p, std::max(grace_ms, 200))) return p.status;
  }
  // Last resort: closing the channel closes the command's pipes.
  release(c, p);
  return p.status;
}

Status check_private_key(const std::string& path, const std::string& who) {
  auto key = load_private_key(expand_home(path), who);
  if (!key) return std::move(key.error());
  return {};
}

}  // namespace tracr::fleet
