// A PARTICIPANT's frame pipeline (LibTorch side, compiled only when
// TRACR_WITH_TORCH): heads [0, k) on its input, the crossing tensors
// through a Link (agent/link.hpp), frames in flight, replies
// post-processed, one FrameRecord per batch with the timing identity of
// wire/record_fields.def; the split policy decides what runs next, and the
// controller's commands apply between frames.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/command.hpp"
#include "agent/energy.hpp"
#include "agent/link.hpp"
#include "agent/segment.hpp"
#include "experiments/datasets.hpp"
#include "experiments/exits.hpp"
#include "wire/placement.hpp"
#include "wire/record.hpp"

namespace tracr::agent {

struct ParticipantSpec {
  ModelSpec model;
  experiments::DatasetConfig dataset;
  int64_t batch = 1;
  int64_t max_samples = 0;       // 0 = all
  std::vector<int> splits;       // empty = every split 0..N
  std::vector<wire::Placement> placements;  // a chain of two or more devices: the placements (splits unused)
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
  // While paused or held in lockstep, an echo on the session this often
  // (agent/link_probe.hpp keep_alive) so it is never the idle session a
  // full server evicts (its evict_idle_ms is 30 s); 0: none.
  int keepalive_ms = 10000;
  // Early exits (#44), in backbone order: the head on backbone layer
  // `layer`'s output (at cut layer + 1); index = its place in the
  // experiment's exits:. At split k those with layer + 1 <= k run here.
  struct Exit {
    size_t index = 0;
    int layer = 0;
    std::shared_ptr<experiments::ExitHead> head;
  };
  std::vector<Exit> exits;
  std::string exit_measure = "max_softmax";
  double exit_threshold = 0.9;
  bool exit_confidences = true;  // record.exit_confidences: evaluate the exits past the one taken
  // The participant's run clock origin: frames' start_ns/end_ns count from here.
  std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now();
  // Energy (agent/energy.hpp): the participant's meters or power model, and
  // the radio model for transmission; either may be absent.
  EnergyMeter* energy = nullptr;
  const RadioModel* radio = nullptr;
};

// One step of a split policy: a split, its warm-up frames and its passes
// over the data.
struct PolicyStep {
  int split = 0;
  int warmup = 0;
  int passes = 1;
  // A chain's cuts after `split` (the placement split|beyond[0]|...): the
  // request asks the first chain device for [split, beyond[0]) and to
  // forward the rest (PROTOCOL.md 3.4). Empty: two tiers.
  std::vector<int> beyond;
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
  SweepPolicy(const std::vector<int>& splits, int warmup, int passes) : warmup_(warmup), passes_(passes) {
    for (int k : splits) placements_.push_back(wire::Placement{{k}, {}});
  }
  // A chain's placements, one step each.
  static SweepPolicy of_placements(std::vector<wire::Placement> placements, int warmup, int passes) {
    SweepPolicy p({}, warmup, passes);
    p.placements_ = std::move(placements);
    return p;
  }
  std::string name() const override { return "sweep"; }
  std::optional<PolicyStep> next() override {
    if (i_ >= placements_.size()) return std::nullopt;
    const auto& c = placements_[i_++].cuts;
    return PolicyStep{c.front(), warmup_, passes_, std::vector<int>(c.begin() + 1, c.end())};
  }
  int64_t planned_frames(int64_t b) const override {
    return static_cast<int64_t>(placements_.size()) * passes_ * b;
  }

 private:
  std::vector<wire::Placement> placements_;
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
