// A small one-stage detector whose FPN neck reads three backbone stages, so
// several tensors (C3, C4, C5 and partial pyramid levels) cross every cut
// between the middle of the backbone and the heads.
//
//   backbone.stem    conv3x3 s2 (3->16)  + BN + ReLU                 stride 2
//   backbone.stage1  conv3x3 s2 (16->32) + BN + ReLU                 stride 4
//   backbone.stage2  2 x (conv3x3 + BN + ReLU), 32->64,  first s2   C3 stride 8
//   backbone.stage3  2 x (conv3x3 + BN + ReLU), 64->128, first s2   C4 stride 16
//   backbone.stage4  2 x (conv3x3 + BN + ReLU), 128->256, first s2  C5 stride 32
//   neck             1x1 laterals to 64 ch, top-down nearest 2x upsample + add,
//                    3x3 smoothing convs -> P3, P4, P5
//   head.p3/p4/p5    1x1 conv to 4 + 1 + num_classes channels per location:
//                    (tx, ty, tw, th, objectness, class logits), decoded by
//                    postprocess.hpp decode_detections (anchor-free, YOLOX-style).
// scripts/tracr_reference.py holds the identical PyTorch module.
#include "experiments/graph.hpp"
#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments::zoo {
namespace {

using torch::nn::Conv2dOptions;

std::string conv_bn_relu(GraphBuilder& g, const std::string& p, int first, const std::string& in,
                         int64_t cin, int64_t cout, int64_t stride) {
  auto x = g.conv2d(p + std::to_string(first), in,
                    Conv2dOptions(cin, cout, 3).stride(stride).padding(1).bias(false));
  x = g.batchnorm2d(p + std::to_string(first + 1), x, cout);
  return g.relu(p + std::to_string(first + 2), x);
}

}  // namespace

Result<std::unique_ptr<SplitModel>> make_tiny_fpn_detector(const ModelConfig& cfg) {
  GraphBuilder g("tiny_fpn_detector", ModelTask::detection, cfg, {3, 256, 256});
  const int64_t nc = g.num_classes(80);
  const int64_t in_ch = g.input_shape().empty() ? 3 : g.input_shape()[0];
  auto x = conv_bn_relu(g, "backbone.stem.", 0, "input", in_ch, 16, 2);
  x = conv_bn_relu(g, "backbone.stage1.", 0, x, 16, 32, 2);
  x = conv_bn_relu(g, "backbone.stage2.", 0, x, 32, 64, 2);
  const auto c3 = conv_bn_relu(g, "backbone.stage2.", 3, x, 64, 64, 1);
  x = conv_bn_relu(g, "backbone.stage3.", 0, c3, 64, 128, 2);
  const auto c4 = conv_bn_relu(g, "backbone.stage3.", 3, x, 128, 128, 1);
  x = conv_bn_relu(g, "backbone.stage4.", 0, c4, 128, 256, 2);
  const auto c5 = conv_bn_relu(g, "backbone.stage4.", 3, x, 256, 256, 1);

  const auto l5 = g.conv2d("neck.lateral5", c5, Conv2dOptions(256, 64, 1));
  const auto u5 = g.upsample_nearest2x("neck.up5", l5);
  const auto l4 = g.conv2d("neck.lateral4", c4, Conv2dOptions(128, 64, 1));
  const auto m4 = g.add_tensors("neck.merge4", l4, u5);
  const auto u4 = g.upsample_nearest2x("neck.up4", m4);
  const auto l3 = g.conv2d("neck.lateral3", c3, Conv2dOptions(64, 64, 1));
  const auto m3 = g.add_tensors("neck.merge3", l3, u4);
  const auto p3 = g.conv2d("neck.smooth3", m3, Conv2dOptions(64, 64, 3).padding(1));
  const auto h3 = g.conv2d("head.p3", p3, Conv2dOptions(64, 5 + nc, 1));
  const auto p4 = g.conv2d("neck.smooth4", m4, Conv2dOptions(64, 64, 3).padding(1));
  const auto h4 = g.conv2d("head.p4", p4, Conv2dOptions(64, 5 + nc, 1));
  const auto p5 = g.conv2d("neck.smooth5", l5, Conv2dOptions(64, 64, 3).padding(1));
  const auto h5 = g.conv2d("head.p5", p5, Conv2dOptions(64, 5 + nc, 1));

  g.set_detection(DetectionHeadInfo{{h3, h4, h5}, {8, 16, 32}, nc});
  return g.build({h3, h4, h5});
}

}  // namespace tracr::experiments::zoo
