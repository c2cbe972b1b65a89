// The sparse stage (zero bitmap + packed nonzero elements, PROTOCOL.md 4.4):
// bit-exact round trips of every element width, the raw and blosc forms,
// codec text, descriptors, frames chunked across parts, and hostile input.
#include <blosc.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "frame_fixture.hpp"
#include "protocol/codec.hpp"
#include "protocol/header.hpp"

namespace tracr::protocol {
namespace {

using testing::Pair;
using testing::random_tensor;

CodecSpec spec_of(std::string_view text) {
  auto r = CodecSpec::parse(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().str());
  return r.ok() ? *r : CodecSpec{};
}

// relu(Normal(0, 1)) float32 values: about half zeros.
std::vector<float> relu_data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = std::max(dist(rng), 0.0f);
  return v;
}

const uint8_t* bytes_of(const std::vector<float>& v) {
  return reinterpret_cast<const uint8_t*>(v.data());
}

// Elements of ws bytes, about `zero_share` of them all-zero; the others
// random with at least one nonzero byte, often only the highest or lowest.
std::vector<uint8_t> random_elements(size_t n, size_t ws, double zero_share, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution zero(zero_share);
  std::uniform_int_distribution<int> kind(0, 2);
  std::vector<uint8_t> v(n * ws, 0);
  for (size_t i = 0; i < n; ++i) {
    if (zero(rng)) continue;
    uint8_t* e = v.data() + i * ws;
    switch (kind(rng)) {
      case 0: e[0] = 1; break;        // only the lowest byte set
      case 1: e[ws - 1] = 0x80; break;  // only the highest bit set (-0.0 for floats)
      default:
        for (size_t b = 0; b < ws; ++b) e[b] = static_cast<uint8_t>(rng());
        e[rng() % ws] |= 1;
    }
  }
  return v;
}

size_t count_nonzero(const uint8_t* p, size_t n, size_t ws) {
  size_t nnz = 0;
  for (size_t i = 0; i < n; ++i) {
    bool any = false;
    for (size_t b = 0; b < ws; ++b) any |= p[i * ws + b] != 0;
    nnz += any;
  }
  return nnz;
}

// Encodes with sparse_pack into a buffer of exactly the stated bound,
// checks the size formula, decodes into a buffer with guard bytes and
// compares bit for bit.
void expect_raw_round_trip(const uint8_t* src, size_t n, size_t ws) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " ws=" << ws);
  const int64_t ni = static_cast<int64_t>(n);
  std::vector<uint8_t> enc(sparse_max_encoded(ni, ws, false));
  const size_t len = sparse_pack(src, ni, ws, enc.data());
  EXPECT_EQ(len, (n + 7) / 8 + count_nonzero(src, n, ws) * ws);
  ASSERT_LE(len, enc.size());
  enc.resize(len);
  constexpr size_t kGuard = 32;
  std::vector<uint8_t> out(n * ws + kGuard, 0xA5);
  auto st = sparse_unpack(enc.data(), enc.size(), ni, ws, out.data());
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(0, std::memcmp(out.data(), src, n * ws));
  for (size_t g = 0; g < kGuard; ++g) ASSERT_EQ(out[n * ws + g], 0xA5) << "wrote past the end";
}

// sparse_encode / sparse_decode with `codec` (raw or blosc form).
std::vector<uint8_t> encode_with(std::string_view codec, const uint8_t* src, int64_t n, size_t ws) {
  const CodecSpec spec = spec_of(codec);
  std::vector<uint8_t> scratch;
  std::vector<uint8_t> enc(sparse_max_encoded(n, ws, spec.comp == Compressor::blosc));
  auto r = sparse_encode(spec, ws, src, n, enc.data(), enc.size(), scratch);
  EXPECT_TRUE(r.ok()) << codec << ": " << (r.ok() ? "" : r.error().str());
  enc.resize(r.ok() ? *r : 0);
  return enc;
}

Status decode_with(std::string_view codec, const std::vector<uint8_t>& enc, int64_t n, size_t ws,
                   uint8_t* dst) {
  std::vector<uint8_t> scratch;
  // An exact-size copy, so a sanitizer build catches any over-read.
  std::vector<uint8_t> part(enc);
  return sparse_decode(part.data(), part.size(), n, ws,
                       spec_of(codec).comp == Compressor::blosc, dst, scratch);
}

