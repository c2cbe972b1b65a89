// Every zoo model at every split point: head then tail equals the unsplit
// forward bit for bit on CPU (also through the protocol tensor bridge), and
// each lossy codec applied to the crossing tensors stays within its bound.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "experiments/registry.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/codec.hpp"

namespace tracr::experiments {
namespace {

struct ZooCase {
  std::string model;
  int64_t size;  // smallest square input each model accepts
};

void PrintTo(const ZooCase& c, std::ostream* o) { *o << c.model << " at " << c.size << "x" << c.size; }

std::unique_ptr<SplitModel> make(const std::string& name, int64_t size) {
  ModelConfig cfg;
  cfg.input_shape = {3, size, size};
  cfg.device = "cpu";
  cfg.seed = 1;
  auto m = create_model(name, cfg);
  if (!m) throw std::runtime_error(m.error().str());
  return std::move(*m);
}

at::Tensor input_for(const SplitModel& m, int64_t batch = 2) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), m.input_shape().begin(), m.input_shape().end());
  return at::randn(shape, gen, torch::kFloat);
}

// Encodes and decodes every element with the codec's lossy stage; checks the
// stated bound; returns the decoded tensor. *max_err gets the largest error.
at::Tensor lossy_roundtrip(const protocol::CodecSpec& spec, const NamedTensor& nt, int k,
                           double* max_err) {
  auto pt = to_protocol(nt.name, nt.tensor);
  EXPECT_TRUE(pt.ok());
  auto params = protocol::lossy_prepare(spec, *pt);
  EXPECT_TRUE(params.ok()) << params.error().str();
  const int64_t n = pt->numel();
  std::vector<uint8_t> wire(n * protocol::dtype_size(params->wire));
  auto out = protocol::Tensor::allocate(nt.name, pt->dtype, pt->shape);
  protocol::lossy_encode(*params, pt->data, 0, n, wire.data());
  protocol::lossy_decode(*params, wire.data(), 0, n, out.mutable_data());
  auto dec = from_protocol(out);
  EXPECT_TRUE(dec.ok());
  auto orig = nt.tensor.contiguous();
  const float* a = orig.data_ptr<float>();
  const float* b = dec->data_ptr<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::abs(double(a[i]) - double(b[i]));
    *max_err = std::max(*max_err, err);
    if (!(err <= protocol::lossy_error_bound(*params, a[i], i))) {
      if (bad++ < 3)
        ADD_FAILURE() << spec.name() << " split " << k << " tensor " << nt.name << " element " << i
                      << ": |" << a[i] << " - " << b[i] << "| = " << err << " > bound "
                      << protocol::lossy_error_bound(*params, a[i], i);
    }
  }
  EXPECT_EQ(bad, 0);
  return *dec;
}

class ZooSplit : public ::testing::TestWithParam<ZooCase> {};

TEST_P(ZooSplit, HeadThenTailEqualsUnsplitAtEverySplitBitForBit) {
  auto m = make(GetParam().model, GetParam().size);
  const auto x = input_for(*m);
  auto full = m->forward(x);
  ASSERT_TRUE(full.ok()) << full.error().str();
  const int n = m->num_layers();
  ASSERT_GT(n, 10);
  ASSERT_EQ(full->size(), m->output_names().size());
  for (int k = 0; k <= n; ++k) {
    auto head = m->run(0, k, SplitModel::input_bundle(x));
    ASSERT_TRUE(head.ok()) << "split " << k << ": " << head.error().str();
    const auto cross = m->crossing(k);
    ASSERT_EQ(head->size(), cross.size()) << "split " << k;
    for (size_t i = 0; i < cross.size(); ++i) {
      EXPECT_EQ((*head)[i].name, cross[i].name);
      auto expect = cross[i].shape;
      expect[0] = x.size(0);
      EXPECT_EQ((*head)[i].tensor.sizes().vec(), expect) << cross[i].name;
    }
    // Across the "wire": through protocol tensors and back.
    auto wire = to_protocol(*head);
    ASSERT_TRUE(wire.ok());
    auto received = from_protocol(*wire);
    ASSERT_TRUE(received.ok());
    auto tail = m->run(k, n, std::move(*received));
    ASSERT_TRUE(tail.ok()) << "split " << k << ": " << tail.error().str();
    ASSERT_EQ(tail->size(), full->size());
    for (size_t i = 0; i < full->size(); ++i)
      ASSERT_TRUE(torch::equal((*tail)[i].tensor, (*full)[i].tensor))
          << GetParam().model << " split " << k << " output " << (*full)[i].name
          << " max diff " << ((*tail)[i].tensor - (*full)[i].tensor).abs().max().item<float>();
  }
}

