#include "protocol/header.hpp"

#include <msgpack.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

namespace tracr::protocol {

std::string_view msg_type_name(MsgType t) {
  switch (t) {
    case MsgType::hello: return "HELLO";
    case MsgType::welcome: return "WELCOME";
    case MsgType::infer_request: return "INFER_REQUEST";
    case MsgType::infer_result: return "INFER_RESULT";
    case MsgType::error: return "ERROR";
    case MsgType::heartbeat: return "HEARTBEAT";
    case MsgType::shutdown: return "SHUTDOWN";
    case MsgType::goodbye: return "GOODBYE";
    case MsgType::train_forward: return "TRAIN_FORWARD";
    case MsgType::train_backward: return "TRAIN_BACKWARD";
    case MsgType::profile_request: return "PROFILE_REQUEST";
    case MsgType::profile_result: return "PROFILE_RESULT";
    case MsgType::probe: return "PROBE";
    case MsgType::probe_reply: return "PROBE_REPLY";
  }
  return "UNKNOWN";
}

bool msg_type_known(uint64_t v) {
  return v <= 255 && msg_type_name(static_cast<MsgType>(v)) != "UNKNOWN";
}

std::string_view cipher_name(Cipher c) { return c == Cipher::aes256gcm ? "aes-256-gcm" : "none"; }

std::optional<Cipher> cipher_from_name(std::string_view s) {
  if (s == "none") return Cipher::none;
  if (s == "aes-256-gcm") return Cipher::aes256gcm;
  return std::nullopt;
}

namespace {

struct VecStream {
  std::vector<uint8_t>& out;
  void write(const char* p, size_t n) { out.insert(out.end(), p, p + n); }
};
using Packer = msgpack::packer<VecStream>;

void pack_str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
void pack_bin(Packer& pk, const std::vector<uint8_t>& b) {
  pk.pack_bin(static_cast<uint32_t>(b.size()));
  pk.pack_bin_body(reinterpret_cast<const char*>(b.data()), static_cast<uint32_t>(b.size()));
}

// float32 on the wire as float32 (0xca + big-endian bits): msgpack-c's
// pack_float writes a whole-number value such as 1.0 as an integer.
void pack_f32(VecStream& vs, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const char b[5] = {static_cast<char>(0xca), static_cast<char>(bits >> 24), static_cast<char>(bits >> 16),
                     static_cast<char>(bits >> 8), static_cast<char>(bits)};
  vs.write(b, sizeof b);
}

void pack_desc(Packer& pk, VecStream& vs, const TensorDesc& d) {
  const bool lossy = d.lossy.kind != Lossy::none;
  const bool int8 = d.lossy.kind == Lossy::int8 || d.lossy.kind == Lossy::int8_channel;
  const bool blosc = d.comp == Compressor::blosc;
  uint32_t n = 9 + (lossy ? 1 : 0) + (int8 ? 2 : 0) + (d.lossy.kind == Lossy::int8_channel ? 1 : 0) +
               (blosc ? 1 : 0);
  pk.pack_map(n);
  pack_str(pk, "name"); pack_str(pk, d.name);
  pack_str(pk, "dtype"); pack_str(pk, dtype_name(d.dtype));
  pack_str(pk, "shape");
  pk.pack_array(static_cast<uint32_t>(d.shape.size()));
  for (auto s : d.shape) pk.pack_int64(s);
  pack_str(pk, "codec"); pack_str(pk, d.codec);
  pack_str(pk, "lossy"); pack_str(pk, lossy_name(d.lossy.kind));
  if (lossy) { pack_str(pk, "wdtype"); pack_str(pk, dtype_name(d.lossy.wire)); }
  if (d.lossy.kind == Lossy::int8_channel) { pack_str(pk, "axis"); pk.pack_int32(d.lossy.axis); }
  if (int8) {
    pack_str(pk, "scale");
    pk.pack_array(static_cast<uint32_t>(d.lossy.scale.size()));
    for (float s : d.lossy.scale) pack_f32(vs, s);
    pack_str(pk, "zp");
    pk.pack_array(static_cast<uint32_t>(d.lossy.zero_point.size()));
    for (int32_t z : d.lossy.zero_point) pk.pack_int32(z);
  }
  pack_str(pk, "comp");
  if (d.sparse) pack_str(pk, blosc ? "sparse+blosc" : "sparse");
  else pack_str(pk, compressor_name(d.comp));
  if (blosc) { pack_str(pk, "cname"); pack_str(pk, d.cname); }
  pack_str(pk, "raw"); pk.pack_uint64(d.raw_bytes);
  pack_str(pk, "chunk"); pk.pack_uint64(d.chunk_bytes);
  pack_str(pk, "parts"); pk.pack_uint32(d.parts);
}

void pack_hs(Packer& pk, const Handshake& h) {
  pk.pack_map(h.ts_ms ? 9 : 8);
  pack_str(pk, "versions");
  pk.pack_array(static_cast<uint32_t>(h.versions.size()));
  for (auto v : h.versions) pk.pack_uint32(v);
  pack_str(pk, "ciphers");
  pk.pack_array(static_cast<uint32_t>(h.ciphers.size()));
  for (auto& c : h.ciphers) pack_str(pk, c);
  pack_str(pk, "kx");
  pk.pack_array(static_cast<uint32_t>(h.kx.size()));
  for (auto& c : h.kx) pack_str(pk, c);
  pack_str(pk, "nonce"); pack_bin(pk, h.nonce);
  pack_str(pk, "pub"); pack_bin(pk, h.pub);
  pack_str(pk, "role"); pack_str(pk, h.role);
  pack_str(pk, "agent"); pack_str(pk, h.agent);
  pack_str(pk, "maxb"); pk.pack_uint64(h.max_frame_bytes);
  if (h.ts_ms) { pack_str(pk, "ts"); pk.pack_uint64(*h.ts_ms); }
}

// ---- decoding -------------------------------------------------------------

using Obj = msgpack::object;

Error type_err(std::string_view field, std::string_view expected) {
  return make_error(Errc::field_type,
                    "header field '" + std::string(field) + "' must be " + std::string(expected));
}

Result<uint64_t> as_uint(const Obj& o, std::string_view f) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) return type_err(f, "an unsigned integer");
  return o.via.u64;
}
Result<int64_t> as_int(const Obj& o, std::string_view f) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) return type_err(f, "an int64");
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  return type_err(f, "an integer");
}
Result<std::string> as_str(const Obj& o, std::string_view f, const Limits& lim) {
  if (o.type != msgpack::type::STR) return type_err(f, "a string");
  if (o.via.str.size > lim.max_string)
    return make_error(Errc::limit_exceeded, "header field '" + std::string(f) + "' longer than " +
                                                std::to_string(lim.max_string) + " bytes");
  return std::string(o.via.str.ptr, o.via.str.size);
}
Result<std::vector<uint8_t>> as_bin(const Obj& o, std::string_view f, const Limits& lim) {
  if (o.type != msgpack::type::BIN) return type_err(f, "binary");
  if (o.via.bin.size > lim.max_string)
    return make_error(Errc::limit_exceeded, "header field '" + std::string(f) + "' too long");
  auto p = reinterpret_cast<const uint8_t*>(o.via.bin.ptr);
  return std::vector<uint8_t>(p, p + o.via.bin.size);
}
Result<bool> as_bool(const Obj& o, std::string_view f) {
  if (o.type != msgpack::type::BOOLEAN) return type_err(f, "a boolean");
  return o.via.boolean;
}
// A float field also accepts a msgpack integer (PROTOCOL.md section 2):
// common msgpack writers encode a whole-number float such as 1.0 that way.
Result<double> as_float(const Obj& o, std::string_view f) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return static_cast<double>(o.via.u64);
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<double>(o.via.i64);
  if (o.type != msgpack::type::FLOAT32 && o.type != msgpack::type::FLOAT64)
    return type_err(f, "a float (or an integer)");
  return o.via.f64;
}
Result<const msgpack::object_array*> as_array(const Obj& o, std::string_view f, uint32_t max) {
  if (o.type != msgpack::type::ARRAY) return type_err(f, "an array");
  if (o.via.array.size > max)
    return make_error(Errc::limit_exceeded, "header field '" + std::string(f) + "' has " +
                                                std::to_string(o.via.array.size) +
                                                " entries, limit " + std::to_string(max));
  return &o.via.array;
}
bool key_is(const msgpack::object_kv& kv, std::string_view k) {
  return kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == k;
}

