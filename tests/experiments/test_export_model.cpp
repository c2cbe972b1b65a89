// scripts/export_model.py against LibTorch: the .pt it writes loads with
// torch::jit::load and gives Python's output for the same input, for a
// torchvision model with a user's weights file, a model of the user's own on
// four features (an nn.Sequential, which `torchscript:` splits today) and a
// transformer on a token sequence; the preset it writes is the weights
// enum's; its errors say what went wrong.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "experiments/registry.hpp"
#include "test_util.hpp"

namespace tracr::experiments {
namespace {

using test::TempDir;

const char* kUserModels = R"(import torch
import torch.nn as nn


def mlp(features=4, classes=3):
    # A plain nn.Sequential: main's torchscript: loader takes only that type.
    return nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, classes))


class TinyTransformer(nn.Module):
    def __init__(self, d=32, heads=4, layers=2, classes=5):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y * 2
        return y - 1


if __name__ == "__main__":
    torch.manual_seed(5)
    torch.save(mlp(), "mlp_whole.pth")         # a whole pickled model
    torch.save(mlp(features=5).state_dict(), "mlp5.pth")
)";

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The exported file, run by LibTorch on the reference input, against the
// eager model's output in Python.
void expect_matches_python(const std::string& pt, const std::string& ref_path, const std::string& what) {
  torch::jit::Module m = torch::jit::load(pt);
  m.eval();
  auto ref = test::read_ref(ref_path);
  torch::NoGradGuard ng;
  const at::Tensor out = m.forward({ref.at("input")}).toTensor();
  const at::Tensor& want = ref.at("output.0");
  ASSERT_EQ(out.sizes(), want.sizes()) << what;
  // The same LibTorch (1.13.1) kernels under the trace as in eager Python:
  // equal to float rounding.
  EXPECT_TRUE(torch::allclose(out, want, 1e-5, 1e-6))
      << what << ": differs by up to " << (out - want).abs().max().item<double>();
}

TEST(ExportModel, TorchvisionModelWithAWeightsFileLoadsInLibTorchWithPythonsOutput) {
  TempDir dir;
  // resnet18's state dict with randomised BatchNorm statistics, as a user's .pth.
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " model resnet18 " + dir.path() + " --size 64 64"),
            0);
  auto r = test::run_python_output(test::script("export_model.py") + " resnet18 r18.pt --weights resnet18.pth " +
                                       "--input-shape 3,64,64 --batch 2 --reference r18.ref.pt",
                                   dir.path());
  ASSERT_EQ(r.first, 0) << r.second;
  expect_matches_python(dir.file("r18.pt"), dir.file("r18.ref.pt"), "resnet18");
  // The preset of ResNet18_Weights.IMAGENET1K_V1 (resize 256, crop 224),
  // scaled to the traced 64x64.
  const std::string preset = read_text(dir.file("r18.preset.yaml"));
  EXPECT_NE(preset.find("ResNet18_Weights.IMAGENET1K_V1"), std::string::npos) << preset;
  EXPECT_NE(preset.find("input_size: [3, 64, 64]"), std::string::npos) << preset;
  EXPECT_NE(preset.find("resize_size: 73"), std::string::npos) << "round(64 * 256 / 224)\n" << preset;
  EXPECT_NE(preset.find("interpolation: bilinear"), std::string::npos) << preset;
  EXPECT_NE(preset.find("mean: [0.485, 0.456, 0.406]"), std::string::npos) << preset;
}

TEST(ExportModel, PresetIsTheWeightsEnumsOwn) {
  TempDir dir;
  // EfficientNet-B0's weights: bicubic, resize 256, crop 224 (the default input).
  auto r = test::run_python_output(test::script("export_model.py") + " efficientnet_b0 e.pt", dir.path());
  ASSERT_EQ(r.first, 0) << r.second;
  const std::string preset = read_text(dir.file("e.preset.yaml"));
  EXPECT_NE(preset.find("EfficientNet_B0_Weights.IMAGENET1K_V1"), std::string::npos) << preset;
  EXPECT_NE(preset.find("input_size: [3, 224, 224]"), std::string::npos) << preset;
  EXPECT_NE(preset.find("resize_size: 256"), std::string::npos) << preset;
  EXPECT_NE(preset.find("interpolation: bicubic"), std::string::npos) << preset;
  torch::jit::Module m = torch::jit::load(dir.file("e.pt"));
  torch::NoGradGuard ng;
  EXPECT_EQ(m.forward({torch::zeros({1, 3, 224, 224})}).toTensor().sizes(), (c10::IntArrayRef{1, 1000}));
}

