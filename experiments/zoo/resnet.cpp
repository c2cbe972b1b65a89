// ResNet-18 (BasicBlock) and ResNet-50 (Bottleneck, stride on the 3x3 conv,
// "v1.5") as torchvision.models.resnet builds them. A block's input is read
// again by its final Add (and by downsample), so cuts inside a block carry
// the identity tensor in the bundle. torchvision calls one ReLU module
// several times per block; its later calls are layers "<block>.relu:1",
// "<block>.relu:2".
#include "experiments/graph.hpp"
#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments::zoo {
namespace {

using torch::nn::Conv2dOptions;

std::string conv_bn(GraphBuilder& g, const std::string& p, const std::string& conv,
                    const std::string& bn, const std::string& in, int64_t cin, int64_t cout,
                    int64_t k, int64_t stride) {
  auto x = g.conv2d(p + conv, in,
                    Conv2dOptions(cin, cout, k).stride(stride).padding(k / 2).bias(false));
  return g.batchnorm2d(p + bn, x, cout);
}

std::string basic_block(GraphBuilder& g, const std::string& p, const std::string& in,
                        int64_t inplanes, int64_t planes, int64_t stride) {
  auto x = conv_bn(g, p, "conv1", "bn1", in, inplanes, planes, 3, stride);
  x = g.relu(p + "relu", x);
  x = conv_bn(g, p, "conv2", "bn2", x, planes, planes, 3, 1);
  std::string identity = in;
  if (stride != 1 || inplanes != planes)
    identity = conv_bn(g, p, "downsample.0", "downsample.1", in, inplanes, planes, 1, stride);
  x = g.add_tensors(p + "add", x, identity);
  return g.relu(p + "relu:1", x);
}

std::string bottleneck(GraphBuilder& g, const std::string& p, const std::string& in,
                       int64_t inplanes, int64_t planes, int64_t stride) {
  const int64_t width = planes, out = planes * 4;
  auto x = conv_bn(g, p, "conv1", "bn1", in, inplanes, width, 1, 1);
  x = g.relu(p + "relu", x);
  x = conv_bn(g, p, "conv2", "bn2", x, width, width, 3, stride);
  x = g.relu(p + "relu:1", x);
  x = conv_bn(g, p, "conv3", "bn3", x, width, out, 1, 1);
  std::string identity = in;
  if (stride != 1 || inplanes != out)
    identity = conv_bn(g, p, "downsample.0", "downsample.1", in, inplanes, out, 1, stride);
  x = g.add_tensors(p + "add", x, identity);
  return g.relu(p + "relu:2", x);
}

Result<std::unique_ptr<SplitModel>> make_resnet(const std::string& id, bool use_bottleneck,
                                                const std::vector<int>& blocks,
                                                const ModelConfig& cfg) {
  GraphBuilder g(id, ModelTask::classification, cfg, {3, 224, 224});
  const int64_t expansion = use_bottleneck ? 4 : 1;
  auto x = g.conv2d("conv1", "input", Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));
  x = g.batchnorm2d("bn1", x, 64);
  x = g.relu("relu", x);
  x = g.maxpool2d("maxpool", x, torch::nn::MaxPool2dOptions(3).stride(2).padding(1));
  int64_t inplanes = 64;
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int l = 0; l < 4; ++l) {
    for (int b = 0; b < blocks[l]; ++b) {
      const std::string p = "layer" + std::to_string(l + 1) + "." + std::to_string(b) + ".";
      const int64_t stride = (l > 0 && b == 0) ? 2 : 1;
      x = use_bottleneck ? bottleneck(g, p, x, inplanes, planes[l], stride)
                         : basic_block(g, p, x, inplanes, planes[l], stride);
      inplanes = planes[l] * expansion;
    }
  }
  x = g.adaptive_avgpool2d("avgpool", x, 1, 1);
  x = g.flatten("flatten", x);
  x = g.linear("fc", x, 512 * expansion, g.num_classes(1000));
  return g.build({x});
}

}  // namespace

Result<std::unique_ptr<SplitModel>> make_resnet18(const ModelConfig& cfg) {
  return make_resnet("resnet18", false, {2, 2, 2, 2}, cfg);
}

Result<std::unique_ptr<SplitModel>> make_resnet50(const ModelConfig& cfg) {
  return make_resnet("resnet50", true, {3, 4, 6, 3}, cfg);
}

}  // namespace tracr::experiments::zoo