constexpr const char* kSparseLossless[] = {"sparse", "sparse+blosc-lz4", "sparse+blosc-zstd",
                                           "sparse+blosc-zstd:level=5,shuffle=bit"};

// ------------------------------------------------------------ round trips

TEST(Sparse, PostReluDataRoundTripsBitExactAtOddSizes) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{64},
                   size_t{65}, size_t{1001}, size_t{4099}, size_t{100003}}) {
    const auto v = relu_data(n, static_cast<uint32_t>(n));
    expect_raw_round_trip(bytes_of(v), n, 4);
    for (const char* codec : kSparseLossless) {
      SCOPED_TRACE(codec);
      const auto enc = encode_with(codec, bytes_of(v), static_cast<int64_t>(n), 4);
      std::vector<float> out(n, -1.0f);
      auto st = decode_with(codec, enc, static_cast<int64_t>(n), 4,
                            reinterpret_cast<uint8_t*>(out.data()));
      ASSERT_TRUE(st.ok()) << st.error().str();
      EXPECT_EQ(0, std::memcmp(out.data(), v.data(), n * 4)) << "n=" << n;
    }
  }
}

TEST(Sparse, HalfZeroActivationsShrinkToAboutHalfPlusTheBitmap) {
  const size_t n = 193600;  // 1x64x55x55
  const auto v = relu_data(n, 42);
  const size_t nnz = count_nonzero(bytes_of(v), n, 4);
  EXPECT_GT(nnz, n * 45 / 100);
  EXPECT_LT(nnz, n * 55 / 100);
  std::vector<uint8_t> enc(sparse_max_encoded(static_cast<int64_t>(n), 4, false));
  const size_t len = sparse_pack(bytes_of(v), static_cast<int64_t>(n), 4, enc.data());
  EXPECT_EQ(len, n / 8 + nnz * 4);
  const double ratio = static_cast<double>(n * 4) / static_cast<double>(len);
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.1);
}

TEST(Sparse, EveryElementWidthRoundTripsWithZerosOnlyWhereAllBytesAreZero) {
  for (size_t ws : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    for (double share : {0.0, 0.3, 0.5, 0.9, 1.0}) {
      for (size_t n : {size_t{5}, size_t{64}, size_t{77}, size_t{3001}}) {
        const auto v = random_elements(n, ws, share, static_cast<uint32_t>(n * 10 + ws));
        expect_raw_round_trip(v.data(), n, ws);
        const auto enc = encode_with("sparse+blosc-lz4", v.data(), static_cast<int64_t>(n), ws);
        std::vector<uint8_t> out(n * ws, 0xEE);
        auto st = decode_with("sparse+blosc-lz4", enc, static_cast<int64_t>(n), ws, out.data());
        ASSERT_TRUE(st.ok()) << st.error().str();
        EXPECT_EQ(out, v) << "ws=" << ws << " share=" << share << " n=" << n;
      }
    }
  }
}

TEST(Sparse, AllZerosIsJustAZeroBitmap) {
  for (size_t n : {size_t{1}, size_t{8}, size_t{13}, size_t{4096}}) {
    const std::vector<float> v(n, 0.0f);
    std::vector<uint8_t> enc(sparse_max_encoded(static_cast<int64_t>(n), 4, false), 0xFF);
    const size_t len = sparse_pack(bytes_of(v), static_cast<int64_t>(n), 4, enc.data());
    ASSERT_EQ(len, (n + 7) / 8);
    for (size_t i = 0; i < len; ++i) EXPECT_EQ(enc[i], 0) << i;
    expect_raw_round_trip(bytes_of(v), n, 4);
    // blosc form: the values buffer is an empty c-blosc buffer.
    const auto b = encode_with("sparse+blosc-zstd", bytes_of(v), static_cast<int64_t>(n), 4);
    std::vector<float> out(n, 1.0f);
    auto st = decode_with("sparse+blosc-zstd", b, static_cast<int64_t>(n), 4,
                          reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_TRUE(st.ok()) << st.error().str();
    EXPECT_EQ(out, v);
  }
}

TEST(Sparse, NoZerosKeepsEveryValueAfterAFullBitmap) {
  for (size_t n : {size_t{3}, size_t{8}, size_t{29}, size_t{1024}}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) + 0.5f;
    std::vector<uint8_t> enc(sparse_max_encoded(static_cast<int64_t>(n), 4, false));
    const size_t len = sparse_pack(bytes_of(v), static_cast<int64_t>(n), 4, enc.data());
    const size_t nb = (n + 7) / 8;
    ASSERT_EQ(len, nb + n * 4);
    ASSERT_EQ(len, sparse_max_encoded(static_cast<int64_t>(n), 4, false));  // the bound is tight
    for (size_t i = 0; i + 1 < nb; ++i) EXPECT_EQ(enc[i], 0xFF);
    EXPECT_EQ(enc[nb - 1], n % 8 ? (1u << (n % 8)) - 1 : 0xFFu);  // padding bits stay zero
    EXPECT_EQ(0, std::memcmp(enc.data() + nb, v.data(), n * 4));
    expect_raw_round_trip(bytes_of(v), n, 4);
  }
}

