// Throughput of each codec stage on post-ReLU activations (normal values,
// negatives set to 0, so about half zeros): 1x64x12x12 float32 (36,864
// bytes), 1x64x55x55 (774,400 bytes, AlexNet conv1 output) and 1x64x112x112
// (3,211,264 bytes). Bytes processed are always the raw float32 bytes, so
// MB/s compare across stages; GB/s is the same rate in 10^9 bytes per second
// of CPU time on one core, and ratio is raw bytes over encoded bytes.
//   tracr_stage_bench --benchmark_filter='sparse|blosc'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "protocol/codec.hpp"

namespace tracr::protocol {
namespace {

// The argument is the spatial side: 12, 55 or 112.
const std::vector<float>& activations(int64_t side) {
  static std::map<int64_t, std::vector<float>> cache;
  auto& v = cache[side];
  if (v.empty()) {
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    v.resize(static_cast<size_t>(64 * side * side));
    for (auto& x : v) x = std::max(dist(rng), 0.0f);
  }
  return v;
}

Tensor tensor_of(int64_t side) {
  return Tensor::view("act", DType::float32, {1, 64, side, side}, activations(side).data());
}

LossyParams prepared(const char* codec, const Tensor& t) {
  return get_or_throw(lossy_prepare(get_or_throw(CodecSpec::parse(codec)), t));
}

void set_bytes(benchmark::State& state, const Tensor& t) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(t.nbytes));
  state.counters["raw_bytes"] = static_cast<double>(t.nbytes);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(t.nbytes), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void lossy_encode_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const LossyParams p = prepared(codec, t);
  std::vector<uint8_t> wire(static_cast<size_t>(t.numel()) * dtype_size(p.wire));
  for (auto _ : state) {
    lossy_encode(p, t.data, 0, t.numel(), wire.data());
    benchmark::DoNotOptimize(wire.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, t);
}

void lossy_decode_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const LossyParams p = prepared(codec, t);
  std::vector<uint8_t> wire(static_cast<size_t>(t.numel()) * dtype_size(p.wire));
  lossy_encode(p, t.data, 0, t.numel(), wire.data());
  std::vector<uint8_t> out(t.nbytes);
  for (auto _ : state) {
    lossy_decode(p, wire.data(), 0, t.numel(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, t);
}

// Range statistics and scale computation that precede an int8 encode.
void lossy_prepare_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const CodecSpec spec = get_or_throw(CodecSpec::parse(codec));
  for (auto _ : state) {
    auto p = lossy_prepare(spec, t);
    benchmark::DoNotOptimize(p);
  }
  set_bytes(state, t);
}

void blosc_compress_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const CodecSpec spec = get_or_throw(CodecSpec::parse(codec));
  std::vector<uint8_t> out(blosc_max_compressed(t.nbytes));
  size_t csize = 0;
  for (auto _ : state) {
    csize = get_or_throw(blosc_compress(spec, 4, t.data, t.nbytes, out.data(), out.size()));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, t);
  state.counters["ratio"] = static_cast<double>(t.nbytes) / static_cast<double>(csize);
}

void blosc_decompress_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const CodecSpec spec = get_or_throw(CodecSpec::parse(codec));
  std::vector<uint8_t> c(blosc_max_compressed(t.nbytes));
  c.resize(get_or_throw(blosc_compress(spec, 4, t.data, t.nbytes, c.data(), c.size())));
  std::vector<uint8_t> out(t.nbytes);
  for (auto _ : state) {
    check_or_throw(blosc_decompress(c.data(), c.size(), out.data(), out.size(), spec.threads));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, t);
  state.counters["ratio"] = static_cast<double>(t.nbytes) / static_cast<double>(c.size());
}

// Bytes a run-length alternative to the bitmap would take for n float32
// elements: each run (zeros and nonzeros alternating, starting with zeros)
// as a LEB128 varint, plus the nonzero values. Reported beside the bitmap's
// size to show which layout suits these activations.
size_t run_length_bytes(const float* x, int64_t n) {
  size_t bytes = 0;
  bool zero = true;
  int64_t run = 0;
  const auto flush = [&] {
    uint64_t v = static_cast<uint64_t>(run);
    do {
      ++bytes;
      v >>= 7;
    } while (v != 0);
  };
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    if ((u == 0) != zero) {
      flush();
      zero = !zero;
      run = 0;
    }
    ++run;
    if (u != 0) bytes += 4;
  }
  flush();
  return bytes;
}

