#include <algorithm>
#include <cmath>
#include <optional>
#include <cstring>

#include <msgpack.hpp>

#include "frame_fixture.hpp"
#include "protocol/header.hpp"

using namespace tracr;
using namespace tracr::protocol;
using namespace tracr::protocol::testing;

namespace {

const DType kAllDTypes[] = {DType::float32, DType::float16, DType::bfloat16, DType::int8, DType::uint8,
                            DType::int32,   DType::int64,   DType::bool_,    DType::float64, DType::int16};

void expect_same_bytes(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.name, b.name);
  ASSERT_EQ(a.dtype, b.dtype);
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.nbytes, b.nbytes);
  EXPECT_EQ(0, std::memcmp(a.data, b.data, a.nbytes)) << a.name;
}

SendOptions opts(const std::string& codec, size_t chunk = 256 * 1024, size_t seg = 256 * 1024) {
  SendOptions so;
  auto c = CodecSpec::parse(codec);
  EXPECT_TRUE(c.ok()) << codec;
  so.codec = *c;
  so.chunk_bytes = chunk;
  so.segment_bytes = seg;
  return so;
}

}  // namespace

class FrameLossless : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(FrameLossless, EveryDTypeRoundTripsBitExact) {
  auto [codec, enc] = GetParam();
  Pair p(enc);
  Bundle b;
  uint32_t seed = 1;
  for (DType dt : kAllDTypes) {
    b.push_back(random_tensor(std::string(dtype_name(dt)), dt, {2, 3, 17, 5}, seed++));
  }
  b.push_back(random_tensor("scalar", DType::float32, {}, seed++));
  b.push_back(random_tensor("empty", DType::int64, {0, 4}, seed++));
  b.push_back(random_tensor("rank8", DType::uint8, {2, 1, 2, 1, 3, 1, 2, 2}, seed++));
  auto segs = p.write(b, opts(codec, 4096, 4096));
  auto out = p.read(segs);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error().str();
  const Frame& f = *out[0];
  EXPECT_EQ(f.header.type, MsgType::infer_request);
  EXPECT_EQ(f.header.split, 3);
  ASSERT_EQ(f.tensors.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i) expect_same_bytes(b[i], f.tensors[i]);
  EXPECT_EQ(p.r.rejected().total(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllLosslessCodecs, FrameLossless,
                         ::testing::Combine(::testing::Values("none", "blosc-lz4", "blosc-zstd:level=3",
                                                              "blosc-blosclz:shuffle=bit", "blosc-zlib:shuffle=none",
                                                              "sparse", "sparse+blosc-lz4", "sparse+blosc-zstd:shuffle=bit"),
                                            ::testing::Bool()));

class FrameLossy : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(FrameLossy, ErrorWithinStatedBoundAndOtherDTypesExact) {
  auto [codec, enc] = GetParam();
  Pair p(enc);
  Bundle b{random_tensor("act", DType::float32, {1, 16, 33, 35}, 7),
           random_tensor("signed", DType::float32, {4, 8, 100}, 8, /*relu=*/false),
           random_tensor("ids", DType::int64, {4, 9}, 9)};
  auto so = opts(codec, 8192, 8192);
  auto segs = p.write(b, so);
  EXPECT_GT(segs.size(), 1u);
  auto out = p.read(segs);
  for (auto& o : out) EXPECT_TRUE(o.ok()) << o.error().str();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error().str();
  const Frame& f = *out[0];
  for (size_t ti = 0; ti < 2; ++ti) {
    auto lp = lossy_prepare(so.codec, b[ti]);
    ASSERT_TRUE(lp.ok());
    EXPECT_NE(lp->kind, Lossy::none);
    EXPECT_EQ(f.header.tensors[ti].lossy.kind, lp->kind);
    const float* x = reinterpret_cast<const float*>(b[ti].data);
    const float* y = reinterpret_cast<const float*>(f.tensors[ti].data);
    for (int64_t i = 0; i < b[ti].numel(); ++i) {
      ASSERT_LE(std::fabs(double(x[i]) - double(y[i])), lossy_error_bound(*lp, x[i], i))
          << codec << " tensor " << ti << " element " << i << " x=" << x[i] << " y=" << y[i];
    }
  }
  expect_same_bytes(b[2], f.tensors[2]);
}

INSTANTIATE_TEST_SUITE_P(AllLossyCodecs, FrameLossy,
                         ::testing::Combine(::testing::Values("fp16", "bf16", "int8", "int8_channel",
                                                              "fp16+blosc-lz4", "int8_channel+blosc-zstd",
                                                              "fp16+sparse", "int8+sparse", "bf16+sparse+blosc-lz4",
                                                              "int8_channel+sparse+blosc-zstd"),
                                            ::testing::Bool()));

TEST(Frame, LargeTensorIsChunkedIntoBoundedSegments) {
  Pair p(true);
  Bundle b{random_tensor("big", DType::float32, {1, 64, 112, 112}, 3)};
  auto so = opts("blosc-lz4", 64 * 1024, 64 * 1024);
  auto segs = p.write(b, so);
  EXPECT_GE(segs.size(), 10u);  // 49 parts of 64 KiB, segments cut at 64 KiB of compressed payload
  for (const auto& s : segs) {
    size_t n = 0;
    for (const auto& m : s) n += m.size();
    EXPECT_LE(n, 2 * 64 * 1024u + 4096u);
  }
  auto out = p.read(segs);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok());
  expect_same_bytes(b[0], out[0]->tensors[0]);
  EXPECT_EQ(out[0]->stats.segments, segs.size());
  EXPECT_EQ(out[0]->stats.raw_bytes, b[0].nbytes);
}

TEST(Frame, MetaAndEmptyBundleRoundTrip) {
  Pair p(true);
  Meta m{{"head_ns", int64_t{-5}}, {"energy_j", 0.25}, {"note", std::string("modelled")}};
  auto segs = p.write({}, opts("none"), MsgType::heartbeat, -1, m);
  auto out = p.read(segs);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_EQ(out[0]->header.meta, m);
  EXPECT_EQ(out[0]->header.split, -1);
  EXPECT_TRUE(out[0]->tensors.empty());
}

TEST(Frame, NonContiguousInputIsTheCallersJobSizeMismatchRejected) {
  Pair p(false);
  Tensor t = random_tensor("t", DType::float32, {4, 4}, 1);
  t.nbytes = 12;  // claims fewer bytes than its shape needs
  Header h;
  h.type = MsgType::infer_request;
  auto st = p.w.write(h, {t}, opts("none"), [](Segment&&) { return Status{}; });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::invalid_argument);
}

