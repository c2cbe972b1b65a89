#include <gtest/gtest.h>
#include <torch/torch.h>

#include "experiments/postprocess.hpp"
#include "experiments/registry.hpp"
#include "test_util.hpp"

namespace tracr::experiments {
namespace {

TEST(TopK, SoftmaxConfidencesBestFirstWithNames) {
  auto logits = torch::tensor({{0.0f, 2.0f, 1.0f}, {5.0f, 0.0f, 0.0f}});
  auto r = top_k(logits, 2, {"a", "b", "c"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0][0].class_id, 1);
  EXPECT_EQ((*r)[0][0].label, "b");
  EXPECT_EQ((*r)[0][1].label, "c");
  const double e0 = 1, e1 = std::exp(2.0), e2 = std::exp(1.0);
  EXPECT_NEAR((*r)[0][0].confidence, e1 / (e0 + e1 + e2), 1e-6);
  EXPECT_EQ((*r)[1][0].label, "a");
  // Without names the id is the label; k is capped at the class count.
  auto r2 = top_k(logits, 10, {});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)[0].size(), 3u);
  EXPECT_EQ((*r2)[0][2].label, "0");
  EXPECT_FALSE(top_k(torch::zeros({3}), 1, {}).ok());
  EXPECT_FALSE(top_k(logits, 0, {}).ok());
}

TEST(Nms, SuppressesOverlapsAboveThresholdOnly) {
  auto boxes = torch::tensor({{0.f, 0.f, 10.f, 10.f},     // 0 score .9
                              {1.f, 1.f, 11.f, 11.f},     // 1 IoU with 0 = 81/119 = .68
                              {20.f, 20.f, 30.f, 30.f},   // 2 disjoint
                              {0.f, 0.f, 10.f, 5.f}});    // 3 IoU with 0 = .5
  auto scores = torch::tensor({0.9f, 0.95f, 0.5f, 0.8f});
  auto keep = nms(boxes, scores, 0.5);
  // Box 1 has the top score and suppresses 0 (.68); 3 vs 1: inter 9*4=36,
  // union 50+100-36=114 -> .32 kept; 2 kept.
  EXPECT_EQ(test::to_vec(keep), (std::vector<int64_t>{1, 3, 2}));
  auto keep_loose = nms(boxes, scores, 0.7);
  EXPECT_EQ(keep_loose.numel(), 4);
  EXPECT_EQ(nms(torch::zeros({0, 4}), torch::zeros({0}), 0.5).numel(), 0);
}

TEST(Nms, BatchedKeepsOverlappingBoxesOfDifferentClasses) {
  auto boxes = torch::tensor({{0.f, 0.f, 10.f, 10.f}, {0.f, 0.f, 10.f, 10.f}, {0.f, 0.f, 10.f, 10.f}});
  auto scores = torch::tensor({0.9f, 0.8f, 0.7f});
  auto classes = torch::tensor({0, 1, 0}, torch::kLong);
  auto keep = batched_nms(boxes, scores, classes, 0.5);
  EXPECT_EQ(test::to_vec(keep), (std::vector<int64_t>{0, 1}));
}

TEST(Detections, DecodesOneConfidentLocationIntoOriginalImageCoordinates) {
  DetectionHeadInfo head{{"p3", "p4"}, {8, 16}, 3};
  // p3: 4x4 grid, p4: 2x2 grid, batch 1; all very unlikely except one cell.
  auto p3 = torch::full({1, 8, 4, 4}, -20.0f);
  auto p4 = torch::full({1, 8, 2, 2}, -20.0f);
  // Level p4 (stride 16), cell gx=1, gy=0: tx=ty=0 -> centre (1.5*16, 0.5*16) = (24, 8);
  // tw = log(2) -> w = 32, th = 0 -> h = 16; obj and class 2 logits high.
  p4.index_put_({0, 0, 0, 1}, 0.0f);
  p4.index_put_({0, 1, 0, 1}, 0.0f);
  p4.index_put_({0, 2, 0, 1}, std::log(2.0f));
  p4.index_put_({0, 3, 0, 1}, 0.0f);
  p4.index_put_({0, 4, 0, 1}, 10.0f);
  p4.index_put_({0, 7, 0, 1}, 10.0f);
  Bundle out{{"p3", p3}, {"p4", p4}};
  // Original image 64 wide, 32 high, resized 2x then cropped by (8, 0)... here
  // input = orig * 0.5 + (4, 0).
  ImageTransform tf;
  tf.orig_width = 200;
  tf.orig_height = 100;
  tf.scale_x = tf.scale_y = 0.5;
  tf.offset_x = 4;
  auto dets = decode_detections(out, head, {tf}, {"a", "b", "c"});
  ASSERT_TRUE(dets.ok()) << dets.error().str();
  ASSERT_EQ(dets->size(), 1u);
  ASSERT_EQ((*dets)[0].size(), 1u);
  const auto& d = (*dets)[0][0];
  EXPECT_EQ(d.class_id, 2);
  EXPECT_EQ(d.label, "c");
  EXPECT_GT(d.score, 0.99);
  // Input box (8, 0, 40, 16) -> original ((8-4)/.5, 0, (40-4)/.5, 32).
  EXPECT_NEAR(d.x1, 8.0, 1e-3);
  EXPECT_NEAR(d.y1, 0.0, 1e-3);
  EXPECT_NEAR(d.x2, 72.0, 1e-3);
  EXPECT_NEAR(d.y2, 32.0, 1e-3);
}

TEST(Detections, ErrorsNameTheMissingOutput) {
  DetectionHeadInfo head{{"p3"}, {8}, 3};
  auto r = decode_detections({{"other", torch::zeros({1, 8, 2, 2})}}, head, {ImageTransform{}}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'p3'"), std::string::npos);
  auto bad = decode_detections({{"p3", torch::zeros({1, 7, 2, 2})}}, head, {ImageTransform{}}, {});
  EXPECT_FALSE(bad.ok());
}

TEST(Detections, TinyDetectorEndToEndRespectsLimits) {
  ModelConfig cfg;
  cfg.input_shape = {3, 64, 64};
  cfg.device = "cpu";
  auto m = create_model("tiny_fpn_detector", cfg);
  ASSERT_TRUE(m.ok()) << m.error().str();
  auto out = (*m)->forward(torch::randn({2, 3, 64, 64}));
  ASSERT_TRUE(out.ok());
  ImageTransform tf;
  tf.orig_width = 128;
  tf.orig_height = 96;
  tf.scale_x = 0.5;
  tf.scale_y = 64.0 / 96;
  DetectionOptions opts;
  opts.score_threshold = 0.0;
  opts.max_detections = 7;
  auto dets = decode_detections(*out, *(*m)->detection_head(), {tf, tf}, {}, opts);
  ASSERT_TRUE(dets.ok()) << dets.error().str();
  ASSERT_EQ(dets->size(), 2u);
  for (const auto& img : *dets) {
    EXPECT_EQ(img.size(), 7u);
    for (size_t i = 0; i < img.size(); ++i) {
      const auto& d = img[i];
      EXPECT_GE(d.x1, 0);
      EXPECT_LE(d.x2, 128);
      EXPECT_LE(d.y2, 96);
      EXPECT_LE(d.x1, d.x2);
      EXPECT_GE(d.class_id, 0);
      EXPECT_LT(d.class_id, 80);
      if (i) {
        EXPECT_LE(d.score, img[i - 1].score);
      }
    }
  }
}

}  // namespace
}  // namespace tracr::experiments
