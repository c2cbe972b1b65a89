// Early exit heads (experiments/exits.hpp): the built-in linear head written
// as TorchScript and read back computes pooling + linear; the confidence
// measures; which layers an exit may hang on; training heads on a frozen
// backbone leaves it unchanged and learns more than chance.
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "experiments/exits.hpp"
#include "experiments/registry.hpp"

using namespace tracr::experiments;

namespace {

std::unique_ptr<SplitModel> fmnist() {
  ModelConfig mc;
  mc.device = "cpu";
  mc.seed = 3;
  auto m = create_model("fmnist_cnn", mc);
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  return std::move(*m);
}

}  // namespace

TEST(ExitHeads, TheLinearHeadIsPoolingThenLinearAndLoadsAsTorchScript) {
  const auto dir = std::filesystem::temp_directory_path() / ("tracr-exit-" + std::to_string(::getpid()));
  const std::string path = (dir / "h.pt").string();
  torch::manual_seed(1);
  const at::Tensor w = torch::randn({10, 16}), b = torch::randn({10});
  ASSERT_TRUE(save_linear_head(path, w, b));
  auto h = ExitHead::load(path, c10::Device(c10::kCPU));
  ASSERT_TRUE(h) << h.error().message;
  const at::Tensor x = torch::randn({3, 16, 14, 14});
  auto l = (*h)->logits(x);
  ASSERT_TRUE(l) << l.error().message;
  const at::Tensor want = torch::matmul(x.mean({2, 3}), w.t()) + b;
  EXPECT_TRUE(torch::allclose(*l, want, 1e-5, 1e-5));
  // [B, C] inputs are not pooled.
  auto flat = (*h)->logits(torch::ones({2, 16}));
  ASSERT_TRUE(flat);
  EXPECT_TRUE(torch::allclose(*flat, torch::matmul(torch::ones({2, 16}), w.t()) + b, 1e-5, 1e-5));
  // A wrong input is named, not thrown.
  auto bad = (*h)->logits(torch::ones({2, 5, 3, 3}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("fails on an input of shape [2, 5, 3, 3]"), std::string::npos);
  auto missing = ExitHead::load((dir / "none.pt").string(), c10::Device(c10::kCPU));
  EXPECT_FALSE(missing);
  std::filesystem::remove_all(dir);
}

TEST(ExitHeads, ConfidencesAreTheTopProbabilityAndOneLessNormalisedEntropy) {
  const at::Tensor l = torch::tensor({{0.0f, 0.0f, 0.0f, 0.0f}, {10.0f, 0.0f, 0.0f, 0.0f}});
  auto a = exit_answers(l);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NEAR(a[0].max_softmax, 0.25f, 1e-6);
  EXPECT_NEAR(a[0].entropy_conf, 0.0f, 1e-6);  // uniform: entropy is ln C
  EXPECT_EQ(a[1].top1, 0);
  EXPECT_GT(a[1].max_softmax, 0.99f);
  EXPECT_GT(a[1].entropy_conf, 0.99f);
  EXPECT_EQ(exit_confidence(a[1], "entropy"), a[1].entropy_conf);
  EXPECT_EQ(exit_confidence(a[1], "max_softmax"), a[1].max_softmax);
}

TEST(ExitHeads, AnExitHangsOnANamedOrIndexedLayerBeforeTheLast) {
  auto m = fmnist();
  auto byname = exit_layer(*m, "pool1");
  ASSERT_TRUE(byname);
  EXPECT_EQ(*byname, 2);
  auto byindex = exit_layer(*m, "5");
  ASSERT_TRUE(byindex);
  EXPECT_EQ(*byindex, 5);
  auto last = exit_layer(*m, "fc2");
  ASSERT_FALSE(last);
  EXPECT_NE(last.error().message.find("last layer"), std::string::npos);
  auto none = exit_layer(*m, "pool7");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("is not a layer of fmnist_cnn"), std::string::npos);
}

TEST(ExitHeads, TrainingOnAFrozenBackboneLeavesItAndLearns) {
  auto m = fmnist();
  DatasetConfig dc;
  dc.kind = "synthetic";
  dc.input_shape = {1, 28, 28};
  dc.num_samples = 256;
  dc.num_classes = 10;
  dc.mean = {0.5f};
  dc.std = {0.5f};
  auto ds = open_dataset(dc);
  ASSERT_TRUE(ds) << ds.error().message;
  const auto before = m->state_dict();
  ExitTrainOptions o;
  o.epochs = 30;
  o.lr = 5e-2;
  auto r = train_linear_exits(*m, {2, 5}, **ds, nullptr, o);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].features, 16);
  EXPECT_EQ((*r)[1].features, 32);
  for (const auto& x : *r) {
    EXPECT_LT(x.loss.back(), x.loss.front());  // it learned something of the training set
    EXPECT_GT(x.train_accuracy, 0.1);
    EXPECT_EQ(x.test_accuracy, -1);
  }
  const auto after = m->state_dict();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i].tensor, after[i].tensor)) << before[i].name;
}