TEST(Frame, TamperedPayloadIsRejectedAndNextFrameAccepted) {
  Pair p(true);
  Bundle b{random_tensor("a", DType::float32, {1, 8, 32, 32}, 1)};
  auto s1 = p.write(b, opts("blosc-lz4", 4096, 1 << 20));
  auto s2 = p.write(b, opts("blosc-lz4", 4096, 1 << 20));
  // Flip one byte in the middle of a payload part.
  auto* d = static_cast<uint8_t*>(s1[0][2].data());
  d[s1[0][2].size() / 2] ^= 0x01;
  auto o1 = p.read(s1);
  ASSERT_EQ(o1.size(), 1u);
  ASSERT_FALSE(o1[0].ok());
  EXPECT_EQ(o1[0].error().code, Errc::auth_failed);
  auto o2 = p.read(s2);
  ASSERT_EQ(o2.size(), 1u);
  ASSERT_TRUE(o2[0].ok()) << o2[0].error().str();
  expect_same_bytes(b[0], o2[0]->tensors[0]);
  EXPECT_EQ(p.r.rejected().auth_failed, 1u);
}

TEST(Frame, TamperedHeaderIsRejected) {
  Pair p(true);
  Bundle b{random_tensor("a", DType::float32, {64}, 1)};
  auto s = p.write(b, opts("none"), MsgType::infer_request, 5);
  // Re-encode the header with another split index: same size, authentic-looking.
  auto h = decode_header(static_cast<const uint8_t*>(s[0][0].data()), s[0][0].size(), Limits{});
  ASSERT_TRUE(h.ok());
  h->split = 6;
  std::vector<uint8_t> bytes;
  encode_header(*h, bytes);
  s[0][0] = zmq::message_t(bytes.data(), bytes.size());
  auto o = p.read(s);
  ASSERT_EQ(o.size(), 1u);
  ASSERT_FALSE(o[0].ok());
  EXPECT_EQ(o[0].error().code, Errc::auth_failed);
}

