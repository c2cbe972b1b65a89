// The split pipeline of one experiment, LibTorch side (compiled only when
// TRACR_WITH_TORCH). A PARTICIPANT runs heads [0, k), ships the crossing
// tensors through a Link, and records one FrameRecord per batch; the tail
// [k, N) runs in a TailExecutor, either in the SERVER agent behind a ZeroMQ
// socket (NetworkLink) or in this process behind an in-memory FrameWriter /
// FrameReader pair (InProcessLink: the same frames, codecs and cipher, no
// socket), so local and networked runs have the same numerics and fields.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <deque>
#include <optional>
#include <vector>

#include "wire/control.hpp"
#include "agent/energy.hpp"
#include "wire/record.hpp"
#include "experiments/datasets.hpp"
#include "experiments/model.hpp"
#include "protocol/channel.hpp"
#include "settings/config.hpp"

namespace tracr::agent {

// Model identity shared by both ends (same name, weights, shape, seed =>
// same parameters; checked with a fingerprint at the first request).
struct ModelSpec {
  std::string name;                  // zoo name or "torchscript:<path>"
  experiments::ModelConfig config;  // shape, classes, device, weights, seed, granularity, optimize
};

Result<std::unique_ptr<experiments::SplitModel>> load_model(const ModelSpec& spec);
// The model and the dataset an experiment names, as every agent reads them.
// `device` ("" = auto) is the devices file's `device` of this agent's device.
ModelSpec model_spec(const settings::ExperimentConfig& c, const std::string& device = "");
experiments::DatasetConfig dataset_config(const settings::ExperimentConfig& c, const std::vector<int64_t>& input_shape);
// Hash of every parameter and buffer (names, shapes, bytes): both ends must agree.
std::string model_fingerprint(const experiments::SplitModel& m);

// Runs tails for any split point. Thread-compatible (one caller at a time).
class TailExecutor {
 public:
  explicit TailExecutor(std::shared_ptr<experiments::SplitModel> model);
  const experiments::SplitModel& model() const { return *model_; }
  // Handles an INFER_REQUEST frame: checks split and fingerprint, runs
  // [split, N), returns the outputs and meta (srv_decode_ns, srv_tail_ns).
  Result<std::pair<protocol::Bundle, protocol::Meta>> handle(const protocol::Frame& f);
  // The server's meters: each reply then carries the tail's energy rows (srv_energy).
  void set_energy(EnergyMeter* e) { energy_ = e; }

 private:
  EnergyMeter* energy_ = nullptr;
  std::shared_ptr<experiments::SplitModel> model_;
  std::string fingerprint_;
};

// Where the crossing tensors go.
class Link {
 public:
  virtual ~Link() = default;
  virtual Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
                      const protocol::Meta& meta, protocol::FrameStats* stats) = 0;
  virtual Result<protocol::Frame> recv(int timeout_ms) = 0;
  virtual std::string cipher() const = 0;
  // True when send() also runs the tail (in-process): the send's wall time is
  // then not all encoding.
  virtual bool tail_in_send() const { return false; }
  // The network session, when there is one (link probes use it).
  virtual protocol::Client* client() { return nullptr; }
};

class NetworkLink : public Link {
 public:
  explicit NetworkLink(std::unique_ptr<protocol::Client> c) : c_(std::move(c)) {}
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
              const protocol::Meta& meta, protocol::FrameStats* stats) override;
  Result<protocol::Frame> recv(int timeout_ms) override { return c_->recv(timeout_ms); }
  std::string cipher() const override { return std::string(protocol::cipher_name(c_->cipher())); }
  protocol::Client* client() override { return c_.get(); }

 private:
  std::unique_ptr<protocol::Client> c_;
};

// Frames go through FrameWriter/FrameReader in memory (encrypted with fresh
// random keys when `encrypt`) to a TailExecutor in this process.
class InProcessLink : public Link {
 public:
  InProcessLink(std::unique_ptr<TailExecutor> tail, bool encrypt);
  Status send(const protocol::SendOptions& so, int32_t split, const protocol::Bundle& b,
              const protocol::Meta& meta, protocol::FrameStats* stats) override;
  Result<protocol::Frame> recv(int timeout_ms) override;
  std::string cipher() const override { return encrypt_ ? "aes-256-gcm" : "none"; }
  bool tail_in_send() const override { return true; }

 private:
  std::unique_ptr<TailExecutor> tail_;
  bool encrypt_;
  protocol::FrameWriter up_w_, down_w_;
  protocol::FrameReader up_r_, down_r_;
  std::deque<Result<protocol::Frame>> ready_;
};

