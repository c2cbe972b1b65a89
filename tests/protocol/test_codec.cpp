// Codec text parsing, lossy transforms against their stated error bounds,
// chunking, and the blosc stage against corrupt and hostile input.
#include <blosc.h>
#include <fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "protocol/codec.hpp"

namespace tracr::protocol {
namespace {

constexpr uint8_t kCanary = 0xA5;
constexpr size_t kGuard = 64;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Normal(0, sigma) values; with relu, negatives become 0 (about half zeros).
std::vector<float> normal_data(size_t n, float sigma, bool relu, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (relu && x < 0.0f) x = 0.0f;
  }
  return v;
}

// Values spanning many binades (1e-9 .. 3e4), both signs, plus zeros.
std::vector<float> wide_data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-30, 14);
  std::bernoulli_distribution neg(0.5), zero(0.05);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = zero(rng) ? 0.0f : std::ldexp(mant(rng), ex(rng)) * (neg(rng) ? -1.0f : 1.0f);
  }
  return v;
}

Tensor view_of(const std::vector<float>& v, std::vector<int64_t> shape) {
  return Tensor::view("x", DType::float32, std::move(shape), v.data());
}

CodecSpec spec_of(std::string_view text) {
  auto r = CodecSpec::parse(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().str());
  return r.ok() ? *r : CodecSpec{};
}

LossyParams prepare(std::string_view codec, const Tensor& t) {
  auto r = lossy_prepare(spec_of(codec), t);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().str());
  return r.ok() ? *r : LossyParams{};
}

std::vector<uint8_t> encode_all(const LossyParams& p, const std::vector<float>& v) {
  std::vector<uint8_t> wire(v.size() * dtype_size(p.wire));
  lossy_encode(p, reinterpret_cast<const uint8_t*>(v.data()), 0, static_cast<int64_t>(v.size()),
               wire.data());
  return wire;
}

std::vector<float> decode_all(const LossyParams& p, const std::vector<uint8_t>& wire, size_t n) {
  std::vector<float> out(n);
  lossy_decode(p, wire.data(), 0, static_cast<int64_t>(n), reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

// Every element's |decoded - x| is within lossy_error_bound; returns the
// number of violations (reports the first few).
size_t count_bound_violations(const LossyParams& p, const std::vector<float>& x) {
  const auto y = decode_all(p, encode_all(p, x), x.size());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - static_cast<double>(x[i]));
    const double bound = lossy_error_bound(p, x[i], static_cast<int64_t>(i));
    if (!(err <= bound)) {
      if (bad < 5)
        ADD_FAILURE() << lossy_name(p.kind) << " element " << i << ": x=" << x[i]
                      << " decoded=" << y[i] << " error " << err << " > bound " << bound;
      ++bad;
    }
  }
  return bad;
}

// ------------------------------------------------------------ codec text

TEST(Codec, EveryListedCodecRoundTripsThroughParseAndName) {
  const auto all = list_codecs();
  ASSERT_FALSE(all.empty());
  for (const auto& text : all) {
    auto r = CodecSpec::parse(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.error().str();
    EXPECT_EQ(r->name(), text);
    EXPECT_TRUE(r->validate().ok()) << text;
  }
}

TEST(Codec, ListIncludesEachLossyEachCnameAndCombos) {
  const auto all = list_codecs();
  const auto has = [&](std::string_view s) {
    return std::find(all.begin(), all.end(), s) != all.end();
  };
  for (auto s : {"none", "fp16", "bf16", "int8", "int8_channel", "blosc-lz4", "blosc-zstd",
                 "blosc-blosclz", "blosc-zlib", "fp16+blosc-lz4", "bf16+blosc-zstd",
                 "int8+blosc-lz4", "int8_channel+blosc-zstd"})
    EXPECT_TRUE(has(s)) << s;
}

TEST(Codec, ParsedFieldsMatchText) {
  auto s = spec_of("int8_channel+blosc-zstd:level=5,shuffle=bit,threads=4,axis=-1");
  EXPECT_EQ(s.lossy, Lossy::int8_channel);
  EXPECT_EQ(s.comp, Compressor::blosc);
  EXPECT_EQ(s.cname, "zstd");
  EXPECT_EQ(s.level, 5);
  EXPECT_EQ(s.shuffle, 2);
  EXPECT_EQ(s.threads, 4);
  EXPECT_EQ(s.channel_axis, -1);
  EXPECT_EQ(s.name(), "int8_channel+blosc-zstd:level=5,shuffle=bit,threads=4,axis=-1");

  auto n = spec_of("none");
  EXPECT_EQ(n.lossy, Lossy::none);
  EXPECT_EQ(n.comp, Compressor::none);
}

TEST(Codec, ParamsRoundTripInCanonicalOrderWithDefaultsDropped) {
  EXPECT_EQ(spec_of("blosc-lz4:level=1,shuffle=byte,threads=1").name(), "blosc-lz4");
  EXPECT_EQ(spec_of("blosc-zlib:shuffle=none,level=9").name(), "blosc-zlib:level=9,shuffle=none");
  EXPECT_EQ(spec_of("int8_channel:axis=1").name(), "int8_channel");
  EXPECT_EQ(spec_of("int8_channel:axis=+2").name(), "int8_channel:axis=2");
  for (const char* text : {"fp16+blosc-blosclz:level=3,shuffle=bit,threads=64",
                           "int8_channel:axis=0", "bf16+blosc-lz4:shuffle=none"}) {
    auto s = spec_of(text);
    EXPECT_EQ(s.name(), text);
    auto again = spec_of(s.name());
    EXPECT_EQ(again.name(), s.name());
  }
}

TEST(Codec, UnknownCodecTextsAreRejectedNamingTheToken) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"fp32", "'fp32'"},
      {"FP16", "'FP16'"},
      {"blosc-lz5", "'lz5'"},
      {"blosc-lz4hc", "'lz4hc'"},
      {"blosc-", "''"},
      {"blosc", "'blosc'"},
      {"fp16+", "'fp16+'"},
      {"+blosc-lz4", "''"},
      {"none+blosc-lz4", "'none'"},
      {"fp16+zstd", "'zstd'"},
      {"fp16+blosc-zstd+blosc-lz4", "'zstd+blosc-lz4'"},
      {"int9+blosc-lz4", "'int9'"},
      {":level=3", "empty"},
  };
  for (const auto& [text, token] : cases) {
    auto r = CodecSpec::parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, Errc::unknown_codec) << text << ": " << r.error().str();
    EXPECT_NE(r.error().message.find(token), std::string::npos)
        << text << ": " << r.error().message;
  }
}