// Every map of a header has distinct string keys (PROTOCOL.md section 2): a
// repeated key is malformed, never "the last one wins" (which would let two
// readers of one header disagree).
Status distinct_keys(const Obj& map, std::string_view where) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(map.via.map.size);
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& k = map.via.map.ptr[i].key;
    if (k.type != msgpack::type::STR) continue;
    const std::string_view name(k.via.str.ptr, k.via.str.size);
    if (!seen.insert(name).second)
      return make_error(Errc::malformed_header, "header map " + std::string(where) + " repeats the key '" +
                                                    std::string(name.substr(0, 64)) + "'");
  }
  return {};
}

#define ASSIGN_OR_RETURN(lhs, expr)            \
  do {                                         \
    auto _r = (expr);                          \
    if (!_r) return std::move(_r.error());     \
    lhs = std::move(*_r);                      \
  } while (0)

template <class T, class F>
Status each(const Obj& o, std::string_view f, uint32_t max, F fn) {
  const msgpack::object_array* a = nullptr;
  ASSIGN_OR_RETURN(a, as_array(o, f, max));
  for (uint32_t i = 0; i < a->size; ++i) {
    auto st = fn(a->ptr[i]);
    if (!st) return st;
  }
  return {};
}

Result<TensorDesc> decode_desc(const Obj& o, const Limits& lim) {
  if (o.type != msgpack::type::MAP) return type_err("tensors[]", "a map");
  TRACR_TRY(distinct_keys(o, "tensors[]"));
  TensorDesc d;
  bool have_name = false, have_dtype = false, have_shape = false, have_raw = false,
       have_chunk = false, have_parts = false;
  std::string lossy_s = "none", comp_s = "none", wdtype_s;
  int64_t axis = -1;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (key_is(kv, "name")) { ASSIGN_OR_RETURN(d.name, as_str(kv.val, "name", lim)); have_name = true; }
    else if (key_is(kv, "dtype")) {
      std::string s;
      ASSIGN_OR_RETURN(s, as_str(kv.val, "dtype", lim));
      auto dt = dtype_from_name(s);
      if (!dt) return make_error(Errc::unsupported_dtype, "tensor dtype '" + s + "' is not supported");
      d.dtype = *dt;
      have_dtype = true;
    } else if (key_is(kv, "shape")) {
      const msgpack::object_array* a = nullptr;
      ASSIGN_OR_RETURN(a, as_array(kv.val, "shape", lim.max_rank));
      for (uint32_t j = 0; j < a->size; ++j) {
        int64_t v = 0;
        ASSIGN_OR_RETURN(v, as_int(a->ptr[j], "shape[]"));
        d.shape.push_back(v);
      }
      have_shape = true;
    } else if (key_is(kv, "codec")) ASSIGN_OR_RETURN(d.codec, as_str(kv.val, "codec", lim));
    else if (key_is(kv, "lossy")) ASSIGN_OR_RETURN(lossy_s, as_str(kv.val, "lossy", lim));
    else if (key_is(kv, "wdtype")) ASSIGN_OR_RETURN(wdtype_s, as_str(kv.val, "wdtype", lim));
    else if (key_is(kv, "axis")) ASSIGN_OR_RETURN(axis, as_int(kv.val, "axis"));
    else if (key_is(kv, "scale")) {
      const msgpack::object_array* a = nullptr;
      ASSIGN_OR_RETURN(a, as_array(kv.val, "scale", 1u << 16));
      for (uint32_t j = 0; j < a->size; ++j) {
        double v = 0;
        ASSIGN_OR_RETURN(v, as_float(a->ptr[j], "scale[]"));
        d.lossy.scale.push_back(static_cast<float>(v));
      }
    } else if (key_is(kv, "zp")) {
      const msgpack::object_array* a = nullptr;
      ASSIGN_OR_RETURN(a, as_array(kv.val, "zp", 1u << 16));
      for (uint32_t j = 0; j < a->size; ++j) {
        int64_t v = 0;
        ASSIGN_OR_RETURN(v, as_int(a->ptr[j], "zp[]"));
        if (v < INT32_MIN || v > INT32_MAX) return type_err("zp[]", "an int32");
        d.lossy.zero_point.push_back(static_cast<int32_t>(v));
      }
    } else if (key_is(kv, "comp")) ASSIGN_OR_RETURN(comp_s, as_str(kv.val, "comp", lim));
    else if (key_is(kv, "cname")) ASSIGN_OR_RETURN(d.cname, as_str(kv.val, "cname", lim));
    else if (key_is(kv, "raw")) { ASSIGN_OR_RETURN(d.raw_bytes, as_uint(kv.val, "raw")); have_raw = true; }
    else if (key_is(kv, "chunk")) { ASSIGN_OR_RETURN(d.chunk_bytes, as_uint(kv.val, "chunk")); have_chunk = true; }
    else if (key_is(kv, "parts")) {
      uint64_t p = 0;
      ASSIGN_OR_RETURN(p, as_uint(kv.val, "parts"));
      if (p > lim.max_parts) return make_error(Errc::limit_exceeded, "tensor has too many parts");
      d.parts = static_cast<uint32_t>(p);
      have_parts = true;
    }
  }
  if (!(have_name && have_dtype && have_shape && have_raw && have_chunk && have_parts))
    return make_error(Errc::missing_field,
                      "tensor descriptor needs name, dtype, shape, raw, chunk and parts");
  // Lossy stage.
  d.lossy.src = d.dtype;
  d.lossy.wire = d.dtype;
  bool found = false;
  for (Lossy l : {Lossy::none, Lossy::fp16, Lossy::bf16, Lossy::int8, Lossy::int8_channel})
    if (lossy_name(l) == lossy_s) { d.lossy.kind = l; found = true; }
  if (!found) return make_error(Errc::unknown_codec, "unknown lossy transform '" + lossy_s + "'");
  if (d.lossy.kind != Lossy::none) {
    auto w = dtype_from_name(wdtype_s);
    if (!w) return make_error(Errc::codec_params, "tensor '" + d.name + "' has lossy '" + lossy_s +
                                                      "' but wdtype '" + wdtype_s + "' is not a dtype");
    d.lossy.wire = *w;
  }
  if (axis < INT32_MIN || axis > INT32_MAX) return type_err("axis", "an int32");
  d.lossy.axis = static_cast<int>(axis);
  if (d.lossy.kind == Lossy::int8_channel) {
    // channels/inner are derived from shape and axis (lossy_validate checks them).
    const int64_t rank = static_cast<int64_t>(d.shape.size());
    if (axis >= 0 && axis < rank) {
      d.lossy.channels = d.shape[static_cast<size_t>(axis)];
      int64_t inner = 1;
      for (int64_t k = axis + 1; k < rank; ++k) {
        const int64_t dim = d.shape[static_cast<size_t>(k)];
        if (dim < 0 || (dim != 0 && inner > INT64_MAX / dim)) { inner = -1; break; }
        inner *= dim;
      }
      d.lossy.inner = inner;
    } else {
      d.lossy.channels = 0;
    }
  }
  if (comp_s == "none") d.comp = Compressor::none;
  else if (comp_s == "blosc") d.comp = Compressor::blosc;
  else if (comp_s == "sparse") d.sparse = true;
  else if (comp_s == "sparse+blosc") { d.sparse = true; d.comp = Compressor::blosc; }
  else return make_error(Errc::unknown_codec, "unknown compressor '" + comp_s +
                                                  "': expected none, blosc, sparse or sparse+blosc");
  return d;
}

