// compression: auto — each lossless candidate is tried through the real
// frame writer and reader; the choice follows the link's rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "protocol/codec_choice.hpp"

namespace tracr::protocol {
namespace {

// Post-ReLU activations: normal values with the negatives at zero (about half).
Tensor post_relu(int64_t n, uint32_t seed) {
  Tensor t = Tensor::allocate("act", DType::float32, {1, n});
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  auto* p = reinterpret_cast<float*>(t.mutable_data());
  for (int64_t i = 0; i < n; ++i) p[i] = std::max(0.f, d(gen));
  return t;
}

TEST(AutoCodec, EveryCandidateIsTriedAndTheBestPredictedTimeWins) {
  Bundle b{post_relu(193600, 1)};  // 774,400 bytes, the size the benchmarks use
  CodecChoiceOptions o;
  o.up_mbps = 100;
  auto r = try_codecs(b, o);
  ASSERT_TRUE(r) << r.error().str();
  ASSERT_EQ(r->size(), auto_codec_candidates().size());
  for (size_t i = 1; i < r->size(); ++i) EXPECT_LE((*r)[i - 1].total_ms, (*r)[i].total_ms);
  for (const auto& t : *r) {
    EXPECT_EQ(t.raw_bytes, 774400u);
    EXPECT_GT(t.wire_bytes, 0u);
    EXPECT_NEAR(t.link_ms, t.wire_bytes * 8.0 / 1e5, 1e-9);  // 100 Mbit/s
    EXPECT_NEAR(t.total_ms, t.encode_ms + t.decode_ms + t.link_ms, 1e-9);
    EXPECT_GT(t.encode_ms, 0);
    EXPECT_GT(t.decode_ms, 0);
  }
  const std::string text = describe_choice(*r, o.up_mbps);
  EXPECT_EQ(text.rfind("auto chose " + r->front().codec, 0), 0u) << text;
  for (const auto& c : auto_codec_candidates()) EXPECT_NE(text.find(c), std::string::npos) << c;
}

TEST(AutoCodec, ASlowLinkPicksACodecThatShrinksTheActivations) {
  // At 1 Mbit/s every byte costs 8 us: half-zero activations are worth compressing.
  Bundle b{post_relu(9216, 2)};
  CodecChoiceOptions o;
  o.up_mbps = 1;
  o.encrypt = true;
  auto r = try_codecs(b, o);
  ASSERT_TRUE(r) << r.error().str();
  EXPECT_NE(r->front().codec, "none");
  auto none = std::find_if(r->begin(), r->end(), [](const CodecTrial& t) { return t.codec == "none"; });
  ASSERT_NE(none, r->end());
  EXPECT_LT(r->front().wire_bytes * 10, none->wire_bytes * 7) << "at least 30 % smaller than uncompressed";
}

TEST(AutoCodec, UnknownLinkRateLeavesCpuTimeToDecide) {
  Bundle b{post_relu(9216, 3)};
  CodecChoiceOptions o;
  o.up_mbps = 0;
  auto r = try_codecs(b, o);
  ASSERT_TRUE(r);
  for (const auto& t : *r) EXPECT_EQ(t.link_ms, 0);
  EXPECT_NE(describe_choice(*r, 0).find("link rate unknown: CPU time decided"), std::string::npos);
}

TEST(AutoCodec, ABadCandidateIsAnErrorNamingIt) {
  Bundle b{post_relu(1024, 4)};
  CodecChoiceOptions o;
  o.candidates = {"none", "blosc-snappy9"};
  auto r = try_codecs(b, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("blosc-snappy9"), std::string::npos) << r.error().str();
}

}  // namespace
}  // namespace tracr::protocol
