// Codecs: codec text parsing, the lossy element transforms (fp16, bf16, int8
// per tensor / per channel), the sparse stage (zero bitmap + packed nonzero
// elements) and the c-blosc stage.
//
// Hot loops are written as fixed blocks of kBlock elements with a scalar
// tail: GCC's -O2 ("very cheap") vectoriser only vectorises loops whose trip
// count is a known multiple of the vector width and whose pointers cannot
// alias, so each block is copied into local arrays, transformed by a
// branch-free element function and copied out.
#include "protocol/codec.hpp"

#include <blosc.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

namespace tracr::protocol {

namespace {

// ---------------------------------------------------------------- tables

constexpr std::string_view kLossyNames[] = {"none", "fp16", "bf16", "int8", "int8_channel"};
constexpr std::string_view kBloscCnames[] = {"lz4", "zstd", "blosclz", "zlib"};
constexpr std::string_view kShuffleNames[] = {"none", "byte", "bit"};
constexpr std::string_view kParamKeys[] = {"level", "shuffle", "threads", "axis"};
constexpr std::string_view kBloscPrefix = "blosc-";
constexpr std::string_view kSparse = "sparse";
constexpr std::string_view kSparsePrefix = "sparse+";

constexpr int kMaxThreads = 64;

template <size_t N>
std::string join(const std::string_view (&names)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  return out;
}

std::string accepted_codecs() {
  return join(kLossyNames) + ", sparse, <lossy>+sparse, or [<lossy>+][sparse+]blosc-<cname> " +
         "(stages in that order) with cname one of " + join(kBloscCnames);
}

std::optional<Lossy> lossy_from_name(std::string_view s) {
  for (size_t i = 0; i < std::size(kLossyNames); ++i)
    if (kLossyNames[i] == s) return static_cast<Lossy>(i);
  return std::nullopt;
}

bool known_cname(std::string_view s) {
  return std::find(std::begin(kBloscCnames), std::end(kBloscCnames), s) != std::end(kBloscCnames);
}

// Whether the linked c-blosc was built with this compressor.
bool cname_in_build(const std::string& s) { return blosc_compname_to_compcode(s.c_str()) >= 0; }

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || b == e) return std::nullopt;
  return v;
}

bool known_dtype(DType d) {
  auto back = dtype_from_name(dtype_name(d));
  return back && *back == d;
}

// ---------------------------------------------------------------- bits

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

constexpr int64_t kBlock = 16;

// fp16_ieee_from_fp32_value from fp16.h, without its `volatile` (a guard
// against constant folding that also blocks vectorisation; we do not fold
// because nothing here is constant), plus saturation: finite inputs beyond
// the fp16 range give +-65504 (0x7BFF) instead of infinity. Infinities stay
// infinities and NaN stays a quiet NaN, as in fp16.h. Tests check it against
// fp16.h bit for bit (it was also checked on all 2^32 inputs).
inline uint16_t f32_to_f16_sat(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  uint32_t nonsign = exp_bits + mantissa_bits;
  // Finite input that rounded to infinity: saturate.
  nonsign = (shl1_w < 0xFF000000u && nonsign > 0x7BFFu) ? 0x7BFFu : nonsign;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// fp16_ieee_to_fp32_value from fp16.h with memcpy bit casts instead of its
// union ones, which GCC does not vectorise. Equal to fp16.h on all 65536
// inputs (tested).
inline float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized_value = f32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized_value = f32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  // A mask, not ?:, so GCC does not sink the float ops into branches it then
  // refuses to if-convert (-ftrapping-math).
  const uint32_t denormal = 0u - static_cast<uint32_t>(two_w < denormalized_cutoff);
  const uint32_t nb = f32_bits(normalized_value);
  const uint32_t db = f32_bits(denormalized_value);
  return f32_from_bits(sign | (db & denormal) | (nb & ~denormal));
}

// Round-to-nearest-even of the top 16 bits; NaN stays NaN (quietened, so a
// signalling NaN whose payload is in the low bits cannot become infinity).
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Applies `op(const In*, Out*, count)`-style element function `f` to n
// elements in blocks; In/Out are trivially copyable element types read and
// written through memcpy (the byte pointers need not be aligned).
template <class In, class Out, class F>
inline void map_elems(const uint8_t* src, int64_t n, uint8_t* dst, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    In x[kBlock];
    Out y[kBlock];
    std::memcpy(x, src + i * sizeof(In), sizeof x);
    for (int64_t j = 0; j < kBlock; ++j) y[j] = f(x[j]);
    std::memcpy(dst + i * sizeof(Out), y, sizeof y);
  }
  for (; i < n; ++i) {
    In x;
    std::memcpy(&x, src + i * sizeof(In), sizeof x);
    const Out y = f(x);
    std::memcpy(dst + i * sizeof(Out), &y, sizeof y);
  }
}

// ---------------------------------------------------------------- int8

// Non-finite values are replaced by 0, which never changes a range that
// always includes 0.
inline float finite_or_zero(float x) {
  return (f32_bits(x) & 0x7F800000u) != 0x7F800000u ? x : 0.0f;
}

struct Range {
  float lo = 0.0f;  // <= 0
  float hi = 0.0f;  // >= 0
};