TEST(Codec, UnknownCodecMessageListsAcceptedNames) {
  auto r = CodecSpec::parse("blosc-snappy");
  ASSERT_FALSE(r.ok());
  for (auto s : {"lz4", "zstd", "blosclz", "zlib"})
    EXPECT_NE(r.error().message.find(s), std::string::npos) << s;
  auto q = CodecSpec::parse("q4");
  ASSERT_FALSE(q.ok());
  for (auto s : {"none", "fp16", "bf16", "int8", "int8_channel", "blosc-"})
    EXPECT_NE(q.error().message.find(s), std::string::npos) << s;
}

TEST(Codec, BadParamsAreRejectedAsCodecParams) {
  const std::pair<const char*, const char*> cases[] = {
      {"blosc-lz4:level=0", "level=0"},
      {"blosc-lz4:level=10", "level=10"},
      {"blosc-lz4:level=x", "level=x"},
      {"blosc-lz4:level=3x", "level=3x"},
      {"blosc-lz4:level=", "level="},
      {"blosc-lz4:level", "level"},
      {"blosc-lz4:=3", "=3"},
      {"blosc-lz4:", "empty"},
      {"blosc-lz4:level=3,", "expected key=value"},
      {"blosc-lz4:shuffle=foo", "shuffle=foo"},
      {"blosc-lz4:shuffle=1", "shuffle=1"},
      {"blosc-lz4:threads=0", "threads=0"},
      {"blosc-lz4:threads=65", "threads=65"},
      {"blosc-lz4:threads=99999999999999999999", "threads="},
      {"blosc-lz4:foo=1", "'foo'"},
      {"blosc-lz4:level=1,level=2", "twice"},
      {"fp16:level=3", "level=3"},
      {"int8:axis=1", "axis=1"},
      {"int8_channel+blosc-lz4:axis=one", "axis=one"},
      {"blosc-zstd:axis=1", "axis=1"},
  };
  for (const auto& [text, token] : cases) {
    auto r = CodecSpec::parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, Errc::codec_params) << text << ": " << r.error().str();
    EXPECT_NE(r.error().message.find(token), std::string::npos)
        << text << ": " << r.error().message;
  }
}

TEST(Codec, ValidateRejectsOutOfRangeFields) {
  CodecSpec s;
  s.comp = Compressor::blosc;
  EXPECT_TRUE(s.validate().ok());
  auto with = [&](auto mutate) {
    CodecSpec t = s;
    mutate(t);
    return t.validate();
  };
  EXPECT_EQ(with([](CodecSpec& t) { t.level = 0; }).error().code, Errc::codec_params);
  EXPECT_EQ(with([](CodecSpec& t) { t.level = 10; }).error().code, Errc::codec_params);
  EXPECT_EQ(with([](CodecSpec& t) { t.shuffle = 3; }).error().code, Errc::codec_params);
  EXPECT_EQ(with([](CodecSpec& t) { t.threads = 0; }).error().code, Errc::codec_params);
  EXPECT_EQ(with([](CodecSpec& t) { t.cname = "snappy"; }).error().code, Errc::unknown_codec);
  EXPECT_EQ(with([](CodecSpec& t) { t.lossy = static_cast<Lossy>(9); }).error().code,
            Errc::unknown_codec);
  EXPECT_EQ(with([](CodecSpec& t) { t.comp = static_cast<Compressor>(7); }).error().code,
            Errc::unknown_codec);
}

