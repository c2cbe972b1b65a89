// Shared helpers for protocol tests: tensors of every dtype, writer/reader
// pairs with real keys, in-memory segment capture.
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "protocol/frame.hpp"

namespace tracr::protocol::testing {

inline Tensor random_tensor(const std::string& name, DType dt, std::vector<int64_t> shape, uint32_t seed,
                            bool relu = true) {
  Tensor t = Tensor::allocate(name, dt, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 2.f);
  const int64_t n = t.numel();
  uint8_t* p = t.mutable_data();
  for (int64_t i = 0; i < n; ++i) {
    float v = nd(rng);
    if (relu && v < 0) v = 0;
    switch (dt) {
      case DType::float32: std::memcpy(p + 4 * i, &v, 4); break;
      case DType::float64: { double d = v; std::memcpy(p + 8 * i, &d, 8); break; }
      case DType::float16:
      case DType::bfloat16:
      case DType::int16: { uint16_t u = static_cast<uint16_t>(rng()); std::memcpy(p + 2 * i, &u, 2); break; }
      case DType::int8:
      case DType::uint8: p[i] = static_cast<uint8_t>(rng()); break;
      case DType::bool_: p[i] = rng() & 1; break;
      case DType::int32: { int32_t x = static_cast<int32_t>(rng()); std::memcpy(p + 4 * i, &x, 4); break; }
      case DType::int64: { int64_t x = (static_cast<int64_t>(rng()) << 32) | rng(); std::memcpy(p + 8 * i, &x, 8); break; }
    }
  }
  return t;
}

// The fixed key and IV base of Pair's session.
inline std::pair<Key256, Iv96> test_key() {
  Key256 k{};
  Iv96 iv{};
  for (int i = 0; i < 32; ++i) k[i] = static_cast<uint8_t>(i * 7 + 1);
  for (int i = 0; i < 12; ++i) iv[i] = static_cast<uint8_t>(0xa0 + i);
  return {k, iv};
}

struct Pair {
  FrameWriter w;
  FrameReader r;
  explicit Pair(bool encrypt, Limits lim = {}) : r(lim) {
    w.set_session(42);
    r.set_session(42);
    if (encrypt) {
      const auto [k, iv] = test_key();
      EXPECT_TRUE(w.set_key(k, iv).ok());
      EXPECT_TRUE(r.set_key(k, iv).ok());
    }
  }
  // Encodes a frame, keeping its segments.
  std::vector<Segment> write(const Bundle& b, const SendOptions& so, MsgType type = MsgType::infer_request,
                             int32_t split = 3, Meta meta = {}) {
    std::vector<Segment> segs;
    Header h;
    h.type = type;
    h.split = split;
    h.meta = std::move(meta);
    auto st = w.write(h, b, so, [&](Segment&& s) {
      segs.push_back(std::move(s));
      return Status{};
    });
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().str());
    return segs;
  }
  // Feeds segments; returns all outcomes.
  std::vector<Result<Frame>> read(std::vector<Segment>& segs) {
    std::vector<Result<Frame>> out;
    for (auto& s : segs)
      for (auto& r : this->r.feed(s)) out.push_back(std::move(r));
    return out;
  }
};

inline Segment copy_segment(const Segment& s) {
  Segment c;
  for (const auto& m : s) c.emplace_back(m.data(), m.size());
  return c;
}
inline std::vector<Segment> copy_segments(const std::vector<Segment>& v) {
  std::vector<Segment> c;
  for (const auto& s : v) c.push_back(copy_segment(s));
  return c;
}

}  // namespace tracr::protocol::testing
