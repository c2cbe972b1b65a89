// Control channel between tracrctl and an agent: the agent's standard input
// and output (a local pipe, or the SSH exec channel for a remote agent).
// The first stdin line carries the hex session secret. Every later line in
// either direction is
//     <seq> <KIND> key=value key=value ... #<mac>
// with values percent-encoded, seq counting from 1 per direction, and mac =
// the first 16 bytes (hex) of HMAC-SHA256(k, "<seq> <KIND> <fields>") where
// k = HKDF-SHA256(secret, salt = "", info = "tracr/1 control a2c" or
// "tracr/1 control c2a", 32). A line with a bad MAC, a repeated or skipped
// seq, or bad syntax is rejected with a typed error naming the agent.
// The kinds, each direction's, with their meaning: wire/control_kinds.def
// (READY, HEARTBEAT, FRAME, ... from the agent; CONFIG, STOP, CMD and
// HEARTBEAT from the controller). A line of a kind not listed for its
// direction does not decode.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::wire {

struct ControlMsg {
  uint64_t seq = 0;
  std::string kind;
  std::map<std::string, std::string> fields;

  // Typed accessors; errors name the field and the message kind.
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_double(const std::string& key) const;
  Result<std::string> get_str(const std::string& key) const;
  std::string get_or(const std::string& key, const std::string& dflt) const;
};

enum class ControlDir { agent_to_controller, controller_to_agent };

// Whether control_kinds.def lists `kind` for lines in direction `dir`.
bool control_kind_known(ControlDir dir, const std::string& kind);
// The kinds of a direction, in control_kinds.def's order, ", "-separated.
std::string control_kinds(ControlDir dir);

class ControlCodec {
 public:
  // secret: the session secret (raw bytes).
  ControlCodec(const std::vector<uint8_t>& secret, ControlDir dir);
  // Encodes one line (with trailing newline); thread-safe (seq is atomic under a lock).
  std::string encode(const std::string& kind, const std::map<std::string, std::string>& fields);
  // Verifies and parses one line (without newline). A kind that
  // control_kinds.def does not list for this direction is malformed_header,
  // naming it.
  Result<ControlMsg> decode(const std::string& line);

 private:
  ControlDir dir_;
  std::vector<uint8_t> key_;
  std::mutex mu_;
  uint64_t next_send_ = 1;
  uint64_t next_recv_ = 1;
};

// Calls `beat` every period_ms on its own thread, from start() until stop()
// (idempotent; also on destruction). Both ends of a control channel send
// their HEARTBEAT lines with it.
class Heartbeat {
 public:
  Heartbeat() = default;
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  ~Heartbeat() { stop(); }
  // Starts the thread; a second start() while running does nothing.
  void start(int period_ms, std::function<void()> beat);
  void stop();

 private:
  std::thread th_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

std::string pct_encode(const std::string& s);
Result<std::string> pct_decode(const std::string& s);

}  // namespace tracr::wire