// min(0, min x) and max(0, max x) over the finite values of n floats.
Range finite_range(const uint8_t* src, int64_t n, Range r) {
  int64_t i = 0;
  if (n >= kBlock) {
    float lo[kBlock], hi[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) lo[j] = hi[j] = 0.0f;
    for (; i + kBlock <= n; i += kBlock) {
      float x[kBlock];
      std::memcpy(x, src + i * 4, sizeof x);
      for (int64_t j = 0; j < kBlock; ++j) {
        const float v = finite_or_zero(x[j]);
        lo[j] = v < lo[j] ? v : lo[j];
        hi[j] = v > hi[j] ? v : hi[j];
      }
    }
    for (int64_t j = 0; j < kBlock; ++j) {
      r.lo = std::min(r.lo, lo[j]);
      r.hi = std::max(r.hi, hi[j]);
    }
  }
  for (; i < n; ++i) {
    float x;
    std::memcpy(&x, src + i * 4, 4);
    const float v = finite_or_zero(x);
    r.lo = std::min(r.lo, v);
    r.hi = std::max(r.hi, v);
  }
  return r;
}

// Rounds a positive normal float up to the next value whose significand has
// at most 15 significant bits (low 9 mantissa bits zero).
inline float round_up_15bit(float s) {
  uint32_t u = f32_bits(s);
  if (u & 0x1FFu) u = (u | 0x1FFu) + 1u;
  return f32_from_bits(u);
}

// Scale and zero point for one range [lo, hi] (lo <= 0 <= hi, finite).
//
// scale is (hi - lo) / 255 rounded *up* to a float with at most 15
// significant bits and at least FLT_MIN. Then every grid point
// (q - zp) * scale (|q - zp| <= 255, 8 bits) is exactly representable, the
// grid spans [lo - scale/2, hi + scale/2], and with the nearest-code choice
// made in double precision the error is at most scale/2 exactly (the header
// states scale/2 * (1 + 2^-20)). The cost is a scale at most 2^-14 larger
// than (hi - lo) / 255.
void int8_params(Range r, float& scale, int32_t& zero_point) {
  const double range = static_cast<double>(r.hi) - static_cast<double>(r.lo);
  if (range == 0.0) {
    scale = 1.0f;
    zero_point = -128;  // round(-0 / 1) - 128
    return;
  }
  float s = static_cast<float>(range / 255.0);
  s = std::max(s, std::numeric_limits<float>::min());
  s = round_up_15bit(s);
  while (static_cast<double>(s) * 255.0 < range) s = f32_from_bits(f32_bits(s) + 0x200u);
  scale = s;
  const double z = std::nearbyint(-static_cast<double>(r.lo) / static_cast<double>(s)) - 128.0;
  zero_point = static_cast<int32_t>(std::clamp(z, -128.0, 127.0));
}

// Round half to even of |t| < 2^51 without SSE4.1 (vectorises with SSE2).
// Needs the default rounding mode and no -ffast-math (which would fold it).
inline double round_even(double t) {
  constexpr double kMagic = 0x1.8p52;
  return (t + kMagic) - kMagic;
}

void int8_encode_run(const uint8_t* src, int64_t n, float scale, int32_t zp, uint8_t* dst) {
  // Division is replaced by a multiply in double: its relative error (2^-52)
  // is far below the distance of any float x from a rounding midpoint, so
  // the nearest code is still chosen.
  const double inv = 1.0 / static_cast<double>(scale);
  const double lo = -128.0 - zp;
  const double hi = 127.0 - zp;
  const double zpd = zp;
  map_elems<float, int8_t>(src, n, dst, [=](float x) {
    double t = static_cast<double>(x) * inv;
    t = t == t ? t : 0.0;  // NaN -> 0 (code zp)
    t = t < lo ? lo : t;   // also -inf -> lowest code
    t = t > hi ? hi : t;   // also +inf -> highest code
    return static_cast<int8_t>(static_cast<int32_t>(round_even(t) + zpd));
  });
}

void int8_decode_run(const uint8_t* src, int64_t n, float scale, int32_t zp, uint8_t* dst) {
  map_elems<int8_t, float>(src, n, dst, [=](int8_t q) {
    return static_cast<float>(static_cast<int32_t>(q) - zp) * scale;
  });
}

// Calls f(channel, offset, len) for the runs of [first, first+count) that
// share a channel; offsets are relative to `first`.
template <class F>
void for_each_channel_run(const LossyParams& p, int64_t first, int64_t count, F f) {
  if (count <= 0) return;
  if (p.scale.size() <= 1 || p.channels <= 1) {
    f(int64_t{0}, int64_t{0}, count);
    return;
  }
  const int64_t inner = std::max<int64_t>(p.inner, 1);
  const int64_t end = first + count;
  if (inner == 1) {
    int64_t c = first % p.channels;
    for (int64_t i = first; i < end; ++i) {
      f(c, i - first, int64_t{1});
      if (++c == p.channels) c = 0;
    }
    return;
  }
  for (int64_t i = first; i < end;) {
    const int64_t c = (i / inner) % p.channels;
    const int64_t len = std::min(inner - i % inner, end - i);
    f(c, i - first, len);
    i += len;
  }
}

size_t channel_index(const LossyParams& p, int64_t element_index) {
  if (p.scale.size() <= 1 || p.channels <= 1) return 0;
  const int64_t inner = std::max<int64_t>(p.inner, 1);
  return static_cast<size_t>((element_index / inner) % p.channels);
}

}  // namespace

// ---------------------------------------------------------------- names

std::string_view lossy_name(Lossy l) {
  const auto i = static_cast<size_t>(l);
  return i < std::size(kLossyNames) ? kLossyNames[i] : std::string_view("unknown");
}

std::string_view compressor_name(Compressor c) {
  switch (c) {
    case Compressor::none:
      return "none";
    case Compressor::blosc:
      return "blosc";
  }
  return "unknown";
}

