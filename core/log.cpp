#include "core/log.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tracr::core {

namespace {

LogLevel from_env() {
  const char* v = std::getenv("TRACR_LOG_LEVEL");
  if (!v) return LogLevel::info;
  if (!std::strcmp(v, "error")) return LogLevel::error;
  if (!std::strcmp(v, "warn")) return LogLevel::warn;
  if (!std::strcmp(v, "debug")) return LogLevel::debug;
  return LogLevel::info;
}

std::atomic<int> g_level{-1};  // -1: not read from the environment yet
std::atomic<std::FILE*> g_sink{nullptr};

}  // namespace

LogLevel log_level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = static_cast<int>(from_env());
    g_level.store(l, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(l);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

void set_log_sink(std::FILE* sink) { g_sink.store(sink, std::memory_order_relaxed); }

void log_line(LogLevel, std::string_view text) {
  std::FILE* out = g_sink.load(std::memory_order_relaxed);
  if (!out) out = stderr;
  // One write per line, so lines of different threads do not interleave.
  std::string line(text);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace tracr::core