TEST(Codec, NamesOfEnums) {
  EXPECT_EQ(lossy_name(Lossy::none), "none");
  EXPECT_EQ(lossy_name(Lossy::fp16), "fp16");
  EXPECT_EQ(lossy_name(Lossy::bf16), "bf16");
  EXPECT_EQ(lossy_name(Lossy::int8), "int8");
  EXPECT_EQ(lossy_name(Lossy::int8_channel), "int8_channel");
  EXPECT_EQ(compressor_name(Compressor::none), "none");
  EXPECT_EQ(compressor_name(Compressor::blosc), "blosc");
}

// ------------------------------------------------------------ fp16 / bf16

TEST(Codec, Fp16ErrorWithinStatedBound) {
  for (uint32_t seed : {1u, 2u}) {
    for (const auto& x :
         {normal_data(100003, 1.0f, false, seed), normal_data(100003, 3.0f, true, seed + 10),
          normal_data(4096, 1000.0f, false, seed + 20), wide_data(100003, seed + 30)}) {
      const auto t = view_of(x, {static_cast<int64_t>(x.size())});
      const auto p = prepare("fp16", t);
      ASSERT_EQ(p.kind, Lossy::fp16);
      ASSERT_EQ(p.wire, DType::float16);
      EXPECT_EQ(count_bound_violations(p, x), 0u);
    }
  }
}

TEST(Codec, Fp16EncodingMatchesFp16hAndSaturatesFiniteOverflow) {
  const auto t = view_of({}, {0});
  const auto p = prepare("fp16", t);
  std::mt19937 rng(7);
  std::vector<float> x;
  for (int i = 0; i < 1 << 20; ++i) x.push_back(from_bits(rng()));
  // Boundaries: max half, the rounding edge to infinity, subnormals, zero.
  for (float f :
       {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, 3.4e38f, 6.1035156e-05f, 5.9604645e-08f,
        2.9802322e-08f, 2.98023259e-08f, 1e-30f, 0.0f, 1.0f, 1.0009765625f, 1.00048828125f})
    for (float s : {1.0f, -1.0f}) x.push_back(f * s);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(from_bits(0x7F800001u));  // signalling NaN
  x.push_back(from_bits(0xFFC00001u));

  const auto wire = encode_all(p, x);
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, wire.data() + 2 * i, 2);
    const uint16_t ref = fp16_ieee_from_fp32_value(x[i]);
    const bool finite_in = std::isfinite(x[i]);
    if (finite_in && (ref & 0x7FFFu) == 0x7C00u) {
      EXPECT_EQ(got, (ref & 0x8000u) | 0x7BFFu) << "saturation of " << x[i];
    } else {
      ASSERT_EQ(got, ref) << "x=" << x[i] << " bits " << std::hex << to_bits(x[i]);
    }
  }
  const auto y = decode_all(p, wire, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i]));
    } else if (std::isinf(x[i])) {
      EXPECT_EQ(y[i], x[i]);
    } else if (std::fabs(x[i]) >= 65504.0f) {
      EXPECT_EQ(y[i], std::copysign(65504.0f, x[i])) << x[i];
    }
    if (!std::isnan(x[i])) {
      uint16_t h;
      std::memcpy(&h, wire.data() + 2 * i, 2);
      EXPECT_EQ(to_bits(y[i]), to_bits(fp16_ieee_to_fp32_value(h)));
    }
  }
}

