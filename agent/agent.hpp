// tracr-agent: one executable, role SERVER or PARTICIPANT.
#pragma once

#include <atomic>
#include <string>

namespace tracr::agent {

struct ServerOptions {
  std::string bind = "tcp://127.0.0.1:0";
  std::string raw_bind;          // optional raw-ZeroMQ ack socket (baseline for benchmarks)
  bool encrypt = true;
  bool x25519 = true;
  std::string secret_hex;        // session secret; read from stdin, never argv
  int idle_exit_ms = 0;          // exit after this long with no traffic (0: never)
};

// Serves frames until SHUTDOWN, `stop` or stdin EOF (when watch_stdin).
// INFER_REQUEST frames are answered with INFER_RESULT; with meta echo=1 the
// received tensors are sent back, otherwise an empty bundle whose meta holds
// the server-side measurements (raw/wire bytes, decode time, FNV-1a of the
// decoded bytes when verify=1). Prints "READY <endpoint> [raw <endpoint>]".
int run_server(const ServerOptions& opt, std::atomic<bool>* stop, bool watch_stdin);

// FNV-1a 64 over a tensor bundle's bytes (names and shapes excluded).
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

// Entry point of tracr-agent; returns the process exit code.
int agent_main(int argc, char** argv);

}  // namespace tracr::agent
