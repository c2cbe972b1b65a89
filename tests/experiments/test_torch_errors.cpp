// LibTorch throws more than c10::Error: torch::jit::JITException from a
// scripted `raise`, std::runtime_error from the interpreter and the
// unpickler. Each reaches the user as an error naming the model, never as a
// crash (issue #24: torch_error_text called itself forever for those, a
// segfault, exit 139).
#include <gtest/gtest.h>

#include <stdexcept>

#include "experiments/model.hpp"
#include "experiments/registry.hpp"
#include "test_util.hpp"

namespace tracr::experiments {
namespace {

using test::TempDir;

// The models of scripts/torch_error_models.py, written once per test.
class TorchErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(test::run_python(test::script("torch_error_models.py") + " " + dir_.path()), 0);
  }
  std::string ts(const std::string& name) const { return "torchscript:" + dir_.file(name); }
  TempDir dir_;
};

ModelConfig at_input(std::vector<int64_t> shape) {
  ModelConfig cfg;
  cfg.input_shape = std::move(shape);
  cfg.device = "cpu";
  return cfg;
}

// Every exception type LibTorch code may throw gives its text back once,
// without a backtrace, and returns: no path calls itself.
TEST(TorchErrorText, EveryExceptionTypeReturnsItsText) {
  EXPECT_EQ(torch_error_text(std::runtime_error("plain runtime error")), "plain runtime error");
  EXPECT_EQ(torch_error_text(std::logic_error("logic")), "logic");
  EXPECT_EQ(torch_error_text(std::out_of_range("range")), "range");
  EXPECT_FALSE(torch_error_text(std::bad_alloc()).empty());
  try {
    TORCH_CHECK(false, "a c10 check that fails");
  } catch (const c10::Error& e) {
    const std::string t = torch_error_text(e);
    EXPECT_NE(t.find("a c10 check that fails"), std::string::npos) << t;
    EXPECT_EQ(t.find("frame #"), std::string::npos) << "backtrace kept: " << t;
  }
  try {
    at::ones({2, 3}).view({7});  // c10::Error subclasses too
  } catch (const std::exception& e) {
    EXPECT_FALSE(torch_error_text(e).empty());
  }
}

// A TorchScript model given an input shape it cannot take: at the default
// 3x224x224 and at a small one. The Linear wants 10 features.
TEST_F(TorchErrors, InputShapeTheModelCannotTakeIsAnError) {
  for (auto shape : {std::vector<int64_t>{3, 224, 224}, std::vector<int64_t>{1, 4, 4}}) {
    auto m = create_model(ts("narrow.ts"), at_input(shape));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("narrow.ts"), std::string::npos) << m.error().str();
  }
  // It runs at the shape it takes.
  auto ok = create_model(ts("narrow.ts"), at_input({1, 2, 5}));
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  auto wrong = (*ok)->forward(torch::zeros({1, 3, 3, 3}));
  ASSERT_FALSE(wrong.ok());
  EXPECT_FALSE(wrong.error().message.empty());
}

// A child that returns a tuple or a dict instead of a tensor: the graph
// splitter (#23) runs such a module (a tuple travels as its elements), or
// refuses it with an error naming the file; it never crashes.
TEST_F(TorchErrors, ChildReturningATupleOrADictRunsOrIsAnError) {
  for (const char* file : {"tuple.ts", "dict.ts"}) {
    auto m = create_model(ts(file), at_input({1, 4, 4}));
    if (!m.ok()) {
      EXPECT_NE(m.error().message.find(file), std::string::npos) << m.error().str();
      continue;
    }
    auto out = (*m)->forward(torch::zeros({1, 1, 4, 4}));
    ASSERT_TRUE(out.ok()) << file << ": " << out.error().str();
    EXPECT_FALSE(out->empty()) << file;
    for (const auto& t : *out) EXPECT_TRUE(t.tensor.defined()) << file << " " << t.name;
  }
}

// A scripted module that raises (torch::jit::JITException, not a c10::Error).
TEST_F(TorchErrors, ScriptedModuleThatRaisesIsAnError) {
  auto m = create_model(ts("raises.ts"), at_input({1, 4, 4}));
  if (m.ok()) {
    auto out = (*m)->forward(torch::zeros({1, 1, 4, 4}));
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.error().message.find("always raises"), std::string::npos) << out.error().str();
  } else {
    EXPECT_NE(m.error().message.find("always raises"), std::string::npos) << m.error().str();
  }
}

// A whole pickled model (torch.save(model)) passed as `weights:`.
TEST_F(TorchErrors, PickledWholeModelAsWeightsIsAnError) {
  ModelConfig cfg = at_input({1, 28, 28});
  cfg.weights = dir_.file("whole_model.pth");
  auto m = create_model("fmnist_cnn", cfg);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("whole_model.pth"), std::string::npos) << m.error().str();
}

}  // namespace
}  // namespace tracr::experiments
