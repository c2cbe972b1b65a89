// Agent roles and options (no LibTorch here; model roles live in
// roles_torch.cpp, built when TRACR_WITH_TORCH).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/control.hpp"
#include "protocol/frame.hpp"

namespace tracr::agent {

struct AgentOptions {
  std::string role;                 // SERVER | PARTICIPANT
  std::string bind = "tcp://127.0.0.1:0";
  std::string raw_bind;             // SERVER: raw ZeroMQ ack socket (benchmark baseline)
  std::string connect;              // PARTICIPANT: the SERVER's data endpoint
  bool in_process = false;          // PARTICIPANT: run tails in this process, no socket
  bool encrypt = true;
  bool x25519 = true;
  std::vector<uint8_t> secret;      // from stdin, never argv
  std::string secret_file;          // detached agents: secret from this 0600 file; stdin not watched
  // Model (both roles).
  std::string model;                // empty: SERVER echoes (protocol demo)
  std::string weights;
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
  std::string device = "auto";
  uint64_t seed = 0;
  int profile_reps = 0;             // > 0: profile every layer first, emit PROFILE lines
  int64_t profile_batch = 1;
  // Run (PARTICIPANT).
  std::string dataset = "synthetic";
  std::string dataset_path;
  std::string dataset_split = "test";
  std::string class_names;
  int64_t max_samples = 0;
  int64_t batch = 1;
  std::vector<int> splits;          // empty: all
  int warmup = 1;
  int reps = 1;
  std::string codec = "none";
  size_t chunk_bytes = 256 * 1024;
  int inflight = 1;
  int topk = 5;
};

// Parses the command line; errors name the option and what was expected.
Status parse_agent_args(const std::vector<std::string>& args, AgentOptions& opt);

// Authenticated control lines on stdout, a heartbeat thread, and STOP/EOF
// detection on stdin.
class ControlOut {
 public:
  // watch_stdin false (detached agents): only SIGTERM/SIGINT stop the agent.
  explicit ControlOut(const std::vector<uint8_t>& secret, bool watch_stdin = true);
  ~ControlOut();
  void send(const std::string& kind, const std::map<std::string, std::string>& fields);
  void start_heartbeat(int period_ms);
  void stop_heartbeat();
  // True once stdin closed, a valid STOP line arrived or the agent was
  // signalled (non-blocking).
  bool stop_requested();
  // CMD lines received since the last call (non-blocking).
  std::vector<ControlMsg> take_commands();

 private:
  ControlCodec codec_, in_;
  std::mutex out_mu_;
  std::thread hb_;
  std::mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
  bool stopped_ = false;
  bool watch_stdin_ = true;
  std::string pending_;
  std::vector<ControlMsg> commands_;
  void read_stdin();
};

// Runs tails for the SERVER loop (implemented with LibTorch).
class TailHandler {
 public:
  virtual ~TailHandler() = default;
  virtual Result<std::pair<protocol::Bundle, protocol::Meta>> handle(const protocol::Frame& f) = 0;
  virtual std::string describe() const = 0;
  // Extra READY fields (the hardware identity).
  virtual std::map<std::string, std::string> ready_fields() const { return {}; }
};

// The SERVER loop: echo when `tail` is null, else tails. Returns exit code.
int serve(const AgentOptions& opt, ControlOut& ctl, const std::unique_ptr<TailHandler>& tail);
// Dispatches on opt.role. Returns the exit code.
int run_role(const AgentOptions& opt, ControlOut& ctl);
#if TRACR_WITH_TORCH
int run_model_role(const AgentOptions& opt, ControlOut& ctl);
#endif

}  // namespace tracr::agent