Result<Handshake> decode_hs(const Obj& o, const Limits& lim) {
  if (o.type != msgpack::type::MAP) return type_err("hs", "a map");
  TRACR_TRY(distinct_keys(o, "hs"));
  Handshake h;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (key_is(kv, "versions")) {
      TRACR_TRY(each<uint32_t>(kv.val, "versions", 64, [&](const Obj& e) -> Status {
        uint64_t v = 0;
        ASSIGN_OR_RETURN(v, as_uint(e, "versions[]"));
        h.versions.push_back(static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX)));
        return {};
      }));
    } else if (key_is(kv, "ciphers") || key_is(kv, "kx")) {
      auto& dst = key_is(kv, "kx") ? h.kx : h.ciphers;
      TRACR_TRY(each<std::string>(kv.val, "ciphers", 64, [&](const Obj& e) -> Status {
        std::string s;
        ASSIGN_OR_RETURN(s, as_str(e, "ciphers[]", lim));
        dst.push_back(std::move(s));
        return {};
      }));
    } else if (key_is(kv, "nonce")) ASSIGN_OR_RETURN(h.nonce, as_bin(kv.val, "nonce", lim));
    else if (key_is(kv, "pub")) ASSIGN_OR_RETURN(h.pub, as_bin(kv.val, "pub", lim));
    else if (key_is(kv, "role")) ASSIGN_OR_RETURN(h.role, as_str(kv.val, "role", lim));
    else if (key_is(kv, "agent")) ASSIGN_OR_RETURN(h.agent, as_str(kv.val, "agent", lim));
    else if (key_is(kv, "maxb")) ASSIGN_OR_RETURN(h.max_frame_bytes, as_uint(kv.val, "maxb"));
    else if (key_is(kv, "ts")) ASSIGN_OR_RETURN(h.ts_ms, as_uint(kv.val, "ts"));
  }
  return h;
}