TEST(Sparse, NaNInfinitiesAndNegativeZeroArePreservedBitExactly) {
  const uint32_t patterns[] = {
      0x00000000u,  // +0.0: the only zero
      0x80000000u,  // -0.0: nonzero bits, kept
      0x7FC00000u,  // quiet NaN
      0x7F800001u,  // signalling NaN
      0xFFFFFFFFu,  // negative NaN, full payload
      0x7F800000u,  // +inf
      0xFF800000u,  // -inf
      0x00000001u,  // smallest denormal
      0x3F800000u,  // 1.0
  };
  std::vector<uint32_t> v;
  std::mt19937 rng(5);
  for (int i = 0; i < 1000; ++i) v.push_back(patterns[rng() % std::size(patterns)]);
  const auto* src = reinterpret_cast<const uint8_t*>(v.data());
  expect_raw_round_trip(src, v.size(), 4);
  std::vector<uint8_t> enc(sparse_max_encoded(static_cast<int64_t>(v.size()), 4, false));
  const size_t len = sparse_pack(src, static_cast<int64_t>(v.size()), 4, enc.data());
  size_t zeros = 0;
  for (uint32_t u : v) zeros += u == 0;
  EXPECT_EQ(len, (v.size() + 7) / 8 + (v.size() - zeros) * 4);
  for (const char* codec : kSparseLossless) {
    const auto e = encode_with(codec, src, static_cast<int64_t>(v.size()), 4);
    std::vector<uint32_t> out(v.size(), 0x12345678u);
    auto st = decode_with(codec, e, static_cast<int64_t>(v.size()), 4,
                          reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_TRUE(st.ok()) << codec << ": " << st.error().str();
    EXPECT_EQ(out, v) << codec;
  }
}

TEST(Sparse, EmptyChunkEncodesToNothing) {
  std::vector<uint8_t> enc(1, 0x77);
  EXPECT_EQ(sparse_pack(nullptr, 0, 4, enc.data()), 0u);
  EXPECT_EQ(sparse_max_encoded(0, 4, false), 0u);
  EXPECT_TRUE(sparse_unpack(enc.data(), 0, 0, 4, nullptr).ok());
  auto st = sparse_unpack(enc.data(), 1, 0, 4, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::decompress_failed);
}

// ------------------------------------------------------------ hostile input

TEST(Sparse, BitmapClaimingMoreValuesThanPresentIsRejected) {
  const size_t n = 37;
  const auto v = relu_data(n, 9);
  std::vector<uint8_t> enc(sparse_max_encoded(n, 4, false));
  enc.resize(sparse_pack(bytes_of(v), n, 4, enc.data()));
  const size_t nb = (n + 7) / 8;
  // Mark one more element nonzero than there are values.
  std::vector<uint8_t> more = enc;
  size_t bit = 0;
  while ((more[bit / 8] >> (bit % 8)) & 1) ++bit;
  ASSERT_LT(bit, n);
  more[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
  std::vector<float> out(n);
  auto st = sparse_unpack(more.data(), more.size(), n, 4, reinterpret_cast<uint8_t*>(out.data()));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::decompress_failed);
  EXPECT_NE(st.error().message.find("marks"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("which need"), std::string::npos) << st.error().message;
  // An all-ones bitmap with the values of the real one.
  std::vector<uint8_t> ones = enc;
  for (size_t i = 0; i < nb; ++i) ones[i] = 0xFF;
  ones[nb - 1] = static_cast<uint8_t>((1u << (n % 8)) - 1);
  st = sparse_unpack(ones.data(), ones.size(), n, 4, reinterpret_cast<uint8_t*>(out.data()));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::decompress_failed);
}

TEST(Sparse, EveryTruncationAndExtraByteIsRejected) {
  const size_t n = 45;
  const auto v = relu_data(n, 11);
  std::vector<uint8_t> enc(sparse_max_encoded(n, 4, false));
  enc.resize(sparse_pack(bytes_of(v), n, 4, enc.data()));
  std::vector<float> out(n);
  for (size_t len = 0; len < enc.size(); ++len) {
    std::vector<uint8_t> cut(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(len));
    auto st = sparse_unpack(cut.data(), cut.size(), n, 4, reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_FALSE(st.ok()) << "truncated to " << len;
    EXPECT_EQ(st.error().code, Errc::decompress_failed);
  }
  for (size_t extra : {size_t{1}, size_t{3}, size_t{4}, size_t{400}}) {
    std::vector<uint8_t> longer = enc;
    longer.resize(enc.size() + extra, 0);
    auto st =
        sparse_unpack(longer.data(), longer.size(), n, 4, reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_FALSE(st.ok()) << extra << " extra bytes";
    EXPECT_EQ(st.error().code, Errc::decompress_failed);
  }
}

TEST(Sparse, BitmapBitFlipsAreRejectedValueBitFlipsDecode) {
  const size_t n = 50;  // not a multiple of 8: two padding bits
  const auto v = relu_data(n, 13);
  std::vector<uint8_t> enc(sparse_max_encoded(n, 4, false));
  enc.resize(sparse_pack(bytes_of(v), n, 4, enc.data()));
  const size_t nb = (n + 7) / 8;
  std::vector<float> out(n);
  for (size_t byte = 0; byte < enc.size(); ++byte) {
    for (int b = 0; b < 8; ++b) {
      std::vector<uint8_t> m = enc;
      m[byte] ^= static_cast<uint8_t>(1u << b);
      auto st = sparse_unpack(m.data(), m.size(), n, 4, reinterpret_cast<uint8_t*>(out.data()));
      if (byte < nb) {
        // One more or one fewer set bit, or a padding bit: never consistent.
        ASSERT_FALSE(st.ok()) << "bitmap byte " << byte << " bit " << b;
        EXPECT_EQ(st.error().code, Errc::decompress_failed);
        if (byte == nb - 1 && b >= static_cast<int>(n % 8)) {
          EXPECT_NE(st.error().message.find("padding"), std::string::npos) << st.error().message;
        }
      } else {
        ASSERT_TRUE(st.ok()) << "value byte " << byte << ": " << st.error().str();
        EXPECT_NE(0, std::memcmp(out.data(), v.data(), n * 4));
      }
    }
  }
}

TEST(Sparse, UnsupportedElementSizeIsCodecParams) {
  std::vector<uint8_t> buf(64);
  for (size_t ws : {size_t{0}, size_t{3}, size_t{16}}) {
    auto st = sparse_unpack(buf.data(), buf.size(), 8, ws, buf.data());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, Errc::codec_params);
    EXPECT_NE(st.error().message.find("1, 2, 4 or 8"), std::string::npos);
    std::vector<uint8_t> scratch;
    auto r = sparse_encode(spec_of("sparse"), ws, buf.data(), 8, buf.data(), buf.size(), scratch);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::codec_params);
  }
  EXPECT_THROW(sparse_pack(buf.data(), 8, 3, buf.data()), std::invalid_argument);
}

TEST(Sparse, EncodeRefusesAnOutputBelowTheBound) {
  const auto v = relu_data(100, 3);
  std::vector<uint8_t> enc(sparse_max_encoded(100, 4, true));
  std::vector<uint8_t> scratch;
  for (const char* codec : {"sparse", "sparse+blosc-lz4"}) {
    const bool blosc = spec_of(codec).comp == Compressor::blosc;
    auto r = sparse_encode(spec_of(codec), 4, bytes_of(v), 100, enc.data(),
                           sparse_max_encoded(100, 4, blosc) - 1, scratch);
    ASSERT_FALSE(r.ok()) << codec;
    EXPECT_EQ(r.error().code, Errc::invalid_argument);
  }
}

TEST(Sparse, BloscFormRejectsTruncationLiesAndSwappedBuffers) {
  const int64_t n = 3000;
  const auto v = relu_data(static_cast<size_t>(n), 17);
  const auto enc = encode_with("sparse+blosc-lz4", bytes_of(v), n, 4);
  std::vector<float> out(static_cast<size_t>(n));
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  size_t raw1 = 0, c1 = 0, bs = 0;
  blosc_cbuffer_sizes(enc.data(), &raw1, &c1, &bs);
  ASSERT_EQ(raw1, static_cast<size_t>((n + 7) / 8));
  ASSERT_LT(c1, enc.size());
  const auto expect_rejected = [&](const std::vector<uint8_t>& part, const char* what) {
    auto st = decode_with("sparse+blosc-lz4", part, n, 4, dst);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.error().code, Errc::decompress_failed) << what << ": " << st.error().str();
  };
  // Every truncation.
  for (size_t len = 0; len < enc.size(); len += (len < 64 ? 1 : 97))
    expect_rejected(std::vector<uint8_t>(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(len)),
                    "truncated");
  expect_rejected(std::vector<uint8_t>(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(c1)),
                  "values buffer missing");
  {
    auto longer = enc;
    longer.push_back(0);
    expect_rejected(longer, "trailing byte");
  }
  {
    // The bitmap buffer's compressed size (bytes 12-15) claims the whole part.
    auto lie = enc;
    const uint32_t all = static_cast<uint32_t>(enc.size());
    std::memcpy(lie.data() + 12, &all, 4);
    expect_rejected(lie, "bitmap cbytes lie");
  }
  {
    // Values buffer first, bitmap second.
    std::vector<uint8_t> swapped(enc.begin() + static_cast<std::ptrdiff_t>(c1), enc.end());
    swapped.insert(swapped.end(), enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(c1));
    expect_rejected(swapped, "swapped buffers");
  }
  {
    // A valid bitmap of eight elements more: its raw size disagrees.
    auto longer_src = v;
    longer_src.resize(v.size() + 8, 1.0f);
    const auto other = encode_with("sparse+blosc-lz4", bytes_of(longer_src), n + 8, 4);
    size_t r2 = 0, oc1 = 0;
    blosc_cbuffer_sizes(other.data(), &r2, &oc1, &bs);
    std::vector<uint8_t> mixed(other.begin(), other.begin() + static_cast<std::ptrdiff_t>(oc1));
    mixed.insert(mixed.end(), enc.begin() + static_cast<std::ptrdiff_t>(c1), enc.end());
    expect_rejected(mixed, "bitmap of another size");
  }
  {
    // Values of a different chunk (another count of nonzeros).
    const auto w = relu_data(static_cast<size_t>(n), 18);
    const auto other = encode_with("sparse+blosc-lz4", bytes_of(w), n, 4);
    size_t r2 = 0, oc1 = 0;
    blosc_cbuffer_sizes(other.data(), &r2, &oc1, &bs);
    std::vector<uint8_t> mixed(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(c1));
    mixed.insert(mixed.end(), other.begin() + static_cast<std::ptrdiff_t>(oc1), other.end());
    size_t vr = 0, vc = 0;
    blosc_cbuffer_sizes(enc.data() + c1, &vr, &vc, &bs);
    size_t wr = 0, wc = 0;
    blosc_cbuffer_sizes(other.data() + oc1, &wr, &wc, &bs);
    ASSERT_NE(vr, wr);  // the two chunks differ in their nonzero counts
    expect_rejected(mixed, "values of another chunk");
  }
}

