// Deploying tracr-agent on a device over SSH: deploy_agent puts the agent
// binary on the device under a name derived from its content hash (so an
// identical agent is never uploaded twice and different versions never
// overwrite each other). Starting it is the launcher's job
// (fleet/launcher.hpp): the secret on stdin, READY awaited; the agent
// exits when its stdin closes, so a controller that dies (and its SSH
// connection with it) never leaves agents behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fleet/ssh.hpp"
#include "protocol/error.hpp"

namespace tracr::fleet {

struct DeployInfo {
  std::string remote_path;  // <remote_dir>/tracr-agent-<first 16 hex of sha256>
  std::string remote_arch;  // `uname -m` on the device
  std::string local_arch;   // architecture of the local agent binary (uname -m naming)
  std::string sha256;       // hex SHA-256 of the agent binary
  bool uploaded = false;    // false when an identical copy was already there
  std::string note;         // housekeeping that failed (the deploy itself succeeded)
};

// Agent binaries kept in a device's work_dir after an upload: the one just
// uploaded and the two newest others (older ones are removed, as are
// temporary files of uploads interrupted more than 10 minutes ago).
inline constexpr int kKeptAgentBinaries = 3;

// Checks that the device can run local_agent_path (ELF machine vs `uname -m`),
// creates remote_dir, and uploads the agent atomically (mode 0755) unless a
// copy with the same SHA-256 is already there; the upload is verified by
// hashing the remote copy. remote_dir may be absolute or relative to the
// login directory ("~/x" means "x").
// Errors: not_found/io (local binary), config (architecture mismatch; names
// both), io (remote command or upload failed, hash differs after upload),
// plus the session's transport errors.
Result<DeployInfo> deploy_agent(SshSession& session, const std::string& local_agent_path,
                                const std::string& remote_dir);

// The last max_bytes of an agent's remote log (its stderr).
Result<std::string> fetch_logs(SshSession& session, const std::string& log_path, size_t max_bytes = 64u << 10);

// A device directory as SFTP and the login shell both take it: "~/x" -> "x"
// (both start at the login directory), "~" -> ".", trailing slashes removed.
std::string normalize_remote_dir(std::string d);
// Shell snippet printing the sha256 of a remote file (nothing when it does
// not exist).
std::string remote_sha256_cmd(const std::string& path);
// How long hashing `bytes` on a device may take: the session's timeout plus
// 1 s per 2 MB (a board's SD card under load; the 109 MB agent once took
// over 10 s on a loaded 2-core machine hashing beside two other uploads).
// session_timeout_ms <= 0 counts as 10 s.
int hash_timeout_ms(int session_timeout_ms, uint64_t bytes);
// The sha256 of a remote file as lower-case hex; "" when it does not exist.
// `bytes` (its expected size) sets the timeout (hash_timeout_ms).
// Errors: io (the command failed), plus the session's transport errors.
Result<std::string> remote_sha256(SshSession& session, const std::string& path, uint64_t bytes = 0);

// A command's output without the whitespace around it.
std::string trim(std::string s);

// Shared libraries `ldd` on the device reports "not found" for the binary at
// remote_path (names as ldd prints them, e.g. "libtorch.so.2.1"); empty when
// none are missing or the device has no ldd (nothing to check then).
// Errors: the session's transport errors.
Result<std::vector<std::string>> remote_missing_libraries(SshSession& session, const std::string& remote_path);
// The "not found" names in ldd output.
std::vector<std::string> ldd_missing(const std::string& ldd_output);
// "device D: ... lacks shared libraries the agent needs: a, b; ..." naming the
// fix (tracrctl devices setup).
std::string missing_libraries_message(const std::string& where, const std::string& agent,
                                      const std::vector<std::string>& libs);

// Local helpers, exposed for tests and `tracrctl devices check`.
// SHA-256 of a file as lower-case hex. Errors: not_found, io.
Result<std::string> sha256_file(const std::string& path);
// Architecture of an ELF executable, named like `uname -m` ("x86_64",
// "aarch64", "arm", "i686", "riscv64", ...). Errors: not_found, io,
// invalid_argument (not an ELF file).
Result<std::string> elf_arch(const std::string& path);
// Whether a binary for binary_arch (elf_arch naming) runs on a machine whose
// `uname -m` is machine.
bool arch_compatible(const std::string& binary_arch, const std::string& machine);

}  // namespace tracr::fleet
