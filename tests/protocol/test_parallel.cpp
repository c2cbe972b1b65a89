// Parallel encode and decode of a frame's parts (SendOptions::threads,
// ReadOptions::threads): the bytes on the wire never depend on the thread
// count, either reader decodes either writer's frames, and failures are
// still typed and confined to their frame.
#include <atomic>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "frame_fixture.hpp"
#include "protocol/worker_pool.hpp"

using namespace tracr;
using namespace tracr::protocol;
using namespace tracr::protocol::testing;

namespace {

std::vector<uint8_t> flatten(const std::vector<Segment>& segs) {
  std::vector<uint8_t> out;
  for (const auto& s : segs)
    for (const auto& m : s) {
      const auto* p = static_cast<const uint8_t*>(m.data());
      // Part boundaries matter too: prefix each part with its size.
      const uint64_t n = m.size();
      out.insert(out.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 8);
      out.insert(out.end(), p, p + m.size());
    }
  return out;
}

// Two post-ReLU activations (about half zeros) and a small tensor of
// another dtype, so frames have several tensors, parts and segments.
Bundle activations() {
  return {random_tensor("conv1", DType::float32, {1, 64, 55, 55}, 11),
          random_tensor("skip", DType::float32, {1, 32, 28, 28}, 12),
          random_tensor("ids", DType::int64, {1, 1000}, 13, false)};
}

// A reader with `threads` for Pair's session and (when encrypt) Pair's keys.
FrameReader reader(unsigned threads, bool encrypt) {
  FrameReader r(Limits{}, ReadOptions{threads});
  r.set_session(42);
  if (encrypt) {
    const auto [k, iv] = test_key();
    EXPECT_TRUE(r.set_key(k, iv).ok());
  }
  return r;
}

struct Case {
  const char* codec;
  bool encrypt;
};

class ThreadCounts : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST(WorkerPool, RunsEveryTaskOnAWorkerIndexWithinItsSize) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  std::atomic<int> ran{0};
  std::atomic<unsigned> bad_index{0};
  std::vector<std::future<void>> fs;
  for (int i = 0; i < 200; ++i)
    fs.push_back(pool.submit([&](unsigned w) {
      if (w >= 3) bad_index++;
      ran++;
    }));
  for (auto& f : fs) f.get();
  EXPECT_EQ(ran.load(), 200);
  EXPECT_EQ(bad_index.load(), 0u);
  EXPECT_EQ(WorkerPool::shared(2).get(), WorkerPool::shared(2).get()) << "pools are shared per size";
  EXPECT_GE(resolve_threads(0), 1u);
  EXPECT_EQ(resolve_threads(5), 5u);
}

