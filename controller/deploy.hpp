// Deploying and launching tracr-agent on a device over SSH.
//
// deploy_agent puts the agent binary on the device under a name derived
// from its content hash (so an identical agent is never uploaded twice and
// different versions never overwrite each other); launch_agent starts it with
// the session secret on stdin and waits for its READY line. The agent exits
// when its stdin closes, so a controller that dies (and its SSH connection
// with it) never leaves agents behind.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "controller/ssh.hpp"
#include "protocol/error.hpp"

namespace tracr::controller {

struct DeployInfo {
  std::string remote_path;  // <remote_dir>/tracr-agent-<first 16 hex of sha256>
  std::string remote_arch;  // `uname -m` on the device
  std::string local_arch;   // architecture of the local agent binary (uname -m naming)
  std::string sha256;       // hex SHA-256 of the agent binary
  bool uploaded = false;    // false when an identical copy was already there
};

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

// An agent started by launch_agent. Stops the agent when destroyed.
class RemoteAgent {
 public:
  RemoteAgent() = default;
  RemoteAgent(RemoteAgent&&) noexcept = default;
  RemoteAgent& operator=(RemoteAgent&&) noexcept;
  ~RemoteAgent();

  // The READY line as the agent printed it: "READY <endpoint> ..." or, with
  // the authenticated control channel (agent/control.hpp), "<seq> READY
  // endpoint=<endpoint> ... #<mac>", which the caller verifies with its
  // ControlCodec (feed it preamble() first, then this line).
  const std::string& ready_line() const { return ready_line_; }
  // Lines the agent printed before READY, in order (usually none).
  const std::vector<std::string>& preamble() const { return preamble_; }
  // The endpoint the agent bound: the endpoint= field of the READY line, or
  // its second word. Empty when neither is there.
  std::string endpoint() const;
  const std::string& remote_path() const { return remote_path_; }
  const std::string& log_path() const { return log_path_; }  // remote stderr log
  long pid() const;
  // The agent's stdin/stdout (for a line control channel). Valid until stop.
  RemoteProcess* process() { return proc_.get(); }
  bool running();
  // Closes the agent's stdin (it exits on EOF), waits up to grace_ms, then
  // TERM/KILL (see RemoteProcess::stop). Returns the exit status (0 after a
  // clean exit). Idempotent: later calls return the same status.
  Result<int> stop(int grace_ms = 2000);

 private:
  friend Result<RemoteAgent> launch_agent(SshSession&, const std::string&, const std::vector<std::string>&,
                                          const std::string&, int);
  std::unique_ptr<RemoteProcess> proc_;
  std::string ready_line_, remote_path_, log_path_;
  std::vector<std::string> preamble_;
  long pid_ = -1;
  bool stopped_ = false;
  int status_ = -1;
};

// Starts remote_path with args (each shell-quoted), hands secret_hex to the
// agent on stdin (never on its command line; empty: nothing is sent, e.g.
// with --no-encrypt), sends its stderr to a log file beside remote_path,
// and waits up to ready_timeout_ms for its READY line (first word READY, or
// second word READY after a control-channel sequence number).
// Errors (the agent is stopped and the log tail included in the message):
// invalid_argument (secret not hex), timeout (no READY in time), peer_closed
// (agent exited before READY, with its exit status), plus session errors.
Result<RemoteAgent> launch_agent(SshSession& session, const std::string& remote_path,
                                 const std::vector<std::string>& args, const std::string& secret_hex,
                                 int ready_timeout_ms = 15000);

// The last max_bytes of an agent's remote log (its stderr).
Result<std::string> fetch_logs(SshSession& session, const RemoteAgent& agent, size_t max_bytes = 64u << 10);
Result<std::string> fetch_logs(SshSession& session, const std::string& log_path, size_t max_bytes = 64u << 10);

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

}  // namespace tracr::controller