TEST(ExportModel, NonImageModelsFromAUsersFileLoadAndSplit) {
  TempDir dir;
  { std::ofstream(dir.file("nets.py")) << kUserModels; }
  const std::string exp = test::script("export_model.py");
  // Four features into an MLP, with weights pickled as a whole model by a script.
  auto pickled = test::run_python_output("nets.py", dir.path());
  ASSERT_EQ(pickled.first, 0) << pickled.second;
  auto r = test::run_python_output(
      exp + " nets.py:mlp mlp.pt --input-shape 4 --weights mlp_whole.pth --batch 3 --reference mlp.ref.pt", dir.path());
  ASSERT_EQ(r.first, 0) << r.second;
  expect_matches_python(dir.file("mlp.pt"), dir.file("mlp.ref.pt"), "MLP on 4 features");
  // A token sequence [T, D] into a transformer encoder.
  r = test::run_python_output(
      exp + " nets.py:TinyTransformer tt.pt --input-shape 12,32 --arg layers=1 --reference tt.ref.pt", dir.path());
  ASSERT_EQ(r.first, 0) << r.second;
  expect_matches_python(dir.file("tt.pt"), dir.file("tt.ref.pt"), "transformer on [12, 32]");
  // The file records the shape it was traced at: with no input_size (an
  // experiment without one, `profile` without --input-shape) that is the
  // model's input, not [3, 224, 224] (#46 item 6).
  {
    ModelConfig dflt;
    dflt.device = "cpu";
    auto t = create_model("torchscript:" + dir.file("tt.pt"), dflt);
    ASSERT_TRUE(t.ok()) << t.error().str();
    EXPECT_EQ((*t)->input_shape(), (std::vector<int64_t>{12, 32}));
  }

  // The MLP is an nn.Sequential: `torchscript:` splits it at a [4] input,
  // head then tail equal to the whole at every cut.
  ModelConfig cfg;
  cfg.input_shape = {4};
  cfg.device = "cpu";
  auto m = create_model("torchscript:" + dir.file("mlp.pt"), cfg);
  ASSERT_TRUE(m.ok()) << m.error().str();
  EXPECT_EQ((*m)->num_layers(), 5);
  EXPECT_EQ((*m)->input_shape(), (std::vector<int64_t>{4}));
  auto ref = test::read_ref(dir.file("mlp.ref.pt"));
  auto full = (*m)->forward(ref.at("input"));
  ASSERT_TRUE(full.ok()) << full.error().str();
  EXPECT_TRUE(torch::allclose((*full)[0].tensor, ref.at("output.0"), 1e-5, 1e-6));
  for (int k = 0; k <= (*m)->num_layers(); ++k) {
    auto head = (*m)->run(0, k, SplitModel::input_bundle(ref.at("input")));
    ASSERT_TRUE(head.ok()) << head.error().str();
    auto tail = (*m)->run(k, (*m)->num_layers(), *head);
    ASSERT_TRUE(tail.ok()) << tail.error().str();
    EXPECT_TRUE(torch::equal((*tail)[0].tensor, (*full)[0].tensor)) << "split " << k;
  }
}

TEST(ExportModel, ErrorsNameTheModelAndWhatWentWrong) {
  TempDir dir;
  { std::ofstream(dir.file("nets.py")) << kUserModels; }
  ASSERT_EQ(test::run_python_output("nets.py", dir.path()).first, 0);
  const std::string exp = test::script("export_model.py");
  struct Case {
    std::string args;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"resnet5 x.pt", {"unknown torchvision model 'resnet5'", "did you mean resnet50", "module:Class"}},
      {"nets.py:Nope x.pt", {"'nets.py' has no 'Nope'", "Branchy, TinyTransformer"}},
      {"no_such_module:Net x.pt", {"cannot import module 'no_such_module'"}},
      {"missing.py:Net x.pt", {"no such file 'missing.py'"}},
      {"nets.py:mlp x.pt", {"no default input shape; give --input-shape"}},
      {"nets.py:mlp x.pt --input-shape 4 --weights mlp5.pth",
       {"does not fit the model", "mis-shaped 0.weight: [16, 5], the model has [16, 4]"}},
      {"nets.py:mlp x.pt --input-shape 4 --weights nets.py", {"not a PyTorch weights file"}},
      {"nets.py:mlp x.pt --input-shape 0,4", {"--input-shape 0,4: expected positive sizes"}},
      {"alexnet x.pt --input-shape 4",
       {"torch.jit.trace failed for alexnet at input [1, 4]", "data-dependent control flow"}},
      {"nets.py:Branchy x.pt --input-shape 4",
       {"tracing records one path", "differs from the model's on another input", "torch.jit.script"}},
  };
  for (const auto& c : cases) {
    auto r = test::run_python_output(exp + " " + c.args, dir.path());
    EXPECT_EQ(r.first, 2) << c.args << "\n" << r.second;
    EXPECT_EQ(r.second.find("Traceback"), std::string::npos) << c.args << "\n" << r.second;
    for (const auto& e : c.expect) EXPECT_NE(r.second.find(e), std::string::npos) << c.args << ": " << e << "\n" << r.second;
    EXPECT_FALSE(std::filesystem::exists(dir.file("x.pt"))) << c.args;
  }
}

}  // namespace
}  // namespace tracr::experiments
