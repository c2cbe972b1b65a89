// Split training building blocks on real Fashion-MNIST data: a chain of
// segments trained by their own optimizers equals single-process training
// step by step; checkpoints resume exactly; bad gradients are refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>

#include "experiments/datasets.hpp"
#include "experiments/registry.hpp"
#include "experiments/train.hpp"
#include "test_util.hpp"

namespace tracr::experiments {
namespace {

std::shared_ptr<SplitModel> cnn(uint64_t seed) {
  ModelConfig mc;
  mc.seed = seed;
  mc.device = "cpu";
  auto m = create_model("fmnist_cnn", mc);
  EXPECT_TRUE(m) << m.error().str();
  return std::shared_ptr<SplitModel>(std::move(*m));
}

TensorDataset fmnist_train(int64_t n) {
  DatasetConfig dc;
  dc.kind = "fashion-mnist";
  dc.path = TRACR_FASHION_MNIST_DIR;
  dc.split = "train";
  dc.input_shape = {1, 28, 28};
  dc.resize_mode = "none";
  dc.mean = {0.2860f};
  dc.std = {0.3530f};
  auto ds = open_dataset(dc);
  EXPECT_TRUE(ds) << ds.error().str();
  auto d = load_tensor_dataset(**ds, n);
  EXPECT_TRUE(d) << d.error().str();
  return *d;
}

// The owner's loop in miniature: segments in order forward, the loss on the
// last one's output, gradients back segment by segment.
std::vector<double> train_split(std::shared_ptr<SplitModel> m, const std::vector<int>& cuts, const OptimizerSpec& opt,
                                const TensorDataset& d, int64_t batch, int64_t steps, uint64_t seed) {
  std::vector<std::unique_ptr<Segment>> segs;
  int a = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const int b = i < cuts.size() ? cuts[i] : m->num_layers();
    auto s = Segment::create(m, a, b, opt);
    EXPECT_TRUE(s) << s.error().str();
    segs.push_back(std::move(*s));
    a = b;
  }
  std::vector<double> losses;
  for (int64_t epoch = 0; static_cast<int64_t>(losses.size()) < steps; ++epoch) {
    auto order = epoch_order(d.size(), seed, epoch);
    for (int64_t first = 0; first < d.size() && static_cast<int64_t>(losses.size()) < steps; first += batch) {
      auto [x, y] = gather_batch(d, order, first, batch);
      Bundle act{{"input", x}};
      for (auto& s : segs) {
        auto out = s->forward(act);
        EXPECT_TRUE(out) << out.error().str();
        act = *out;
      }
      at::Tensor loss = classification_loss(segs.back()->attached_outputs().at(0).tensor, y);
      losses.push_back(loss.item<double>());
      auto g = segs.back()->backward_loss(loss);
      EXPECT_TRUE(g) << g.error().str();
      for (int i = static_cast<int>(segs.size()) - 2; i >= 0; --i) {
        g = segs[i]->backward(*g);
        EXPECT_TRUE(g) << g.error().str();
      }
      EXPECT_TRUE(g->empty()) << "segment 0 returned a gradient of the raw input";
    }
  }
  return losses;
}

void expect_same_losses(const std::vector<ReferenceStep>& ref, const std::vector<double>& split) {
  ASSERT_EQ(ref.size(), split.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double rel = std::abs(split[i] - ref[i].loss) / std::max(1e-12, std::abs(ref[i].loss));
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "step " << i << ": split " << split[i] << ", single-process " << ref[i].loss;
  }
  // Training happened: the loss fell from ln(10).
  EXPECT_LT(ref.back().loss, ref.front().loss);
  std::printf("worst relative loss difference over %zu steps: %.3g\n", ref.size(), worst);
}

TEST(SplitTraining, ThreeSegmentsEqualSingleProcessAdamStepByStep) {
  auto d = fmnist_train(3000);
  OptimizerSpec opt;
  opt.kind = "adam";
  opt.lr = 1e-3;
  auto ref = train_reference(cnn(7), opt, d, 64, 60, 11);
  ASSERT_TRUE(ref) << ref.error().str();
  expect_same_losses(*ref, train_split(cnn(7), {3, 7}, opt, d, 64, 60, 11));
}

TEST(SplitTraining, FiveSegmentsEqualSingleProcessSgdMomentum) {
  auto d = fmnist_train(2000);
  OptimizerSpec opt;
  opt.kind = "sgd";
  opt.lr = 0.05;
  opt.momentum = 0.9;
  auto ref = train_reference(cnn(3), opt, d, 32, 50, 5);
  ASSERT_TRUE(ref) << ref.error().str();
  // A segment without parameters (ReLU + pool) in the middle of the chain.
  expect_same_losses(*ref, train_split(cnn(3), {1, 3, 4, 8}, opt, d, 32, 50, 5));
}

TEST(SplitTraining, CheckpointResumesExactly) {
  test::TempDir tmp;
  auto d = fmnist_train(1000);
  OptimizerSpec opt;
  auto m1 = cnn(1);
  auto s1 = Segment::create(m1, 0, m1->num_layers(), opt);
  ASSERT_TRUE(s1);
  auto order = epoch_order(d.size(), 0, 0);
  auto step = [&](Segment& s, int64_t k) {
    auto [x, y] = gather_batch(d, order, k * 50, 50);
    EXPECT_TRUE(s.forward({{"input", x}}));
    at::Tensor loss = classification_loss(s.attached_outputs().at(0).tensor, y);
    const double v = loss.item<double>();
    EXPECT_TRUE(s.backward_loss(loss));
    return v;
  };
  for (int k = 0; k < 5; ++k) step(**s1, k);
  ASSERT_TRUE((*s1)->save(tmp.file("seg.pt")));
  auto m2 = cnn(99);  // other initial weights: the checkpoint must overwrite them all
  auto s2 = Segment::create(m2, 0, m2->num_layers(), opt);
  ASSERT_TRUE(s2);
  auto st = (*s2)->load(tmp.file("seg.pt"));
  ASSERT_TRUE(st) << st.error().str();
  EXPECT_EQ((*s2)->steps(), 5);
  for (int k = 5; k < 10; ++k) EXPECT_EQ(step(**s1, k), step(**s2, k)) << "step " << k;
  // A checkpoint of other layers is refused, naming them.
  auto s3 = Segment::create(cnn(1), 0, 3, opt);
  ASSERT_TRUE(s3);
  auto bad = (*s3)->load(tmp.file("seg.pt"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("[0, 3)"), std::string::npos) << bad.error().str();
}

TEST(SplitTraining, MismatchedGradientIsRefused) {
  auto m = cnn(1);
  auto s = Segment::create(m, 3, 7, OptimizerSpec{});
  ASSERT_TRUE(s);
  EXPECT_FALSE((*s)->backward({{"pool2", torch::zeros({2, 32, 7, 7})}})) << "backward before forward";
  auto out = (*s)->forward({{"pool1", torch::randn({2, 16, 14, 14})}});
  ASSERT_TRUE(out) << out.error().str();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ(out->at(0).name, "flatten");
  auto wrong = (*s)->backward({{"flatten", torch::zeros({2, 10})}});
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("expected [2, 1568]"), std::string::npos) << wrong.error().str();
  auto unknown = (*s)->backward({{"conv9", torch::zeros({2, 1568})}});
  ASSERT_FALSE(unknown);
  auto ok = (*s)->backward({{"flatten", torch::ones({2, 1568})}});
  ASSERT_TRUE(ok) << ok.error().str();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ(ok->at(0).name, "pool1");
  EXPECT_EQ(ok->at(0).tensor.sizes(), torch::IntArrayRef({2, 16, 14, 14}));
  EXPECT_GT(ok->at(0).tensor.abs().sum().item<double>(), 0);
}

TEST(SplitTraining, EpochOrderIsADeterministicPermutation) {
  auto a = epoch_order(1000, 42, 3), b = epoch_order(1000, 42, 3), c = epoch_order(1000, 42, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<int64_t> s(a.begin(), a.end());
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 999);
}

}  // namespace
}  // namespace tracr::experiments
