// Writes a seed corpus for fuzz_frame: one valid frame per codec text that
// `tracrctl codecs` lists (plain, and encrypted under fuzz_frame's all-zero
// key), in fuzz_frame's input layout, so the fuzzer starts from frames whose
// parts reach every decoder (blosc, the lossy transforms, the sparse stage)
// and mutates from there.   fuzz_seeds DIR
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "protocol/frame.hpp"

using namespace tracr::protocol;

namespace {

// fuzz_frame's layout: each part as a 2-byte little-endian length and its
// bytes; a zero length ends a segment.
std::vector<uint8_t> serialise(const std::vector<Segment>& segs) {
  std::vector<uint8_t> out;
  for (size_t s = 0; s < segs.size(); ++s) {
    if (s > 0) out.insert(out.end(), {0, 0});
    for (const auto& m : segs[s]) {
      const size_t n = m.size();
      if (n == 0 || n > 0xFFFF) continue;  // not expressible; seeds keep parts small
      out.push_back(static_cast<uint8_t>(n & 0xFF));
      out.push_back(static_cast<uint8_t>(n >> 8));
      const auto* p = static_cast<const uint8_t*>(m.data());
      out.insert(out.end(), p, p + n);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  // Post-ReLU activations (about half zeros) and a small integer tensor.
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> act(1 * 4 * 30 * 30);
  for (auto& x : act) x = std::max(dist(rng), 0.0f);
  std::vector<int64_t> ids(12);
  for (auto& x : ids) x = static_cast<int64_t>(rng() % 3);
  const Bundle bundle{Tensor::view("act", DType::float32, {1, 4, 30, 30}, act.data()),
                      Tensor::view("ids", DType::int64, {3, 4}, ids.data())};
  int written = 0;
  for (const auto& codec : list_codecs()) {
    for (bool encrypted : {false, true}) {
      FrameWriter w;
      if (encrypted && !w.set_key(Key256{}, Iv96{}).ok()) return 1;
      SendOptions so;
      so.codec = get_or_throw(CodecSpec::parse(codec));
      so.chunk_bytes = 4096;
      so.segment_bytes = 8192;
      std::vector<Segment> segs;
      Header h;
      h.type = MsgType::infer_request;
      h.split = 1;
      auto st = w.write(h, bundle, so, [&](Segment&& s) {
        segs.push_back(std::move(s));
        return tracr::Status{};
      });
      if (!st) {
        std::fprintf(stderr, "%s: %s\n", codec.c_str(), st.error().str().c_str());
        return 1;
      }
      const auto bytes = serialise(segs);
      std::string name = dir + "/seed-" + (encrypted ? "aes-" : "plain-") + codec;
      for (auto& c : name) c = c == '+' || c == ':' || c == ',' || c == '=' ? '_' : c;
      FILE* f = std::fopen(name.c_str(), "wb");
      if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
        std::fprintf(stderr, "cannot write %s\n", name.c_str());
        if (f) std::fclose(f);
        return 1;
      }
      std::fclose(f);
      ++written;
    }
  }
  std::printf("%d seeds in %s\n", written, dir.c_str());
  return 0;
}
