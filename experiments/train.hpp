// Split training (SplitNN): a model cut into segments, each trained by its
// own optimizer on whichever device holds it. A Segment runs layers [a, b)
// of a SplitModel with autograd, keeps the graph of its last training
// forward, and turns the gradients of its outputs into a parameter update
// and the gradients of its inputs (what travels back to the previous
// segment). The same code trains a model in one process (train_reference),
// which is what split training is checked against step by step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experiments/datasets.hpp"
#include "experiments/model.hpp"

namespace tracr::experiments {

struct OptimizerSpec {
  std::string kind = "adam";  // "sgd" (with momentum) or "adam"
  double lr = 1e-3;
  double momentum = 0.9;      // sgd only
  double weight_decay = 0;
};

class Segment {
 public:
  // Layers [a, b) of `model` (0 <= a < b <= N) with an optimizer over their
  // parameters. Error invalid_argument for an empty or out-of-range range,
  // a range with parameters outside torch::nn (TorchScript), or an unknown
  // optimizer.
  static Result<std::unique_ptr<Segment>> create(std::shared_ptr<SplitModel> model, int a, int b,
                                                 const OptimizerSpec& opt);
  ~Segment();
  int begin() const { return a_; }
  int end() const { return b_; }
  const SplitModel& model() const { return *model_; }
  int64_t num_params() const;
  // Optimizer steps taken (restored by load).
  int64_t steps() const { return steps_; }

  // Training forward: `in` (crossing(a)) becomes leaves that record their
  // gradient, except the raw "input" of segment 0. Returns crossing(b),
  // detached (what travels on); the graph is kept for backward. Errors from
  // SplitModel::run.
  Result<Bundle> forward(Bundle in);
  // Evaluation forward: no graph, eval mode; the training graph is kept.
  Result<Bundle> infer(Bundle in);
  // Backward from the gradients of the last forward's outputs (same names,
  // same shapes; a name may be absent when nothing depends on it), then one
  // optimizer step. Returns the gradients of the inputs, named like them
  // (none for segment 0's "input"). Error invalid_argument when no forward
  // is pending or a gradient does not match its output.
  Result<Bundle> backward(const Bundle& grad_out);
  // The same, with the outputs' gradients from a scalar loss computed from
  // the forward's outputs (`outputs_for_loss` returns them attached to the
  // graph).
  Result<Bundle> backward_loss(const at::Tensor& loss);
  // The last forward's outputs attached to the graph (for a loss).
  const Bundle& attached_outputs() const { return outputs_; }

  // Parameters and buffers of the segment's layers (export).
  std::vector<NamedTensor> state() const { return model_->state(a_, b_); }
  // A checkpoint: state, optimizer state and step count, atomically
  // (written beside, then renamed). Error io naming the path.
  Status save(const std::string& path) const;
  // Restores a checkpoint written by save for the same layers. Error io or
  // invalid_argument naming the path and what does not match.
  Status load(const std::string& path);

 private:
  Segment() = default;
  Result<Bundle> finish_backward();
  std::shared_ptr<SplitModel> model_;
  int a_ = 0, b_ = 0;
  OptimizerSpec spec_;
  struct Opt;
  std::unique_ptr<Opt> opt_;
  Bundle inputs_;   // leaves of the pending forward
  Bundle outputs_;  // its outputs, attached
  int64_t steps_ = 0;
};

// A deterministic permutation of [0, n) for an epoch: Fisher-Yates over
// mt19937_64 seeded with (seed, epoch); the same on every platform.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// A labelled dataset held in memory as tensors (images [N, C, H, W] float32,
// labels [N] int64), the first `max_samples` samples (0 = all).
struct TensorDataset {
  at::Tensor images;
  at::Tensor labels;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};
// Error from the dataset, or invalid_argument when a sample has no label.
Result<TensorDataset> load_tensor_dataset(const Dataset& ds, int64_t max_samples);
// Samples order[first, first + batch) (clipped to the end).
std::pair<at::Tensor, at::Tensor> gather_batch(const TensorDataset& d, const std::vector<int64_t>& order,
                                               int64_t first, int64_t batch);

// Cross-entropy loss (mean over the batch) of logits against labels.
at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& labels);

struct ReferenceStep {
  int64_t epoch = 0, step = 0;
  double loss = 0;
};
// Single-process training of `model` (all layers, one optimizer) on `train`
// for `steps` batches of `batch` (an epoch is ceil(n / batch) batches, the
// last one smaller), in epoch_order(n, seed, epoch): the losses split
// training must reproduce.
Result<std::vector<ReferenceStep>> train_reference(std::shared_ptr<SplitModel> model, const OptimizerSpec& opt,
                                                   const TensorDataset& train, int64_t batch, int64_t steps,
                                                   uint64_t seed);

}  // namespace tracr::experiments