TEST(Codec, Fp16DecodingMatchesFp16hOnEveryHalf) {
  const auto p = prepare("fp16", view_of({}, {0}));
  std::vector<uint16_t> h(65536);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> wire(h.size() * 2);
  std::memcpy(wire.data(), h.data(), wire.size());
  const auto y = decode_all(p, wire, h.size());
  for (size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(to_bits(y[i]), to_bits(fp16_ieee_to_fp32_value(h[i]))) << std::hex << i;
}

TEST(Codec, Bf16ErrorWithinStatedBound) {
  for (const auto& x : {normal_data(100003, 1.0f, false, 3), normal_data(100003, 3.0f, true, 4),
                        normal_data(4096, 1e30f, false, 5), wide_data(100003, 6)}) {
    const auto t = view_of(x, {static_cast<int64_t>(x.size())});
    const auto p = prepare("bf16+blosc-lz4", t);
    ASSERT_EQ(p.kind, Lossy::bf16);
    ASSERT_EQ(p.wire, DType::bfloat16);
    EXPECT_EQ(count_bound_violations(p, x), 0u);
  }
}

TEST(Codec, Bf16RoundsToNearestEvenAndKeepsNaN) {
  const auto p = prepare("bf16", view_of({}, {0}));
  const std::vector<float> x = {
      from_bits(0x3F808000u),  // tie, lower half even -> 0x3F80
      from_bits(0x3F818000u),  // tie, lower half odd -> 0x3F82
      from_bits(0x3F808001u),  // above tie -> 0x3F81
      from_bits(0x3F807FFFu),  // below tie -> 0x3F80
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      from_bits(0x7F800001u),  // signalling NaN with payload only in the low bits
      from_bits(0xFFC00000u),
      -0.0f,
  };
  const uint16_t want[] = {0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0xFF80};
  const auto wire = encode_all(p, x);
  for (size_t i = 0; i < std::size(want); ++i) {
    uint16_t got;
    std::memcpy(&got, wire.data() + 2 * i, 2);
    EXPECT_EQ(got, want[i]) << i;
  }
  const auto y = decode_all(p, wire, x.size());
  EXPECT_TRUE(std::isnan(y[6]));
  EXPECT_TRUE(std::isnan(y[7]));
  EXPECT_EQ(to_bits(y[8]), 0x80000000u);
}

// ------------------------------------------------------------ int8

TEST(Codec, Int8ErrorWithinStatedBound) {
  for (const auto& x : {normal_data(100003, 1.0f, false, 11), normal_data(100003, 2.0f, true, 12),
                        normal_data(4096, 1e-30f, false, 13), normal_data(4096, 1e20f, true, 14),
                        wide_data(50000, 15)}) {
    const auto t = view_of(x, {static_cast<int64_t>(x.size())});
    const auto p = prepare("int8+blosc-zstd", t);
    ASSERT_EQ(p.kind, Lossy::int8);
    ASSERT_EQ(p.wire, DType::int8);
    ASSERT_EQ(p.scale.size(), 1u);
    EXPECT_TRUE(lossy_validate(p, t.shape).ok());
    EXPECT_EQ(count_bound_violations(p, x), 0u);
  }
}

TEST(Codec, Int8ChannelErrorWithinStatedBound) {
  const std::vector<int64_t> shape = {2, 64, 13, 11};
  auto x = normal_data(2 * 64 * 13 * 11, 1.0f, true, 21);
  // Give channels very different ranges so per-channel scales matter.
  for (size_t i = 0; i < x.size(); ++i)
    x[i] *= std::ldexp(1.0f, static_cast<int>((i / 143) % 64) - 32);
  for (int axis : {1, 0, 2, 3, -1, -4}) {
    CodecSpec spec = spec_of("int8_channel");
    spec.channel_axis = axis;
    const auto t = view_of(x, shape);
    auto r = lossy_prepare(spec, t);
    ASSERT_TRUE(r.ok()) << r.error().str();
    const auto& p = *r;
    const int norm = axis < 0 ? axis + 4 : axis;
    EXPECT_EQ(p.axis, norm);
    EXPECT_EQ(p.channels, shape[static_cast<size_t>(norm)]);
    EXPECT_EQ(p.scale.size(), static_cast<size_t>(p.channels));
    EXPECT_TRUE(lossy_validate(p, shape).ok()) << axis;
    EXPECT_EQ(count_bound_violations(p, x), 0u) << "axis " << axis;
  }
}

TEST(Codec, Int8ChannelScalesFollowEachChannelsRange) {
  // Channel c holds values in [0, c + 1]: scale (c + 1) / 255 (rounded up slightly).
  std::vector<float> x(3 * 4 * 5);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = (i / 5) % 4;
    x[i] = static_cast<float>(c + 1) * static_cast<float>(i % 5) / 4.0f;
  }
  const auto p = prepare("int8_channel", view_of(x, {3, 4, 5}));
  ASSERT_EQ(p.scale.size(), 4u);
  for (size_t c = 0; c < 4; ++c) {
    const double want = (c + 1) / 255.0;
    EXPECT_GE(p.scale[c], want);
    EXPECT_LE(p.scale[c], want * (1 + 0x1p-13));
    EXPECT_EQ(p.zero_point[c], -128);
  }
  EXPECT_EQ(count_bound_violations(p, x), 0u);
}

TEST(Codec, Int8ZerosStayExact) {
  auto x = normal_data(100000, 1.5f, true, 31);
  auto neg = normal_data(1000, 1.0f, false, 32);
  for (auto& v : neg) v = -std::fabs(v);  // all <= 0: range [min, 0]
  neg[10] = neg[500] = 0.0f;
  for (const auto* data : {&x, &neg}) {
    for (const char* codec : {"int8", "int8_channel"}) {
      const std::vector<int64_t> shape = {1, 10, static_cast<int64_t>(data->size() / 10)};
      const auto p = prepare(codec, view_of(*data, shape));
      const auto y = decode_all(p, encode_all(p, *data), data->size());
      size_t zeros = 0;
      for (size_t i = 0; i < data->size(); ++i)
        if ((*data)[i] == 0.0f) {
          ++zeros;
          ASSERT_EQ(y[i], 0.0f) << codec << " element " << i;
        }
      EXPECT_GT(zeros, 1u);
    }
  }
}

