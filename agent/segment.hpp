// The model an experiment names, as every agent builds it, and the segment
// executor that runs a request's layers on the device behind a hop (LibTorch
// side, compiled only when TRACR_WITH_TORCH): layers [k, l) of a request,
// the SERVER's tail [k, N) when the request names no end. A SERVER agent
// runs it behind a ZeroMQ socket, a local run behind an InProcessLink
// (agent/link.hpp).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/energy.hpp"
#include "experiments/datasets.hpp"
#include "experiments/model.hpp"
#include "protocol/frame.hpp"
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

// Runs a request's segment of the model: layers [split, last), last from the
// request's meta.last (PROTOCOL.md 3.4), N when it has none: a middle
// segment of a chain or the last one (a tail). Thread-compatible (one caller
// at a time).
class SegmentExecutor {
 public:
  explicit SegmentExecutor(std::shared_ptr<experiments::SplitModel> model);
  const experiments::SplitModel& model() const { return *model_; }
  // Handles an INFER_REQUEST frame: checks split, last and fingerprint, runs
  // [split, last), returns the tensors crossing cut `last` (the model's
  // outputs when last = N) and meta (srv_decode_ns, srv_tail_ns, srv_ns;
  // last, echoed when the request carried it).
  Result<std::pair<protocol::Bundle, protocol::Meta>> handle(const protocol::Frame& f);
  // SERVER batching (#46, server.batch): requests for the same segment run as
  // one: each request's tensors stacked on dimension 0 (each frame's batch),
  // one run, the outputs split back in the same proportions. Each reply's
  // meta also says srv_batch (frames run together) and srv_batch_wait_ns
  // (`ready`, when the request was complete, to the batch's start);
  // srv_tail_ns is the batch's time, srv_energy each frame's share of the
  // batch's energy by samples (flag `batched`). A request that fails its
  // checks gets its error and the others run without it. Requests that
  // cannot be stacked (other segments, shapes that differ beyond dimension 0,
  // a frame whose tensors disagree on dimension 0) or whose outputs cannot be
  // split back run one by one. The first batch of each segment is also run
  // one by one and compared (a value crossing the cut that does not carry the
  // batch on dimension 0, e.g. one computed from weights alone, would make the
  // stacked answers wrong): a segment whose answers differ runs unbatched from
  // then on, said in notes(). Those comparison runs come after the batch's
  // tail_ns, inside that first batch's srv_ns. A batched run that fails, or
  // whose outputs are not per sample, makes its segment run unbatched too.
  struct BatchItem {
    const protocol::Frame* frame = nullptr;
    std::chrono::steady_clock::time_point ready;
  };
  std::vector<Result<std::pair<protocol::Bundle, protocol::Meta>>> handle_batch(const std::vector<BatchItem>& items);
  // What batching decided that the operator should read (a segment found not
  // batchable), since the last call.
  std::vector<std::string> take_notes() { return std::exchange(notes_, {}); }
  // The server's meters: each reply then carries the segment's energy rows
  // (srv_energy; stage "tail", which a middle segment does not yet change).
  void set_energy(EnergyMeter* e) { energy_ = e; }

 private:
  struct Segment {
    int k = 0, last = 0;
    bool has_last = false;  // the request carried meta.last (echoed)
  };
  Result<Segment> check(const protocol::Frame& f) const;
  // Runs [k, last) on stacked inputs once; nullopt when the inputs cannot be
  // stacked or the outputs split back.
  struct Ran {
    std::vector<experiments::Bundle> outs;  // per item
    std::vector<int64_t> rows;              // a stacked run: each item's samples (dimension 0)
    int64_t tail_ns = 0;
    std::vector<wire::EnergyRecord> energy;  // the whole run's rows
    std::chrono::steady_clock::time_point t0;
  };
  Result<std::optional<Ran>> run_stacked(const Segment& s, std::vector<experiments::Bundle> ins);
  Result<Ran> run_one(const Segment& s, experiments::Bundle in);
  Result<std::pair<protocol::Bundle, protocol::Meta>> make_reply(const protocol::Frame& f, const Segment& seg,
                                                                 std::chrono::steady_clock::time_point ready,
                                                                 const Ran& ran, const experiments::Bundle& out,
                                                                 size_t frames, double share);
  // Whether each request alone answers as the batched run did (the inputs are cloned: they serve again).
  bool same_alone(const Segment& seg, const std::vector<experiments::Bundle>& ins, const Ran& batched);
  EnergyMeter* energy_ = nullptr;
  std::shared_ptr<experiments::SplitModel> model_;
  std::string fingerprint_;
  std::map<std::pair<int, int>, bool> batchable_;  // per segment, once its first batch was compared
  std::vector<std::string> notes_;
};

// Waits for all work queued on `d` (every stream of a CUDA device) so that a
// clock read after it counts that work; nothing on the CPU.
void sync_device(const c10::Device& d);

}  // namespace tracr::agent
