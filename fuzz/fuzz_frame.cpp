// libFuzzer target: arbitrary bytes as a peer's segments, fed to a plain, a
// plain one that checks control-message seals (PROTOCOL.md 5.1) and an
// encrypted FrameReader (all-zero keys and IVs), all new for each input so
// an input's outcome does not depend on the ones before it (a reader keeps
// the last sequence number it accepted). Input layout: a sequence of parts,
// each a 2-byte little-endian length followed by that many bytes; a zero
// length ends a segment. Anything goes; the reader must only return frames
// or typed errors. fuzz_seeds writes one valid frame per codec as a seed.
#include <cstddef>
#include <cstdint>

#include "protocol/frame.hpp"

using namespace tracr::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameReader plain_reader;
  FrameReader enc_reader;
  (void)enc_reader.set_key(Key256{}, Iv96{});
  FrameReader sealed_reader;
  (void)sealed_reader.set_control_key(Key256{}, Iv96{});
  FrameReader* plain = &plain_reader;
  FrameReader* enc = &enc_reader;
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
    Segment copy, copy2;
    for (auto& m : s) copy.emplace_back(m.data(), m.size());
    for (auto& m : s) copy2.emplace_back(m.data(), m.size());
    for (auto& r : plain->feed(s)) (void)r;
    for (auto& r : enc->feed(copy)) (void)r;
    for (auto& r : sealed_reader.feed(copy2)) (void)r;
  }
  return 0;
}
