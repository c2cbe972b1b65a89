// libFuzzer target: arbitrary bytes as a peer's segments, fed to a plain and
// an encrypted FrameReader. Input layout: a sequence of parts, each a 2-byte
// little-endian length followed by that many bytes; a zero length ends a
// segment. Anything goes; the reader must only return frames or typed errors.
#include <cstddef>
#include <cstdint>

#include "protocol/frame.hpp"

using namespace tracr::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FrameReader* plain = new FrameReader();
  static FrameReader* enc = [] {
    auto* r = new FrameReader();
    Key256 k{};
    Iv96 iv{};
    (void)r->set_key(k, iv);
    return r;
  }();
  std::vector<Segment> segs(1);
  size_t off = 0;
  while (off + 2 <= size) {
    size_t n = data[off] | (static_cast<size_t>(data[off + 1]) << 8);
    off += 2;
    if (n == 0) {
      segs.emplace_back();
      continue;
    }
    n = std::min(n, size - off);
    segs.back().emplace_back(data + off, n);
    off += n;
  }
  (void)decode_header(data, size, Limits{});
  for (auto& s : segs) {
    if (s.empty()) continue;
    Segment copy;
    for (auto& m : s) copy.emplace_back(m.data(), m.size());
    for (auto& r : plain->feed(s)) (void)r;
    for (auto& r : enc->feed(copy)) (void)r;
  }
  return 0;
}