// The sparse stage (raw form or with blosc) on the whole tensor as one chunk.
void sparse_encode_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const CodecSpec spec = get_or_throw(CodecSpec::parse(codec));
  std::vector<uint8_t> out(sparse_max_encoded(t.numel(), 4, spec.comp == Compressor::blosc));
  std::vector<uint8_t> scratch;
  size_t size = 0;
  for (auto _ : state) {
    size = get_or_throw(sparse_encode(spec, 4, t.data, t.numel(), out.data(), out.size(), scratch));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, t);
  state.counters["ratio"] = static_cast<double>(t.nbytes) / static_cast<double>(size);
  if (spec.comp == Compressor::none)
    state.counters["rle_ratio"] =
        static_cast<double>(t.nbytes) /
        static_cast<double>(run_length_bytes(reinterpret_cast<const float*>(t.data), t.numel()));
}

void sparse_decode_bench(benchmark::State& state, const char* codec) {
  const Tensor t = tensor_of(state.range(0));
  const CodecSpec spec = get_or_throw(CodecSpec::parse(codec));
  const bool blosc = spec.comp == Compressor::blosc;
  std::vector<uint8_t> enc(sparse_max_encoded(t.numel(), 4, blosc));
  std::vector<uint8_t> scratch;
  enc.resize(
      get_or_throw(sparse_encode(spec, 4, t.data, t.numel(), enc.data(), enc.size(), scratch)));
  std::vector<uint8_t> out(t.nbytes);
  for (auto _ : state) {
    check_or_throw(sparse_decode(enc.data(), enc.size(), t.numel(), 4, blosc, out.data(), scratch));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  if (std::memcmp(out.data(), t.data, t.nbytes) != 0)
    state.SkipWithError("sparse decode did not reproduce the tensor");
  set_bytes(state, t);
  state.counters["ratio"] = static_cast<double>(t.nbytes) / static_cast<double>(enc.size());
}

#define TRACR_CODEC_BENCH(fn, label, codec) \
  BENCHMARK_CAPTURE(fn, label, codec)->Arg(55)->Arg(112)->Unit(benchmark::kMicrosecond)
// The issue #14 comparison: the three activation sizes.
#define TRACR_CODEC_BENCH3(fn, label, codec) \
  BENCHMARK_CAPTURE(fn, label, codec)->Arg(12)->Arg(55)->Arg(112)->Unit(benchmark::kMicrosecond)

TRACR_CODEC_BENCH(lossy_encode_bench, fp16, "fp16");
TRACR_CODEC_BENCH(lossy_decode_bench, fp16, "fp16");
TRACR_CODEC_BENCH(lossy_encode_bench, bf16, "bf16");
TRACR_CODEC_BENCH(lossy_decode_bench, bf16, "bf16");
TRACR_CODEC_BENCH(lossy_prepare_bench, int8, "int8");
TRACR_CODEC_BENCH(lossy_encode_bench, int8, "int8");
TRACR_CODEC_BENCH(lossy_decode_bench, int8, "int8");
TRACR_CODEC_BENCH(lossy_prepare_bench, int8_channel, "int8_channel");
TRACR_CODEC_BENCH(lossy_encode_bench, int8_channel, "int8_channel");
TRACR_CODEC_BENCH(lossy_decode_bench, int8_channel, "int8_channel");
TRACR_CODEC_BENCH3(blosc_compress_bench, lz4_l1_byteshuffle, "blosc-lz4:level=1,shuffle=byte");
TRACR_CODEC_BENCH3(blosc_decompress_bench, lz4_l1_byteshuffle, "blosc-lz4:level=1,shuffle=byte");
TRACR_CODEC_BENCH3(blosc_compress_bench, zstd_l1_byteshuffle, "blosc-zstd:level=1,shuffle=byte");
TRACR_CODEC_BENCH3(blosc_decompress_bench, zstd_l1_byteshuffle, "blosc-zstd:level=1,shuffle=byte");
TRACR_CODEC_BENCH3(sparse_encode_bench, sparse, "sparse");
TRACR_CODEC_BENCH3(sparse_decode_bench, sparse, "sparse");
TRACR_CODEC_BENCH3(sparse_encode_bench, sparse_lz4, "sparse+blosc-lz4");
TRACR_CODEC_BENCH3(sparse_decode_bench, sparse_lz4, "sparse+blosc-lz4");
TRACR_CODEC_BENCH3(sparse_encode_bench, sparse_zstd, "sparse+blosc-zstd");
TRACR_CODEC_BENCH3(sparse_decode_bench, sparse_zstd, "sparse+blosc-zstd");

}  // namespace
}  // namespace tracr::protocol
