// Splittable models: a network as an ordered list of layers (torchvision leaf
// modules plus the functional ops between them: add, flatten, upsample, ...)
// over named tensors. Split k runs layers [0, k) on the participant and
// [k, N) on the server; the tensors that cross the cut (skip connections and
// FPN inputs included) travel as a Bundle. k = 0 sends the preprocessed
// input ("input"), k = N sends the model outputs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/error.hpp"
#include "protocol/tensor.hpp"

namespace torch::nn {
class Module;
}

namespace tracr::experiments {

// A torch tensor with the name it travels under.
struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};
// The activations that cross a cut, in the order crossing(k) lists them.
using Bundle = std::vector<NamedTensor>;

// Name, dtype and shape of a tensor (shapes are at the traced batch of 1;
// the batch dimension may differ at run time).
struct TensorSpec {
  std::string name;
  protocol::DType dtype = protocol::DType::float32;
  std::vector<int64_t> shape;
  int64_t bytes = 0;  // numel * element size at the traced shape
};

// One layer, from the shape-tracing forward at the configured input size
// with batch 1.
struct LayerInfo {
  int index = 0;
  std::string name;   // torchvision module path, e.g. "layer1.0.conv1"
  std::string type;   // "Conv2d", "BatchNorm2d", "Add", ...
  std::vector<std::string> inputs;  // names of the tensors it reads
  int64_t params = 0;               // parameters owned by the layer
  int64_t macs = 0;                 // multiply-accumulates (Conv2d, Linear; others 0)
  std::vector<int64_t> output_shape;
  int64_t output_bytes = 0;
};

enum class ModelTask { classification, detection, generic };

// What the detector's raw outputs mean (see postprocess.hpp).
struct DetectionHeadInfo {
  std::vector<std::string> outputs;  // output tensor names, one per level
  std::vector<int64_t> strides;      // stride of each level in input pixels
  int64_t num_classes = 0;           // channels per location: 4 box + 1 obj + classes
};

// Options every factory receives.
struct ModelConfig {
  // C, H, W of one input sample; empty -> the model's default.
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;   // 0 -> the model's default (1000 for ImageNet models)
  std::string device = "auto";  // "cpu", "cuda", "cuda:N" or "auto" (cuda when available)
  std::string weights;       // optional .pth / exported state dict to import
  uint64_t seed = 0;         // random init seed (used when no weights are given)
  // TorchScript graph models ("torchscript:<path>") only:
  std::string granularity = "module";  // cut at leaf-module boundaries, or "node" (every graph node)
  bool optimize = true;                // freeze + optimize each segment for inference
};

class SplitModel;
// Builds a model's layers; only zoo/ and registry code use this.
class GraphBuilder;

class SplitModel {
 public:
  // Function computing one layer's output from its inputs.
  using LayerFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

  // A model that executes layer ranges itself (a TorchScript graph cut into
  // segments) instead of layer by layer.
  class Engine {
   public:
    virtual ~Engine() = default;
    // Runs [a, b): `in` holds crossing(a) in crossing order (already checked
    // and on the model's device); returns crossing(b) in order.
    virtual Result<std::vector<at::Tensor>> run(int a, int b, std::vector<at::Tensor> in) const = 0;
  };

  ~SplitModel();
  SplitModel(const SplitModel&) = delete;
  SplitModel& operator=(const SplitModel&) = delete;