TEST(Frame, TamperedTagOrSealIsRejected) {
  for (int which : {0, 1}) {
    Pair p(true);
    Bundle b{random_tensor("a", DType::float32, {256}, 1)};
    auto s = p.write(b, opts("none"));
    auto& m = which == 0 ? s[0][1] : s[0].back();
    static_cast<uint8_t*>(m.data())[m.size() - 1] ^= 0x80;
    auto o = p.read(s);
    ASSERT_EQ(o.size(), 1u);
    ASSERT_FALSE(o[0].ok());
    EXPECT_EQ(o[0].error().code, Errc::auth_failed);
  }
}

TEST(Frame, ReplayedFrameIsRejected) {
  Pair p(true);
  Bundle b{random_tensor("a", DType::float32, {1000}, 1)};
  auto s1 = p.write(b, opts("none"));
  auto copy = copy_segments(s1);
  ASSERT_TRUE(p.read(s1)[0].ok());
  auto o = p.read(copy);
  ASSERT_EQ(o.size(), 1u);
  ASSERT_FALSE(o[0].ok());
  EXPECT_EQ(o[0].error().code, Errc::replay);
  EXPECT_EQ(p.r.rejected().replay, 1u);
  // The session carries on.
  auto s3 = p.write(b, opts("none"));
  ASSERT_TRUE(p.read(s3)[0].ok());
}

TEST(Frame, ReorderedFramesOlderOneRejected) {
  for (bool enc : {true, false}) {
    Pair p(enc);
    Bundle b{random_tensor("a", DType::float32, {100}, 1)};
    auto s1 = p.write(b, opts("none"));
    auto s2 = p.write(b, opts("none"));
    ASSERT_TRUE(p.read(s2)[0].ok());
    auto o = p.read(s1);
    ASSERT_EQ(o.size(), 1u);
    ASSERT_FALSE(o[0].ok());
    EXPECT_EQ(o[0].error().code, Errc::replay) << enc;
  }
}

TEST(Frame, TruncatedFrameReportedWhenNextFrameStarts) {
  Pair p(true);
  Bundle b{random_tensor("a", DType::float32, {1, 16, 64, 64}, 1)};
  auto s1 = p.write(b, opts("blosc-lz4", 8192, 8192));
  ASSERT_GT(s1.size(), 3u);
  s1.pop_back();  // the last segment never arrives
  auto o1 = p.read(s1);
  EXPECT_TRUE(o1.empty());
  auto s2 = p.write(b, opts("none"));
  auto o2 = p.read(s2);
  ASSERT_EQ(o2.size(), 2u);
  ASSERT_FALSE(o2[0].ok());
  EXPECT_EQ(o2[0].error().code, Errc::truncated);
  ASSERT_TRUE(o2[1].ok()) << o2[1].error().str();
  expect_same_bytes(b[0], o2[1]->tensors[0]);
}

TEST(Frame, DroppedPartIsRejected) {
  for (bool enc : {true, false}) {
    Pair p(enc);
    Bundle b{random_tensor("a", DType::float32, {1, 4, 64, 64}, 1)};
    auto s = p.write(b, opts("none", 4096, 1 << 20));
    ASSERT_EQ(s.size(), 1u);
    s[0].erase(s[0].begin() + 2);
    auto o = p.read(s);
    ASSERT_EQ(o.size(), 1u);
    ASSERT_FALSE(o[0].ok());
    EXPECT_EQ(o[0].error().code, Errc::size_mismatch) << enc;
  }
}

TEST(Frame, CipherDowngradeIsRejected) {
  Pair plain(false);
  Pair enc(true);
  Bundle b{random_tensor("a", DType::float32, {10}, 1)};
  auto s = plain.write(b, opts("none"));
  auto o = enc.read(s);
  ASSERT_EQ(o.size(), 1u);
  ASSERT_FALSE(o[0].ok());
  EXPECT_EQ(o[0].error().code, Errc::cipher_mismatch);
}

TEST(Frame, WrongSessionIsRejected) {
  Pair p(false);
  p.r.set_session(43);
  Bundle b{random_tensor("a", DType::float32, {10}, 1)};
  auto s = p.write(b, opts("none"));
  auto o = p.read(s);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].error().code, Errc::wrong_session);
}