TEST(Codec, Int8AllZeroTensorUsesUnitScale) {
  std::vector<float> x(100, 0.0f);
  const auto p = prepare("int8", view_of(x, {100}));
  ASSERT_EQ(p.scale.size(), 1u);
  EXPECT_EQ(p.scale[0], 1.0f);
  EXPECT_EQ(p.zero_point[0], -128);
  const auto y = decode_all(p, encode_all(p, x), x.size());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Codec, Int8MapsInfinitiesToRangeEndsAndNaNToZero) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = normal_data(1000, 1.0f, false, 41);
  float lo = 0, hi = 0;
  for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
  x[3] = inf;
  x[4] = -inf;
  x[5] = std::numeric_limits<float>::quiet_NaN();
  const auto p = prepare("int8", view_of(x, {1, 1000}));
  ASSERT_EQ(p.scale.size(), 1u);
  const auto y = decode_all(p, encode_all(p, x), x.size());
  EXPECT_NEAR(y[3], hi, p.scale[0] / 2);  // the finite range ignores infinities
  EXPECT_NEAR(y[4], lo, p.scale[0] / 2);
  EXPECT_EQ(y[5], 0.0f);

  // Per channel (axis 1 of [2, 3]: 3 channels, inner 1): each channel's
  // infinities go to that channel's extreme codes.
  const std::vector<float> z = {1.0f,  -2.0f, inf,
                                -4.0f, 8.0f,  std::numeric_limits<float>::quiet_NaN()};
  const auto q = prepare("int8_channel", view_of(z, {2, 3}));
  ASSERT_EQ(q.channels, 3);
  const auto w = decode_all(q, encode_all(q, z), z.size());
  EXPECT_NEAR(w[0], 1.0f, q.scale[0] / 2);
  EXPECT_NEAR(w[3], -4.0f, q.scale[0] / 2);
  EXPECT_NEAR(w[1], -2.0f, q.scale[1] / 2);
  EXPECT_NEAR(w[4], 8.0f, q.scale[1] / 2);
  // Channel 2 has no finite non-zero value: range [0, 0], scale 1, and +inf
  // saturates to the highest code.
  EXPECT_EQ(q.scale[2], 1.0f);
  EXPECT_EQ(w[2], (127 - q.zero_point[2]) * q.scale[2]);
  EXPECT_EQ(w[5], 0.0f);
}

TEST(Codec, Int8ChannelBadAxisIsRejected) {
  std::vector<float> x(24, 1.0f);
  for (int axis : {3, -4, 100}) {
    CodecSpec spec = spec_of("int8_channel");
    spec.channel_axis = axis;
    auto r = lossy_prepare(spec, view_of(x, {2, 3, 4}));
    ASSERT_FALSE(r.ok()) << axis;
    EXPECT_EQ(r.error().code, Errc::codec_params);
  }
  std::vector<float> one = {1.0f};
  auto r = lossy_prepare(spec_of("int8_channel:axis=0"), view_of(one, {}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::codec_params);
}

// ------------------------------------------------------------ chunking, dtypes

TEST(Codec, ChunkedEncodeDecodeEqualsWholeTensor) {
  const std::vector<int64_t> shape = {1, 6, 17, 13};
  const auto x = normal_data(6 * 17 * 13, 1.0f, true, 51);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<int64_t> cuts = {0, 1, 7, 200, 221, 222, 700, 1000, 1326};
  ASSERT_EQ(cuts.back(), n);
  for (const char* codec : {"none", "fp16", "bf16", "int8", "int8_channel", "int8_channel:axis=-1",
                            "int8_channel:axis=2", "int8_channel:axis=0"}) {
    const auto p = prepare(codec, view_of(x, shape));
    const size_t ws = dtype_size(p.wire);
    const auto whole = encode_all(p, x);
    const auto whole_back = decode_all(p, whole, x.size());
    std::vector<uint8_t> wire(whole.size(), 0);
    std::vector<float> back(x.size(), -1.0f);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t first = cuts[k], count = cuts[k + 1] - cuts[k];
      // src and dst both point at element `first`; `first` locates channels.
      lossy_encode(p, reinterpret_cast<const uint8_t*>(x.data() + first), first, count,
                   wire.data() + first * ws);
    }
    EXPECT_EQ(wire, whole) << codec;
    for (size_t k = cuts.size() - 1; k-- > 0;) {  // any order
      const int64_t first = cuts[k], count = cuts[k + 1] - cuts[k];
      lossy_decode(p, wire.data() + first * ws, first, count,
                   reinterpret_cast<uint8_t*>(back.data() + first));
    }
    EXPECT_EQ(std::memcmp(back.data(), whole_back.data(), x.size() * 4), 0) << codec;
  }
}

