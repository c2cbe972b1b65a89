#include <gtest/gtest.h>
#include <torch/torch.h>

#include "experiments/local_run.hpp"
#include "experiments/registry.hpp"

namespace tracr::experiments {
namespace {

std::unique_ptr<SplitModel> make(const std::string& name, int64_t size) {
  ModelConfig cfg;
  cfg.input_shape = {3, size, size};
  cfg.device = "cpu";
  auto m = create_model(name, cfg);
  if (!m) throw std::runtime_error(m.error().str());
  return std::move(*m);
}

protocol::CodecSpec codec(const char* text) {
  auto c = protocol::CodecSpec::parse(text);
  if (!c) throw std::runtime_error(c.error().str());
  return *c;
}

TEST(LocalRun, LosslessCodecsReproduceTheUnsplitOutputAtEverySplit) {
  auto m = make("resnet18", 32);
  const auto x = torch::randn({2, 3, 32, 32});
  auto full = m->forward(x);
  ASSERT_TRUE(full.ok());
  for (const char* c : {"none", "blosc-lz4", "blosc-zstd:level=3,shuffle=bit", "sparse", "sparse+blosc-lz4"}) {
    for (int k = 0; k <= m->num_layers(); k += 7) {
      auto r = run_split_local(*m, x, k, codec(c));
      ASSERT_TRUE(r.ok()) << c << " split " << k << ": " << r.error().str();
      EXPECT_EQ(r->split, k);
      EXPECT_EQ(r->raw_bytes, 2 * m->crossing_bytes(k));
      if (std::string(c) == "none") {
        EXPECT_EQ(r->wire_bytes, r->raw_bytes);
      }
      // After a ReLU (resnet18's split 7 crosses one), the sparse stage drops the zeros.
      if (std::string(c) == "sparse" && k == 7) EXPECT_LT(r->wire_bytes, r->raw_bytes);
      ASSERT_EQ(r->outputs.size(), 1u);
      EXPECT_TRUE(torch::equal(r->outputs[0].tensor, (*full)[0].tensor)) << c << " split " << k;
      EXPECT_GE(r->head_ms, 0);
      EXPECT_GE(r->tail_ms, 0);
    }
  }
}

TEST(LocalRun, LossyCodecShrinksWireBytesAndStaysClose) {
  auto m = make("tiny_fpn_detector", 64);
  const auto x = torch::randn({1, 3, 64, 64});
  auto full = m->forward(x);
  ASSERT_TRUE(full.ok());
  const int k = m->num_layers() / 2;
  auto r = run_split_local(*m, x, k, codec("fp16+blosc-lz4"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_LE(r->wire_bytes * 2, r->raw_bytes + 4096);
  EXPECT_EQ(r->codec, "fp16+blosc-lz4");
  ASSERT_EQ(r->outputs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& ref = (*full)[i].tensor;
    const double diff = (r->outputs[i].tensor - ref).abs().max().item<double>();
    EXPECT_LT(diff, 1e-2 * (1 + ref.abs().max().item<double>()));
  }
  auto q = run_split_local(*m, x, k, codec("int8"));
  ASSERT_TRUE(q.ok());
  EXPECT_LE(q->wire_bytes * 4, q->raw_bytes + 64);
  // int8 under the sparse stage decodes to the same values as int8 alone.
  auto qs = run_split_local(*m, x, k, codec("int8+sparse"));
  ASSERT_TRUE(qs.ok()) << qs.error().str();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(qs->outputs[i].tensor, q->outputs[i].tensor)) << i;
}

TEST(LocalRun, SplitOutOfRangeIsAnError) {
  auto m = make("mobilenet_v2", 32);
  auto r = run_split_local(*m, torch::randn({1, 3, 32, 32}), m->num_layers() + 1, codec("none"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
}

}  // namespace
}  // namespace tracr::experiments