std::string CodecSpec::name() const {
  std::string out;
  if (lossy != Lossy::none) out += lossy_name(lossy);
  if (sparse) {
    if (!out.empty()) out += '+';
    out += kSparse;
  }
  if (comp == Compressor::blosc) {
    if (!out.empty()) out += '+';
    out += kBloscPrefix;
    out += cname;
  }
  if (out.empty()) out = "none";
  std::vector<std::string> kv;
  if (comp == Compressor::blosc) {
    if (level != 1) kv.push_back(fmt::format("level={}", level));
    if (shuffle != 1) {
      if (shuffle >= 0 && shuffle < 3)
        kv.push_back(fmt::format("shuffle={}", kShuffleNames[shuffle]));
      else
        kv.push_back(fmt::format("shuffle={}", shuffle));  // invalid; parse() rejects it
    }
    if (threads != 1) kv.push_back(fmt::format("threads={}", threads));
  }
  if (lossy == Lossy::int8_channel && channel_axis != 1)
    kv.push_back(fmt::format("axis={}", channel_axis));
  for (size_t i = 0; i < kv.size(); ++i) {
    out += i == 0 ? ':' : ',';
    out += kv[i];
  }
  return out;
}

Result<CodecSpec> CodecSpec::parse(std::string_view text) {
  CodecSpec s;
  const size_t colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  const auto bad_codec = [&](std::string_view token, std::string_view what) {
    return make_error(Errc::unknown_codec, fmt::format("{} '{}' in codec \"{}\": expected {}", what,
                                                       token, text, accepted_codecs()));
  };
  if (head.empty()) return bad_codec(head, "empty codec name");

  std::string_view lossy_tok = head;
  std::string_view comp_tok;
  // "sparse[+...]" and "<lossy>+sparse[+...]": the sparse stage sits between
  // the lossy stage and the compressor; take it out and parse the rest as
  // before. Returns false for "sparse+" with nothing after it.
  const auto take_sparse = [&](std::string_view rest, std::string_view& after) {
    if (rest == kSparse) {
      s.sparse = true;
      after = {};
      return true;
    }
    if (rest.substr(0, kSparsePrefix.size()) == kSparsePrefix) {
      s.sparse = true;
      after = rest.substr(kSparsePrefix.size());
      return !after.empty();
    }
    after = rest;
    return true;
  };
  if (head == kSparse || head.substr(0, kSparsePrefix.size()) == kSparsePrefix) {
    lossy_tok = {};
    if (!take_sparse(head, comp_tok)) return bad_codec(head, "missing compressor after '+'");
  } else if (const size_t plus = head.find('+'); plus != std::string_view::npos) {
    lossy_tok = head.substr(0, plus);
    if (!take_sparse(head.substr(plus + 1), comp_tok) || (!s.sparse && comp_tok.empty()))
      return bad_codec(head, "missing compressor after '+'");
    // "none+blosc-lz4" is spelled "blosc-lz4".
    if (lossy_tok == "none" || lossy_tok.empty())
      return bad_codec(lossy_tok, "missing lossy stage before '+'");
  } else if (head.substr(0, kBloscPrefix.size()) == kBloscPrefix) {
    lossy_tok = {};
    comp_tok = head;
  }

  if (!lossy_tok.empty()) {
    auto l = lossy_from_name(lossy_tok);
    if (!l) return bad_codec(lossy_tok, "unknown codec");
    s.lossy = *l;
  }
  if (!comp_tok.empty()) {
    if (comp_tok.substr(0, kBloscPrefix.size()) != kBloscPrefix)
      return bad_codec(comp_tok, "unknown compressor");
    const std::string_view cname = comp_tok.substr(kBloscPrefix.size());
    if (!known_cname(cname))
      return make_error(
          Errc::unknown_codec,
          fmt::format("unknown blosc compressor '{}' in codec \"{}\": expected one of {}", cname,
                      text, join(kBloscCnames)));
    s.comp = Compressor::blosc;
    s.cname = std::string(cname);
  }

  if (colon != std::string_view::npos) {
    std::string_view params = text.substr(colon + 1);
    bool seen[std::size(kParamKeys)] = {};
    const auto bad_param = [&](std::string_view item, std::string_view why) {
      return make_error(Errc::codec_params,
                        fmt::format("codec parameter '{}' in \"{}\": {}", item, text, why));
    };
    if (params.empty()) return bad_param(params, "empty parameter list after ':'");
    while (true) {
      const size_t comma = params.find(',');
      const std::string_view item = params.substr(0, comma);
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
        return bad_param(item, "expected key=value");
      const std::string_view key = item.substr(0, eq);
      const std::string_view val = item.substr(eq + 1);
      const auto* it = std::find(std::begin(kParamKeys), std::end(kParamKeys), key);
      if (it == std::end(kParamKeys))
        return bad_param(
            item, fmt::format("unknown key '{}', expected one of {}", key, join(kParamKeys)));
      const size_t k = static_cast<size_t>(it - std::begin(kParamKeys));
      if (seen[k]) return bad_param(item, fmt::format("'{}' given twice", key));
      seen[k] = true;
      if (key == "axis") {
        if (s.lossy != Lossy::int8_channel)
          return bad_param(item, "'axis' applies only to int8_channel");
        auto v = parse_int(val);
        if (!v) return bad_param(item, "axis must be an integer (negative counts from the end)");
        s.channel_axis = *v;
      } else {
        if (s.comp != Compressor::blosc)
          return bad_param(item, fmt::format("'{}' applies only to blosc compressors", key));
        if (key == "shuffle") {
          const auto* sh = std::find(std::begin(kShuffleNames), std::end(kShuffleNames), val);
          if (sh == std::end(kShuffleNames))
            return bad_param(item, fmt::format("shuffle must be one of {}", join(kShuffleNames)));
          s.shuffle = static_cast<int>(sh - std::begin(kShuffleNames));
        } else if (key == "level") {
          auto v = parse_int(val);
          if (!v || *v < 1 || *v > 9) return bad_param(item, "level must be an integer 1-9");
          s.level = *v;
        } else {  // threads
          auto v = parse_int(val);
          if (!v || *v < 1 || *v > kMaxThreads)
            return bad_param(item, fmt::format("threads must be an integer 1-{}", kMaxThreads));
          s.threads = *v;
        }
      }
      if (comma == std::string_view::npos) break;
      params = params.substr(comma + 1);
    }
  }
  TRACR_TRY(s.validate());
  return s;
}

