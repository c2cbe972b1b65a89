// Codecs: how a tensor's bytes become wire bytes. A codec is a chain of an
// optional lossy transform (fp16/bf16 cast, int8 affine quantization per
// tensor or per channel), an optional lossless sparse stage (a zero bitmap
// plus the packed nonzero elements) and an optional lossless compressor
// (c-blosc with lz4, zstd, blosclz or zlib). Each lossy transform states its
// error bound (lossy_error_bound) and tests check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/error.hpp"
#include "protocol/tensor.hpp"

namespace tracr::protocol {

enum class Lossy : uint8_t { none = 0, fp16 = 1, bf16 = 2, int8 = 3, int8_channel = 4 };
enum class Compressor : uint8_t { none = 0, blosc = 1 };

std::string_view lossy_name(Lossy l);        // "none" "fp16" "bf16" "int8" "int8_channel"
std::string_view compressor_name(Compressor c);  // "none" "blosc"

// Codec chosen per experiment. Text form (parse/name): the stages in the
// order they are applied, joined by '+', each optional but at least one:
//   [<lossy>+][sparse+]blosc-<cname> | [<lossy>+]sparse | <lossy> | none
//   lossy: fp16 bf16 int8 int8_channel; cname: lz4 zstd blosclz zlib
// optionally followed by ":key=value,..." with keys level (1-9),
// shuffle (none|byte|bit), threads (1-64) (blosc only), axis (int8_channel
// channel axis). e.g. "int8_channel+blosc-zstd:level=5,shuffle=bit",
// "sparse", "fp16+sparse", "sparse+blosc-zstd", "int8+sparse+blosc-lz4".
struct CodecSpec {
  Lossy lossy = Lossy::none;
  int channel_axis = 1;  // for int8_channel; negative counts from the end
  bool sparse = false;   // zero bitmap + packed nonzero elements (PROTOCOL.md 4.4)
  Compressor comp = Compressor::none;
  std::string cname = "lz4";
  int shuffle = 1;  // 0 none, 1 byte, 2 bit (BLOSC_NOSHUFFLE/SHUFFLE/BITSHUFFLE)
  int level = 1;    // 1-9
  int threads = 1;  // blosc internal threads