TEST(Frame, OversizedFrameRejectedBeforeAllocation) {
  Limits lim;
  lim.max_frame_bytes = 1 << 20;
  Pair p(true, lim);
  Bundle b{random_tensor("a", DType::float32, {1, 1, 1024, 512}, 1)};  // 2 MiB
  auto s = p.write(b, opts("none"));
  auto o = p.read(s);
  ASSERT_FALSE(o.empty());
  ASSERT_FALSE(o[0].ok());
  EXPECT_EQ(o[0].error().code, Errc::limit_exceeded);
}

// int8_channel beyond kMaxInt8Channels channels goes as per-tensor int8
// through the real frame path (#24: VGG's flatten cut, 25,088 channels,
// needed 175,900 B of header and ended the sweep with limit_exceeded).
TEST(Frame, PerChannelInt8OnHugeChannelCountFallsBackToPerTensor) {
  for (int64_t channels : {int64_t{25088}, int64_t{200000}, kMaxInt8Channels + 1}) {
    Pair p(false);
    Tensor t = random_tensor("a", DType::float32, {1, channels}, 1);
    auto segs = p.write({t}, opts("int8_channel"));
    auto outs = p.read(segs);
    ASSERT_EQ(outs.size(), 1u) << channels;
    ASSERT_TRUE(outs[0].ok()) << outs[0].error().str();
    std::optional<Frame> got = std::move(*outs[0]);
    ASSERT_EQ(got->header.tensors.size(), 1u);
    EXPECT_EQ(got->header.tensors[0].lossy.kind, Lossy::int8) << channels;
    EXPECT_EQ(got->header.tensors[0].lossy.scale.size(), 1u);
    // Within per-tensor int8's bound: one quantisation step (rounding of the
    // value and of the zero point), the step covering the tensor's range.
    const float* a = reinterpret_cast<const float*>(t.data);
    const float* b = reinterpret_cast<const float*>(got->tensors[0].data);
    float lo = a[0], hi = a[0];
    for (int64_t i = 0; i < channels; ++i) lo = std::min(lo, a[i]), hi = std::max(hi, a[i]);
    const float step = got->header.tensors[0].lossy.scale[0];
    EXPECT_GE(step * 255.0f, (hi - lo) * 0.999f);
    EXPECT_LE(step * 255.0f, (hi - lo) * 1.01f);
    for (int64_t i = 0; i < channels; ++i) ASSERT_LE(std::fabs(a[i] - b[i]), step) << i;
  }
  // At the limit it stays per channel.
  Pair p(false);
  Tensor t = random_tensor("a", DType::float32, {1, kMaxInt8Channels}, 1);
  auto segs = p.write({t}, opts("int8_channel"));
  auto outs = p.read(segs);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].ok()) << outs[0].error().str();
  std::optional<Frame> got = std::move(*outs[0]);
  EXPECT_EQ(got->header.tensors[0].lossy.kind, Lossy::int8_channel);
  EXPECT_EQ(got->header.tensors[0].lossy.scale.size(), static_cast<size_t>(kMaxInt8Channels));
}

// Post-ReLU activations often have dead channels (all zeros) or are constant:
// an int8 scale of exactly 1.0 used to come back from msgpack as an integer
// and fail the frame. Every lossy codec, alone and chained with blosc, must
// carry such tensors within its bound.
TEST(Frame, DeadChannelsAndConstantTensorsSurviveEveryLossyCodec) {
  auto make = [](const std::string& kind) {
    Tensor t = Tensor::allocate("act", DType::float32, {1, 4, 5, 5});
    auto* f = reinterpret_cast<float*>(t.mutable_data());
    for (int64_t i = 0; i < 100; ++i) {
      const int64_t c = i / 25;
      if (kind == "zeros") f[i] = 0.f;
      else if (kind == "constant") f[i] = 5.f;
      else if (kind == "ones") f[i] = 1.f;
      else f[i] = c == 1 ? 0.f : (c == 2 ? 3.f : static_cast<float>((i * 37) % 11) / 4.f);  // dead + constant channel
    }
    return t;
  };
  for (const char* codec : {"fp16", "bf16", "int8", "int8_channel", "int8+blosc-zstd", "int8_channel+blosc-lz4",
                            "fp16+blosc-lz4"})
    for (const char* kind : {"zeros", "constant", "ones", "dead_channel"}) {
      for (bool enc : {false, true}) {
        Pair p(enc);
        SendOptions so;
        auto spec = CodecSpec::parse(codec);
        ASSERT_TRUE(spec.ok()) << codec;
        so.codec = *spec;
        const Tensor in = make(kind);
        auto segs = p.write({in}, so);
        auto out = p.read(segs);
        ASSERT_EQ(out.size(), 1u) << codec << " " << kind;
        ASSERT_TRUE(out[0].ok()) << codec << " " << kind << ": " << out[0].error().str();
        const auto* a = reinterpret_cast<const float*>(in.data);
        const auto* b = reinterpret_cast<const float*>(out[0]->tensors[0].data);
        for (int64_t i = 0; i < 100; ++i) {
          // fp16/bf16 keep these values exactly; int8 keeps zero and constants within half a step.
          const float bound = std::string(codec).rfind("int8", 0) == 0 ? 3.f / 255.f : 0.f;
          ASSERT_NEAR(a[i], b[i], bound + 1e-6f) << codec << " " << kind << " element " << i;
        }
      }
    }
}

