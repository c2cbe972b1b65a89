// Whole-frame encode and decode in memory (no sockets): FrameWriter then
// FrameReader on the same post-ReLU activations as bench_codec, per codec,
// with and without AES-256-GCM. Shows the protocol's own overhead beside the
// stage figures of bench_codec/bench_crypto.
//   tracr_stage_bench --benchmark_filter=Frame
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "protocol/frame.hpp"

namespace tracr::protocol {
namespace {

Tensor activations(int64_t side) {
  static std::vector<float> v;
  static int64_t cached = 0;
  if (cached != side) {
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    v.resize(static_cast<size_t>(64 * side * side));
    for (auto& x : v) x = std::max(dist(rng), 0.0f);
    cached = side;
  }
  return Tensor::view("act", DType::float32, {1, 64, side, side}, v.data());
}

// Both ends keyed with the same all-zero key and IV (AES-GCM on).
void key_both(FrameWriter& w, FrameReader& r) {
  Key256 k{};
  Iv96 iv{};
  (void)w.set_key(k, iv);
  (void)r.set_key(k, iv);
}

// The timed loop: write `t` as one INFER_REQUEST frame and read it back.
// Returns the last frame's payload bytes on the wire.
uint64_t round_trips(benchmark::State& state, const Tensor& t, FrameWriter& w, FrameReader& r,
                     const SendOptions& so) {
  Header h;
  h.type = MsgType::infer_request;
  uint64_t wire = 0;
  for (auto _ : state) {
    std::vector<Segment> segs;
    (void)w.write(h, {t}, so, [&](Segment&& s) {
      segs.push_back(std::move(s));
      return Status{};
    });
    for (auto& s : segs)
      for (auto& out : r.feed(s)) {
        if (!out) state.SkipWithError(out.error().str().c_str());
        else wire = out->stats.payload_bytes;
      }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(t.nbytes));
  return wire;
}

void frame_bench(benchmark::State& state, const char* codec, bool enc) {
  const Tensor t = activations(state.range(0));
  FrameWriter w;
  FrameReader r;
  if (enc) key_both(w, r);
  SendOptions so;
  so.codec = get_or_throw(CodecSpec::parse(codec));
  const uint64_t wire = round_trips(state, t, w, r, so);
  state.counters["wire_ratio"] = static_cast<double>(wire) / static_cast<double>(t.nbytes);
}

// The same round trip with a frame's parts coded on `threads` workers at
// both ends (SendOptions::threads, ReadOptions::threads; PROTOCOL.md 4.5):
// the wire bytes do not change, the time should fall where cores are free.
void frame_threads_bench(benchmark::State& state, const char* codec) {
  const Tensor t = activations(state.range(0));
  const unsigned threads = static_cast<unsigned>(state.range(1));
  FrameWriter w;
  ReadOptions ro;
  ro.threads = threads;
  FrameReader r(Limits{}, ro);
  key_both(w, r);
  SendOptions so;
  so.codec = get_or_throw(CodecSpec::parse(codec));
  so.threads = threads;
  so.chunk_bytes = 64 * 1024;  // 12 to 49 parts per frame: work to share
  (void)round_trips(state, t, w, r, so);
}
#define FRAME_THREADS_BENCH(name, codec)                                                              \
  BENCHMARK_CAPTURE(frame_threads_bench, name, codec)                                                 \
      ->ArgsProduct({{55, 112}, {1, 2, 4, 8, 16}})                                                    \
      ->Unit(benchmark::kMicrosecond)                                                                 \
      ->UseRealTime()
FRAME_THREADS_BENCH(none_aes, "none");
FRAME_THREADS_BENCH(sparse_lz4_aes, "sparse+blosc-lz4");
FRAME_THREADS_BENCH(zstd_aes, "blosc-zstd");

#define FRAME_BENCH(name, codec, enc) \
  BENCHMARK_CAPTURE(frame_bench, name, codec, enc)->Arg(55)->Arg(112)->Unit(benchmark::kMicrosecond)

FRAME_BENCH(none_plain, "none", false);
FRAME_BENCH(none_aes, "none", true);
FRAME_BENCH(lz4_aes, "blosc-lz4", true);
FRAME_BENCH(zstd_aes, "blosc-zstd", true);
FRAME_BENCH(fp16_aes, "fp16", true);
FRAME_BENCH(int8_aes, "int8", true);
FRAME_BENCH(int8_channel_lz4_aes, "int8_channel+blosc-lz4", true);

}  // namespace
}  // namespace tracr::protocol