TEST(Codec, NonFloatDtypesPassThroughAsNone) {
  std::vector<int32_t> ints(100);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(i * 7919) - 300000;
  std::vector<double> doubles(50, 3.14159);
  const std::pair<DType, const void*> cases[] = {
      {DType::int32, ints.data()}, {DType::float64, doubles.data()}, {DType::uint8, ints.data()}};
  for (const auto& [dt, data] : cases) {
    const int64_t numel = dt == DType::int32 ? 100 : dt == DType::float64 ? 50 : 64;
    const auto t = Tensor::view("t", dt, {numel}, data);
    for (const char* codec : {"fp16", "bf16+blosc-lz4", "int8", "int8_channel:axis=0"}) {
      const auto p = prepare(codec, t);
      EXPECT_EQ(p.kind, Lossy::none) << codec;
      EXPECT_EQ(p.src, dt);
      EXPECT_EQ(p.wire, dt);
      EXPECT_TRUE(lossy_validate(p, t.shape).ok());
      std::vector<uint8_t> wire(t.nbytes), back(t.nbytes);
      lossy_encode(p, t.data, 0, numel, wire.data());
      EXPECT_EQ(std::memcmp(wire.data(), t.data, t.nbytes), 0);
      lossy_decode(p, wire.data(), 0, numel, back.data());
      EXPECT_EQ(std::memcmp(back.data(), t.data, t.nbytes), 0);
      EXPECT_EQ(lossy_error_bound(p, 1.0, 0), 0.0);
    }
  }
  // float32 with a lossless-only codec is none as well.
  std::vector<float> f(10, 1.5f);
  const auto p = prepare("blosc-zstd", view_of(f, {10}));
  EXPECT_EQ(p.kind, Lossy::none);
  EXPECT_EQ(p.wire, DType::float32);
}

TEST(Codec, ErrorBoundFollowsHeaderFormulas) {
  LossyParams p;
  p.kind = Lossy::fp16;
  EXPECT_EQ(lossy_error_bound(p, 1.0, 0), 0x1p-11);
  EXPECT_EQ(lossy_error_bound(p, -4.0, 0), 0x1p-9);
  EXPECT_EQ(lossy_error_bound(p, 0.0, 0), 0x1p-25);
  p.kind = Lossy::bf16;
  EXPECT_EQ(lossy_error_bound(p, -2.0, 0), 0x1p-7);
  p.kind = Lossy::int8_channel;
  p.channels = 3;
  p.inner = 4;
  p.scale = {1.0f, 2.0f, 4.0f};
  p.zero_point = {0, 0, 0};
  EXPECT_EQ(lossy_error_bound(p, 0.0, 0), 0.5 * (1 + 0x1p-20));
  EXPECT_EQ(lossy_error_bound(p, 0.0, 4), 1.0 * (1 + 0x1p-20));
  EXPECT_EQ(lossy_error_bound(p, 0.0, 11), 2.0 * (1 + 0x1p-20));
  EXPECT_EQ(lossy_error_bound(p, 0.0, 12), 0.5 * (1 + 0x1p-20));  // next outer slice
  p.kind = Lossy::none;
  EXPECT_EQ(lossy_error_bound(p, 5.0, 0), 0.0);
}

// ------------------------------------------------------------ lossy_validate

TEST(Codec, LossyValidateRejectsBadParams) {
  const std::vector<int64_t> shape = {2, 3, 4};
  LossyParams good;
  good.kind = Lossy::int8_channel;
  good.src = DType::float32;
  good.wire = DType::int8;
  good.axis = 1;
  good.channels = 3;
  good.inner = 4;
  good.scale = {0.1f, 0.2f, 0.3f};
  good.zero_point = {-128, 0, 127};
  ASSERT_TRUE(lossy_validate(good, shape).ok());

  const std::pair<const char*, std::function<void(LossyParams&)>> cases[] = {
      {"scale count", [](LossyParams& p) { p.scale.push_back(1.0f); }},
      {"scale count", [](LossyParams& p) { p.scale.clear(); }},
      {"zero point count", [](LossyParams& p) { p.zero_point.pop_back(); }},
      {"NaN scale", [](LossyParams& p) { p.scale[1] = std::nanf(""); }},
      {"inf scale", [](LossyParams& p) { p.scale[1] = std::numeric_limits<float>::infinity(); }},
      {"zero scale", [](LossyParams& p) { p.scale[0] = 0.0f; }},
      {"negative scale", [](LossyParams& p) { p.scale[2] = -1.0f; }},
      {"zp 128", [](LossyParams& p) { p.zero_point[0] = 128; }},
      {"zp -129", [](LossyParams& p) { p.zero_point[0] = -129; }},
      {"axis 3", [](LossyParams& p) { p.axis = 3; }},
      {"axis -1", [](LossyParams& p) { p.axis = -1; }},
      {"channels", [](LossyParams& p) { p.channels = 4; }},
      {"inner", [](LossyParams& p) { p.inner = 5; }},
      {"wire fp16", [](LossyParams& p) { p.wire = DType::float16; }},
      {"src int32", [](LossyParams& p) { p.src = DType::int32; }},
      {"kind 9", [](LossyParams& p) { p.kind = static_cast<Lossy>(9); }},
      {"wire 200", [](LossyParams& p) { p.wire = static_cast<DType>(200); }},
      {"int8 with 3 scales", [](LossyParams& p) { p.kind = Lossy::int8; }},
      {"fp16 with int8 wire", [](LossyParams& p) { p.kind = Lossy::fp16; }},
      {"bf16 with int8 wire", [](LossyParams& p) { p.kind = Lossy::bf16; }},
      {"none with int8 wire", [](LossyParams& p) { p.kind = Lossy::none; }},
  };
  for (const auto& [what, mutate] : cases) {
    LossyParams p = good;
    mutate(p);
    auto st = lossy_validate(p, shape);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.error().code, Errc::codec_params) << what;
    EXPECT_FALSE(st.error().message.empty());
  }
  // Rank 0 with int8_channel.
  LossyParams p = good;
  p.axis = 0;
  EXPECT_FALSE(lossy_validate(p, {}).ok());
}