Result<Header> decode_root(const Obj& root, const Limits& lim) {
  if (root.type != msgpack::type::MAP) return make_error(Errc::malformed_header, "header is not a msgpack map");
  TRACR_TRY(distinct_keys(root, "(top level)"));
  Header h;
  bool have_magic = false, have_v = false, have_type = false;
  unsigned seen = 0;  // bit per required field, in the order of `names` below
  // Magic and version are checked before anything else is interpreted.
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    if (key_is(kv, "magic")) {
      if (kv.val.type != msgpack::type::STR || std::string_view(kv.val.via.str.ptr, kv.val.via.str.size) != kMagic)
        return make_error(Errc::bad_magic, "header magic is not \"TRCR\"");
      have_magic = true;
    } else if (key_is(kv, "v")) {
      uint64_t v = 0;
      ASSIGN_OR_RETURN(v, as_uint(kv.val, "v"));
      if (v != kVersion)
        return make_error(Errc::unsupported_version, "protocol version " + std::to_string(v) +
                                                         " is not supported (this build speaks 1)");
      have_v = true;
    }
  }
  if (!have_magic) return make_error(Errc::bad_magic, "header has no magic field");
  if (!have_v) return make_error(Errc::missing_field, "header has no version field 'v'");
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    const Obj& v = kv.val;
    if (key_is(kv, "type")) {
      uint64_t t = 0;
      ASSIGN_OR_RETURN(t, as_uint(v, "type"));
      if (!msg_type_known(t))
        return make_error(Errc::unknown_message_type, "message type " + std::to_string(t) + " is unknown");
      h.type = static_cast<MsgType>(t);
      have_type = true;
    } else if (key_is(kv, "sid")) {
      ASSIGN_OR_RETURN(h.session, as_uint(v, "sid"));
      seen |= 1;
    } else if (key_is(kv, "seq")) {
      ASSIGN_OR_RETURN(h.seq, as_uint(v, "seq"));
      seen |= 2;
    }
    else if (key_is(kv, "split")) {
      int64_t s = 0;
      ASSIGN_OR_RETURN(s, as_int(v, "split"));
      if (s < -1 || s > INT32_MAX) return type_err("split", "an int32 >= -1");
      h.split = static_cast<int32_t>(s);
    } else if (key_is(kv, "seg")) {
      uint64_t s = 0;
      ASSIGN_OR_RETURN(s, as_uint(v, "seg"));
      if (s > lim.max_parts) return make_error(Errc::limit_exceeded, "segment index too large");
      h.seg = static_cast<uint32_t>(s);
      seen |= 4;
    } else if (key_is(kv, "last")) {
      ASSIGN_OR_RETURN(h.last, as_bool(v, "last"));
      seen |= 8;
    }
    else if (key_is(kv, "np")) {
      uint64_t s = 0;
      ASSIGN_OR_RETURN(s, as_uint(v, "np"));
      if (s > lim.max_parts) return make_error(Errc::limit_exceeded, "too many parts in segment");
      h.nparts = static_cast<uint32_t>(s);
      seen |= 16;
    } else if (key_is(kv, "cipher")) {
      std::string s;
      ASSIGN_OR_RETURN(s, as_str(v, "cipher", lim));
      auto c = cipher_from_name(s);
      if (!c) return make_error(Errc::cipher_mismatch, "unknown cipher '" + s + "'");
      h.cipher = *c;
      seen |= 32;
    } else if (key_is(kv, "ctr")) {
      ASSIGN_OR_RETURN(h.ctr, as_uint(v, "ctr"));
      seen |= 64;
    }
    else if (key_is(kv, "tensors")) {
      TRACR_TRY(each<TensorDesc>(v, "tensors", lim.max_tensors, [&](const Obj& e) -> Status {
        TensorDesc d;
        ASSIGN_OR_RETURN(d, decode_desc(e, lim));
        h.tensors.push_back(std::move(d));
        return {};
      }));
    } else if (key_is(kv, "meta")) {
      if (v.type != msgpack::type::MAP) return type_err("meta", "a map");
      if (v.via.map.size > lim.max_meta) return make_error(Errc::limit_exceeded, "meta has too many entries");
      TRACR_TRY(distinct_keys(v, "meta"));
      for (uint32_t j = 0; j < v.via.map.size; ++j) {
        const auto& m = v.via.map.ptr[j];
        std::string key;
        ASSIGN_OR_RETURN(key, as_str(m.key, "meta key", lim));
        switch (m.val.type) {
          case msgpack::type::POSITIVE_INTEGER:
          case msgpack::type::NEGATIVE_INTEGER: {
            int64_t x = 0;
            ASSIGN_OR_RETURN(x, as_int(m.val, "meta value"));
            h.meta[key] = x;
            break;
          }
          case msgpack::type::FLOAT32:
          case msgpack::type::FLOAT64: h.meta[key] = m.val.via.f64; break;
          case msgpack::type::STR: {
            std::string s;
            ASSIGN_OR_RETURN(s, as_str(m.val, "meta value", lim));
            h.meta[key] = std::move(s);
            break;
          }
          default: return type_err("meta value", "an integer, float or string");
        }
      }
    } else if (key_is(kv, "err")) {
      if (v.type != msgpack::type::MAP) return type_err("err", "a map");
      TRACR_TRY(distinct_keys(v, "err"));
      Error e;
      for (uint32_t j = 0; j < v.via.map.size; ++j) {
        const auto& m = v.via.map.ptr[j];
        if (key_is(m, "code")) {
          uint64_t c = 0;
          ASSIGN_OR_RETURN(c, as_uint(m.val, "err.code"));
          e.code = c <= UINT16_MAX ? static_cast<Errc>(c) : Errc::internal;
        } else if (key_is(m, "msg")) ASSIGN_OR_RETURN(e.message, as_str(m.val, "err.msg", lim));
      }
      h.error = std::move(e);
    } else if (key_is(kv, "hs")) {
      Handshake hs;
      ASSIGN_OR_RETURN(hs, decode_hs(v, lim));
      h.hs = std::move(hs);
    } else if (key_is(kv, "wire")) {
      TRACR_TRY(each<uint64_t>(v, "wire", lim.max_tensors, [&](const Obj& e) -> Status {
        uint64_t w = 0;
        ASSIGN_OR_RETURN(w, as_uint(e, "wire[]"));
        h.wire.push_back(w);
        return {};
      }));
    }
    // Unknown keys are ignored: fields are only ever appended (PROTOCOL.md).
  }
  if (!have_type) return make_error(Errc::missing_field, "header has no message type field 'type'");
  // Fields PROTOCOL.md marks "always" (and ctr whenever a cipher is used).
  const char* names[] = {"sid", "seq", "seg", "last", "np", "cipher"};
  for (int i = 0; i < 6; ++i)
    if (!(seen & (1u << i)))
      return make_error(Errc::missing_field, std::string("header has no '") + names[i] + "' field");
  if (h.cipher != Cipher::none && !(seen & 64))
    return make_error(Errc::missing_field, "encrypted header has no 'ctr' field");
  return h;
}

}  // namespace

