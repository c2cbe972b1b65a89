#include "protocol/error.hpp"

namespace tracr {

std::string_view errc_name(Errc c) {
  switch (c) {
    case Errc::ok: return "ok";
    case Errc::malformed_header: return "malformed_header";
    case Errc::bad_magic: return "bad_magic";
    case Errc::unsupported_version: return "unsupported_version";
    case Errc::unknown_message_type: return "unknown_message_type";
    case Errc::field_type: return "field_type";
    case Errc::missing_field: return "missing_field";
    case Errc::limit_exceeded: return "limit_exceeded";
    case Errc::size_mismatch: return "size_mismatch";
    case Errc::truncated: return "truncated";
    case Errc::unexpected_message: return "unexpected_message";
    case Errc::unknown_codec: return "unknown_codec";
    case Errc::codec_params: return "codec_params";
    case Errc::decompress_failed: return "decompress_failed";
    case Errc::unsupported_dtype: return "unsupported_dtype";
    case Errc::auth_failed: return "auth_failed";
    case Errc::replay: return "replay";
    case Errc::handshake_failed: return "handshake_failed";
    case Errc::wrong_session: return "wrong_session";
    case Errc::crypto_backend: return "crypto_backend";
    case Errc::cipher_mismatch: return "cipher_mismatch";
    case Errc::auth_refused: return "auth_refused";
    case Errc::host_key_unknown: return "host_key_unknown";
    case Errc::host_key_mismatch: return "host_key_mismatch";
    case Errc::key_permissions: return "key_permissions";
    case Errc::timeout: return "timeout";
    case Errc::transport: return "transport";
    case Errc::peer_closed: return "peer_closed";
    case Errc::unreachable: return "unreachable";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::io: return "io";
    case Errc::config: return "config";
    case Errc::remote: return "remote";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

std::string Error::str() const {
  std::string s(errc_name(code));
  s += ": ";
  s += message;
  return s;
}

}  // namespace tracr