TEST(Codec, LossyValidateAcceptsPreparedAndSimpleParams) {
  const auto x = normal_data(2 * 3 * 4, 1.0f, false, 61);
  for (const char* codec :
       {"none", "fp16", "bf16", "int8", "int8_channel", "int8_channel:axis=-1"}) {
    const auto p = prepare(codec, view_of(x, {2, 3, 4}));
    EXPECT_TRUE(lossy_validate(p, {2, 3, 4}).ok()) << codec;
  }
  LossyParams p;
  p.kind = Lossy::int8_channel;
  p.wire = DType::int8;
  p.axis = 1;
  p.channels = 3;
  p.inner = 4;
  p.scale = {0.5f};  // one scale shared by all channels
  p.zero_point = {3};
  EXPECT_TRUE(lossy_validate(p, {2, 3, 4}).ok());
}

// ------------------------------------------------------------ blosc

std::vector<uint8_t> compressible_bytes(size_t n, uint32_t seed) {
  const auto f = normal_data(n / 4 + 1, 1.0f, true, seed);
  std::vector<uint8_t> b(n);
  if (n) std::memcpy(b.data(), f.data(), n);
  return b;
}

std::vector<uint8_t> compress(const CodecSpec& spec, const std::vector<uint8_t>& raw,
                              size_t typesize = 4) {
  std::vector<uint8_t> out(blosc_max_compressed(raw.size()));
  auto r = blosc_compress(spec, typesize, raw.data(), raw.size(), out.data(), out.size());
  EXPECT_TRUE(r.ok()) << r.error().str();
  out.resize(r.ok() ? *r : 0);
  return out;
}

// Decompresses into a buffer with a guard zone after `expected` bytes and
// checks the guard is intact.
Status decompress_guarded(const std::vector<uint8_t>& c, size_t n, size_t expected,
                          std::vector<uint8_t>* out = nullptr) {
  std::vector<uint8_t> dst(expected + kGuard, kCanary);
  auto st = blosc_decompress(c.data(), n, dst.data(), expected, 1);
  for (size_t i = expected; i < dst.size(); ++i) {
    EXPECT_EQ(dst[i], kCanary) << "wrote past dst at +" << (i - expected);
    if (dst[i] != kCanary) break;
  }
  if (out) out->assign(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(expected));
  return st;
}

TEST(Codec, BloscRoundTripsEveryCnameAndShuffle) {
  const auto raw = compressible_bytes(200 * 1024 + 12, 71);
  for (const char* cname : {"lz4", "zstd", "blosclz", "zlib"}) {
    for (const char* shuffle : {"none", "byte", "bit"}) {
      for (int level : {1, 9}) {
        auto spec = spec_of(std::string("blosc-") + cname + ":shuffle=" + shuffle +
                            ",level=" + std::to_string(level));
        const auto c = compress(spec, raw);
        ASSERT_FALSE(c.empty());
        EXPECT_LE(c.size(), blosc_max_compressed(raw.size()));
        std::vector<uint8_t> back(raw.size());
        auto st = blosc_decompress(c.data(), c.size(), back.data(), back.size(), 1);
        ASSERT_TRUE(st.ok()) << spec.name() << ": " << st.error().str();
        EXPECT_EQ(back, raw) << spec.name();
      }
    }
  }
}

TEST(Codec, BloscRoundTripsOddSizesTypesizesAndThreads) {
  for (size_t n : {0, 1, 15, 16, 17, 4095, 65537}) {
    const auto raw = compressible_bytes(n, static_cast<uint32_t>(n));
    for (size_t ts : {1, 2, 4, 8}) {
      auto spec = spec_of("blosc-zstd:threads=2");
      const auto c = compress(spec, raw, ts);
      ASSERT_GE(c.size(), static_cast<size_t>(BLOSC_MIN_HEADER_LENGTH));
      std::vector<uint8_t> back(n + 1);
      auto st = blosc_decompress(c.data(), c.size(), back.data(), n, 2);
      ASSERT_TRUE(st.ok()) << n << " " << ts << ": " << st.error().str();
      if (n) {
        EXPECT_EQ(std::memcmp(back.data(), raw.data(), n), 0);
      }
    }
  }
}

TEST(Codec, BloscCompressRejectsBadArguments) {
  const auto raw = compressible_bytes(1000, 72);
  std::vector<uint8_t> out(blosc_max_compressed(raw.size()));
  auto none = blosc_compress(spec_of("fp16"), 4, raw.data(), raw.size(), out.data(), out.size());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::codec_params);
  auto ts = blosc_compress(spec_of("blosc-lz4"), 0, raw.data(), raw.size(), out.data(), out.size());
  ASSERT_FALSE(ts.ok());
  EXPECT_EQ(ts.error().code, Errc::codec_params);
}

