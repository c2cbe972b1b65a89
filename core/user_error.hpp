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

// Every tracrctl command returns a Status: ok, or the Error that ended it.
// The top level (controller/cli) writes that error once, as
// "tracrctl COMMAND: message", and exit_code() below is the one mapping from
// it to the exit status. Warnings and progress are logged where they happen;
// only the ending error travels up.

// The exit status of a command that failed with `e` (docs/COMMANDS.md):
// 2 for a usage or configuration error (a bad option, value or file: the
// command started nothing), 1 for every other failure (a device, agent or
// database error, no such run).
inline int exit_code(const Error& e) {
  return e.code == Errc::invalid_argument || e.code == Errc::config ? 2 : 1;
}
inline int exit_code(const Status& s) { return s ? 0 : exit_code(s.error()); }

// `e` as a usage error (exit 2): what the person gave is wrong (a missing or
// broken experiment file, a setting, an option), whatever the underlying
// code was (io for a file that is not there). The text a person reads stays.
inline Error bad_input(Error e) {
  if (e.code == Errc::invalid_argument || e.code == Errc::config) return e;
  return Error{Errc::config, user_text(e), e.frame_seq};
}
inline Error bad_input(std::string message) { return Error{Errc::config, std::move(message)}; }

// A failure that is not the input's fault (exit 1), with `message` as the
// text a person reads: a device that did not pass its check, a run that failed.
inline Error command_failed(std::string message, Errc code = Errc::io) { return Error{code, std::move(message)}; }

}  // namespace tracr::core