TEST(Sparse, BloscFormByteFlipsGiveTypedErrorsOrValidData) {
  const int64_t n = 500;
  const auto v = relu_data(static_cast<size_t>(n), 19);
  for (const char* codec : {"sparse+blosc-lz4", "sparse+blosc-zstd"}) {
    const auto enc = encode_with(codec, bytes_of(v), n, 4);
    std::vector<float> out(static_cast<size_t>(n));
    size_t failures = 0;
    for (size_t i = 0; i < enc.size(); ++i) {
      auto m = enc;
      m[i] ^= 0x5A;
      auto st = decode_with(codec, m, n, 4, reinterpret_cast<uint8_t*>(out.data()));
      if (!st.ok()) {
        ++failures;
        EXPECT_TRUE(st.error().code == Errc::decompress_failed) << i << ": " << st.error().str();
      }
    }
    EXPECT_GT(failures, 0u) << codec;
  }
}

// ------------------------------------------------------------ int8 recentring

TEST(Sparse, Int8CodesAreRecentredSoZeroIsByteZeroAndBack) {
  const auto v = relu_data(1000, 21);
  const Tensor t = Tensor::view("x", DType::float32, {10, 100}, v.data());
  for (const char* codec : {"int8+sparse", "int8_channel+sparse"}) {
    auto lp = lossy_prepare(spec_of(codec), t);
    ASSERT_TRUE(lp.ok());
    std::vector<uint8_t> q(1000), orig(1000);
    lossy_encode(*lp, t.data, 0, 1000, q.data());
    orig = q;
    sparse_int8_recenter(*lp, 0, 1000, q.data(), false);
    for (size_t i = 0; i < 1000; ++i) {
      if (v[i] == 0.0f) {
        ASSERT_EQ(q[i], 0) << codec << " element " << i;
      }
    }
    // Chunks starting mid-channel undo exactly what they did.
    for (int64_t first : {int64_t{0}, int64_t{37}, int64_t{512}}) {
      std::vector<uint8_t> part(q.begin() + first, q.end());
      sparse_int8_recenter(*lp, first, 1000 - first, part.data(), true);
      EXPECT_EQ(0, std::memcmp(part.data(), orig.data() + first, part.size())) << codec;
    }
  }
  // Other kinds are left alone.
  auto fp = lossy_prepare(spec_of("fp16+sparse"), t);
  ASSERT_TRUE(fp.ok());
  std::vector<uint8_t> h(8, 7);
  sparse_int8_recenter(*fp, 0, 4, h.data(), false);
  EXPECT_EQ(h, std::vector<uint8_t>(8, 7));
}

