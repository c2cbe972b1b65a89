// The frame header: a msgpack map carried as the first ZeroMQ part of every
// segment of a frame. Field names, types and limits: protocol/PROTOCOL.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "protocol/codec.hpp"
#include "protocol/error.hpp"
#include "protocol/tensor.hpp"

namespace tracr::protocol {

inline constexpr char kMagic[] = "TRCR";
inline constexpr uint32_t kVersion = 1;

enum class MsgType : uint8_t {
  hello = 1,
  welcome = 2,
  infer_request = 3,
  infer_result = 4,
  error = 5,
  heartbeat = 6,
  shutdown = 7,
  goodbye = 8,  // participant -> server: end this session (encrypted when the session is)
  // Reserved for split training: activations forward, gradients backward.
  train_forward = 16,
  train_backward = 17,
  // Reserved for per-layer profiling and link probing.
  profile_request = 24,
  profile_result = 25,
  probe = 32,
  probe_reply = 33,
};
std::string_view msg_type_name(MsgType t);
bool msg_type_known(uint64_t v);

enum class Cipher : uint8_t { none = 0, aes256gcm = 1 };
std::string_view cipher_name(Cipher c);  // "none" | "aes-256-gcm"
std::optional<Cipher> cipher_from_name(std::string_view s);

// Typed key/value extras (timings, energy, status...). No nested objects.
using MetaValue = std::variant<int64_t, double, std::string>;
using Meta = std::map<std::string, MetaValue>;

// One tensor of the bundle, as described in segment 0.
struct TensorDesc {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  std::string codec;          // canonical codec text actually applied to this tensor
  LossyParams lossy;          // kind, wire dtype, axis, scale, zero_point
  bool sparse = false;        // sparse stage (zero bitmap + nonzero values) after lossy
  Compressor comp = Compressor::none;
  std::string cname;          // blosc compressor name when comp == blosc
  uint64_t raw_bytes = 0;     // numel * dtype_size(dtype)
  uint64_t chunk_bytes = 0;   // bytes of the transformed stream per part
  uint32_t parts = 0;         // payload parts carrying this tensor
};

// Capabilities and key-exchange material in HELLO / WELCOME.
struct Handshake {
  std::vector<uint32_t> versions;    // HELLO: versions the client speaks
  std::vector<std::string> ciphers;  // HELLO: offered, preference order; WELCOME: chosen (1)
  std::vector<std::string> kx;       // "x25519" offered/chosen; empty = secret only
  std::vector<uint8_t> nonce;        // 32 random bytes
  std::vector<uint8_t> pub;          // X25519 public key (32) when kx has x25519
  std::string role;                  // "PARTICIPANT", "SERVER", "CONTROLLER"
  std::string agent;                 // software name and version
  uint64_t max_frame_bytes = 0;      // receiver's limit on raw bytes per frame
  // HELLO: the sender's clock, Unix milliseconds (PROTOCOL.md 6.3: a server
  // refuses a HELLO outside its freshness window). Absent on WELCOME.
  std::optional<uint64_t> ts_ms;
};

struct Header {
  uint32_t version = kVersion;
  MsgType type = MsgType::heartbeat;
  uint64_t session = 0;
  uint64_t seq = 0;        // frame sequence number, per direction, starts at 1
  int32_t split = -1;      // split index, -1 when not applicable
  uint32_t seg = 0;        // segment index within the frame
  bool last = true;        // last segment of the frame
  uint32_t nparts = 0;     // payload parts in this segment
  Cipher cipher = Cipher::none;
  uint64_t ctr = 0;        // first AEAD counter used by this segment
  // Segment 0 only:
  std::vector<TensorDesc> tensors;
  Meta meta;
  std::optional<Error> error;          // ERROR frames
  std::optional<Handshake> hs;         // HELLO / WELCOME
  // Last segment only: wire bytes of each tensor (sum of its parts).
  std::vector<uint64_t> wire;
};

// Bounds applied while decoding anything a peer sent.
struct Limits {
  uint64_t max_frame_bytes = 1ull << 30;  // raw bytes of all tensors in a frame
  uint32_t max_tensors = 256;
  uint32_t max_rank = 8;
  uint32_t max_parts = 1u << 16;          // payload parts per frame
  uint32_t max_header_bytes = 1u << 16;
  uint32_t max_string = 4096;
  uint32_t max_meta = 128;
  uint64_t min_chunk_bytes = 4096;
  // Transformed bytes per payload part (a descriptor's `chunk`). With it
  // every ZeroMQ message part is bounded (max_part_bytes), which both ends
  // hand to ZeroMQ as ZMQ_MAXMSGSIZE: a larger part is refused by the
  // transport before it is buffered.
  uint64_t max_chunk_bytes = 64ull << 20;
  // Tensor bytes one reader (one session) may hold for a frame in progress;
  // a frame declaring more is refused (limit_exceeded) before allocation.
  uint64_t session_budget_bytes = 1ull << 30;
};

// Serialises to msgpack (appends to out).
void encode_header(const Header& h, std::vector<uint8_t>& out);
// Parses and validates field types and limits; does not check tensor
// consistency (see validate_descs). Errors: malformed_header, bad_magic,
// unsupported_version, unknown_message_type, field_type, missing_field,
// limit_exceeded, unknown_codec, unsupported_dtype.
Result<Header> decode_header(const uint8_t* data, size_t n, const Limits& lim);

// Checks segment-0 descriptors for internal consistency and the limits:
// raw_bytes == numel*dtype size, parts == ceil(transformed/chunk), lossy
// params valid, totals within limits. Returns the total part count.
Result<uint64_t> validate_descs(const std::vector<TensorDesc>& descs, const Limits& lim);

// The largest ZeroMQ message part a frame within `lim` can hold: the header
// (max_header_bytes), or a part: a chunk plus the sparse bitmap (chunk / 8),
// c-blosc headers and the GCM tag (4,096 bytes cover them). PROTOCOL.md 8.
uint64_t max_part_bytes(const Limits& lim);

// Bytes of the transformed element stream of a tensor (numel * wire size).
uint64_t transformed_bytes(const TensorDesc& d);

}  // namespace tracr::protocol
