#include "fleet/deploy.hpp"

#include "fleet/process.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include <openssl/evp.h>

#include "wire/control.hpp"
#include "protocol/crypto.hpp"

namespace tracr::fleet {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string normalize_remote_dir(std::string d) {
  if (d == "~" || d.empty()) return ".";
  if (d.rfind("~/", 0) == 0) d = d.substr(2);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d.empty() ? "." : d;
}

std::string remote_sha256_cmd(const std::string& path) {
  const std::string q = shell_quote(path);
  return fmt::format("if [ -f {0} ]; then (sha256sum {0} 2>/dev/null || shasum -a 256 {0}) | cut -c1-64; fi", q);
}

int hash_timeout_ms(int session_timeout_ms, uint64_t bytes) {
  const uint64_t base = session_timeout_ms > 0 ? static_cast<uint64_t>(session_timeout_ms) : 10000;
  return static_cast<int>(std::min<uint64_t>(base + bytes / 2000, 24ull * 3600 * 1000));
}

Result<std::string> remote_sha256(SshSession& s, const std::string& path, uint64_t bytes) {
  auto r = s.run(remote_sha256_cmd(path), "", hash_timeout_ms(s.target().timeout_ms, bytes));
  if (!r) return std::move(r.error());
  if (r->exit_status != 0)
    return make_error(Errc::io, fmt::format("cannot hash {} on {} (exit status {}): {}", path, s.label(),
                                            r->exit_status, trim(r->err)));
  return trim(r->out);
}

Result<std::string> sha256_file(const std::string& path) {
  // Streamed: weights and data sets can be larger than memory.
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return make_error(Errc::not_found, fmt::format("{} does not exist", path));
    return make_error(Errc::io, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return make_error(Errc::internal, "cannot start a SHA-256 digest");
  std::vector<char> buf(1u << 20);
  while (in) {
    // A caught SIGINT/SIGTERM/SIGHUP ends it (#24: 188 GB were hashed while
    // signals went unanswered).
    if (const int sig = SignalCatcher::signal())
      return make_error(Errc::io, fmt::format("hashing {} interrupted by signal {}", path, sig));
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return make_error(Errc::io, fmt::format("reading {} failed", path));
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), h, &n);
  return protocol::to_hex(h, n);
}

std::vector<std::string> ldd_missing(const std::string& out) {
  // "\tlibfoo.so.1 => not found"
  std::vector<std::string> libs;
  size_t start = 0;
  while (start < out.size()) {
    size_t nl = out.find('\n', start);
    const std::string line = trim(out.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    const auto arrow = line.find(" => not found");
    if (arrow != std::string::npos) libs.push_back(trim(line.substr(0, arrow)));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return libs;
}

Result<std::vector<std::string>> remote_missing_libraries(SshSession& s, const std::string& remote_path) {
  // 127: no ldd on the device (a minimal image): nothing can be said.
  auto r = s.run("command -v ldd >/dev/null 2>&1 || exit 127; ldd " + shell_quote(remote_path) + " 2>&1");
  if (!r) return std::move(r.error());
  if (r->exit_status == 127) return std::vector<std::string>{};
  return ldd_missing(r->out);
}

std::string missing_libraries_message(const std::string& where, const std::string& agent,
                                      const std::vector<std::string>& libs) {
  std::string names;
  for (const auto& l : libs) names += (names.empty() ? "" : ", ") + l;
  return fmt::format("{} lacks shared libraries the agent {} needs (ldd: not found): {}; "
                     "`tracrctl devices setup` installs the agent's runtime packages there",
                     where, agent, names);
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
  std::error_code size_ec;  // an unknown size gets the session's own timeout
  const uint64_t size = std::filesystem::file_size(local_agent_path, size_ec);
  const uint64_t bytes = size_ec ? 0 : size;

  // One round trip: architecture, directory, hash of an existing copy.
  const std::string dir = normalize_remote_dir(remote_dir);
  info.remote_path = dir + "/tracr-agent-" + info.sha256.substr(0, 16);
  auto probe = s.run(fmt::format("uname -m || exit 90; mkdir -p {} || exit 91; {}", shell_quote(dir),
                                 remote_sha256_cmd(info.remote_path)),
                     "", hash_timeout_ms(s.target().timeout_ms, bytes));
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
  auto got = remote_sha256(s, info.remote_path, bytes);
  if (!got) return std::move(got.error());
  if (*got != info.sha256)
    return make_error(Errc::io, fmt::format("{} on {} has sha256 {} after upload, expected {}", info.remote_path,
                                            s.label(), got->empty() ? "(missing)" : *got, info.sha256));
  info.uploaded = true;
  // Housekeeping after an upload: temporary files of uploads interrupted more
  // than 10 minutes ago, and agent binaries beyond the newest few (the one
  // just uploaded always stays; a running agent keeps its deleted binary).
  const std::string keep = "tracr-agent-" + info.sha256.substr(0, 16);
  auto prune = s.run(fmt::format(
      "cd {} && find . -maxdepth 1 -name 'tracr-agent-*.tmp-*' -mmin +10 -exec rm -f {{}} + ; "
      "ls -1t | grep -E '^tracr-agent-[0-9a-f]{{16}}$' | grep -vx {} | tail -n +{} | xargs -r rm -f --",
      shell_quote(dir), shell_quote(keep), kKeptAgentBinaries));
  if (!prune || prune->exit_status != 0)
    info.note = fmt::format("pruning old agents in {} failed: {}", dir,
                            prune ? trim(prune->err) : prune.error().str());
  return Result<DeployInfo>(std::move(info));
}

Result<std::string> fetch_logs(SshSession& s, const std::string& log_path, size_t max_bytes) {
  return s.read_file_tail(log_path, max_bytes);
}


}  // namespace tracr::fleet