struct ParticipantSpec {
  ModelSpec model;
  experiments::DatasetConfig dataset;
  int64_t batch = 1;
  int64_t max_samples = 0;       // 0 = all
  std::vector<int> splits;       // empty = every split 0..N
  int warmup = 1;                // warm-up passes per split (first batch), stored with warmup = 1
  int reps = 1;                  // recorded passes over the data per split
  std::string codec = "none";
  bool auto_codec = false;       // compression: auto: chosen per split (codec is then ignored)
  double link_up_mbps = 0;       // the probe's upstream rate (0 = not probed)
  size_t chunk_bytes = 256 * 1024;
  int inflight = 1;              // frames in flight
  unsigned codec_threads = 1;    // threads coding a frame's parts (SendOptions::threads)
  int topk = 5;                  // top-k rows per sample (frame_topk); top-5 accuracy is counted regardless
  bool record_outputs = false;   // carry each timed frame's output tensor (record.outputs)
  int timeout_ms = 60000;        // per result
  int max_consecutive_failures = 3;  // failed frames in a row before the run fails
  // lockstep: before each step of the policy, wait (event step_waiting) for
  // the controller's resume, so that every participant starts it together.
  bool lockstep = false;
  // The participant's run clock origin: frames' start_ns/end_ns count from here.
  std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now();
  // Energy (agent/energy.hpp): the participant's meters or power model, and
  // the radio model for transmission; either may be absent.
  EnergyMeter* energy = nullptr;
  const RadioModel* radio = nullptr;
};

// The link probe (PROTOCOL.md, message types 32/33) over a session with no
// frames in flight: rtt_count echo round trips, then bulk messages of
// chunk_bytes kept `window` deep for duration_ms each way (sink: up, source:
// down). Throughput is wire bytes over the span from the first message to
// the last reply, less the smallest round trip.
struct ProbeOptions {
  int rtt_count = 20;
  int duration_ms = 1000;
  int64_t chunk_bytes = 0;  // 0: auto, each way (auto_probe_chunk)
  int window = 4;
  std::string trigger = "startup";
  std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now();
  int timeout_ms = 60000;  // per reply
};
Result<wire::ProbeRecord> probe_link(protocol::Client& client, const ProbeOptions& o);

// A command from the controller, applied between frames (control.hpp lists
// the line kinds). id is the controller's number for it, echoed in events.
struct Command {
  enum class Kind { set_split, set_codec, pause, resume, stop } kind = Kind::stop;
  int64_t id = 0;
  int split = -1;     // set_split
  std::string codec;  // set_codec
};
// Parses a CMD control line: op=set_split split=K | op=set_codec codec=TEXT |
// op=pause | op=resume | op=stop, id=N. Error names the field.
Result<Command> parse_command(const wire::ControlMsg& m);

// One step of a split policy: a split, its warm-up frames and its passes
// over the data.
struct PolicyStep {
  int split = 0;
  int warmup = 0;
  int passes = 1;
};

// Decides what the pipeline runs next. The sweep (today's default and a
// fixed split list alike) is one step per split. Controller commands change
// the split of the current step (set_split) and the codec of every later
// frame (set_codec); the policy's next step starts as it planned.
class SplitPolicy {
 public:
  virtual ~SplitPolicy() = default;
  virtual std::string name() const = 0;
  virtual std::optional<PolicyStep> next() = 0;
  virtual int64_t planned_frames(int64_t batches_per_pass) const = 0;  // recorded frames, for progress
};

class SweepPolicy : public SplitPolicy {
 public:
  SweepPolicy(std::vector<int> splits, int warmup, int passes)
      : splits_(std::move(splits)), warmup_(warmup), passes_(passes) {}
  std::string name() const override { return "sweep"; }
  std::optional<PolicyStep> next() override {
    if (i_ >= splits_.size()) return std::nullopt;
    return PolicyStep{splits_[i_++], warmup_, passes_};
  }
  int64_t planned_frames(int64_t b) const override {
    return static_cast<int64_t>(splits_.size()) * passes_ * b;
  }

 private:
  std::vector<int> splits_;
  int warmup_, passes_;
  size_t i_ = 0;
};

// What the pipeline reports and asks while it runs.
struct PipelineHooks {
  std::function<void(const wire::FrameRecord&)> emit;              // every frame, warm-up included
  std::function<void(const wire::EnergyRecord&)> energy;           // energy rows of each frame, both sides
  std::function<void(int64_t, int64_t)> progress;            // recorded frames done, planned
  std::function<std::vector<Command>()> poll;                // controller commands (may be empty)
  std::function<bool()> stop;                                // controller gone or signalled: end now
  // kind (command_applied, command_rejected, paused, resumed, stopped), the
  // frame number the next frame will have, the command, and a message.
  std::function<void(const std::string&, int64_t, const Command*, const std::string&)> event;
};

// Runs a policy through the link. Errors (model, dataset, link, remote) end
// the run; a stop command or hooks.stop ends it cleanly after the frames in
// flight came back (Status ok, *stopped set).
Status run_pipeline(const ParticipantSpec& spec, experiments::SplitModel& model, Link& link,
                    SplitPolicy& policy, const PipelineHooks& hooks, bool* stopped = nullptr);

}  // namespace tracr::agent
