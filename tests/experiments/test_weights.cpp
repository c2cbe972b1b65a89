// Weights imported from torchvision state_dict .pth files reproduce
// torchvision's outputs (max abs difference <= 1e-4). The reference script
// builds each model with a fixed seed under /usr/bin/python3 (no hub: random
// init, BatchNorm statistics randomised) and saves state_dict + outputs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "experiments/registry.hpp"
#include "experiments/weights.hpp"
#include "test_util.hpp"

namespace tracr::experiments {
namespace {

using test::TempDir;

struct RefCase {
  std::string model;
  int64_t size;
};

void PrintTo(const RefCase& c, std::ostream* o) { *o << c.model << " at " << c.size << "x" << c.size; }

class TorchvisionWeights : public ::testing::TestWithParam<RefCase> {};

TEST_P(TorchvisionWeights, ImportedPthReproducesTorchvisionOutputs) {
  const auto& c = GetParam();
  TempDir dir;
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " model " + c.model + " " +
                             dir.path() + " --size " + std::to_string(c.size) + " " +
                             std::to_string(c.size)),
            0)
      << "reference script failed for " << c.model;
  ModelConfig cfg;
  cfg.input_shape = {3, c.size, c.size};
  cfg.device = "cpu";
  cfg.weights = dir.file(c.model + ".pth");  // the .pth exactly as torch.save wrote it
  auto m = create_model(c.model, cfg);
  ASSERT_TRUE(m.ok()) << m.error().str();
  auto ref = test::read_ref(dir.file(c.model + ".ref.pt"));
  auto out = (*m)->forward(ref.at("input"));
  ASSERT_TRUE(out.ok()) << out.error().str();
  ASSERT_EQ(out->size() + 1, ref.size());
  for (size_t i = 0; i < out->size(); ++i) {
    const auto& expect = ref.at("output." + std::to_string(i));
    const auto& got = (*out)[i].tensor;
    ASSERT_EQ(got.sizes(), expect.sizes());
    const double diff = (got - expect).abs().max().item<double>();
    EXPECT_LE(diff, 1e-4) << c.model << " output " << i;
    // Not trivially zero: the outputs depend on the imported weights.
    EXPECT_GT(expect.abs().max().item<double>(), 1e-3);
  }
  // A split run with imported weights gives the same outputs.
  const int k = (*m)->num_layers() / 2;
  auto head = (*m)->run(0, k, SplitModel::input_bundle(ref.at("input")));
  ASSERT_TRUE(head.ok());
  auto tail = (*m)->run(k, (*m)->num_layers(), *head);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(torch::equal((*tail)[0].tensor, (*out)[0].tensor));
}

INSTANTIATE_TEST_SUITE_P(Zoo, TorchvisionWeights,
                         ::testing::Values(RefCase{"alexnet", 63}, RefCase{"vgg11", 32},
                                           RefCase{"vgg16", 32}, RefCase{"resnet18", 32},
                                           RefCase{"resnet50", 32}, RefCase{"mobilenet_v2", 32},
                                           RefCase{"tiny_fpn_detector", 64}),
                         [](const auto& info) { return info.param.model; });

TEST(Weights, LegacyPthNeedsTheExportScriptWhichProducesALoadableFile) {
  TempDir dir;
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " model resnet18 " + dir.path() +
                             " --size 32 32 --legacy"),
            0);
  auto direct = read_state_dict(dir.file("resnet18.pth"));
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(direct.error().message.find("export_torchvision.py"), std::string::npos);
  ASSERT_EQ(test::run_python(test::script("export_torchvision.py") + " " +
                             dir.file("resnet18.pth") + " " + dir.file("r18.pt") +
                             " --arch resnet18"),
            0);
  ModelConfig cfg;
  cfg.input_shape = {3, 32, 32};
  cfg.device = "cpu";
  cfg.weights = dir.file("r18.pt");
  auto m = create_model("resnet18", cfg);
  ASSERT_TRUE(m.ok()) << m.error().str();
  auto ref = test::read_ref(dir.file("resnet18.ref.pt"));
  auto out = (*m)->forward(ref.at("input"));
  ASSERT_TRUE(out.ok());
  EXPECT_LE(((*out)[0].tensor - ref.at("output.0")).abs().max().item<double>(), 1e-4);
  // --arch validation catches a file for another architecture.
  EXPECT_NE(test::run_python(test::script("export_torchvision.py") + " " +
                             dir.file("resnet18.pth") + " " + dir.file("x.pt") + " --arch resnet50"),
            0);
}

class StateDictErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig cfg;
    cfg.input_shape = {3, 32, 32};
    cfg.device = "cpu";
    auto m = create_model("resnet18", cfg);
    ASSERT_TRUE(m.ok());
    model = std::move(*m);
    state = model->state_dict();
  }
  std::unique_ptr<SplitModel> model;
  std::vector<NamedTensor> state;
};

TEST_F(StateDictErrors, MissingParameterIsNamed) {
  const std::string name = "layer2.0.downsample.1.running_var";
  const size_t before = state.size();
  state.erase(std::remove_if(state.begin(), state.end(),
                             [&](const NamedTensor& nt) { return nt.name == name; }),
              state.end());
  ASSERT_EQ(state.size() + 1, before);
  auto st = model->load_state_dict(state);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("missing (1): " + name), std::string::npos) << st.error().message;
}