// ------------------------------------------------------------ codec text

TEST(Sparse, CodecTextsParseAndNameCanonically) {
  struct Case {
    const char* text;
    Lossy lossy;
    Compressor comp;
  };
  for (const auto& c : {Case{"sparse", Lossy::none, Compressor::none},
                        Case{"fp16+sparse", Lossy::fp16, Compressor::none},
                        Case{"int8_channel+sparse:axis=0", Lossy::int8_channel, Compressor::none},
                        Case{"sparse+blosc-zstd", Lossy::none, Compressor::blosc},
                        Case{"sparse+blosc-lz4:level=5,shuffle=bit", Lossy::none, Compressor::blosc},
                        Case{"int8+sparse+blosc-lz4", Lossy::int8, Compressor::blosc},
                        Case{"bf16+sparse+blosc-zstd:threads=2", Lossy::bf16, Compressor::blosc}}) {
    auto s = spec_of(c.text);
    EXPECT_TRUE(s.sparse) << c.text;
    EXPECT_EQ(s.lossy, c.lossy) << c.text;
    EXPECT_EQ(s.comp, c.comp) << c.text;
    EXPECT_EQ(s.name(), c.text);
  }
  EXPECT_FALSE(spec_of("fp16+blosc-lz4").sparse);
  EXPECT_FALSE(spec_of("none").sparse);
}

