// Micro-benchmarks for protocol/crypto: AES-256-GCM throughput at the payload
// sizes of typical split tensors, and per-operation latency of the handshake
// primitives (HKDF-SHA256, X25519).
//
// Sizes: 36,864 B (e.g. 9,216 float32), 774,400 B (e.g. 64x55x55 float32) and
// 3,211,264 B (e.g. 64x112x112 float32).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "protocol/crypto.hpp"

namespace {

using namespace tracr::protocol;

constexpr int64_t kSizes[] = {36864, 774400, 3211264};

void check(const tracr::Status& st, benchmark::State& state) {
  if (!st) state.SkipWithError(st.error().str().c_str());
}

AesGcm keyed() {
  Key256 key{};
  Iv96 iv{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<uint8_t>(0xa0 + i);
  AesGcm g;
  if (!g.set_key(key, iv)) std::abort();
  return g;
}

// Header-sized associated data, as the channel authenticates the frame header.
const std::vector<uint8_t> kAad(64, 0x5a);

void BM_AesGcmSeal(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  AesGcm g = keyed();
  std::vector<uint8_t> in(n, 0x11), out(n);
  Tag128 tag{};
  uint64_t counter = 0;
  for (auto _ : state) {
    auto st = g.seal(counter++, kAad.data(), kAad.size(), in.data(), n, out.data(), tag.data());
    check(st, state);
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_AesGcmSealInPlace(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  AesGcm g = keyed();
  std::vector<uint8_t> buf(n, 0x11);
  Tag128 tag{};
  uint64_t counter = 0;
  for (auto _ : state) {
    auto st = g.seal(counter++, kAad.data(), kAad.size(), buf.data(), n, buf.data(), tag.data());
    check(st, state);
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_AesGcmOpen(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  AesGcm tx = keyed(), rx = keyed();
  std::vector<uint8_t> pt(n, 0x11), ct(n), out(n);
  Tag128 tag{};
  if (!tx.seal(7, kAad.data(), kAad.size(), pt.data(), n, ct.data(), tag.data())) std::abort();
  for (auto _ : state) {
    auto st = rx.open(7, kAad.data(), kAad.size(), ct.data(), n, out.data(), tag.data());
    check(st, state);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : kSizes) b->Arg(n);
}

BENCHMARK(BM_AesGcmSeal)->Apply(sizes);
BENCHMARK(BM_AesGcmSealInPlace)->Apply(sizes);
BENCHMARK(BM_AesGcmOpen)->Apply(sizes);

// Session key schedule: 32-byte shared secret -> 2 keys + 2 IVs (88 bytes).
void BM_HkdfSha256(benchmark::State& state) {
  std::vector<uint8_t> ikm(32, 0x42), salt(32, 0x24);
  for (auto _ : state) {
    auto okm = hkdf_sha256(ikm.data(), ikm.size(), salt.data(), salt.size(),
                           "tracr v1 session keys", 88);
    if (!okm) state.SkipWithError(okm.error().str().c_str());
    benchmark::DoNotOptimize(okm);
  }
}
BENCHMARK(BM_HkdfSha256);

void BM_HmacSha256_64B(benchmark::State& state) {
  std::vector<uint8_t> key(32, 0x01), data(64, 0x02);
  for (auto _ : state) {
    auto mac = hmac_sha256(key.data(), key.size(), data.data(), data.size());
    benchmark::DoNotOptimize(mac);
  }
}
BENCHMARK(BM_HmacSha256_64B);

void BM_X25519Generate(benchmark::State& state) {
  for (auto _ : state) {
    auto kp = x25519_generate();
    if (!kp) state.SkipWithError(kp.error().str().c_str());
    benchmark::DoNotOptimize(kp);
  }
}
BENCHMARK(BM_X25519Generate);

void BM_X25519Shared(benchmark::State& state) {
  auto a = x25519_generate();
  auto b = x25519_generate();
  if (!a || !b) {
    state.SkipWithError("x25519_generate failed");
    return;
  }
  for (auto _ : state) {
    auto s = x25519_shared(a->priv, b->pub);
    if (!s) state.SkipWithError(s.error().str().c_str());
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_X25519Shared);

}  // namespace
