// Randomised mutation test: valid frames are mutated (bit flips, byte
// overwrites, truncation, extension, dropped/duplicated/swapped parts,
// header fields rewritten with hostile values) and fed to a reader. Every
// outcome must be a verified frame or a typed error; no crash, no hang, no
// unbounded allocation (run under ASan in CI), and an encrypted session
// accepts the next good frame after every rejected one.
#include <algorithm>

#include "frame_fixture.hpp"

using namespace tracr;
using namespace tracr::protocol;
using namespace tracr::protocol::testing;

namespace {

bool is_typed(const Error& e) { return errc_name(e.code) != "unknown" && e.code != Errc::internal; }

void mutate(std::vector<Segment>& segs, std::mt19937& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  Segment& seg = segs[pick(segs.size())];
  const int op = static_cast<int>(rng() % 9);
  if (seg.empty()) return;
  zmq::message_t& part = seg[pick(seg.size())];
  std::string bytes(static_cast<const char*>(part.data()), part.size());
  switch (op) {
    case 0:  // flip a bit
      if (!bytes.empty()) bytes[pick(bytes.size())] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte with an interesting value
      if (!bytes.empty()) {
        const char vals[] = {0, '\x7f', '\x80', '\xff', '\xcf', '\xdd', '\xdf', '\xc1'};
        bytes[pick(bytes.size())] = vals[rng() % sizeof vals];
      }
      break;
    case 2: bytes.resize(pick(bytes.size() + 1)); break;                  // truncate
    case 3: bytes.append(1 + pick(64), static_cast<char>(rng())); break;  // extend
    case 4: seg.erase(seg.begin() + static_cast<long>(pick(seg.size()))); return;  // drop a part
    case 5: seg.insert(seg.begin() + static_cast<long>(pick(seg.size())), zmq::message_t(bytes.data(), bytes.size())); return;
    case 6: if (seg.size() > 1) std::swap(seg[pick(seg.size())], seg[pick(seg.size())]); return;
    case 7: segs.erase(segs.begin() + static_cast<long>(pick(segs.size()))); return;  // drop a segment
    case 8: {  // rewrite the header with hostile field values, keeping it valid msgpack
      auto h = decode_header(static_cast<const uint8_t*>(seg[0].data()), seg[0].size(), Limits{});
      if (!h) return;
      switch (rng() % 6) {
        case 0: if (!h->tensors.empty()) h->tensors[0].shape = {1 << 30, 1 << 30, 1 << 30}; break;
        case 1: if (!h->tensors.empty()) h->tensors[0].raw_bytes = ~0ull; break;
        case 2: h->nparts = 65535; break;
        case 3: if (!h->tensors.empty()) h->tensors[0].chunk_bytes = 1; break;
        case 4: h->seg += 1; break;
        case 5: if (!h->tensors.empty()) h->tensors[0].lossy.scale.assign(3, -1.f); break;
      }
      std::vector<uint8_t> out;
      encode_header(*h, out);
      seg[0] = zmq::message_t(out.data(), out.size());
      return;
    }
  }
  part = zmq::message_t(bytes.data(), bytes.size());
}

}  // namespace

TEST(Mutation, MutatedFramesGiveTypedErrorsAndSessionCarriesOn) {
  const char* codecs[] = {"none", "blosc-lz4", "int8_channel+blosc-zstd", "fp16", "bf16+blosc-blosclz"};
  std::mt19937 rng(20261121);
  uint64_t rejected = 0, accepted = 0;
  for (bool enc : {true, false}) {
    Pair p(enc);
    for (int iter = 0; iter < 1500; ++iter) {
      SendOptions so;
      so.codec = *CodecSpec::parse(codecs[iter % 5]);
      so.chunk_bytes = 4096;
      so.segment_bytes = 4096 * (1 + iter % 3);
      Bundle b{random_tensor("a", DType::float32, {1, 4, 24, int64_t(8 + iter % 13)}, uint32_t(iter)),
               random_tensor("b", iter % 2 ? DType::int64 : DType::float16, {int64_t(iter % 50)}, uint32_t(iter + 1))};
      auto segs = p.write(b, so);
      const int nmut = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < nmut && !segs.empty(); ++k) mutate(segs, rng);
      for (auto& r : p.read(segs)) {
        if (r.ok()) {
          ++accepted;
          EXPECT_EQ(r->tensors.size(), r->header.tensors.size());
        } else {
          ++rejected;
          EXPECT_TRUE(is_typed(r.error())) << r.error().str();
        }
      }
      if (enc) {
        // The next good frame must be accepted (a pending truncated frame may be reported first).
        auto good = p.write(b, so);
        auto outs = p.read(good);
        ASSERT_FALSE(outs.empty());
        ASSERT_TRUE(outs.back().ok()) << "iteration " << iter << ": " << outs.back().error().str();
        ++accepted;
        if (so.codec.lossy == Lossy::none) {
          EXPECT_EQ(0, std::memcmp(outs.back()->tensors[0].data, b[0].data, b[0].nbytes));
        }
      }
    }
  }
  EXPECT_GT(rejected, 1000u);
  EXPECT_GT(accepted, 1500u);
}

TEST(Mutation, RandomBytesAsHeaderNeverCrash) {
  std::mt19937 rng(7);
  FrameReader r;
  for (int i = 0; i < 20000; ++i) {
    std::string s(1 + rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    if (i % 2) s[0] = static_cast<char>(0x80 | (rng() % 16));  // msgpack fixmap
    Segment seg;
    seg.emplace_back(s.data(), s.size());
    for (auto& out : r.feed(seg)) {
      if (!out.ok()) {
        EXPECT_TRUE(is_typed(out.error()));
      }
    }
  }
}

TEST(Mutation, HugeDeclaredArraysDoNotAllocate) {
  // msgpack array32 header claiming 4 billion entries with 5 bytes of input.
  const uint8_t evil[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  auto h = decode_header(evil, sizeof evil, Limits{});
  ASSERT_FALSE(h.ok());
  const uint8_t evil_map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a'};
  auto h2 = decode_header(evil_map, sizeof evil_map, Limits{});
  ASSERT_FALSE(h2.ok());
}
