// A small CNN for Fashion-MNIST (1x28x28, 10 classes), the model split
// training is checked with: two conv/ReLU/max-pool stages, then two linear
// layers. No BatchNorm or Dropout, so training is the same in train and eval
// mode and split training is comparable step by step with single-process
// training.
#include "experiments/graph.hpp"
#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments::zoo {

using torch::nn::Conv2dOptions;
using torch::nn::MaxPool2dOptions;

Result<std::unique_ptr<SplitModel>> make_fmnist_cnn(const ModelConfig& cfg) {
  GraphBuilder g("fmnist_cnn", ModelTask::classification, cfg, {1, 28, 28});
  const auto& in = g.input_shape();
  if (in.size() != 3 || in[1] % 4 != 0 || in[2] % 4 != 0)
    return make_error(Errc::invalid_argument,
                      "fmnist_cnn: input_size must be [C, H, W] with H and W multiples of 4 (default [1, 28, 28])");
  std::string x = "input";
  x = g.conv2d("conv1", x, Conv2dOptions(in[0], 16, 3).padding(1));
  x = g.relu("relu1", x);
  x = g.maxpool2d("pool1", x, MaxPool2dOptions(2));
  x = g.conv2d("conv2", x, Conv2dOptions(16, 32, 3).padding(1));
  x = g.relu("relu2", x);
  x = g.maxpool2d("pool2", x, MaxPool2dOptions(2));
  x = g.flatten("flatten", x);
  x = g.linear("fc1", x, 32 * (in[1] / 4) * (in[2] / 4), 128);
  x = g.relu("relu3", x);
  x = g.linear("fc2", x, 128, g.num_classes(10));
  return g.build({x});
}

}  // namespace tracr::experiments::zoo
