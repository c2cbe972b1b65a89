#include "experiments/local_run.hpp"

#include <torch/torch.h>

#include <chrono>

#include "experiments/tensor_bridge.hpp"

namespace tracr::experiments {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void sync(const c10::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

struct Encoded {
  protocol::Tensor original;  // keeps the source alive for dtype/shape
  protocol::LossyParams params;
  std::vector<uint8_t> lossy;       // lossy-stage output
  std::vector<uint8_t> compressed;  // compressor output (empty when none)
  size_t wire_size = 0;
};

Result<Encoded> encode(const NamedTensor& nt, const protocol::CodecSpec& codec) {
  Encoded e;
  auto pt = to_protocol(nt.name, nt.tensor);
  if (!pt) return pt.error();
  e.original = std::move(*pt);
  auto params = protocol::lossy_prepare(codec, e.original);
  if (!params) return params.error();
  e.params = std::move(*params);
  const int64_t n = e.original.numel();
  e.lossy.resize(static_cast<size_t>(n) * protocol::dtype_size(e.params.wire));
  protocol::lossy_encode(e.params, e.original.data, 0, n, e.lossy.data());
  e.wire_size = e.lossy.size();
  if (codec.sparse) {
    // Zero bitmap + nonzero elements (blosc on both when chained), as the frame writer does per chunk.
    const size_t ws = protocol::dtype_size(e.params.wire);
    protocol::sparse_int8_recenter(e.params, 0, n, e.lossy.data(), false);
    const bool blosc = codec.comp == protocol::Compressor::blosc;
    e.compressed.resize(protocol::sparse_max_encoded(n, ws, blosc));
    std::vector<uint8_t> scratch;
    auto sz = protocol::sparse_encode(codec, ws, e.lossy.data(), n, e.compressed.data(), e.compressed.size(), scratch);
    if (!sz) return sz.error();
    e.compressed.resize(*sz);
    e.wire_size = *sz;
    return e;
  }
  if (codec.comp == protocol::Compressor::blosc) {
    e.compressed.resize(protocol::blosc_max_compressed(e.lossy.size()));
    auto sz = protocol::blosc_compress(codec, protocol::dtype_size(e.params.wire), e.lossy.data(),
                                       e.lossy.size(), e.compressed.data(), e.compressed.size());
    if (!sz) return sz.error();
    e.compressed.resize(*sz);
    e.wire_size = *sz;
  }
  return e;
}

Result<NamedTensor> decode(Encoded& e, const protocol::CodecSpec& codec) {
  if (codec.sparse) {
    std::vector<uint8_t> raw(e.lossy.size()), scratch;
    const int64_t n = e.original.numel();
    TRACR_TRY(protocol::sparse_decode(e.compressed.data(), e.compressed.size(), n, protocol::dtype_size(e.params.wire),
                                      codec.comp == protocol::Compressor::blosc, raw.data(), scratch));
    protocol::sparse_int8_recenter(e.params, 0, n, raw.data(), true);
    e.lossy = std::move(raw);
  } else if (codec.comp == protocol::Compressor::blosc) {
    std::vector<uint8_t> raw(e.lossy.size());
    TRACR_TRY(protocol::blosc_decompress(e.compressed.data(), e.compressed.size(), raw.data(),
                                         raw.size(), codec.threads));
    e.lossy = std::move(raw);
  }
  auto out = protocol::Tensor::allocate(e.original.name, e.original.dtype, e.original.shape);
  protocol::lossy_decode(e.params, e.lossy.data(), 0, out.numel(), out.mutable_data());
  auto t = from_protocol(out);
  if (!t) return t.error();
  return NamedTensor{e.original.name, std::move(*t)};
}

}  // namespace

Result<Bundle> codec_roundtrip(const Bundle& in, const protocol::CodecSpec& codec,
                               int64_t* wire_bytes) {
  Bundle out;
  for (const auto& nt : in) {
    auto e = encode(nt, codec);
    if (!e) return e.error();
    if (wire_bytes) *wire_bytes += static_cast<int64_t>(e->wire_size);
    auto d = decode(*e, codec);
    if (!d) return d.error();
    out.push_back(std::move(*d));
  }
  return out;
}

Result<LocalRunResult> run_split_local(const SplitModel& model, const at::Tensor& input, int k,
                                       const protocol::CodecSpec& codec) {
  const int n = model.num_layers();
  if (k < 0 || k > n)
    return make_error(Errc::invalid_argument, model.name() + ": split " + std::to_string(k) +
                                                  " is not within [0, " + std::to_string(n) + "]");
  TRACR_TRY(codec.validate());
  LocalRunResult r;
  r.split = k;
  r.codec = codec.name();
  const auto dev = model.device();

  sync(dev);
  auto t0 = std::chrono::steady_clock::now();
  auto head = model.run(0, k, SplitModel::input_bundle(input.to(dev)));
  sync(dev);
  r.head_ms = ms_since(t0);
  if (!head) return head.error();

  t0 = std::chrono::steady_clock::now();
  std::vector<Encoded> encoded;
  for (const auto& nt : *head) {
    r.raw_bytes += nt.tensor.numel() * static_cast<int64_t>(nt.tensor.element_size());
    auto e = encode(nt, codec);
    if (!e) return e.error();
    r.wire_bytes += static_cast<int64_t>(e->wire_size);
    encoded.push_back(std::move(*e));
  }
  r.encode_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  Bundle received;
  for (auto& e : encoded) {
    auto d = decode(e, codec);
    if (!d) return d.error();
    received.push_back(std::move(*d));
  }
  encoded.clear();
  r.decode_ms = ms_since(t0);

  sync(dev);
  t0 = std::chrono::steady_clock::now();
  auto tail = model.run(k, n, std::move(received));
  sync(dev);
  r.tail_ms = ms_since(t0);
  if (!tail) return tail.error();
  r.outputs = std::move(*tail);
  return r;
}

}  // namespace tracr::experiments
