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

}  // namespace tracr::core
