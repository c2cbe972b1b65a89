// The model an experiment names, as every agent builds it, and the segment
// executor that runs a request's layers on the device behind a hop (LibTorch
// side, compiled only when TRACR_WITH_TORCH). Today the SERVER's tail
// [k, N); a SERVER agent runs it behind a ZeroMQ socket, a local run behind
// an InProcessLink (agent/link.hpp).
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

// Waits for the work queued on `d` (a CUDA stream) so that a clock read
// after it counts that work; nothing on the CPU.
void sync_device(const c10::Device& d);

}  // namespace tracr::agent