Status CodecSpec::validate() const {
  if (static_cast<size_t>(lossy) >= std::size(kLossyNames))
    return make_error(Errc::unknown_codec, fmt::format("unknown lossy stage {}: expected {}",
                                                       static_cast<int>(lossy), join(kLossyNames)));
  if (comp != Compressor::none && comp != Compressor::blosc)
    return make_error(
        Errc::unknown_codec,
        fmt::format("unknown compressor {}: expected none or blosc", static_cast<int>(comp)));
  if (comp == Compressor::blosc) {
    if (!known_cname(cname))
      return make_error(Errc::unknown_codec,
                        fmt::format("unknown blosc compressor '{}': expected one of {}", cname,
                                    join(kBloscCnames)));
    if (!cname_in_build(cname))
      return make_error(
          Errc::unknown_codec,
          fmt::format("blosc compressor '{}' is not in this c-blosc build (it has {})", cname,
                      blosc_list_compressors()));
  }
  if (level < 1 || level > 9)
    return make_error(Errc::codec_params, fmt::format("blosc level {} out of range 1-9", level));
  if (shuffle < 0 || shuffle > 2)
    return make_error(
        Errc::codec_params,
        fmt::format("blosc shuffle {} out of range: 0 (none), 1 (byte) or 2 (bit)", shuffle));
  if (threads < 1 || threads > kMaxThreads)
    return make_error(Errc::codec_params,
                      fmt::format("blosc threads {} out of range 1-{}", threads, kMaxThreads));
  return {};
}

std::vector<std::string> list_codecs() {
  std::vector<std::string> out;
  for (auto l : kLossyNames) out.emplace_back(l);
  for (auto c : kBloscCnames)
    if (cname_in_build(std::string(c))) out.push_back(std::string(kBloscPrefix) + std::string(c));
  for (size_t i = 1; i < std::size(kLossyNames); ++i)
    for (std::string_view c : {std::string_view("lz4"), std::string_view("zstd")})
      if (cname_in_build(std::string(c)))
        out.push_back(std::string(kLossyNames[i]) + "+" + std::string(kBloscPrefix) +
                      std::string(c));
  // The sparse stage: alone, after each lossy stage, and before lz4/zstd.
  const std::string sparse(kSparse);
  out.push_back(sparse);
  for (size_t i = 1; i < std::size(kLossyNames); ++i)
    out.push_back(std::string(kLossyNames[i]) + "+" + sparse);
  for (auto c : kBloscCnames)
    if (cname_in_build(std::string(c)))
      out.push_back(sparse + "+" + std::string(kBloscPrefix) + std::string(c));
  for (size_t i = 1; i < std::size(kLossyNames); ++i)
    for (std::string_view c : {std::string_view("lz4"), std::string_view("zstd")})
      if (cname_in_build(std::string(c)))
        out.push_back(std::string(kLossyNames[i]) + "+" + sparse + "+" +
                      std::string(kBloscPrefix) + std::string(c));
  return out;
}

// ---------------------------------------------------------------- lossy

Result<LossyParams> lossy_prepare(const CodecSpec& spec, const Tensor& t) {
  LossyParams p;
  p.src = t.dtype;
  p.wire = t.dtype;
  if (spec.lossy == Lossy::none || t.dtype != DType::float32) return p;

  const int64_t numel = t.numel();
  if (numel < 0 || t.nbytes != static_cast<size_t>(numel) * 4 || (numel > 0 && t.data == nullptr))
    return make_error(Errc::invalid_argument,
                      fmt::format("tensor '{}': {} bytes at {} for {} float32 elements", t.name,
                                  t.nbytes, static_cast<const void*>(t.data), numel));
  p.kind = spec.lossy;
  switch (spec.lossy) {
    case Lossy::fp16:
      p.wire = DType::float16;
      return p;
    case Lossy::bf16:
      p.wire = DType::bfloat16;
      return p;
    case Lossy::int8: {
      p.wire = DType::int8;
      p.scale.resize(1);
      p.zero_point.resize(1);
      int8_params(finite_range(t.data, numel, {}), p.scale[0], p.zero_point[0]);
      return p;
    }
    case Lossy::int8_channel: {
      p.wire = DType::int8;
      const int rank = static_cast<int>(t.shape.size());
      int axis = spec.channel_axis;
      if (axis < 0) axis += rank;
      if (rank == 0 || axis < 0 || axis >= rank)
        return make_error(
            Errc::codec_params,
            fmt::format("int8_channel axis {} is out of range for tensor '{}' of rank {}",
                        spec.channel_axis, t.name, rank));
      if (t.shape[static_cast<size_t>(axis)] > kMaxInt8Channels) {
        // Too many channels for the header: one scale for the tensor.
        p.kind = Lossy::int8;
        p.scale.resize(1);
        p.zero_point.resize(1);
        int8_params(finite_range(t.data, numel, {}), p.scale[0], p.zero_point[0]);
        return p;
      }
      p.axis = axis;
      p.channels = t.shape[static_cast<size_t>(axis)];
      p.inner = 1;
      for (size_t d = static_cast<size_t>(axis) + 1; d < t.shape.size(); ++d) p.inner *= t.shape[d];
      p.scale.resize(static_cast<size_t>(p.channels));
      p.zero_point.resize(static_cast<size_t>(p.channels));
      std::vector<Range> ranges(static_cast<size_t>(p.channels));
      if (p.channels > 0 && p.inner > 0) {
        const int64_t outer = numel / (p.channels * p.inner);
        const uint8_t* src = t.data;
        for (int64_t o = 0; o < outer; ++o)
          for (auto& r : ranges) {
            r = finite_range(src, p.inner, r);
            src += p.inner * 4;
          }
      }
      for (size_t c = 0; c < ranges.size(); ++c)
        int8_params(ranges[c], p.scale[c], p.zero_point[c]);
      return p;
    }
    case Lossy::none:
      break;
  }
  return make_error(Errc::unknown_codec,
                    fmt::format("unknown lossy stage {}", static_cast<int>(spec.lossy)));
}

