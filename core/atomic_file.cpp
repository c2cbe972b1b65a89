#include "core/atomic_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace tracr::core {

Status write_file(const std::string& file, const std::string& text) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(Errc::io, fmt::format("{}: cannot write: {}", file, std::strerror(errno)));
    out << text;
    out.flush();
    if (!out) return make_error(Errc::io, fmt::format("{}: write failed: {}", file, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(Errc::io, fmt::format("{}: cannot write: {}", file, std::strerror(errno)));
  }
  return {};
}

}  // namespace tracr::core
