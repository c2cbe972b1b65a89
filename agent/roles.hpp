// Agent roles and options (no LibTorch here; model roles live in
// roles_torch.cpp, built when TRACR_WITH_TORCH).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "wire/agent_role.hpp"
#include "wire/control.hpp"
#include "agent/energy.hpp"
#include "wire/record.hpp"
#include "protocol/channel.hpp"
#include "protocol/frame.hpp"
#include "settings/config.hpp"

namespace tracr::agent {

struct AgentOptions {
  std::string role_arg;             // --role as given; check_agent_options sets `role` from it
  wire::AgentRole role = wire::AgentRole::server;
  std::string bind = "tcp://127.0.0.1:0";
  std::string raw_bind;             // SERVER: raw ZeroMQ ack socket (benchmark baseline)
  std::string connect;              // PARTICIPANT: the SERVER's data endpoint
  std::string downstream;           // SERVER: a chain's middle tier, forwarding to this next device (forward.hpp)
  bool in_process = false;          // PARTICIPANT: run tails in this process, no socket
  bool probe_only = false;          // PARTICIPANT: probe the link, run no frames (tracrctl link probe)
  std::string torch_device;         // --device: cpu | cuda | cuda:N ("" = auto)
  int torch_threads = 0;            // --threads: LibTorch intra-op threads (0 = its default)
  double cpu_quota = 0;             // emulated slower device: CPU time in cores (cgroup), 0 = none
  bool cpu_quota_external = false;  // the launcher applied cpu_quota already (recorded, not applied)
  int cpu_cores = 0;                // emulated slower device: pinned to this many CPUs, 0 = none
  std::vector<int> cpus;            // or to these CPUs by number (--cpus; cpu_cores is their count)
  std::optional<std::pair<double, double>> power_model;  // idle_w, busy_w (devices file power_model)
  bool list_meters = false;         // --meters: print the energy meters found and exit
  double link_delay_ms = 0;         // PARTICIPANT: one-way delay its delay relay adds (link_delay: agent)
  double link_jitter_ms = 0;        // and the uniform jitter around it
  bool encrypt = true;              // echo SERVER only: model roles follow the experiment
  bool x25519 = true;
  std::vector<uint8_t> secret;      // from stdin, never argv
  std::string secret_file;          // detached agents: secret from this 0600 file; stdin not watched
  // The controller's clock, handed over with the secret ("HEX clock_ms=N"):
  // HELLO timestamps run on it (PROTOCOL.md 6.3). Empty: the system clock.
  std::function<int64_t()> clock;
  int heartbeat_timeout_ms = 0;     // stop after this long without a control line (0: never; see ControlOut)
  // Where the experiment comes from: "stdin" (a CONFIG control line from the
  // controller, --config stdin) or a file (--experiment FILE: detached or
  // standalone agents). Neither: a SERVER echoes frames (protocol demo).
  bool config_from_stdin = false;
  std::string experiment_file;
  // Split training (TRAIN_WORKER / TRAIN_OWNER).
  std::vector<int> train_segments;               // TRAIN_WORKER: --segments 1,2
  std::vector<std::pair<int, std::string>> train_workers;  // TRAIN_OWNER: --worker SEG=ENDPOINT
  int owner_index = 0, owners = 1;               // TRAIN_OWNER: --owner K/N (round-robin)
  std::string run_tag;                           // --run-tag: checkpoints under <checkpoint_dir>/<tag>/
  int64_t resume_step = -1;                      // --resume-step: load the checkpoints of this step
  // The effective experiment, parsed by settings::parse_experiment, the
  // controller's own parser: one set of names and limits.
  std::optional<settings::ExperimentConfig> experiment;
  // Profiles stored in the run's database, by profile key (the CONFIG
  // line's profiles_known: "KEY layers=N head=0,3 tail=3,7;KEY2 ..."): an
  // agent whose key is there reuses them instead of profiling (#45 friction 2).
  std::string profiles_known;
};

// The devices file's power model for this agent (cores: the CPUs it may use,
// or its CPU quota when lower); nullopt without --power-model.
std::optional<PowerModel> agent_power_model(const AgentOptions& o);

// The data channel's options for an agent in `role`: its role name and its
// security (encryption, X25519, secret, clock) from the options.
protocol::ChannelOptions agent_channel_options(const AgentOptions& o, wire::AgentRole role);

// This machine's identity as this agent runs (CPU limits included).
wire::HwIdentity agent_hw_identity(const AgentOptions& o);

// Parses the command line (agent/agent_args.cpp, CLI11); errors name the
// option and what was expected. --help and --version are not answered here.
Status parse_agent_args(const std::vector<std::string>& args, AgentOptions& opt);
// tracr-agent's command line: -1 when the agent should go on with `opt`
// filled, else the exit status after answering --help/--version (0) or
// printing a usage error naming the option (2).
int parse_agent_command_line(int argc, char** argv, AgentOptions& opt);

// Authenticated control lines on stdout, a heartbeat thread, and a stdin
// reader thread: STOP/EOF detection, CMD and CONFIG lines, and the
// controller's heartbeats.
class ControlOut {
 public:
  // watch_stdin false (detached agents): only SIGTERM/SIGINT stop the agent.
  // silence_ms > 0 (tracrctl passes --heartbeat-timeout-ms): the controller
  // sends a HEARTBEAT line every second, and when no authenticated line has
  // arrived for silence_ms the agent stops as if its stdin had closed (a
  // network partition leaves the stdin of a remote agent open); if it is
  // still running silence_ms after that (a blocked write, a long model
  // load), it exits at once with kOrphanExitStatus. The same when stdin
  // closes: the agent stops, and exits at once (kOrphanExitStatus) if it is
  // still running max(silence_ms, kStdinGraceMs) later, whatever its main
  // thread is doing.
  // stall_ms: when a HEARTBEAT says `stalled_ms` (see note_progress); 0: the
  // larger of silence_ms and kMinStallMs.
  explicit ControlOut(const std::vector<uint8_t>& secret, bool watch_stdin = true, int silence_ms = 0,
                      int stall_ms = 0);
  ~ControlOut();
  static constexpr int kOrphanExitStatus = 4;
  static constexpr int kStdinGraceMs = 5000;
  void send(const std::string& kind, const std::map<std::string, std::string>& fields);
  void start_heartbeat(int period_ms);
  void stop_heartbeat();
  // True once stdin closed, a valid STOP line arrived, the controller went
  // silent or the agent was signalled (non-blocking).
  bool stop_requested();
  // True when the stop came from the controller's silence.
  bool silenced() const { return silenced_.load(); }
  // A serving loop calls this once per turn. From the first call on, every
  // HEARTBEAT line carries `loop` (turns so far). Once no turn has completed
  // for stall_ms the heartbeat thread judges by the process's CPU time over
  // the last stall_ms (`cpu_ms` over `window_ms`): at least kMinBusyCpuPct %
  // of one core is a long frame still computing (`computing_ms`, the run goes
  // on: a 50 s forward is not a hang); less is `stalled_ms` (with
  // `stall_limit_ms`): the controller ends the run on it (the loop is stuck,
  // though this agent still answers).
  void note_progress();
  // The fields of the next HEARTBEAT line (loop, stalled_ms; none before the
  // first note_progress()).
  std::map<std::string, std::string> heartbeat_fields() const;
  static constexpr int kMinStallMs = 30000;
  static constexpr int kMinBusyCpuPct = 5;
  // CMD lines received since the last call (non-blocking).
  std::vector<wire::ControlMsg> take_commands();
  // Waits up to timeout_ms for the CONFIG line and returns its yaml field.
  // Error timeout, or peer_closed when stdin closes (or the controller goes
  // silent) first.
  Result<std::string> wait_config(int timeout_ms);
  // The CONFIG line's profiles_known field (profiles the controller's
  // database holds, #45 friction 2; "" when none or an older controller).
  std::string profiles_known();

