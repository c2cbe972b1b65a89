#include "controller/deploy.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>

#include "agent/control.hpp"
#include "protocol/crypto.hpp"

namespace tracr::controller {

namespace {

// "READY ..." or "<seq> READY ..." (control channel line).
bool is_ready_line(const std::string& line) {
  if (line.rfind("READY", 0) == 0 && (line.size() == 5 || line[5] == ' ')) return true;
  size_t i = 0;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  return i > 0 && line.compare(i, 7, " READY ") == 0;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

Result<std::string> read_local(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return make_error(Errc::not_found, fmt::format("{} does not exist", path));
    return make_error(Errc::io, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error(Errc::io, fmt::format("reading {} failed", path));
  return data;
}

// "~/x" -> "x" (SFTP paths and the shell's working directory both start at
// the login directory); strips trailing slashes.
std::string normalize_remote_dir(std::string d) {
  if (d == "~" || d.empty()) return ".";
  if (d.rfind("~/", 0) == 0) d = d.substr(2);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d.empty() ? "." : d;
}

std::string dirname_of(const std::string& p) {
  auto slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string last_lines(const std::string& s, size_t max_chars) {
  std::string t = trim(s);
  if (t.size() <= max_chars) return t;
  t = t.substr(t.size() - max_chars);
  auto nl = t.find('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// Shell snippet printing the sha256 of a remote file (nothing when it does
// not exist).
std::string remote_sha256_cmd(const std::string& path) {
  const std::string q = shell_quote(path);
  return fmt::format("if [ -f {0} ]; then (sha256sum {0} 2>/dev/null || shasum -a 256 {0}) | cut -c1-64; fi", q);
}

Result<std::string> remote_sha256(SshSession& s, const std::string& path) {
  auto r = s.run(remote_sha256_cmd(path));
  if (!r) return std::move(r.error());
  if (r->exit_status != 0)
    return make_error(Errc::io, fmt::format("cannot hash {} on {} (exit status {}): {}", path, s.label(),
                                            r->exit_status, trim(r->err)));
  return trim(r->out);
}

}  // namespace

Result<std::string> sha256_file(const std::string& path) {
  auto data = read_local(path);
  if (!data) return std::move(data.error());
  auto h = protocol::sha256(reinterpret_cast<const uint8_t*>(data->data()), data->size());
  return protocol::to_hex(h.data(), h.size());
}

Result<std::string> elf_arch(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return make_error(Errc::not_found, fmt::format("{} does not exist", path));
    return make_error(Errc::io, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  unsigned char h[20] = {};
  in.read(reinterpret_cast<char*>(h), sizeof h);
  if (in.gcount() != sizeof h || std::memcmp(h,
                                             "\x7f"
                                             "ELF",
                                             4) != 0)
    return make_error(Errc::invalid_argument, fmt::format("{} is not an ELF executable", path));
  const bool is64 = h[4] == 2;
  const bool big_endian = h[5] == 2;
  const unsigned machine = big_endian ? (h[18] << 8 | h[19]) : (h[19] << 8 | h[18]);
  switch (machine) {
    case 3:
      return std::string("i686");
    case 62:
      return std::string("x86_64");
    case 40:
      return std::string("arm");
    case 183:
      return std::string("aarch64");
    case 243:
      return std::string(is64 ? "riscv64" : "riscv32");
    case 8:
      return std::string(is64 ? "mips64" : "mips");
    case 20:
      return std::string("ppc");
    case 21:
      return std::string(big_endian ? "ppc64" : "ppc64le");
    case 22:
      return std::string("s390x");
    default:
      return fmt::format("elf-machine-{}", machine);
  }
}

bool arch_compatible(const std::string& bin, const std::string& machine) {
  if (bin == machine) return true;
  if (bin == "x86_64") return machine == "amd64";
  if (bin == "aarch64") return machine == "arm64";
  if (bin == "arm") return machine.rfind("arm", 0) == 0 && machine != "arm64";  // armv6l, armv7l, armv8l
  if (bin == "i686")
    return machine == "i386" || machine == "i486" || machine == "i586" || machine == "x86_64" || machine == "amd64";
  return false;
}

Result<DeployInfo> deploy_agent(SshSession& s, const std::string& local_agent_path, const std::string& remote_dir) {
  DeployInfo info;
  auto arch = elf_arch(local_agent_path);
  if (!arch) {
    if (arch.error().code != Errc::invalid_argument) return std::move(arch.error());
    struct utsname u {};
    ::uname(&u);
    info.local_arch = u.machine;  // not ELF (e.g. a wrapper script): assume it is for this machine
  } else {
    info.local_arch = *arch;
  }
  auto hash = sha256_file(local_agent_path);
  if (!hash) return std::move(hash.error());
  info.sha256 = *hash;

  // One round trip: architecture, directory, hash of an existing copy.
  const std::string dir = normalize_remote_dir(remote_dir);
  info.remote_path = dir + "/tracr-agent-" + info.sha256.substr(0, 16);
  auto probe = s.run(fmt::format("uname -m || exit 90; mkdir -p {} || exit 91; {}", shell_quote(dir),
                                 remote_sha256_cmd(info.remote_path)));
  if (!probe) return std::move(probe.error());
  if (probe->exit_status == 90)
    return make_error(Errc::io, fmt::format("`uname -m` failed on {}: {}", s.label(), trim(probe->err)));
  if (probe->exit_status == 91)
    return make_error(Errc::io, fmt::format("cannot create {} on {}: {}", dir, s.label(), trim(probe->err)));
  if (probe->exit_status != 0)
    return make_error(Errc::io, fmt::format("cannot hash {} on {} (exit status {}): {}", info.remote_path, s.label(),
                                            probe->exit_status, trim(probe->err)));
  const std::string out = trim(probe->out);
  const auto nl = out.find('\n');
  info.remote_arch = trim(out.substr(0, nl));
  const std::string have = nl == std::string::npos ? std::string() : trim(out.substr(nl + 1));
  if (!arch_compatible(info.local_arch, info.remote_arch))
    return make_error(Errc::config,
                      fmt::format("{} is {} but the agent {} is built for {}; build tracr-agent for {} and "
                                  "deploy that binary",
                                  s.label(), info.remote_arch, local_agent_path, info.local_arch, info.remote_arch));
  if (have == info.sha256) return Result<DeployInfo>(std::move(info));  // identical agent already there

  TRACR_TRY(s.upload(local_agent_path, info.remote_path, 0755));
  auto got = remote_sha256(s, info.remote_path);
  if (!got) return std::move(got.error());
  if (*got != info.sha256)
    return make_error(Errc::io, fmt::format("{} on {} has sha256 {} after upload, expected {}", info.remote_path,
                                            s.label(), got->empty() ? "(missing)" : *got, info.sha256));
  info.uploaded = true;
  return Result<DeployInfo>(std::move(info));
}

// ---------------------------------------------------------------- RemoteAgent

RemoteAgent& RemoteAgent::operator=(RemoteAgent&& o) noexcept {
  if (this != &o) {
    if (proc_ && !stopped_) (void)stop(1000);
    proc_ = std::move(o.proc_);
    ready_line_ = std::move(o.ready_line_);
    remote_path_ = std::move(o.remote_path_);
    log_path_ = std::move(o.log_path_);
    preamble_ = std::move(o.preamble_);
    pid_ = o.pid_;
    stopped_ = o.stopped_;
    status_ = o.status_;
  }
  return *this;
}

RemoteAgent::~RemoteAgent() {
  if (proc_ && !stopped_) (void)stop(1000);
}

std::string RemoteAgent::endpoint() const {
  std::vector<std::string> words;
  for (size_t i = 0; i < ready_line_.size();) {
    size_t j = ready_line_.find(' ', i);
    if (j == std::string::npos) j = ready_line_.size();
    if (j > i) words.push_back(ready_line_.substr(i, j - i));
    i = j + 1;
  }
  for (const auto& w : words)
    if (w.rfind("endpoint=", 0) == 0) {
      auto v = agent::pct_decode(w.substr(9));
      return v ? *v : w.substr(9);
    }
  if (words.size() >= 2 && words[0] == "READY" && words[1].find('=') == std::string::npos) return words[1];
  return {};
}

long RemoteAgent::pid() const { return pid_; }

bool RemoteAgent::running() { return proc_ && !stopped_ && proc_->running(); }

Result<int> RemoteAgent::stop(int grace_ms) {
  if (stopped_ || !proc_) return status_;
  auto r = proc_->stop(grace_ms);
  if (!r) return std::move(r.error());
  stopped_ = true;
  status_ = *r;
  return status_;
}

Result<RemoteAgent> launch_agent(SshSession& s, const std::string& remote_path, const std::vector<std::string>& args,
                                 const std::string& secret_hex, int ready_timeout_ms) {
  for (char ch : secret_hex)
    if (!std::isxdigit(static_cast<unsigned char>(ch)))
      return make_error(Errc::invalid_argument, "the session secret must be hex digits only");

  RemoteAgent a;
  a.remote_path_ = remote_path;
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  uint8_t rnd[3] = {};
  (void)protocol::random_bytes(rnd, sizeof rnd);
  a.log_path_ = fmt::format("{}/tracr-agent-{}-{}.log", dirname_of(remote_path), stamp, protocol::to_hex(rnd, 3));

  std::string cmd = shell_quote(remote_path);
  for (const auto& arg : args) cmd += " " + shell_quote(arg);
  cmd += " 2>>" + shell_quote(a.log_path_);
  auto proc = s.start(cmd);
  if (!proc) return std::move(proc.error());
  a.proc_ = std::move(*proc);
  a.pid_ = a.proc_->pid();

  auto fail = [&](Errc code, const std::string& what) -> Error {
    auto st = a.stop(500);
    std::string status = st ? fmt::format(" (exit status {})", *st) : "";
    std::string log;
    if (auto l = s.read_file_tail(a.log_path_, 4096)) log = last_lines(*l, 1500);
    return make_error(code, fmt::format("tracr-agent on {} {}{}; log {}{}{}", s.label(), what, status, a.log_path_,
                                        log.empty() ? " is empty" : " ends with:\n", log));
  };
  if (!secret_hex.empty()) {
    if (auto w = a.proc_->write_stdin(secret_hex + "\n"); !w) {
      if (!a.proc_->running()) return fail(Errc::peer_closed, "exited before READY");
      return fail(w.error().code, "did not take the session secret: " + w.error().message);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ready_timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto line = a.proc_->read_line(static_cast<int>(std::max<long long>(left.count(), 0)));
    if (!line) {
      if (line.error().code == Errc::timeout)
        return fail(Errc::timeout, fmt::format("did not print READY within {} ms", ready_timeout_ms));
      if (line.error().code == Errc::peer_closed)
        return fail(Errc::peer_closed, a.proc_->running() ? "closed its stdout before READY" : "exited before READY");
      return fail(line.error().code, line.error().message);
    }
    if (is_ready_line(*line)) {
      a.ready_line_ = *line;
      return Result<RemoteAgent>(std::move(a));
    }
    if (a.preamble_.size() < 1000) a.preamble_.push_back(*line);
  }
}

Result<std::string> fetch_logs(SshSession& s, const std::string& log_path, size_t max_bytes) {
  return s.read_file_tail(log_path, max_bytes);
}

Result<std::string> fetch_logs(SshSession& s, const RemoteAgent& agent, size_t max_bytes) {
  return fetch_logs(s, agent.log_path(), max_bytes);
}

}  // namespace tracr::controller