TEST_F(StateDictErrors, OldFilesWithoutNumBatchesTrackedAreAccepted) {
  std::vector<NamedTensor> old;
  for (const auto& nt : state)
    if (nt.name.find("num_batches_tracked") == std::string::npos) old.push_back(nt);
  ASSERT_LT(old.size(), state.size());
  EXPECT_TRUE(model->load_state_dict(old).ok());
  // Any other missing buffer is still an error.
  old.erase(std::remove_if(old.begin(), old.end(),
                           [](const NamedTensor& nt) { return nt.name == "bn1.running_mean"; }),
            old.end());
  auto st = model->load_state_dict(old);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("bn1.running_mean"), std::string::npos);
}

TEST_F(StateDictErrors, ExtraParameterIsNamed) {
  state.push_back({"fc.extra", torch::zeros({3})});
  auto st = model->load_state_dict(state);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("unexpected (1): fc.extra"), std::string::npos);
}

TEST_F(StateDictErrors, MisShapedParameterIsNamedWithExpectedShape) {
  for (auto& nt : state)
    if (nt.name == "fc.weight") nt.tensor = torch::zeros({10, 512});
  auto st = model->load_state_dict(state);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("fc.weight is [10, 512], expected [1000, 512]"),
            std::string::npos)
      << st.error().message;
}

TEST_F(StateDictErrors, ValidStateDictLoadsAndBuffersCount) {
  std::vector<NamedTensor> copy;
  for (const auto& nt : state) copy.push_back({nt.name, nt.tensor.clone() + 1});
  ASSERT_TRUE(model->load_state_dict(copy).ok());
  for (const auto& nt : model->state_dict())
    if (nt.name == "bn1.running_var") {
      EXPECT_TRUE(torch::equal(nt.tensor, torch::full({64}, 2.0f)));
    }
  bool has_tracked = false;
  for (const auto& nt : state) has_tracked |= nt.name == "layer4.1.bn2.num_batches_tracked";
  EXPECT_TRUE(has_tracked);
}

TEST(Weights, UnreadableFilesAreErrorsNamingTheFile) {
  TempDir dir;
  auto missing = read_state_dict(dir.file("nope.pth"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::io);
  EXPECT_NE(missing.error().message.find("nope.pth"), std::string::npos);
  {
    std::ofstream f(dir.file("junk.pth"));
    f << "not a zip";
  }
  auto junk = read_state_dict(dir.file("junk.pth"));
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.error().message.find("junk.pth"), std::string::npos);
  ModelConfig cfg;
  cfg.input_shape = {3, 32, 32};
  cfg.weights = dir.file("junk.pth");
  EXPECT_FALSE(create_model("resnet18", cfg).ok());
}

class TorchScript : public ::testing::TestWithParam<bool> {};

TEST_P(TorchScript, NestedSequentialIsFlattenedAndMatchesPyTorch) {
  TempDir dir;
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " torchscript " + dir.path() +
                             (GetParam() ? " --trace" : "")),
            0);
  ModelConfig cfg;
  cfg.input_shape = {3, 32, 32};
  cfg.device = "cpu";
  cfg.optimize = false;  // the traced ops as they are: every split bit for bit
  auto m = create_model("torchscript:" + dir.file("seq.ts"), cfg);
  ASSERT_TRUE(m.ok()) << m.error().str();
  std::vector<std::string> names;
  for (const auto& l : (*m)->layers()) names.push_back(l.name);
  // Scripted, AdaptiveAvgPool2d ("4") has an `if` of its own, whose prim::If
  // has no call stack: it stays inside layer 4, between 4's own nodes.
  const std::vector<std::string> expected{"0", "1", "2", "3.0", "3.1", "3.2.0", "3.2.1", "4", "5", "6"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ((*m)->layers()[0].type, "Conv2d");
  EXPECT_EQ((*m)->layers()[0].params, 8 * 3 * 9 + 8);
  EXPECT_EQ((*m)->layers()[0].macs, int64_t(8) * 32 * 32 * 27);
  auto ref = test::read_ref(dir.file("seq.ref.pt"));
  auto full = (*m)->forward(ref.at("input"));
  ASSERT_TRUE(full.ok()) << full.error().str();
  EXPECT_LE(((*full)[0].tensor - ref.at("output.0")).abs().max().item<double>(), 1e-5);
  for (int k = 0; k <= (*m)->num_layers(); ++k) {
    auto head = (*m)->run(0, k, SplitModel::input_bundle(ref.at("input")));
    ASSERT_TRUE(head.ok());
    auto tail = (*m)->run(k, (*m)->num_layers(), *head);
    ASSERT_TRUE(tail.ok());
    EXPECT_TRUE(torch::equal((*tail)[0].tensor, (*full)[0].tensor)) << "split " << k;
  }
  // State dict keys are the TorchScript parameter paths.
  bool found = false;
  for (const auto& nt : (*m)->state_dict()) found |= nt.name == "3.2.1.weight";
  EXPECT_TRUE(found);
}

INSTANTIATE_TEST_SUITE_P(ScriptedAndTraced, TorchScript, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "traced" : "scripted"; });

TEST(TorchScriptFile, MissingFileIsAnErrorAndAnyModuleLoads) {
  TempDir dir;
  auto m = create_model("torchscript:" + dir.file("absent.ts"), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("absent.ts"), std::string::npos);
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " torchscript " + dir.path() +
                             " --not-sequential"),
            0);
  // Not a Sequential: a graph like any other (one layer, the root's own op).
  ModelConfig cfg;
  cfg.input_shape = {4};
  cfg.device = "cpu";
  auto lin = create_model("torchscript:" + dir.file("linear.ts"), cfg);
  ASSERT_TRUE(lin.ok()) << lin.error().str();
  ASSERT_EQ((*lin)->num_layers(), 1);
  EXPECT_EQ((*lin)->layers()[0].name, "linear");
}

}  // namespace
}  // namespace tracr::experiments