  // Canonical text form, round-trips through parse().
  std::string name() const;
  // Error codec_params/unknown_codec naming the offending token.
  static Result<CodecSpec> parse(std::string_view text);
  Status validate() const;
};

// Every codec text this build supports, for `tracrctl codecs`.
std::vector<std::string> list_codecs();

// Per-tensor parameters of the lossy stage, computed by the sender from the
// whole tensor and carried in the frame header.
struct LossyParams {
  Lossy kind = Lossy::none;
  DType src = DType::float32;   // dtype of the original tensor
  DType wire = DType::float32;  // dtype of the transformed element stream
  int axis = -1;                // channel axis (int8_channel), normalised
  int64_t channels = 1;         // size of that axis
  int64_t inner = 1;            // product of dims after the axis
  std::vector<float> scale;     // int8: 1 (per tensor) or `channels` values
  std::vector<int32_t> zero_point;
};

// int8_channel on a tensor with more channels than this is sent as per-tensor
// int8 (its desc says int8): 25,088 channels (VGG's flatten cut) would need
// 175,900 B of scales and zero points, above the 64 KiB header limit, and
// ended whole sweeps (#24). PROTOCOL.md §4 states the rule.
inline constexpr int64_t kMaxInt8Channels = 2048;

// Decides the lossy stage for one tensor. Lossy transforms apply to float32
// tensors only; other dtypes (and float32 tensors when spec.lossy is none)
// get kind none, wire = src. For int8 computes scale/zero_point over the
// tensor (per channel along spec.channel_axis for int8_channel, per tensor
// beyond kMaxInt8Channels channels). Error codec_params if the axis is out of
// range.
Result<LossyParams> lossy_prepare(const CodecSpec& spec, const Tensor& t);

// Transforms elements [first, first+count) of src (dtype p.src, contiguous)
// into dst (count * dtype_size(p.wire) bytes). Element indices are global so
// per-channel parameters are found from them; src and dst both point at
// element `first` (the chunk), not at element 0.
// fp16: finite values beyond +-65504 saturate to +-65504, +-inf and NaN are
// kept. int8: +-inf give the extreme codes, NaN gives 0.
void lossy_encode(const LossyParams& p, const uint8_t* src, int64_t first, int64_t count,
                  uint8_t* dst);
// Inverse of lossy_encode: wire elements [first, first+count) back to p.src
// (src and dst again point at element `first`).
void lossy_decode(const LossyParams& p, const uint8_t* src, int64_t first, int64_t count,
                  uint8_t* dst);

// Stated bound on |decoded - original| for one finite element x of a tensor
// coded with p, for |x| within the wire type's range (see PROTOCOL.md):
//   fp16: max(|x| * 2^-11, 2^-25); bf16: |x| * 2^-8 (normal range);
//   int8: scale/2 * (1 + 2^-20) of x's channel; none: 0.
double lossy_error_bound(const LossyParams& p, double x, int64_t element_index);

// Checks that params received in a header are consistent with the tensor's
// dtype and shape (scale count, axis, positive finite scales, zero points in
// [-128, 127]). Error codec_params naming the problem.
Status lossy_validate(const LossyParams& p, const std::vector<int64_t>& shape);

// c-blosc. Bound on compressed size for n input bytes.
size_t blosc_max_compressed(size_t n);
// Compresses n bytes into dst (capacity >= blosc_max_compressed(n)); returns
// the compressed size. typesize is the element size for shuffling.
Result<size_t> blosc_compress(const CodecSpec& spec, size_t typesize, const uint8_t* src,
                              size_t n, uint8_t* dst, size_t dst_capacity);
// Decompresses exactly `expected` bytes. Validates the blosc header against
// `n` and `expected` first, so corrupt or hostile input (decompression bombs,
// size lies) gives decompress_failed and never writes past dst.
Status blosc_decompress(const uint8_t* src, size_t n, uint8_t* dst, size_t expected,
                        int threads);

// ---------------------------------------------------------------- sparse
//
// A chunk of n elements of ws bytes (ws = 1, 2, 4 or 8) is coded as a zero
// bitmap of ceil(n/8) bytes (bit i%8 of byte i/8 set when element i has any
// nonzero byte; padding bits zero) followed by the nonzero elements in order
// (the "raw form"). -0.0, NaN and inf are nonzero, so the stage is bit exact
// for every dtype. With blosc the bitmap and the values are two c-blosc
// buffers, back to back. Layouts: PROTOCOL.md section 4.4.

// ceil(n / 8): bytes of the bitmap of n elements (0 for n <= 0).
size_t sparse_bitmap_bytes(int64_t n);
// Bound on the encoded size of n elements of ws bytes: bitmap plus n * ws,
// plus two c-blosc headers when `blosc`.
size_t sparse_max_encoded(int64_t n, size_t ws, bool blosc);

// Raw form. Writes the bitmap and the nonzero elements of src (n elements of
// ws bytes) to dst, which must hold sparse_max_encoded(n, ws, false) bytes;
// returns the bytes written (bitmap plus nonzero count * ws). ws must be 1,
// 2, 4 or 8 (a programmer error otherwise: std::invalid_argument).
size_t sparse_pack(const uint8_t* src, int64_t n, size_t ws, uint8_t* dst);
// Inverse of sparse_pack: reads exactly `len` bytes of src, writes n
// elements of ws bytes to dst. Checks before reading any value that len is
// the bitmap plus (number of set bits) * ws and that padding bits are zero;
// error decompress_failed naming the counts otherwise (never reads past
// src + len, never writes past dst + n * ws). Error codec_params for a ws
// other than 1, 2, 4, 8.
Status sparse_unpack(const uint8_t* src, size_t len, int64_t n, size_t ws, uint8_t* dst);

// The whole sparse stage of one chunk: the raw form when spec.comp is none,
// or c-blosc(bitmap) || c-blosc(values) when spec.comp is blosc (bitmap with
// typesize 1, values with typesize ws; spec's cname, level, shuffle and
// threads). dst holds cap >= sparse_max_encoded(n, ws, blosc) bytes; scratch
// is grown as needed (blosc only). Returns the encoded size; errors are
// blosc_compress's.
Result<size_t> sparse_encode(const CodecSpec& spec, size_t ws, const uint8_t* src, int64_t n,
                             uint8_t* dst, size_t cap, std::vector<uint8_t>& scratch);
// Inverse of sparse_encode for a part of exactly len bytes, decoding n
// elements of ws bytes into dst. With blosc, each buffer's header is checked
// against the part and the sizes the bitmap implies before it is
// decompressed. Error decompress_failed naming what disagreed.
Status sparse_decode(const uint8_t* src, size_t len, int64_t n, size_t ws, bool blosc,
                     uint8_t* dst, std::vector<uint8_t>& scratch);

// int8 and int8_channel under the sparse stage: the stream it sees holds
// each code minus its channel's zero point (mod 256), so that 0.0 codes as
// byte 0. `undo` adds the zero points back. No-op for other lossy kinds.
// `first`/`count` and the pointer are as for lossy_encode.
void sparse_int8_recenter(const LossyParams& p, int64_t first, int64_t count, uint8_t* codes,
                          bool undo);

}  // namespace tracr::protocol