namespace {

// lossy_encode (kEncode) and lossy_decode: one switch, so the two directions
// cannot drift apart. Float side is 4 bytes an element, int8 wire side 1.
template <bool kEncode>
void lossy_code(const LossyParams& p, const uint8_t* src, int64_t first, int64_t count, uint8_t* dst) {
  if (count <= 0) return;
  switch (p.kind) {
    case Lossy::none:
      std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(p.src));
      return;
    case Lossy::fp16:
      if constexpr (kEncode) map_elems<float, uint16_t>(src, count, dst, [](float x) { return f32_to_f16_sat(x); });
      else map_elems<uint16_t, float>(src, count, dst, [](uint16_t h) { return f16_to_f32(h); });
      return;
    case Lossy::bf16:
      if constexpr (kEncode) map_elems<float, uint16_t>(src, count, dst, [](float x) { return f32_to_bf16(x); });
      else map_elems<uint16_t, float>(src, count, dst, [](uint16_t h) { return bf16_to_f32(h); });
      return;
    case Lossy::int8:
    case Lossy::int8_channel:
      for_each_channel_run(p, first, count, [&](int64_t c, int64_t off, int64_t len) {
        const float scale = p.scale[static_cast<size_t>(c)];
        const int32_t zero = p.zero_point[static_cast<size_t>(c)];
        if constexpr (kEncode) int8_encode_run(src + off * 4, len, scale, zero, dst + off);
        else int8_decode_run(src + off, len, scale, zero, dst + off * 4);
      });
      return;
  }
}

}  // namespace

void lossy_encode(const LossyParams& p, const uint8_t* src, int64_t first, int64_t count,
                  uint8_t* dst) {
  lossy_code<true>(p, src, first, count, dst);
}

void lossy_decode(const LossyParams& p, const uint8_t* src, int64_t first, int64_t count,
                  uint8_t* dst) {
  lossy_code<false>(p, src, first, count, dst);
}

double lossy_error_bound(const LossyParams& p, double x, int64_t element_index) {
  switch (p.kind) {
    case Lossy::none:
      return 0.0;
    case Lossy::fp16:
      return std::max(std::fabs(x) * 0x1p-11, 0x1p-25);
    case Lossy::bf16:
      return std::fabs(x) * 0x1p-8;
    case Lossy::int8:
    case Lossy::int8_channel: {
      if (p.scale.empty()) return 0.0;
      const size_t c = channel_index(p, element_index);
      if (c >= p.scale.size()) return 0.0;
      return static_cast<double>(p.scale[c]) / 2.0 * (1.0 + 0x1p-20);
    }
  }
  return 0.0;
}

