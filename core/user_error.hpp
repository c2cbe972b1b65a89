// What a person reads when a tracrctl command fails: the error's message,
// which names the file, field, device or run and what was expected, without
// the internal code in front (Error::str() keeps "code: message" for logs,
// stored rows and the agents' FAIL lines, where the code is what a program
// matches on).
#pragma once

#include <string>

#include "core/text.hpp"
#include "protocol/error.hpp"

namespace tracr::core {

inline std::string user_text(const Error& e) {
  if (e.message.empty()) {
    std::string m(errc_name(e.code));
    for (char& c : m)
      if (c == '_') c = ' ';
    return m;
  }
  // Names inside it may come from a database or a peer: no control bytes.
  return terminal_text(e.message);
}

// An error another process reported as text ("code: message", Error::str(),
// as an agent's FAIL line carries it), read by a person: the message without
// a leading code name. Text that does not start with one is kept as it is.
inline std::string reported_error_text(const std::string& text) {
  const size_t colon = text.find(": ");
  if (colon != std::string::npos && colon > 0) {
    const std::string head = text.substr(0, colon);
    for (int c = 1; c < 600; ++c)
      if (errc_name(static_cast<Errc>(c)) == head && head != "unknown") return terminal_text(text.substr(colon + 2));
  }
  return terminal_text(text);
}

// The exit status of a command that failed with `e` (docs/COMMANDS.md):
// 2 for a usage or configuration error (a bad option, value or file: the
// command started nothing), 1 for every other failure (a device, agent or
// database error, no such run).
inline int exit_code(const Error& e) {
  return e.code == Errc::invalid_argument || e.code == Errc::config ? 2 : 1;
}

}  // namespace tracr::core
