// Early exits (#44): side classifiers on a backbone layer's output. A head is
// a TorchScript module from that layer's output [B, ...] to the model's class
// logits [B, C]. tracr's built-in `linear` head is global average pooling
// over every dimension after the channels, then a linear map; it is written
// as TorchScript too (save_linear_head), so both kinds load alike, on any
// device, and Python reads them with torch.jit.load.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/datasets.hpp"
#include "experiments/model.hpp"

namespace torch::jit {
struct Module;
}

namespace tracr::experiments {

// One sample's answer at an exit: its top class and both confidence
// measures, as float32 (the run compares these very values to the threshold,
// and they are stored with 9 significant digits, which gives the same
// float32 back, so an offline sweep decides as the run did).
struct ExitAnswer {
  int64_t top1 = -1;
  float max_softmax = 0;   // the top class's probability
  float entropy_conf = 0;  // 1 - H / ln C (H: the softmax's entropy in nats); 1 when C = 1
};
// Per sample of logits [B, C].
std::vector<ExitAnswer> exit_answers(const at::Tensor& logits);
// The measure an exit policy names: "max_softmax" or "entropy".
float exit_confidence(const ExitAnswer& a, const std::string& measure);

class ExitHead {
 public:
  // Loads a TorchScript head onto `device`, in eval mode. Error io naming
  // the path when it cannot be read or is no TorchScript module.
  static Result<std::unique_ptr<ExitHead>> load(const std::string& path, c10::Device device);
  ~ExitHead();
  ExitHead(const ExitHead&) = delete;
  ExitHead& operator=(const ExitHead&) = delete;
  const std::string& path() const { return path_; }
  // The head on `x`: logits [B, C] as float32. Error invalid_argument naming
  // the file when it fails on x or returns anything but a [B, C] tensor.
  Result<at::Tensor> logits(const at::Tensor& x) const;

 private:
  ExitHead() = default;
  std::unique_ptr<torch::jit::Module> m_;
  std::string path_;
};

// The layer an exit's `after` names (its name in the model, or its index as
// written): the layer's index i (the exit hangs at cut i + 1 and reads the
// layer's output). Error invalid_argument naming what was expected: a layer
// of the model, before its last, whose cut can be used.
Result<int> exit_layer(const SplitModel& model, const std::string& after);
// Layer i's output out of crossing(i + 1), as run(a, i + 1) returns it.
Result<at::Tensor> exit_input(const SplitModel& model, int layer, const Bundle& crossing);

// Writes the built-in linear head: mean over every dimension after the
// channels (none for [B, C] inputs), then x W^T + b. weight [C_out, C_in],
// bias [C_out]. Atomically (written beside, then renamed); error io naming
// the path.
Status save_linear_head(const std::string& path, const at::Tensor& weight, const at::Tensor& bias);

// Training linear exit heads on a frozen backbone: the pooled features of
// each exit's layer are computed once per sample (eval mode, no gradient),
// then each head is fitted by Adam on the cross-entropy for `epochs` passes
// over them in batches, from a seeded initialisation.
struct ExitTrainOptions {
  int epochs = 10;
  int64_t batch_size = 64;
  double lr = 1e-2;
  double weight_decay = 0;
  int64_t train_samples = 0;  // 0 = all
  int64_t test_samples = 0;   // 0 = all
  uint64_t seed = 0;
};
struct ExitTrainResult {
  int layer = 0;                 // the backbone layer
  at::Tensor weight, bias;       // the fitted head
  std::vector<double> loss;      // mean training loss per epoch
  double train_accuracy = 0;     // after the last epoch, on the training samples
  double test_accuracy = -1;     // on the test samples; -1 without a test set
  int64_t train_count = 0, test_count = 0;
  int64_t features = 0;          // C_in
};
// `layers` in backbone order; the model's classes are the width of its last
// layer's output. Error invalid_argument when a layer's output has no channel
// dimension, or the model is no classifier; dataset errors as they come.
Result<std::vector<ExitTrainResult>> train_linear_exits(const SplitModel& model, const std::vector<int>& layers,
                                                        const Dataset& train, const Dataset* test,
                                                        const ExitTrainOptions& o);

}  // namespace tracr::experiments