Status lossy_validate(const LossyParams& p, const std::vector<int64_t>& shape) {
  const auto bad = [](std::string msg) { return make_error(Errc::codec_params, std::move(msg)); };
  if (static_cast<size_t>(p.kind) >= std::size(kLossyNames))
    return bad(fmt::format("unknown lossy kind {}: expected {}", static_cast<int>(p.kind),
                           join(kLossyNames)));
  if (!known_dtype(p.src))
    return bad(fmt::format("unknown source dtype {}", static_cast<int>(p.src)));
  if (!known_dtype(p.wire))
    return bad(fmt::format("unknown wire dtype {}", static_cast<int>(p.wire)));
  const std::string_view kind = lossy_name(p.kind);
  if (p.kind == Lossy::none) {
    if (p.wire != p.src)
      return bad(fmt::format("lossy none but wire dtype {} differs from source dtype {}",
                             dtype_name(p.wire), dtype_name(p.src)));
    return {};
  }
  if (p.src != DType::float32)
    return bad(
        fmt::format("lossy {} applies to float32 tensors only, not {}", kind, dtype_name(p.src)));
  const DType want = p.kind == Lossy::fp16   ? DType::float16
                     : p.kind == Lossy::bf16 ? DType::bfloat16
                                             : DType::int8;
  if (p.wire != want)
    return bad(fmt::format("lossy {} needs wire dtype {}, header says {}", kind, dtype_name(want),
                           dtype_name(p.wire)));
  if (p.kind == Lossy::fp16 || p.kind == Lossy::bf16) return {};

  // int8 / int8_channel
  size_t want_scales = 1;
  if (p.kind == Lossy::int8_channel) {
    const int rank = static_cast<int>(shape.size());
    if (p.axis < 0 || p.axis >= rank)
      return bad(fmt::format("int8_channel axis {} out of range for rank {}", p.axis, rank));
    const int64_t channels = shape[static_cast<size_t>(p.axis)];
    if (p.channels != channels)
      return bad(fmt::format("int8_channel channels {} but shape has {} along axis {}", p.channels,
                             channels, p.axis));
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(p.axis) + 1; d < shape.size(); ++d) {
      if (shape[d] < 0 || (shape[d] > 0 && inner > std::numeric_limits<int64_t>::max() / shape[d]))
        return bad("int8_channel shape has a negative or overflowing dim");
      inner *= shape[d];
    }
    if (p.inner != inner)
      return bad(fmt::format("int8_channel inner {} but shape gives {} after axis {}", p.inner,
                             inner, p.axis));
    if (p.scale.size() != 1) want_scales = static_cast<size_t>(channels);
  }
  if (p.channels < 0 || p.inner < 0)
    return bad(fmt::format("negative channels {} or inner {}", p.channels, p.inner));
  if (p.scale.size() != want_scales)
    return bad(fmt::format(
        "lossy {} has {} scales, expected {}", kind, p.scale.size(),
        p.kind == Lossy::int8 ? std::string("1") : fmt::format("1 or {}", want_scales)));
  if (p.zero_point.size() != p.scale.size())
    return bad(fmt::format("lossy {} has {} zero points for {} scales", kind, p.zero_point.size(),
                           p.scale.size()));
  for (size_t i = 0; i < p.scale.size(); ++i) {
    const float s = p.scale[i];
    if (!std::isfinite(s) || !(s > 0.0f))
      return bad(fmt::format("scale[{}] = {} is not finite and positive", i, s));
    if (p.zero_point[i] < -128 || p.zero_point[i] > 127)
      return bad(fmt::format("zero_point[{}] = {} outside [-128, 127]", i, p.zero_point[i]));
  }
  return {};
}

// ---------------------------------------------------------------- blosc

size_t blosc_max_compressed(size_t n) { return n + BLOSC_MAX_OVERHEAD; }

Result<size_t> blosc_compress(const CodecSpec& spec, size_t typesize, const uint8_t* src, size_t n,
                              uint8_t* dst, size_t dst_capacity) {
  TRACR_TRY(spec.validate());
  if (spec.comp != Compressor::blosc)
    return make_error(Errc::codec_params,
                      fmt::format("codec \"{}\" has no blosc stage", spec.name()));
  if (n > static_cast<size_t>(BLOSC_MAX_BUFFERSIZE))
    return make_error(
        Errc::limit_exceeded,
        fmt::format("blosc input of {} bytes exceeds its limit of {}", n, BLOSC_MAX_BUFFERSIZE));
  if (typesize < 1 || typesize > BLOSC_MAX_TYPESIZE)
    return make_error(Errc::codec_params, fmt::format("blosc typesize {} out of range 1-{}",
                                                      typesize, BLOSC_MAX_TYPESIZE));
  const int r = blosc_compress_ctx(spec.level, spec.shuffle, typesize, n, src, dst, dst_capacity,
                                   spec.cname.c_str(), 0, spec.threads);
  if (r <= 0)
    return make_error(
        r == 0 ? Errc::invalid_argument : Errc::internal,
        fmt::format("blosc-{} failed on {} bytes into {} (code {}){}", spec.cname, n, dst_capacity,
                    r, r == 0 ? ": destination smaller than blosc_max_compressed" : ""));
  return static_cast<size_t>(r);
}

Status blosc_decompress(const uint8_t* src, size_t n, uint8_t* dst, size_t expected, int threads) {
  const auto fail = [](std::string msg) {
    return make_error(Errc::decompress_failed, std::move(msg));
  };
  if (threads < 1 || threads > kMaxThreads)
    return make_error(Errc::codec_params,
                      fmt::format("blosc threads {} out of range 1-{}", threads, kMaxThreads));
  if (n < BLOSC_MIN_HEADER_LENGTH)
    return fail(fmt::format("blosc buffer of {} bytes is shorter than the {}-byte header", n,
                            BLOSC_MIN_HEADER_LENGTH));
  size_t nbytes = 0, cbytes = 0, blocksize = 0;
  blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
  if (cbytes != n || nbytes != expected)
    return fail(
        fmt::format("blosc header claims {} compressed / {} raw bytes, part has {} / expects {}",
                    cbytes, nbytes, n, expected));
  size_t validated = 0;
  if (blosc_cbuffer_validate(src, n, &validated) != 0 || validated != expected)
    return fail(fmt::format("blosc header of a {}-byte part failed validation", n));
  if (expected == 0) return {};
  const int r = blosc_decompress_ctx(src, dst, expected, threads);
  if (r < 0 || static_cast<size_t>(r) != expected)
    return fail(fmt::format("blosc decompression of a {}-byte part gave {} (expected {} bytes)", n,
                            r, expected));
  return {};
}

// ---------------------------------------------------------------- sparse

namespace {

// Elements per bitmap byte.
constexpr int64_t kGroup = 8;

// Set bits of a 64-bit word without the POPCNT instruction (not in the
// x86-64 baseline); GCC turns this into POPCNT where the target has it.
inline uint64_t popcount64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return (x * 0x0101010101010101ull) >> 56;
}

bool sparse_width_ok(size_t ws) { return ws == 1 || ws == 2 || ws == 4 || ws == 8; }