void encode_header(const Header& h, std::vector<uint8_t>& out) {
  VecStream vs{out};
  Packer pk(vs);
  const bool has_ctr = h.cipher != Cipher::none || h.ctr != 0;  // sealed plain control messages too
  uint32_t n = 10 + (has_ctr ? 1 : 0) + (h.tensors.empty() ? 0 : 1) +
               (h.meta.empty() ? 0 : 1) + (h.error ? 1 : 0) + (h.hs ? 1 : 0) +
               (h.last ? 1 : 0);
  pk.pack_map(n);
  pack_str(pk, "magic"); pack_str(pk, kMagic);
  pack_str(pk, "v"); pk.pack_uint32(h.version);
  pack_str(pk, "type"); pk.pack_uint8(static_cast<uint8_t>(h.type));
  pack_str(pk, "sid"); pk.pack_uint64(h.session);
  pack_str(pk, "seq"); pk.pack_uint64(h.seq);
  pack_str(pk, "split"); pk.pack_int32(h.split);
  pack_str(pk, "seg"); pk.pack_uint32(h.seg);
  pack_str(pk, "last"); h.last ? pk.pack_true() : pk.pack_false();
  pack_str(pk, "np"); pk.pack_uint32(h.nparts);
  pack_str(pk, "cipher"); pack_str(pk, cipher_name(h.cipher));
  if (has_ctr) { pack_str(pk, "ctr"); pk.pack_uint64(h.ctr); }
  if (!h.tensors.empty()) {
    pack_str(pk, "tensors");
    pk.pack_array(static_cast<uint32_t>(h.tensors.size()));
    for (const auto& d : h.tensors) pack_desc(pk, vs, d);
  }
  if (!h.meta.empty()) {
    pack_str(pk, "meta");
    pk.pack_map(static_cast<uint32_t>(h.meta.size()));
    for (const auto& [k, v] : h.meta) {
      pack_str(pk, k);
      if (auto* i = std::get_if<int64_t>(&v)) pk.pack_int64(*i);
      else if (auto* d = std::get_if<double>(&v)) pk.pack_double(*d);
      else pack_str(pk, std::get<std::string>(v));
    }
  }
  if (h.error) {
    pack_str(pk, "err");
    pk.pack_map(2);
    pack_str(pk, "code"); pk.pack_uint16(static_cast<uint16_t>(h.error->code));
    // Valid UTF-8 on the wire, whatever peer bytes the message quotes.
    pack_str(pk, "msg"); pack_str(pk, utf8_escaped(h.error->message));
  }
  if (h.hs) { pack_str(pk, "hs"); pack_hs(pk, *h.hs); }
  if (h.last) {
    pack_str(pk, "wire");
    pk.pack_array(static_cast<uint32_t>(h.wire.size()));
    for (auto w : h.wire) pk.pack_uint64(w);
  }
}