TEST(Sparse, ListedCodecsIncludeTheSparseChains) {
  const auto all = list_codecs();
  const auto has = [&](std::string_view s) {
    return std::find(all.begin(), all.end(), s) != all.end();
  };
  for (auto s : {"sparse", "fp16+sparse", "bf16+sparse", "int8+sparse", "int8_channel+sparse",
                 "sparse+blosc-lz4", "sparse+blosc-zstd", "fp16+sparse+blosc-lz4",
                 "int8+sparse+blosc-zstd"})
    EXPECT_TRUE(has(s)) << s;
}

TEST(Sparse, MisorderedOrIncompleteSparseTextsAreRejected) {
  const std::pair<const char*, const char*> unknown[] = {
      {"sparse+", "'sparse+'"},
      {"fp16+sparse+", "'fp16+sparse+'"},
      {"sparse+sparse", "'sparse'"},
      {"sparse+fp16", "'fp16'"},
      {"blosc-lz4+sparse", "'blosc-lz4'"},
      {"none+sparse", "'none'"},
      {"sparse+blosc-lz5", "'lz5'"},
      {"Sparse", "'Sparse'"},
  };
  for (const auto& [text, token] : unknown) {
    auto r = CodecSpec::parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, Errc::unknown_codec) << text << ": " << r.error().str();
    EXPECT_NE(r.error().message.find(token), std::string::npos) << text << ": " << r.error().message;
  }
  for (const char* text : {"sparse:level=3", "fp16+sparse:shuffle=bit", "sparse:axis=1"}) {
    auto r = CodecSpec::parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, Errc::codec_params) << text << ": " << r.error().str();
  }
}