  const std::string& name() const { return name_; }
  ModelTask task() const { return task_; }
  // Number of layers N; valid splits are 0..N.
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const std::vector<LayerInfo>& layers() const { return layers_; }
  // C, H, W the model was traced at.
  const std::vector<int64_t>& input_shape() const { return input_shape_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  const std::optional<DetectionHeadInfo>& detection_head() const { return detection_; }
  int64_t num_params() const;
  // How the layers execute: "layers" (zoo: one LibTorch call per layer),
  // "graph" (TorchScript segments as traced) or "graph-optimized" (each
  // segment frozen and optimized for inference). Part of the fingerprint.
  const std::string& execution() const { return execution_; }
  // "" when split k can run; otherwise why it cannot (a graph cut where a
  // crossing value may alias one the tail writes in place). A sweep skips
  // such splits; run() refuses them.
  std::string split_refusal(int k) const;

  // The tensors that cross split k (0 <= k <= N): produced by a layer before
  // k (or the input) and read by a layer at or after k (or a model output).
  // k out of range -> empty.
  std::vector<TensorSpec> crossing(int k) const;
  // Sum of crossing(k) bytes at batch 1.
  int64_t crossing_bytes(int k) const;

  // Runs layers [a, b) (0 <= a <= b <= N). `in` must hold exactly the
  // tensors of crossing(a) (any order, any batch size, same batch for all);
  // they are moved to the model's device. Returns crossing(b) in that order,
  // on the model's device. Errors (invalid_argument) name the missing, extra
  // or mis-shaped tensor, or the layer that failed.
  Result<Bundle> run(int a, int b, Bundle in) const;
  // run(0, N, {"input": x}).
  Result<Bundle> forward(const at::Tensor& input) const;
  // run() with autograd recording (split training): the outputs carry the
  // graph back to the inputs and to the parameters of layers [a, b).
  Result<Bundle> run_with_grad(int a, int b, Bundle in) const;
  // run() where a or b may be a refused cut, for timing only (layer
  // profiling, #46): values that share memory across a refused cut may not
  // share it here, so the outputs may differ from the whole model's; never
  // for a frame's result.
  Result<Bundle> run_for_timing(int a, int b, Bundle in) const;

  // Split training. Parameters of layers [a, b) keyed "<layer>.<param>"
  // (the tensors themselves, requires_grad set); parameters and buffers of
  // those layers (a segment's checkpoint and export).
  std::vector<NamedTensor> parameters(int a, int b) const;
  std::vector<NamedTensor> state(int a, int b) const;
  // Layers in [a, b) whose parameters live outside torch::nn (TorchScript
  // imports): such a range cannot be trained; empty when there is none.
  std::vector<std::string> untrainable_layers(int a, int b) const;
  // Train or eval mode of the modules of layers [a, b) (BatchNorm batch
  // statistics). Dropout layers are the identity in either mode.
  void set_training(int a, int b, bool on);
  // {"input": x} — the bundle for split 0.
  static Bundle input_bundle(const at::Tensor& input);

  c10::Device device() const { return device_; }
  // Moves parameters and buffers; error invalid_argument for an unusable device.
  Status to(c10::Device device);

  // Parameters and buffers by torchvision state_dict key.
  std::vector<NamedTensor> state_dict() const;
  // Copies `state` into the model. Every key of state_dict() must be
  // present with the same shape and no extra key may appear; otherwise an
  // error (invalid_argument) naming the parameter(s) and expected shape.
  // Exception, as in PyTorch's BatchNorm: "*.num_batches_tracked" may be
  // absent (older torchvision weights predate it); it is then left as is.
  Status load_state_dict(const std::vector<NamedTensor>& state);

 private:
  friend class GraphBuilder;
  friend struct GraphModelBuilder;  // zoo/torchscript.cpp
  SplitModel() = default;

  struct Node {
    std::string name;
    std::string type;
    std::vector<int> inputs;  // value ids: 0 = "input", i + 1 = output of layer i
    LayerFn fn;
    std::shared_ptr<torch::nn::Module> module;  // owns the layer's parameters (may be null)
    bool external_params = false;               // parameters outside torch::nn (TorchScript)
  };
  Result<Bundle> run_impl(int a, int b, Bundle in, bool grad, bool refused_ok = false) const;

  std::string name_;
  ModelTask task_ = ModelTask::generic;
  std::vector<Node> nodes_;
  std::vector<LayerInfo> layers_;
  std::vector<int64_t> input_shape_;
  std::vector<std::string> output_names_;
  std::vector<int> output_ids_;
  std::vector<TensorSpec> value_specs_;  // per value id
  std::vector<int> last_use_;            // per value id; N for outputs
  std::vector<std::vector<int>> crossing_ids_;  // per split k, value ids in order
  std::map<std::string, int> value_ids_;        // tensor name -> value id
  std::optional<DetectionHeadInfo> detection_;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::string execution_ = "layers";
  std::shared_ptr<const Engine> engine_;   // graph models: runs [a, b)
  std::vector<std::string> refusals_;      // graph models: per split, "" = usable
  std::function<std::vector<NamedTensor>()> state_fn_;
  std::function<void(c10::Device)> move_fn_;
};

// The message of an exception from LibTorch code without the backtrace
// c10::Error::what() carries (what_without_backtrace()), on one line where the
// text allows: what a user may be shown.
std::string torch_error_text(const std::exception& ex);

// Parses "cpu", "cuda", "cuda:N", "auto". Error invalid_argument when CUDA is
// requested but torch::cuda::is_available() is false.
Result<c10::Device> resolve_device(const std::string& text);

// dtype conversions shared by the bridge and the model (error
// unsupported_dtype for dtypes the protocol has no name for).
Result<protocol::DType> to_protocol_dtype(c10::ScalarType t);
c10::ScalarType to_torch_dtype(protocol::DType d);

}  // namespace tracr::experiments