Result<Header> decode_header(const uint8_t* data, size_t n, const Limits& lim) {
  if (n == 0) return make_error(Errc::malformed_header, "empty header part");
  if (n > lim.max_header_bytes)
    return make_error(Errc::limit_exceeded, "header of " + std::to_string(n) + " bytes exceeds " +
                                                std::to_string(lim.max_header_bytes));
  // Every container entry needs at least one byte of input, so these limits
  // also bound what the unpacker allocates.
  const auto cap = static_cast<std::size_t>(n);
  msgpack::unpack_limit ul(cap, cap, lim.max_string, lim.max_string, 0, 8);
  try {
    std::size_t off = 0;
    msgpack::object_handle oh =
        msgpack::unpack(reinterpret_cast<const char*>(data), n, off, nullptr, nullptr, ul);
    if (off != n) return make_error(Errc::malformed_header, "trailing bytes after the header map");
    return decode_root(oh.get(), lim);
  } catch (const msgpack::size_overflow& e) {
    return make_error(Errc::limit_exceeded, std::string("header exceeds msgpack limits: ") + e.what());
  } catch (const std::exception& e) {
    return make_error(Errc::malformed_header, std::string("header is not valid msgpack: ") + e.what());
  }
}

uint64_t transformed_bytes(const TensorDesc& d) {
  return d.raw_bytes / dtype_size(d.dtype) * dtype_size(d.lossy.wire);
}

