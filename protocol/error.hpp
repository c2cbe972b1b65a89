// Typed errors and Result<T> for the whole project.
// Expected failures (a peer sent garbage, a tag did not verify, a timeout, a
// missing file) are values, never exceptions. Codes are grouped by area in
// hundreds and are part of the wire protocol (ERROR frames carry them), so a
// code's number never changes once assigned; see protocol/PROTOCOL.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tracr {

enum class Errc : uint16_t {
  ok = 0,
  // 1xx: framing / wire format
  malformed_header = 100,   // header is not a msgpack map of the expected shape
  bad_magic = 101,          // "magic" missing or not "TRCR"
  unsupported_version = 102,
  unknown_message_type = 103,
  field_type = 104,         // a field has the wrong msgpack type
  missing_field = 105,
  limit_exceeded = 106,     // rank, dims, byte counts or part counts beyond limits
  size_mismatch = 107,      // a payload part's size disagrees with the header
  truncated = 108,          // a frame ended before all its parts arrived
  unexpected_message = 109, // a valid message that is not allowed in this state
  // 2xx: codecs
  unknown_codec = 200,
  codec_params = 201,       // invalid codec parameters
  decompress_failed = 202,  // corrupt compressed data or size disagreement
  unsupported_dtype = 203,
  // 3xx: crypto and session security
  auth_failed = 300,        // AES-GCM tag did not verify (tampered frame)
  replay = 301,             // counter not above the last accepted one
  handshake_failed = 302,
  wrong_session = 303,
  crypto_backend = 304,     // OpenSSL reported an internal failure
  cipher_mismatch = 305,    // frame's cipher differs from the negotiated one
  auth_refused = 306,       // SSH (or other) authentication refused
  host_key_unknown = 307,   // SSH host not in known_hosts (and no trust-on-first-use)
  host_key_mismatch = 308,  // SSH host key differs from known_hosts
  key_permissions = 309,    // private key file readable by others
  // 4xx: transport
  timeout = 400,
  transport = 401,          // ZeroMQ reported an error
  peer_closed = 402,
  unreachable = 403,        // host cannot be reached (DNS, refused, no route)
  // 5xx: application (models, experiments, agents)
  invalid_argument = 500,
  not_found = 501,
  io = 502,
  config = 503,
  remote = 504,             // the peer reported an error in an ERROR frame
  internal = 599,
};

// Stable lower_snake name of a code ("auth_failed"); "unknown" for others.
std::string_view errc_name(Errc c);

struct Error {
  Errc code = Errc::internal;
  std::string message;
  // The frame (its seq) this error is about, 0 when none: a server's ERROR
  // answering a frame carries it as meta req_seq (PROTOCOL.md 3.4).
  uint64_t frame_seq = 0;
  // "auth_failed: tag mismatch on part 2 of frame 17"
  std::string str() const;
};

// `s` as valid UTF-8: well-formed sequences are kept, every other byte
// (peer bytes quoted in a message, say) becomes the text \xNN.
std::string utf8_escaped(std::string_view s);

// An exception's message without the backtrace some libraries append to it
// (LibTorch's c10::Error: "Exception raised from ..." and "frame #N: ..."
// lines), trailing blank lines dropped: what a user is shown.
std::string without_backtrace(std::string_view what);

// Minimal expected-like type: holds either a T or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::in_place_index<0>, std::move(v)) {}            // NOLINT
  Result(Error e) : v_(std::in_place_index<1>, std::move(e)) {}        // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }
  Error& error() { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : err_(std::move(e)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }
  Error& error() { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Error make_error(Errc c, std::string msg) { return Error{c, std::move(msg)}; }

// Thrown only for fatal conditions caught once at the top of a main().
struct Fatal : std::exception {
  explicit Fatal(Error e) : err(std::move(e)), text(err.str()) {}
  const char* what() const noexcept override { return text.c_str(); }
  Error err;
  std::string text;
};

// Unwraps a Result or throws Fatal: for top-level code paths only.
template <class T>
T get_or_throw(Result<T> r) {
  if (!r) throw Fatal(std::move(r.error()));
  return std::move(r).value();
}
inline void check_or_throw(Status s) {
  if (!s) throw Fatal(std::move(s.error()));
}

}  // namespace tracr

#define TRACR_TRY(expr)                 \
  do {                                  \
    auto _st = (expr);                  \
    if (!_st) return std::move(_st.error()); \
  } while (0)