Error sparse_bad_width(size_t ws) {
  return make_error(Errc::codec_params,
                    fmt::format("sparse element size {} bytes: expected 1, 2, 4 or 8", ws));
}

// Number of nonzero elements a bitmap of n elements marks, after checking
// that its padding bits (past element n - 1 in the last byte) are zero.
Result<int64_t> bitmap_count(const uint8_t* bitmap, int64_t n) {
  const size_t nb = sparse_bitmap_bytes(n);
  if (n % kGroup != 0) {
    const unsigned padding = bitmap[nb - 1] >> (n % kGroup);
    if (padding != 0)
      return make_error(Errc::decompress_failed,
                        fmt::format("sparse bitmap of {} elements sets padding bits (last byte "
                                    "0x{:02x}); expected bits past element {} to be zero",
                                    n, bitmap[nb - 1], n - 1));
  }
  uint64_t total = 0;
  size_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    uint64_t w;
    std::memcpy(&w, bitmap + i, sizeof w);
    total += popcount64(w);
  }
  for (; i < nb; ++i) total += popcount64(bitmap[i]);
  return static_cast<int64_t>(total);
}

// Writes the bitmap and the nonzero elements of n elements of type T (an
// unsigned integer as wide as the element, so "nonzero" means any nonzero
// byte); returns the number of nonzero elements. Every element is stored at
// the next value slot and the slot advances only when the element is
// nonzero: no branch on the data, and the store for element i lands in
// slot k <= i, so n * sizeof(T) bytes of values always suffice.
template <class T>
int64_t pack_elems(const uint8_t* src, int64_t n, uint8_t* bitmap, uint8_t* values) {
  int64_t k = 0, i = 0;
  for (; i + kGroup <= n; i += kGroup) {
    T x[kGroup];
    std::memcpy(x, src + i * sizeof(T), sizeof x);
    uint32_t b = 0;
    for (int64_t j = 0; j < kGroup; ++j) b |= static_cast<uint32_t>(x[j] != 0) << j;
    bitmap[i / kGroup] = static_cast<uint8_t>(b);
    for (int64_t j = 0; j < kGroup; ++j) {
      std::memcpy(values + k * sizeof(T), &x[j], sizeof(T));
      k += x[j] != 0;
    }
  }
  if (i < n) {
    uint32_t b = 0;
    for (int64_t j = 0; i + j < n; ++j) {
      T x;
      std::memcpy(&x, src + (i + j) * sizeof(T), sizeof(T));
      b |= static_cast<uint32_t>(x != 0) << j;
      std::memcpy(values + k * sizeof(T), &x, sizeof(T));
      k += x != 0;
    }
    bitmap[i / kGroup] = static_cast<uint8_t>(b);
  }
  return k;
}

// Inverse of pack_elems. `nnz` is the bitmap's set-bit count (checked by
// the caller), and values holds exactly nnz elements. While a whole group's
// values are in range, each element reads its candidate value and masks it
// (no branch); the rest read a value only where the bit is set.
template <class T>
void unpack_elems(const uint8_t* bitmap, const uint8_t* values, int64_t nnz, int64_t n,
                  uint8_t* dst) {
  int64_t k = 0, i = 0;
  for (; i + kGroup <= n && k + kGroup <= nnz; i += kGroup) {
    const uint32_t b = bitmap[i / kGroup];
    T y[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) {
      T v;
      std::memcpy(&v, values + k * sizeof(T), sizeof(T));
      const uint32_t bit = (b >> j) & 1u;
      y[j] = static_cast<T>(v & static_cast<T>(T{0} - static_cast<T>(bit)));
      k += bit;
    }
    std::memcpy(dst + i * sizeof(T), y, sizeof y);
  }
  for (; i < n; ++i) {
    T v = 0;
    if ((bitmap[i / kGroup] >> (i % kGroup)) & 1u) {
      std::memcpy(&v, values + k * sizeof(T), sizeof(T));
      ++k;
    }
    std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  }
}

// Calls f(T{}) with T the unsigned integer of ws bytes (ws checked).
template <class F>
void with_width(size_t ws, F f) {
  switch (ws) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

Status unpack_checked(const uint8_t* src, size_t len, int64_t n, size_t ws, uint8_t* dst,
                      std::string_view what) {
  const size_t nb = sparse_bitmap_bytes(n);
  if (len < nb)
    return make_error(Errc::decompress_failed,
                      fmt::format("{} of {} bytes is shorter than the {}-byte bitmap of {} "
                                  "elements",
                                  what, len, nb, n));
  if (n <= 0) {
    if (len != 0)
      return make_error(Errc::decompress_failed,
                        fmt::format("{} of {} bytes for 0 elements: expected 0 bytes", what, len));
    return {};
  }
  auto nnz = bitmap_count(src, n);
  if (!nnz) return nnz.error();
  const size_t need = nb + static_cast<size_t>(*nnz) * ws;
  if (len != need)
    return make_error(Errc::decompress_failed,
                      fmt::format("{} of {} bytes: its bitmap marks {} of {} elements nonzero, "
                                  "which need {} bytes ({}-byte bitmap + {} x {}-byte values)",
                                  what, len, *nnz, n, need, nb, *nnz, ws));
  with_width(ws, [&](auto t) {
    unpack_elems<decltype(t)>(src, src + nb, *nnz, n, dst);
  });
  return {};
}

}  // namespace

size_t sparse_bitmap_bytes(int64_t n) {
  return n <= 0 ? 0 : static_cast<size_t>((n + kGroup - 1) / kGroup);
}

