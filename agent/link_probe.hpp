// The link probe of a session (PROTOCOL.md, message types 32/33): round
// trips and bulk rates each way, measured by the PARTICIPANT. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "protocol/channel.hpp"
#include "wire/record.hpp"

namespace tracr::agent {

// The link probe (PROTOCOL.md, message types 32/33) over a session with no
// frames in flight: rtt_count echo round trips, then bulk messages of
// chunk_bytes kept `window` deep for duration_ms each way (sink: up, source:
// down); with auto chunks, deeper where the link's rate x round trip needs
// it (the record's `window` is then the up way's). Throughput is wire bytes over the span from the first message to
// the last reply, less the smallest round trip.
struct ProbeOptions {
  int rtt_count = 20;
  int duration_ms = 1000;
  int64_t chunk_bytes = 0;  // 0: auto, each way (auto_probe_chunk)
  int window = 4;
  std::string trigger = "startup";
  std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now();
  int timeout_ms = 60000;  // per reply
};
Result<wire::ProbeRecord> probe_link(protocol::Client& client, const ProbeOptions& o);

// One echo round trip (PROTOCOL.md 6.3): a session its controller has
// paused, or holds in lockstep, keeps itself from being the idle one
// evicted when the server's session table is full. Nothing else may be in
// flight on the session. Error names what came instead of the echo.
Status keep_alive(protocol::Client& client, int timeout_ms);

}  // namespace tracr::agent
