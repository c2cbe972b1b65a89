// VGG-11 (config "A") and VGG-16 (config "D") without batch norm, as
// torchvision.models.vgg11 / vgg16 build them.
#include "experiments/graph.hpp"
#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments::zoo {
namespace {

constexpr int M = -1;  // max pool

Result<std::unique_ptr<SplitModel>> make_vgg(const std::string& id, const std::vector<int>& cfgs,
                                             const ModelConfig& cfg) {
  GraphBuilder g(id, ModelTask::classification, cfg, {3, 224, 224});
  std::string x = "input";
  int idx = 0;
  int64_t in_ch = g.input_shape().empty() ? 3 : g.input_shape()[0];
  for (int v : cfgs) {
    if (v == M) {
      x = g.maxpool2d("features." + std::to_string(idx++), x,
                      torch::nn::MaxPool2dOptions(2).stride(2));
    } else {
      x = g.conv2d("features." + std::to_string(idx++), x,
                   torch::nn::Conv2dOptions(in_ch, v, 3).padding(1));
      x = g.relu("features." + std::to_string(idx++), x);
      in_ch = v;
    }
  }
  x = g.adaptive_avgpool2d("avgpool", x, 7, 7);
  x = g.flatten("flatten", x);
  x = g.linear("classifier.0", x, 512 * 7 * 7, 4096);
  x = g.relu("classifier.1", x);
  x = g.dropout("classifier.2", x, 0.5);
  x = g.linear("classifier.3", x, 4096, 4096);
  x = g.relu("classifier.4", x);
  x = g.dropout("classifier.5", x, 0.5);
  x = g.linear("classifier.6", x, 4096, g.num_classes(1000));
  return g.build({x});
}

}  // namespace

Result<std::unique_ptr<SplitModel>> make_vgg11(const ModelConfig& cfg) {
  return make_vgg("vgg11", {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M}, cfg);
}

Result<std::unique_ptr<SplitModel>> make_vgg16(const ModelConfig& cfg) {
  return make_vgg(
      "vgg16", {64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M},
      cfg);
}

}  // namespace tracr::experiments::zoo