// ------------------------------------------------------------ descriptors

TEST(Sparse, DescriptorCompFieldRoundTripsAndUnknownChainsAreRejected) {
  for (const char* comp : {"sparse", "sparse+blosc"}) {
    Header h;
    h.type = MsgType::infer_request;
    h.seq = 1;
    TensorDesc d;
    d.name = "a";
    d.dtype = DType::float32;
    d.shape = {3};
    d.lossy.src = d.lossy.wire = DType::float32;
    d.sparse = true;
    d.comp = std::string(comp) == "sparse+blosc" ? Compressor::blosc : Compressor::none;
    if (d.comp == Compressor::blosc) d.cname = "zstd";
    d.raw_bytes = 12;
    d.chunk_bytes = 12;
    d.parts = 1;
    h.tensors.push_back(d);
    std::vector<uint8_t> bytes;
    encode_header(h, bytes);
    const std::string hay(bytes.begin(), bytes.end());
    EXPECT_NE(hay.find(comp), std::string::npos);
    auto back = decode_header(bytes.data(), bytes.size(), Limits{});
    ASSERT_TRUE(back.ok()) << back.error().str();
    ASSERT_EQ(back->tensors.size(), 1u);
    EXPECT_TRUE(back->tensors[0].sparse);
    EXPECT_EQ(back->tensors[0].comp, d.comp);
    EXPECT_EQ(back->tensors[0].cname, d.cname);
    EXPECT_TRUE(validate_descs(back->tensors, Limits{}).ok());
    // A reader that does not know a chain says so.
    const std::string bad = std::string(comp) == "sparse" ? "sparsx" : "sparse+blosx";
    std::vector<uint8_t> mutated = bytes;
    const size_t at = hay.find(comp);
    std::memcpy(mutated.data() + at, bad.data(), bad.size());
    auto r = decode_header(mutated.data(), mutated.size(), Limits{});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::unknown_codec);
    EXPECT_NE(r.error().message.find("sparse+blosc"), std::string::npos) << r.error().message;
  }
}

// ------------------------------------------------------------ frames

TEST(Sparse, FramesChunkIndependentlyAndMatchTheLossyStageAlone) {
  // 1x3x37x41 = 4551 elements: 4096-byte chunks end mid-channel and the last
  // chunk is short.
  const Tensor act = random_tensor("act", DType::float32, {1, 3, 37, 41}, 23);
  for (bool enc : {false, true}) {
    for (const std::string lossy : {"", "fp16", "bf16", "int8", "int8_channel"}) {
      const std::string base = lossy.empty() ? "none" : lossy;
      const std::string pre = lossy.empty() ? "" : lossy + "+";
      for (const std::string tail : {"sparse", "sparse+blosc-lz4", "sparse+blosc-zstd:shuffle=bit"}) {
        const std::string codec = pre + tail;
        SCOPED_TRACE(codec + (enc ? " aes" : " plain"));
        SendOptions so, base_so;
        so.codec = spec_of(codec);
        base_so.codec = spec_of(base);
        so.chunk_bytes = base_so.chunk_bytes = 4096;
        so.segment_bytes = base_so.segment_bytes = 1024;
        Pair p(enc), q(enc);
        auto segs = p.write({act}, so);
        EXPECT_GT(segs.size(), 1u);
        auto out = p.read(segs);
        ASSERT_EQ(out.size(), 1u);
        ASSERT_TRUE(out[0].ok()) << out[0].error().str();
        EXPECT_TRUE(out[0]->header.tensors[0].sparse);
        EXPECT_EQ(out[0]->header.tensors[0].codec, codec);
        EXPECT_GT(out[0]->stats.parts, 1u);
        auto base_segs = q.write({act}, base_so);
        auto want = q.read(base_segs);
        ASSERT_EQ(want.size(), 1u);
        ASSERT_TRUE(want[0].ok());
        // The sparse stage is lossless on the lossy stage's stream.
        EXPECT_EQ(0, std::memcmp(out[0]->tensors[0].data, want[0]->tensors[0].data, act.nbytes));
        if (lossy.empty()) {
          EXPECT_EQ(0, std::memcmp(out[0]->tensors[0].data, act.data, act.nbytes));
        }
        // Post-ReLU zeros are dropped, whatever the lossy stage.
        EXPECT_LT(out[0]->stats.payload_bytes, want[0]->stats.payload_bytes * 7 / 10);
      }
    }
  }
}

