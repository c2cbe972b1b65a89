// The model an experiment names, as every agent builds it, and the segment
// executor that runs a request's layers on the device behind a hop (LibTorch
// side, compiled only when TRACR_WITH_TORCH): layers [k, l) of a request,
// the SERVER's tail [k, N) when the request names no end. A SERVER agent
// runs it behind a ZeroMQ socket, a local run behind an InProcessLink
// (agent/link.hpp).
#pragma once

#include <memory>
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
  // The server's meters: each reply then carries the segment's energy rows
  // (srv_energy; stage "tail", which a middle segment does not yet change).
  void set_energy(EnergyMeter* e) { energy_ = e; }

 private:
  EnergyMeter* energy_ = nullptr;
  std::shared_ptr<experiments::SplitModel> model_;
  std::string fingerprint_;
};

// Waits for all work queued on `d` (every stream of a CUDA device) so that a
// clock read after it counts that work; nothing on the CPU.
void sync_device(const c10::Device& d);

}  // namespace tracr::agent
