// One logging macro for the controller's floors:
//
//   TRACR_LOG(warn, "detached agent on {}: {}", device, why);
//
// The level is checked before the message is formatted (arguments of a line
// below the level are not evaluated). Lines go to stderr as written (one
// line each, a newline added); the level is TRACR_LOG_LEVEL (error, warn,
// info or debug; default info) or set_log_level(). Structured events that
// belong to a run go to its database too (Recorder::event), not only here.
#pragma once

#include <cstdio>
#include <string_view>

#include <fmt/format.h>

namespace tracr::core {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// The current level: set_log_level's, else $TRACR_LOG_LEVEL's, else info.
LogLevel log_level();
void set_log_level(LogLevel level);
// Where lines go (stderr unless set; tests pass a temporary file).
void set_log_sink(std::FILE* sink);
inline bool log_enabled(LogLevel level) { return level <= log_level(); }
// Writes one line (a newline added) to the sink.
void log_line(LogLevel level, std::string_view text);

}  // namespace tracr::core

#define TRACR_LOG(level, ...)                                                    \
  do {                                                                           \
    if (::tracr::core::log_enabled(::tracr::core::LogLevel::level))              \
      ::tracr::core::log_line(::tracr::core::LogLevel::level, fmt::format(__VA_ARGS__)); \
  } while (0)