TEST(Sparse, RawFormPartsAreExactlyBitmapPlusNonzeroValues) {
  const Tensor act = random_tensor("act", DType::float32, {5, 1001}, 29);
  SendOptions so;
  so.codec = spec_of("sparse");
  so.chunk_bytes = 4096;
  Pair p(false);
  auto segs = p.write({act}, so);
  const auto* x = reinterpret_cast<const uint32_t*>(act.data);
  const int64_t n = act.numel();
  size_t part = 0;
  for (auto& s : segs) {
    for (size_t i = 1; i < s.size(); ++i, ++part) {
      const int64_t first = static_cast<int64_t>(part) * 1024;
      const int64_t count = std::min<int64_t>(1024, n - first);
      size_t nnz = 0;
      for (int64_t e = first; e < first + count; ++e) nnz += x[e] != 0;
      EXPECT_EQ(s[i].size(), static_cast<size_t>((count + 7) / 8) + nnz * 4) << "part " << part;
    }
  }
  EXPECT_EQ(part, static_cast<size_t>((n + 1023) / 1024));
}

TEST(Sparse, CorruptSparsePartIsATypedErrorAndTheSessionCarriesOn) {
  const Tensor act = random_tensor("act", DType::float32, {2, 3000}, 31);
  for (const char* codec : {"sparse", "sparse+blosc-lz4", "fp16+sparse"}) {
    SCOPED_TRACE(codec);
    SendOptions so;
    so.codec = spec_of(codec);
    so.chunk_bytes = 8192;
    Pair p(false);
    auto good = p.write({act}, so);
    auto bad = testing::copy_segments(good);
    // Drop the last 4 bytes of the first part (a value, or blosc's tail).
    auto& m = bad[0][1];
    bad[0][1] = zmq::message_t(m.data(), m.size() - 4);
    auto out = p.read(bad);
    ASSERT_FALSE(out.empty());
    ASSERT_FALSE(out[0].ok());
    EXPECT_EQ(out[0].error().code, Errc::decompress_failed) << out[0].error().str();
    EXPECT_NE(out[0].error().message.find("part 0"), std::string::npos) << out[0].error().message;
    // A part larger than the sparse bound is refused before decoding.
    auto big = testing::copy_segments(p.write({act}, so));
    std::vector<uint8_t> grown(static_cast<const uint8_t*>(big[0][1].data()),
                               static_cast<const uint8_t*>(big[0][1].data()) + big[0][1].size());
    const size_t ws = so.codec.lossy == Lossy::fp16 ? 2 : 4;
    const int64_t count = static_cast<int64_t>(so.chunk_bytes / ws);
    grown.resize(sparse_max_encoded(count, ws, so.codec.comp == Compressor::blosc) + 1, 0);
    big[0][1] = zmq::message_t(grown.data(), grown.size());
    auto out2 = p.read(big);
    ASSERT_FALSE(out2.empty());
    ASSERT_FALSE(out2[0].ok());
    EXPECT_EQ(out2[0].error().code, Errc::size_mismatch) << out2[0].error().str();
    // The next good frame is accepted.
    auto again = p.write({act}, so);
    auto ok = p.read(again);
    ASSERT_EQ(ok.size(), 1u);
    ASSERT_TRUE(ok[0].ok()) << ok[0].error().str();
  }
}

}  // namespace
}  // namespace tracr::protocol