TEST(Codec, BloscDecompressRejectsTruncatedBuffers) {
  const auto raw = compressible_bytes(100000, 73);
  const auto c = compress(spec_of("blosc-lz4"), raw);
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, c.size() / 2, c.size() - 1}) {
    auto st = decompress_guarded(c, n, raw.size());
    ASSERT_FALSE(st.ok()) << n;
    EXPECT_EQ(st.error().code, Errc::decompress_failed) << n;
  }
  // A truncated copy (no bytes readable past the cut) with the header's size
  // fields patched to match the cut still fails.
  std::vector<uint8_t> cut(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(c.size() / 2));
  const uint32_t cb = static_cast<uint32_t>(cut.size());
  std::memcpy(cut.data() + 12, &cb, 4);
  auto st = decompress_guarded(cut, cut.size(), raw.size());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::decompress_failed);
}

TEST(Codec, BloscDecompressRejectsSizeLiesAndBombs) {
  // A valid buffer of 4 MiB of zeros is tiny; offered where 4096 bytes are
  // expected it must be refused before anything is written.
  std::vector<uint8_t> zeros(4 << 20, 0);
  const auto bomb = compress(spec_of("blosc-zstd:level=9"), zeros);
  ASSERT_LT(bomb.size(), 4096u);
  for (size_t expected : {size_t{0}, size_t{4096}, zeros.size() - 1}) {
    auto st = decompress_guarded(bomb, bomb.size(), expected);
    ASSERT_FALSE(st.ok()) << expected;
    EXPECT_EQ(st.error().code, Errc::decompress_failed);
    EXPECT_NE(st.error().message.find(std::to_string(zeros.size())), std::string::npos)
        << st.error().message;
  }
  // Expecting more than the header holds is refused too.
  const auto raw = compressible_bytes(5000, 74);
  const auto c = compress(spec_of("blosc-lz4"), raw);
  auto more = decompress_guarded(c, c.size(), raw.size() + 1);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().code, Errc::decompress_failed);
  // The compressed length must match the header's cbytes exactly.
  std::vector<uint8_t> padded = c;
  padded.push_back(0);
  auto pad = decompress_guarded(padded, padded.size(), raw.size());
  ASSERT_FALSE(pad.ok());
  EXPECT_EQ(pad.error().code, Errc::decompress_failed);
  // A bomb whose header nbytes was rewritten to the expected size: blosc
  // finds the blocks do not fit.
  std::vector<uint8_t> liar = bomb;
  const uint32_t small = 4096;
  std::memcpy(liar.data() + 4, &small, 4);
  auto st = decompress_guarded(liar, liar.size(), small);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::decompress_failed);
}

TEST(Codec, BloscDecompressRejectsFlippedHeaderBytes) {
  const auto raw = compressible_bytes(300000, 75);
  for (const char* codec :
       {"blosc-lz4", "blosc-zstd:shuffle=bit", "blosc-blosclz:shuffle=none", "blosc-zlib"}) {
    const auto c = compress(spec_of(codec), raw);
    // Flipping any bit of the version byte or of the nbytes / blocksize /
    // cbytes fields is detected.
    for (size_t byte : {0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
      for (int bit = 0; bit < 8; ++bit) {
        auto bad = c;
        bad[byte] ^= static_cast<uint8_t>(1u << bit);
        std::vector<uint8_t> back;
        auto st = decompress_guarded(bad, bad.size(), raw.size(), &back);
        if (byte >= 8 && byte <= 11 && st.ok()) {
          // blocksize: a flip can leave a decodable buffer (e.g. a stored,
          // memcpy'd one), and then the data must be the original.
          EXPECT_EQ(back, raw) << codec << " byte " << byte << " bit " << bit;
          continue;
        }
        ASSERT_FALSE(st.ok()) << codec << " byte " << byte << " bit " << bit;
        EXPECT_EQ(st.error().code, Errc::decompress_failed);
      }
    }
    // Other corruption (the flags and typesize bytes 1-3, or the body) may
    // go undetected, since blosc has no checksum (the AEAD tag is what
    // guarantees integrity), but it never writes past dst.
    std::mt19937 rng(76);
    for (int trial = 0; trial < 200; ++trial) {
      auto bad = c;
      bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u + rng() % 255u);
      (void)decompress_guarded(bad, bad.size(), raw.size());
    }
  }
}

TEST(Codec, BloscDecompressRejectsBadThreadCount) {
  const auto raw = compressible_bytes(1000, 77);
  const auto c = compress(spec_of("blosc-lz4"), raw);
  std::vector<uint8_t> back(raw.size());
  auto st = blosc_decompress(c.data(), c.size(), back.data(), back.size(), 0);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::codec_params);
}

}  // namespace
}  // namespace tracr::protocol