TEST(Frame, ErrorMessagesAreValidUtf8WithPeerBytesEscaped) {
  EXPECT_EQ(utf8_escaped("plain ascii\n"), "plain ascii\n");
  EXPECT_EQ(utf8_escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(utf8_escaped(std::string("bad \xff\xfe end")), "bad \\xff\\xfe end");
  EXPECT_EQ(utf8_escaped(std::string("overlong \xc0\xaf")), "overlong \\xc0\\xaf");
  EXPECT_EQ(utf8_escaped(std::string("surrogate \xed\xa0\x80")), "surrogate \\xed\\xa0\\x80");
  EXPECT_EQ(utf8_escaped(std::string("cut \xe2\x82")), "cut \\xe2\\x82");
  EXPECT_EQ(utf8_escaped(std::string("nul \x00 bell \x07", 12)), "nul \\x00 bell \\x07");
  // On the wire: an ERROR quoting peer bytes decodes to valid UTF-8.
  Pair p(true);
  Header h;
  h.type = MsgType::error;
  h.error = make_error(Errc::malformed_header, std::string("peer sent \xff\x80 as a codec name"));
  std::vector<Segment> segs;
  ASSERT_TRUE(p.w.write(h, {}, SendOptions{}, [&](Segment&& s) {
                   segs.push_back(std::move(s));
                   return Status{};
                 }).ok());
  auto out = p.read(segs);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error().str();
  ASSERT_TRUE(out[0]->header.error.has_value());
  EXPECT_EQ(out[0]->header.error->message, "peer sent \\xff\\x80 as a codec name");
}

// PROTOCOL.md section 2: a header map (top level, a descriptor, meta, err,
// hs) that repeats a key is malformed, not "the last one wins".
TEST(Frame, RepeatedHeaderKeysAreMalformed) {
  auto header = [](const std::string& dup_in) {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    const bool top = dup_in == "top", meta = dup_in == "meta";
    pk.pack_map(10 + (top ? 1 : 0) + (meta ? 1 : 0));
    pk.pack("magic"); pk.pack("TRCR");
    pk.pack("v"); pk.pack(1);
    pk.pack("type"); pk.pack(6);
    pk.pack("sid"); pk.pack(0);
    pk.pack("seq"); pk.pack(1);
    pk.pack("split"); pk.pack(-1);
    pk.pack("seg"); pk.pack(0);
    pk.pack("last"); pk.pack(true);
    pk.pack("np"); pk.pack(0);
    pk.pack("cipher"); pk.pack("none");
    if (top) { pk.pack("seq"); pk.pack(2); }
    if (meta) {
      pk.pack("meta");
      pk.pack_map(2);
      pk.pack("n"); pk.pack(1);
      pk.pack("n"); pk.pack(2);
    }
    return std::vector<uint8_t>(b.data(), b.data() + b.size());
  };
  auto ok = header("none");
  EXPECT_TRUE(decode_header(ok.data(), ok.size(), Limits{}).ok());
  for (const char* where : {"top", "meta"}) {
    auto h = header(where);
    auto r = decode_header(h.data(), h.size(), Limits{});
    ASSERT_FALSE(r.ok()) << where;
    EXPECT_EQ(r.error().code, Errc::malformed_header) << where;
    EXPECT_NE(r.error().message.find("repeats the key"), std::string::npos) << r.error().message;
  }
}