size_t sparse_max_encoded(int64_t n, size_t ws, bool blosc) {
  const size_t raw = sparse_bitmap_bytes(n) + (n <= 0 ? 0 : static_cast<size_t>(n) * ws);
  return blosc ? raw + 2 * BLOSC_MAX_OVERHEAD : raw;
}

size_t sparse_pack(const uint8_t* src, int64_t n, size_t ws, uint8_t* dst) {
  if (!sparse_width_ok(ws)) throw std::invalid_argument(sparse_bad_width(ws).message);
  if (n <= 0) return 0;
  const size_t nb = sparse_bitmap_bytes(n);
  int64_t nnz = 0;
  with_width(ws, [&](auto t) { nnz = pack_elems<decltype(t)>(src, n, dst, dst + nb); });
  return nb + static_cast<size_t>(nnz) * ws;
}

Status sparse_unpack(const uint8_t* src, size_t len, int64_t n, size_t ws, uint8_t* dst) {
  if (!sparse_width_ok(ws)) return sparse_bad_width(ws);
  return unpack_checked(src, len, n, ws, dst, "sparse part");
}

Result<size_t> sparse_encode(const CodecSpec& spec, size_t ws, const uint8_t* src, int64_t n,
                             uint8_t* dst, size_t cap, std::vector<uint8_t>& scratch) {
  if (!sparse_width_ok(ws)) return sparse_bad_width(ws);
  const bool blosc = spec.comp == Compressor::blosc;
  if (cap < sparse_max_encoded(n, ws, blosc))
    return make_error(Errc::invalid_argument,
                      fmt::format("sparse output of {} bytes is below the bound {} for {} "
                                  "elements of {} bytes",
                                  cap, sparse_max_encoded(n, ws, blosc), n, ws));
  if (!blosc) return sparse_pack(src, n, ws, dst);
  const size_t raw_cap = sparse_max_encoded(n, ws, false);
  if (scratch.size() < raw_cap) scratch.resize(raw_cap);
  const size_t raw = sparse_pack(src, n, ws, scratch.data());
  const size_t nb = sparse_bitmap_bytes(n);
  auto c1 = blosc_compress(spec, 1, scratch.data(), nb, dst, blosc_max_compressed(nb));
  if (!c1) return c1.error();
  auto c2 = blosc_compress(spec, ws, scratch.data() + nb, raw - nb, dst + *c1,
                           blosc_max_compressed(raw - nb));
  if (!c2) return c2.error();
  return *c1 + *c2;
}

Status sparse_decode(const uint8_t* src, size_t len, int64_t n, size_t ws, bool blosc,
                     uint8_t* dst, std::vector<uint8_t>& scratch) {
  if (!sparse_width_ok(ws)) return sparse_bad_width(ws);
  if (!blosc) return unpack_checked(src, len, n, ws, dst, "sparse part");
  const auto fail = [](std::string msg) {
    return make_error(Errc::decompress_failed, std::move(msg));
  };
  const auto prefixed = [](std::string_view what, const Error& e) {
    return make_error(e.code, fmt::format("{}: {}", what, e.message));
  };
  if (len < 2 * BLOSC_MIN_HEADER_LENGTH)
    return fail(fmt::format("sparse+blosc part of {} bytes is shorter than two {}-byte blosc "
                            "headers (bitmap and values)",
                            len, BLOSC_MIN_HEADER_LENGTH));
  size_t nbytes = 0, c1 = 0, blocksize = 0;
  blosc_cbuffer_sizes(src, &nbytes, &c1, &blocksize);
  if (c1 < BLOSC_MIN_HEADER_LENGTH || c1 > len - BLOSC_MIN_HEADER_LENGTH)
    return fail(fmt::format("sparse+blosc part of {} bytes: its bitmap buffer claims {} "
                            "compressed bytes, expected {} to {} (room left for the values "
                            "buffer's header)",
                            len, c1, BLOSC_MIN_HEADER_LENGTH, len - BLOSC_MIN_HEADER_LENGTH));
  const size_t nb = sparse_bitmap_bytes(n);
  if (scratch.size() < nb) scratch.resize(nb);
  if (auto st = blosc_decompress(src, c1, scratch.data(), nb, 1); !st)
    return prefixed("sparse bitmap", st.error());
  if (n <= 0) {
    if (auto st = blosc_decompress(src + c1, len - c1, scratch.data(), 0, 1); !st)
      return prefixed("sparse values", st.error());
    return {};
  }
  auto nnz = bitmap_count(scratch.data(), n);
  if (!nnz) return nnz.error();
  const size_t vb = static_cast<size_t>(*nnz) * ws;
  if (scratch.size() < nb + vb) scratch.resize(nb + vb);
  if (auto st = blosc_decompress(src + c1, len - c1, scratch.data() + nb, vb, 1); !st)
    return prefixed(fmt::format("sparse values ({} nonzero of {} elements)", *nnz, n), st.error());
  return unpack_checked(scratch.data(), nb + vb, n, ws, dst, "sparse part");
}

void sparse_int8_recenter(const LossyParams& p, int64_t first, int64_t count, uint8_t* codes,
                          bool undo) {
  if (p.kind != Lossy::int8 && p.kind != Lossy::int8_channel) return;
  for_each_channel_run(p, first, count, [&](int64_t c, int64_t off, int64_t len) {
    const auto zp = static_cast<uint8_t>(p.zero_point[static_cast<size_t>(c)]);
    const auto add = static_cast<uint8_t>(undo ? zp : 0u - zp);
    map_elems<uint8_t, uint8_t>(codes + off, len, codes + off,
                                [add](uint8_t q) { return static_cast<uint8_t>(q + add); });
  });
}

}  // namespace tracr::protocol
