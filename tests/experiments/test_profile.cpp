#include <gtest/gtest.h>
#include <torch/torch.h>

#include "experiments/profile.hpp"
#include "experiments/registry.hpp"

namespace tracr::experiments {
namespace {

TEST(Profile, EveryLayerGetsLatencyBytesAndMemory) {
  ModelConfig cfg;
  cfg.input_shape = {3, 32, 32};
  cfg.device = "cpu";
  auto m = create_model("resnet18", cfg);
  ASSERT_TRUE(m.ok());
  ProfileOptions opts;
  opts.warmup = 1;
  opts.repetitions = 5;
  auto prof = profile_layers(**m, torch::randn({2, 3, 32, 32}), opts);
  ASSERT_TRUE(prof.ok()) << prof.error().str();
  ASSERT_EQ(static_cast<int>(prof->size()), (*m)->num_layers());
  for (const auto& p : *prof) {
    const auto& li = (*m)->layers()[p.index];
    EXPECT_EQ(p.name, li.name);
    EXPECT_EQ(p.device, "cpu");
    EXPECT_EQ(p.repetitions, 5);
    EXPECT_GT(p.median_ms, 0);
    EXPECT_GE(p.p95_ms, p.median_ms);
    EXPECT_GE(p.median_ms, p.min_ms);
    EXPECT_EQ(p.output_bytes, 2 * li.output_bytes) << p.name;  // batch 2
    EXPECT_EQ(p.macs, 2 * li.macs);
    EXPECT_GT(p.input_bytes, 0);
    EXPECT_GE(p.peak_rss_delta_bytes, -1);
  }
  EXPECT_EQ((*prof)[0].input_bytes, 2 * 3 * 32 * 32 * 4);
  std::cout << format_layer_profiles(*prof).substr(0, 600);

  auto table = split_table(**m, *prof, 2);
  ASSERT_EQ(static_cast<int>(table.size()), (*m)->num_layers() + 1);
  double total = 0;
  for (const auto& p : *prof) total += p.median_ms;
  EXPECT_DOUBLE_EQ(table.front().head_ms, 0.0);
  EXPECT_NEAR(table.front().tail_ms, total, 1e-9);
  EXPECT_NEAR(table.back().head_ms, total, 1e-9);
  EXPECT_EQ(table.front().crossing_bytes, 2 * 3 * 32 * 32 * 4);
  EXPECT_EQ(table.back().crossing_bytes, 2 * 1000 * 4);
  for (const auto& s : table) {
    EXPECT_NEAR(s.head_ms + s.tail_ms, total, 1e-6);
    EXPECT_EQ(s.crossing_bytes, 2 * (*m)->crossing_bytes(s.split));
  }
  EXPECT_NE(format_split_table(table).find("(input)"), std::string::npos);
}

TEST(Profile, PeakRssSeesALargeAllocation) {
  if (!reset_peak_rss()) GTEST_SKIP() << "kernel refuses to reset VmHWM via /proc/self/clear_refs";
  const int64_t before = current_rss_bytes();
  ASSERT_GT(before, 0);
  {
    auto big = torch::ones({64 * 1024 * 1024 / 4});  // 64 MiB, touched
    EXPECT_EQ(big.sum().item<float>(), 16.0f * 1024 * 1024);
  }
  EXPECT_GE(peak_rss_bytes() - before, 60LL * 1024 * 1024);
}

TEST(Profile, InvalidOptionsAreErrors) {
  ModelConfig cfg;
  cfg.input_shape = {3, 32, 32};
  cfg.device = "cpu";
  auto m = create_model("mobilenet_v2", cfg);
  ASSERT_TRUE(m.ok());
  ProfileOptions opts;
  opts.repetitions = 0;
  EXPECT_FALSE(profile_layers(**m, torch::randn({1, 3, 32, 32}), opts).ok());
}

}  // namespace
}  // namespace tracr::experiments