 private:
  wire::ControlCodec codec_, in_;
  std::mutex out_mu_;
  wire::Heartbeat hb_;
  bool watch_stdin_ = true;
  int silence_ms_ = 0;
  int stall_ms_ = kMinStallMs;
  std::thread reader_;
  std::atomic<bool> reader_stop_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> silenced_{false};
  std::atomic<int64_t> loop_turns_{0};
  std::atomic<int64_t> loop_turn_at_ns_{0};  // steady clock of the last turn; 0: no loop yet
  std::atomic<int64_t> loop_turn_cpu_ns_{0};  // the process's CPU time then
  mutable std::mutex cpu_mu_;
  mutable std::deque<std::pair<int64_t, int64_t>> cpu_samples_;  // (steady ns, CPU ns) per heartbeat, last stall_ms

  std::mutex in_mu_;  // guards what the reader hands over below
  std::vector<wire::ControlMsg> commands_;
  std::optional<std::string> config_;
  std::string profiles_known_;
  std::string last_rejected_;  // why the last rejected line was rejected
  void read_loop();
};

// Runs tails for the SERVER loop (implemented with LibTorch).
class TailHandler {
 public:
  virtual ~TailHandler() = default;
  virtual Result<std::pair<protocol::Bundle, protocol::Meta>> handle(const protocol::Frame& f) = 0;
  // SERVER batching (server.batch, #46): INFER_REQUESTs for one segment,
  // each with the time it was complete, handled together, one answer per
  // request in order. The default runs each alone.
  struct Request {
    const protocol::Frame* frame = nullptr;
    std::chrono::steady_clock::time_point ready;
  };
  virtual std::vector<Result<std::pair<protocol::Bundle, protocol::Meta>>> handle_batch(
      const std::vector<Request>& reqs) {
    std::vector<Result<std::pair<protocol::Bundle, protocol::Meta>>> out;
    for (const auto& r : reqs) out.push_back(handle(*r.frame));
    return out;
  }
  // What batching decided that the operator should read, since the last call.
  virtual std::vector<std::string> take_notes() { return {}; }
  virtual std::string describe() const = 0;
  // Extra READY fields (the hardware identity).
  virtual std::map<std::string, std::string> ready_fields() const { return {}; }
  // How replies are coded (codec, chunking); nullopt: uncompressed.
  virtual std::optional<protocol::SendOptions> reply_send() const { return std::nullopt; }
  // The same for the reply to one request (e.g. a model export is never
  // sent through a lossy codec); nullopt: reply_send().
  virtual std::optional<protocol::SendOptions> reply_send_for(const protocol::Frame&) const { return std::nullopt; }
  // Message types it serves besides INFER_REQUEST, and the reply's type.
  virtual bool serves(protocol::MsgType t) const { return t == protocol::MsgType::infer_request; }
  virtual protocol::MsgType reply_type(protocol::MsgType t) const {
    return t == protocol::MsgType::infer_request ? protocol::MsgType::infer_result : t;
  }
};

// Whether a SERVER can bind `endpoint` (tcp://HOST:PORT), tried with a plain
// socket before a model loads (#45 friction 7): a fixed port another process
// holds is an error naming it and suggesting `port: 0`. Port 0, `*` and
// non-TCP endpoints pass; the real bind still reports what this misses.
Status bind_available(const std::string& endpoint);
// The SERVER loop: echo when `tail` is null, else tails. Returns exit code.
int serve(const AgentOptions& opt, ControlOut& ctl, const std::unique_ptr<TailHandler>& tail);
// Dispatches on opt.role. Returns the exit code.
int run_role(const AgentOptions& opt, ControlOut& ctl);
#if TRACR_WITH_TORCH
int run_model_role(const AgentOptions& opt, ControlOut& ctl);
#endif

}  // namespace tracr::agent
