// A file written whole: beside it first, then renamed over it, so a reader
// never sees half of it.
#pragma once

#include <string>

#include "protocol/error.hpp"

namespace tracr::core {

// Writes `text` to `file` (through file.tmp and a rename). Error io naming
// the file when it cannot be written.
Status write_file(const std::string& file, const std::string& text);

}  // namespace tracr::core
