// MobileNetV2 (width 1.0) as torchvision.models.mobilenet_v2 builds it:
// features.0 and features.18 are Conv2dNormActivation (conv, bn, relu6),
// features.1-17 InvertedResidual blocks whose residual Add (stride 1 and
// in == out channels) makes the block input cross cuts inside the block.
#include "experiments/graph.hpp"
#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments::zoo {
namespace {

using torch::nn::Conv2dOptions;

std::string conv_bn_act(GraphBuilder& g, const std::string& p, const std::string& in,
                        int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t groups) {
  auto x = g.conv2d(p + "0", in,
                    Conv2dOptions(cin, cout, k).stride(stride).padding((k - 1) / 2).groups(groups).bias(false));
  x = g.batchnorm2d(p + "1", x, cout);
  return g.relu6(p + "2", x);
}

}  // namespace

Result<std::unique_ptr<SplitModel>> make_mobilenet_v2(const ModelConfig& cfg) {
  GraphBuilder g("mobilenet_v2", ModelTask::classification, cfg, {3, 224, 224});
  auto x = conv_bn_act(g, "features.0.", "input", 3, 32, 3, 2, 1);
  const int settings[7][4] = {{1, 16, 1, 1},  {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                              {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};
  int64_t inp = 32;
  int idx = 1;
  for (const auto& s : settings) {
    const int64_t t = s[0], c = s[1], n = s[2], st = s[3];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t stride = i == 0 ? st : 1;
      const int64_t hidden = inp * t;
      const std::string p = "features." + std::to_string(idx++) + ".conv.";
      const std::string block_in = x;
      int sub = 0;
      if (t != 1) x = conv_bn_act(g, p + std::to_string(sub++) + ".", x, inp, hidden, 1, 1, 1);
      x = conv_bn_act(g, p + std::to_string(sub++) + ".", x, hidden, hidden, 3, stride, hidden);
      x = g.conv2d(p + std::to_string(sub++), x, Conv2dOptions(hidden, c, 1).bias(false));
      x = g.batchnorm2d(p + std::to_string(sub++), x, c);
      if (stride == 1 && inp == c) x = g.add_tensors(p.substr(0, p.size() - 5) + "add", block_in, x);
      inp = c;
    }
  }
  x = conv_bn_act(g, "features.18.", x, 320, 1280, 1, 1, 1);
  x = g.adaptive_avgpool2d("avgpool", x, 1, 1);
  x = g.flatten("flatten", x);
  x = g.dropout("classifier.0", x, 0.2);
  x = g.linear("classifier.1", x, 1280, g.num_classes(1000));
  return g.build({x});
}

}  // namespace tracr::experiments::zoo
