#include "protocol/error.hpp"

#include <cstdint>

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

std::string without_backtrace(std::string_view what) {
  size_t cut = what.find("Exception raised from ");
  const size_t frame = what.find("frame #");
  if (frame != std::string_view::npos && (cut == std::string_view::npos || frame < cut)) cut = frame;
  std::string out(what.substr(0, cut));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string utf8_escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  static const char* hex = "0123456789abcdef";
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n > 1) {
      // No overlong forms, surrogates or code points past U+10FFFF.
      uint32_t cp = c & (0x7f >> n);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
      const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min[n] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    }
    if (!ok || c == 0x7f || (c < 0x20 && c != '\n' && c != '\t')) {
      escape(c);
      ++i;
      continue;
    }
    out.append(s.data() + i, n);
    i += n;
  }
  return out;
}

std::string Error::str() const {
  std::string s(errc_name(code));
  s += ": ";
  s += message;
  return s;
}

}  // namespace tracr