TEST_P(ThreadCounts, SameWireBytesForOneAndFourThreadsAndEitherReaderDecodes) {
  const Case su = GetParam();
  const Bundle b = activations();
  SendOptions so;
  so.codec = *CodecSpec::parse(su.codec);
  so.chunk_bytes = 16 * 1024;    // 48 parts for conv1 (12 under int8)
  so.segment_bytes = 24 * 1024;  // several segments, boundaries set by coded sizes
  Pair one(su.encrypt), four(su.encrypt);
  std::vector<std::vector<Segment>> by1, by4;
  for (int frame = 0; frame < 3; ++frame) {  // counters and sequence numbers carry on
    so.threads = 1;
    by1.push_back(one.write(b, so));
    so.threads = 4;
    by4.push_back(four.write(b, so));
    ASSERT_GT(by1.back().size(), 2u) << "the frame should span several segments";
    EXPECT_EQ(flatten(by1.back()), flatten(by4.back())) << su.codec << " frame " << frame;
  }
  // Decode the 4-thread frames with a 1-thread reader and the 1-thread
  // frames with a 4-thread reader.
  FrameReader r1 = std::move(one.r);
  FrameReader r4 = reader(4, su.encrypt);
  const bool lossless = so.codec.lossy == Lossy::none;
  for (int frame = 0; frame < 3; ++frame) {
    std::vector<Result<Frame>> got1, got4;
    for (auto& s : by4[frame])
      for (auto& r : r1.feed(s)) got1.push_back(std::move(r));
    for (auto& s : by1[frame])
      for (auto& r : r4.feed(s)) got4.push_back(std::move(r));
    ASSERT_EQ(got1.size(), 1u);
    ASSERT_EQ(got4.size(), 1u);
    ASSERT_TRUE(got1[0].ok()) << got1[0].error().str();
    ASSERT_TRUE(got4[0].ok()) << got4[0].error().str();
    ASSERT_EQ(got1[0]->tensors.size(), b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      const Tensor& a = got1[0]->tensors[i];
      const Tensor& c = got4[0]->tensors[i];
      ASSERT_EQ(a.nbytes, b[i].nbytes);
      EXPECT_EQ(0, std::memcmp(a.data, c.data, a.nbytes)) << "both readers decode the same values";
      if (lossless || b[i].dtype != DType::float32) {
        EXPECT_EQ(0, std::memcmp(a.data, b[i].data, a.nbytes)) << su.codec << " tensor " << b[i].name;
      }
    }
    EXPECT_EQ(got1[0]->stats.parts, got4[0]->stats.parts);
    EXPECT_EQ(got1[0]->stats.payload_bytes, got4[0]->stats.payload_bytes);
  }
  EXPECT_EQ(r1.rejected().total(), 0u);
  EXPECT_EQ(r4.rejected().total(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, ThreadCounts,
    ::testing::Values(Case{"none", true}, Case{"sparse", true}, Case{"sparse+blosc-zstd", true},
                      Case{"blosc-lz4", true}, Case{"int8_channel+sparse+blosc-lz4", true},
                      Case{"fp16", true}, Case{"sparse+blosc-lz4", false}, Case{"int8", false}),
    [](const auto& info) {
      std::string n = std::string(info.param.codec) + (info.param.encrypt ? "_aes" : "_plain");
      for (auto& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(FrameParallel, ZeroThreadsMeansHardwareConcurrencyAndSendsTheSameBytes) {
  const Bundle b = activations();
  SendOptions so;
  so.codec = *CodecSpec::parse("sparse");
  so.chunk_bytes = 32 * 1024;
  Pair one(true), all(true);
  so.threads = 1;
  auto a = one.write(b, so);
  so.threads = 0;
  auto c = all.write(b, so);
  EXPECT_EQ(flatten(a), flatten(c));
}

TEST(FrameParallel, TamperedMiddlePartIsAuthFailedAndTheNextFrameIsAccepted) {
  const Bundle b = activations();
  SendOptions so;
  so.codec = *CodecSpec::parse("sparse+blosc-lz4");
  so.chunk_bytes = 16 * 1024;
  so.segment_bytes = 48 * 1024;
  so.threads = 4;
  Pair p(true);
  FrameReader r = reader(4, true);
  auto bad = p.write(b, so);
  auto good = p.write(b, so);
  ASSERT_GT(bad.size(), 4u);
  // A ciphertext byte of the middle segment's first part: the seal (over the
  // header and tags) still verifies, the part's own tag does not.
  Segment& mid = bad[bad.size() / 2];
  ASSERT_GE(mid.size(), 3u);
  static_cast<uint8_t*>(mid[1].data())[5] ^= 0x40;
  std::vector<Result<Frame>> outs;
  for (auto& s : bad)
    for (auto& o : r.feed(s)) outs.push_back(std::move(o));
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_FALSE(outs[0].ok());
  EXPECT_EQ(outs[0].error().code, Errc::auth_failed) << outs[0].error().str();
  EXPECT_NE(outs[0].error().message.find("part"), std::string::npos) << outs[0].error().message;
  EXPECT_EQ(r.rejected().auth_failed, 1u);
  outs.clear();
  for (auto& s : good)
    for (auto& o : r.feed(s)) outs.push_back(std::move(o));
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].ok()) << outs[0].error().str();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(0, std::memcmp(outs[0]->tensors[i].data, b[i].data, b[i].nbytes));
}

TEST(FrameParallel, FrameCutShortWhileWorkersDecodeIsTruncatedAndFreed) {
  const Bundle b = activations();
  SendOptions so;
  so.codec = *CodecSpec::parse("sparse+blosc-zstd");
  so.chunk_bytes = 16 * 1024;
  so.segment_bytes = 32 * 1024;
  so.threads = 2;
  Pair p(false);
  FrameReader r = reader(3, false);
  auto first = p.write(b, so);
  auto second = p.write(b, so);
  ASSERT_GT(first.size(), 3u);
  // Half of the first frame, then the whole second one.
  std::vector<Result<Frame>> outs;
  for (size_t i = 0; i < first.size() / 2; ++i)
    for (auto& o : r.feed(first[i])) outs.push_back(std::move(o));
  EXPECT_TRUE(outs.empty());
  EXPECT_GT(r.pending_bytes(), 0u);
  for (auto& s : second)
    for (auto& o : r.feed(s)) outs.push_back(std::move(o));
  ASSERT_EQ(outs.size(), 2u);
  ASSERT_FALSE(outs[0].ok());
  EXPECT_EQ(outs[0].error().code, Errc::truncated);
  ASSERT_TRUE(outs[1].ok()) << outs[1].error().str();
  EXPECT_EQ(0, std::memcmp(outs[1]->tensors[0].data, b[0].data, b[0].nbytes));
  EXPECT_EQ(r.pending_bytes(), 0u);
}