TEST_P(ZooSplit, LossyCodecsStayWithinBoundOnCrossingTensors) {
  auto m = make(GetParam().model, GetParam().size);
  const auto x = input_for(*m);
  const int n = m->num_layers();
  std::vector<protocol::CodecSpec> specs;
  for (const char* c : {"fp16", "bf16", "int8", "int8_channel"}) {
    auto s = protocol::CodecSpec::parse(c);
    ASSERT_TRUE(s.ok()) << s.error().str();
    specs.push_back(*s);
  }
  Bundle at_k = SplitModel::input_bundle(x);
  std::vector<double> max_err(specs.size(), 0.0);
  for (int k = 0; k <= n; ++k) {
    if (k > 0) {
      auto next = m->run(k - 1, k, at_k);
      ASSERT_TRUE(next.ok()) << next.error().str();
      at_k = std::move(*next);
    }
    for (size_t c = 0; c < specs.size(); ++c) {
      Bundle decoded;
      for (const auto& nt : at_k)
        decoded.push_back({nt.name, lossy_roundtrip(specs[c], nt, k, &max_err[c])});
      if (::testing::Test::HasFailure()) return;
      // The server can run its tail on the decoded tensors.
      if (k % 4 == 0 || k == n) {
        auto tail = m->run(k, n, std::move(decoded));
        ASSERT_TRUE(tail.ok()) << tail.error().str();
        for (const auto& o : *tail) EXPECT_TRUE(torch::isfinite(o.tensor).all().item<bool>());
      }
    }
  }
  // The codecs really were lossy (the check above is not vacuous).
  for (size_t c = 0; c < specs.size(); ++c) EXPECT_GT(max_err[c], 0.0) << specs[c].name();
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooSplit,
                         ::testing::Values(ZooCase{"alexnet", 63}, ZooCase{"vgg11", 32},
                                           ZooCase{"vgg16", 32}, ZooCase{"resnet18", 32},
                                           ZooCase{"resnet50", 32}, ZooCase{"mobilenet_v2", 32},
                                           ZooCase{"tiny_fpn_detector", 64}),
                         [](const auto& info) { return info.param.model; });

TEST(SplitModel, SplitZeroSendsTheInputAndSplitNTheOutputs) {
  auto m = make("resnet18", 32);
  auto c0 = m->crossing(0);
  ASSERT_EQ(c0.size(), 1u);
  EXPECT_EQ(c0[0].name, "input");
  EXPECT_EQ(c0[0].shape, (std::vector<int64_t>{1, 3, 32, 32}));
  EXPECT_EQ(c0[0].bytes, 3 * 32 * 32 * 4);
  auto cn = m->crossing(m->num_layers());
  ASSERT_EQ(cn.size(), 1u);
  EXPECT_EQ(cn[0].name, "fc");
  EXPECT_EQ(cn[0].shape, (std::vector<int64_t>{1, 1000}));
  EXPECT_TRUE(m->crossing(-1).empty());
  EXPECT_TRUE(m->crossing(m->num_layers() + 1).empty());
}

int index_of(const SplitModel& m, const std::string& layer) {
  for (const auto& l : m.layers())
    if (l.name == layer) return l.index;
  return -1;
}

std::set<std::string> crossing_names(const SplitModel& m, int k) {
  std::set<std::string> s;
  for (const auto& c : m.crossing(k)) s.insert(c.name);
  return s;
}

TEST(SplitModel, CutInsideResidualBlockCarriesTheIdentity) {
  auto m = make("resnet18", 32);
  const int k = index_of(*m, "layer1.0.conv2");
  ASSERT_GT(k, 0);
  // The block input (maxpool output) travels with the main path.
  EXPECT_EQ(crossing_names(*m, k), (std::set<std::string>{"maxpool", "layer1.0.relu"}));
  // Downsampling block: the identity is the previous block's output.
  const int k2 = index_of(*m, "layer2.0.downsample.0");
  EXPECT_EQ(crossing_names(*m, k2), (std::set<std::string>{"layer1.1.relu:1", "layer2.0.bn2"}));
  // Between blocks only one tensor crosses.
  EXPECT_EQ(crossing_names(*m, index_of(*m, "layer2.0.conv1")),
            (std::set<std::string>{"layer1.1.relu:1"}));
}

TEST(SplitModel, DetectorNeckMakesSeveralTensorsCross) {
  auto m = make("tiny_fpn_detector", 64);
  const int k = index_of(*m, "backbone.stage4.0");
  EXPECT_EQ(crossing_names(*m, k),
            (std::set<std::string>{"backbone.stage2.5", "backbone.stage3.5"}));
  const int k2 = index_of(*m, "neck.merge4");
  EXPECT_EQ(crossing_names(*m, k2), (std::set<std::string>{"backbone.stage2.5", "neck.lateral5",
                                                           "neck.up5", "neck.lateral4"}));
  EXPECT_EQ(m->crossing(m->num_layers()).size(), 3u);
  int multi = 0;
  for (int s = 0; s <= m->num_layers(); ++s) multi += m->crossing(s).size() > 1;
  EXPECT_GE(multi, 15);
  ASSERT_TRUE(m->detection_head().has_value());
  EXPECT_EQ(m->detection_head()->strides, (std::vector<int64_t>{8, 16, 32}));
}

