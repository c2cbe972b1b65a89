// AlexNet as torchvision.models.alexnet builds it (features / avgpool /
// classifier), one layer per leaf module.
#include "experiments/graph.hpp"
#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments::zoo {

using torch::nn::Conv2dOptions;
using torch::nn::MaxPool2dOptions;

Result<std::unique_ptr<SplitModel>> make_alexnet(const ModelConfig& cfg) {
  GraphBuilder g("alexnet", ModelTask::classification, cfg, {3, 224, 224});
  std::string x = "input";
  x = g.conv2d("features.0", x, Conv2dOptions(3, 64, 11).stride(4).padding(2));
  x = g.relu("features.1", x);
  x = g.maxpool2d("features.2", x, MaxPool2dOptions(3).stride(2));
  x = g.conv2d("features.3", x, Conv2dOptions(64, 192, 5).padding(2));
  x = g.relu("features.4", x);
  x = g.maxpool2d("features.5", x, MaxPool2dOptions(3).stride(2));
  x = g.conv2d("features.6", x, Conv2dOptions(192, 384, 3).padding(1));
  x = g.relu("features.7", x);
  x = g.conv2d("features.8", x, Conv2dOptions(384, 256, 3).padding(1));
  x = g.relu("features.9", x);
  x = g.conv2d("features.10", x, Conv2dOptions(256, 256, 3).padding(1));
  x = g.relu("features.11", x);
  x = g.maxpool2d("features.12", x, MaxPool2dOptions(3).stride(2));
  x = g.adaptive_avgpool2d("avgpool", x, 6, 6);
  x = g.flatten("flatten", x);
  x = g.dropout("classifier.0", x, 0.5);
  x = g.linear("classifier.1", x, 256 * 6 * 6, 4096);
  x = g.relu("classifier.2", x);
  x = g.dropout("classifier.3", x, 0.5);
  x = g.linear("classifier.4", x, 4096, 4096);
  x = g.relu("classifier.5", x);
  x = g.linear("classifier.6", x, 4096, g.num_classes(1000));
  return g.build({x});
}

}  // namespace tracr::experiments::zoo