Result<uint64_t> validate_descs(const std::vector<TensorDesc>& descs, const Limits& lim) {
  uint64_t total_raw = 0, total_parts = 0;
  for (const auto& d : descs) {
    const std::string who = "tensor '" + d.name + "'";
    int64_t numel = 0;
    {
      auto r = checked_numel(d.shape, static_cast<int64_t>(lim.max_frame_bytes));
      if (!r) return make_error(r.error().code, who + ": " + r.error().message);
      numel = *r;
    }
    if (d.raw_bytes != static_cast<uint64_t>(numel) * dtype_size(d.dtype))
      return make_error(Errc::size_mismatch, who + ": raw " + std::to_string(d.raw_bytes) +
                                                 " bytes but shape and dtype give " +
                                                 std::to_string(numel * dtype_size(d.dtype)));
    total_raw += d.raw_bytes;
    if (total_raw > lim.max_frame_bytes)
      return make_error(Errc::limit_exceeded, "frame carries more than " +
                                                  std::to_string(lim.max_frame_bytes) + " raw bytes");
    auto st = lossy_validate(d.lossy, d.shape);
    if (!st) return make_error(st.error().code, who + ": " + st.error().message);
    if (d.comp == Compressor::blosc && d.cname != "lz4" && d.cname != "zstd" && d.cname != "blosclz" &&
        d.cname != "zlib")
      return make_error(Errc::unknown_codec, who + ": unknown blosc compressor '" + d.cname + "'");
    const uint64_t tb = transformed_bytes(d);
    const size_t ws = dtype_size(d.lossy.wire);
    if (tb == 0) {
      if (d.parts != 0) return make_error(Errc::size_mismatch, who + ": empty tensor with parts");
      continue;
    }
    if (d.chunk_bytes == 0 || d.chunk_bytes % ws != 0 ||
        (d.chunk_bytes < lim.min_chunk_bytes && d.chunk_bytes < tb) || d.chunk_bytes > lim.max_chunk_bytes)
      return make_error(Errc::codec_params, who + ": chunk of " + std::to_string(d.chunk_bytes) +
                                                " bytes is invalid");
    const uint64_t want = (tb + d.chunk_bytes - 1) / d.chunk_bytes;
    if (d.parts != want)
      return make_error(Errc::size_mismatch, who + ": " + std::to_string(d.parts) + " parts but " +
                                                 std::to_string(want) + " expected");
    total_parts += d.parts;
    if (total_parts > lim.max_parts)
      return make_error(Errc::limit_exceeded, "frame has more than " + std::to_string(lim.max_parts) + " parts");
  }
  return total_parts;
}

uint64_t max_part_bytes(const Limits& lim) {
  return std::max<uint64_t>(lim.max_header_bytes, lim.max_chunk_bytes + lim.max_chunk_bytes / 8 + 4096);
}

}  // namespace tracr::protocol