TEST(SplitModel, RunRejectsWrongBundlesNamingTheTensor) {
  auto m = make("resnet18", 32);
  const auto x = input_for(*m);
  const int k = index_of(*m, "layer1.0.conv2");
  auto head = m->run(0, k, SplitModel::input_bundle(x));
  ASSERT_TRUE(head.ok());

  Bundle missing = *head;
  missing.erase(missing.begin());
  auto r = m->run(k, m->num_layers(), missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("'maxpool'"), std::string::npos) << r.error().message;

  Bundle extra = *head;
  extra.push_back({"bogus", torch::zeros({2, 4})});
  r = m->run(k, m->num_layers(), extra);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'bogus'"), std::string::npos);

  Bundle misshaped = *head;
  misshaped[0].tensor = torch::zeros({2, 64, 4, 4});
  r = m->run(k, m->num_layers(), misshaped);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("expected [1, 64, 8, 8]"), std::string::npos) << r.error().message;

  Bundle wrong_dtype = *head;
  wrong_dtype[0].tensor = wrong_dtype[0].tensor.to(torch::kHalf);
  EXPECT_FALSE(m->run(k, m->num_layers(), wrong_dtype).ok());

  EXPECT_FALSE(m->run(3, 2, {}).ok());
  EXPECT_FALSE(m->run(0, m->num_layers() + 1, SplitModel::input_bundle(x)).ok());
  // Empty range passes the bundle through.
  auto same = m->run(k, k, *head);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(torch::equal((*same)[0].tensor, (*head)[0].tensor));
}

TEST(SplitModel, LayerInfoMatchesTorchvisionCounts) {
  // Parameter counts of torchvision's models; MACs of ResNet-18 at 224x224
  // (1.814 G for Conv2d + Linear).
  const std::map<std::string, int64_t> params = {
      {"alexnet", 61100840},  {"vgg11", 132863336},   {"vgg16", 138357544},
      {"resnet18", 11689512}, {"resnet50", 25557032}, {"mobilenet_v2", 3504872}};
  for (const auto& [name, count] : params) {
    auto m = make(name, name == "alexnet" ? 63 : 32);
    EXPECT_EQ(m->num_params(), count) << name;
  }
  auto r18 = make("resnet18", 224);
  int64_t macs = 0;
  for (const auto& l : r18->layers()) macs += l.macs;
  EXPECT_NEAR(double(macs), 1.8142e9, 0.002e9);
  const auto& conv1 = r18->layers()[0];
  EXPECT_EQ(conv1.name, "conv1");
  EXPECT_EQ(conv1.type, "Conv2d");
  EXPECT_EQ(conv1.params, 64 * 3 * 7 * 7);
  EXPECT_EQ(conv1.output_shape, (std::vector<int64_t>{1, 64, 112, 112}));
  EXPECT_EQ(conv1.output_bytes, 64 * 112 * 112 * 4);
  EXPECT_EQ(conv1.macs, int64_t(64) * 112 * 112 * 3 * 49);
}

TEST(SplitModel, TooSmallInputIsAnErrorNamingTheLayer) {
  ModelConfig cfg;
  cfg.input_shape = {3, 16, 16};
  cfg.device = "cpu";
  auto m = create_model("alexnet", cfg);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, Errc::invalid_argument);
  EXPECT_NE(m.error().message.find("features."), std::string::npos) << m.error().message;
}

TEST(SplitModel, DeviceSelection) {
  EXPECT_TRUE(resolve_device("cpu").ok());
  EXPECT_FALSE(resolve_device("tpu").ok());
  auto autod = resolve_device("auto");
  ASSERT_TRUE(autod.ok());
  EXPECT_EQ(autod->is_cuda(), torch::cuda::is_available());
  if (!torch::cuda::is_available()) {
    EXPECT_FALSE(resolve_device("cuda").ok());
    ModelConfig cfg;
    cfg.device = "cuda";
    cfg.input_shape = {3, 32, 32};
    EXPECT_FALSE(create_model("resnet18", cfg).ok());
  }
}

TEST(Registry, ListsTheZooAndRejectsDuplicatesAndUnknownNames) {
  auto names = list_models();
  for (const char* n : {"alexnet", "vgg11", "vgg16", "resnet18", "resnet50", "mobilenet_v2",
                        "tiny_fpn_detector", "torchscript:<path>"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_FALSE(model_description("resnet18").empty());

  ModelRegistry reg;
  auto factory = [](const ModelConfig& c) { return create_model("resnet18", c); };
  EXPECT_TRUE(reg.add({"mine", "", factory}).ok());
  auto dup = reg.add({"mine", "", factory});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("already registered"), std::string::npos);
  EXPECT_FALSE(reg.add({"a:b", "", factory}).ok());
  EXPECT_FALSE(ModelRegistry::global().add({"resnet18", "", factory}).ok());

  auto unknown = create_model("resnet1000", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::not_found);
  EXPECT_NE(unknown.error().message.find("resnet18"), std::string::npos);
}

}  // namespace
}  // namespace tracr::experiments
