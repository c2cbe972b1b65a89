// Building a SplitModel layer by layer (used by zoo/ factories and the
// TorchScript importer). Each add* call appends one layer whose output
// tensor is named after the layer; inputs name earlier layers or "input".
// Parameters of a layer's module are registered as "<layer>.<param>", so a
// layer named like its torchvision module gets torchvision's state_dict keys.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "experiments/model.hpp"

namespace tracr::experiments {

// "[1, 3, 224, 224]".
std::string shape_str(c10::IntArrayRef s);
// Multiply-accumulates of a Conv* or Linear layer (by `type`) from its
// weight and output; 0 for other types.
int64_t count_macs(const std::string& type, const std::vector<at::Tensor>& weights,
                   const at::Tensor& out);

class GraphBuilder {
 public:
  // Seeds LibTorch's generator with cfg.seed so random init is reproducible.
  GraphBuilder(std::string model_name, ModelTask task, const ModelConfig& cfg,
               std::vector<int64_t> default_input_shape);

  // C, H, W the model will be traced at (cfg.input_shape or the default).
  const std::vector<int64_t>& input_shape() const { return input_shape_; }
  // cfg.num_classes or `fallback` when it is 0.
  int64_t num_classes(int64_t fallback) const;

  // Appends a layer. `module` (may be null) owns its parameters/buffers.
  // Returns the layer's output name (== name).
  std::string add(const std::string& name, const std::string& type,
                  std::vector<std::string> inputs, SplitModel::LayerFn fn,
                  std::shared_ptr<torch::nn::Module> module = nullptr);

  // Appends a layer whose parameters live outside torch::nn (TorchScript);
  // `params` (named relative to the layer) count toward LayerInfo::params/macs.
  std::string add_with_params(const std::string& name, const std::string& type,
                              std::vector<std::string> inputs, SplitModel::LayerFn fn,
                              std::vector<NamedTensor> params);

  // torchvision leaf modules and the functional ops between them.
  std::string conv2d(const std::string& name, const std::string& in,
                     torch::nn::Conv2dOptions opts);
  std::string batchnorm2d(const std::string& name, const std::string& in, int64_t channels);
  std::string linear(const std::string& name, const std::string& in, int64_t in_f,
                     int64_t out_f, bool bias = true);
  std::string relu(const std::string& name, const std::string& in);
  std::string relu6(const std::string& name, const std::string& in);
  std::string maxpool2d(const std::string& name, const std::string& in,
                        torch::nn::MaxPool2dOptions opts);
  std::string adaptive_avgpool2d(const std::string& name, const std::string& in, int64_t h,
                                 int64_t w);
  std::string dropout(const std::string& name, const std::string& in, double p);
  std::string flatten(const std::string& name, const std::string& in);
  std::string add_tensors(const std::string& name, const std::string& a, const std::string& b);
  std::string upsample_nearest2x(const std::string& name, const std::string& in);

  void set_detection(DetectionHeadInfo info) { detection_ = std::move(info); }
  // For models whose parameters do not live in torch::nn modules (TorchScript):
  // replaces the default state_dict/device-move implementation. `keep`
  // holds whatever the functions reference.
  void set_state_functions(std::function<std::vector<NamedTensor>()> state_fn,
                           std::function<void(c10::Device)> move_fn);

  // Resolves inputs, checks every layer output is used, traces shapes with a
  // batch-1 zero input on CPU, imports cfg.weights when set, switches to eval
  // and moves to cfg.device. Errors name the layer, tensor or parameter.
  Result<std::unique_ptr<SplitModel>> build(const std::vector<std::string>& outputs);

 private:
  struct PendingNode {
    std::string name, type;
    std::vector<std::string> inputs;
    SplitModel::LayerFn fn;
    std::shared_ptr<torch::nn::Module> module;
    std::vector<NamedTensor> params;
  };
  std::string model_name_;
  ModelTask task_;
  ModelConfig cfg_;
  std::vector<int64_t> input_shape_;
  std::vector<PendingNode> nodes_;
  std::optional<DetectionHeadInfo> detection_;
  std::function<std::vector<NamedTensor>()> state_fn_;
  std::function<void(c10::Device)> move_fn_;
};

}  // namespace tracr::experiments
