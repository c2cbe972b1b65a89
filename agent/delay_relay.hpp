// Link delay applied inside the participant agent, for kernels without
// netem (`link_delay: agent` in the experiment). The participant connects its
// ZeroMQ socket to a relay on loopback instead of the SERVER; the relay
// forwards every byte to the SERVER and back, holding each read for the
// one-way delay (plus a uniform jitter of +-jitter_ms) in each direction, in
// order, as a long link would: the round trip grows by twice the delay and
// frames in flight overlap their delays. Bytes waiting are bounded (the
// relay stops reading past 64 MiB queued per direction, so TCP pushes back).
// Rates stay with tc; loss is not emulated (TCP would retransmit anyway).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "protocol/error.hpp"

namespace tracr::agent {

class DelayRelay {
 public:
  // upstream: "tcp://HOST:PORT" (HOST an address, [v6] in brackets, or a name).
  // Errors: invalid_argument for another endpoint form, io when no loopback
  // port can be bound.
  static Result<std::unique_ptr<DelayRelay>> start(const std::string& upstream, double delay_ms, double jitter_ms,
                                                   uint64_t seed);
  ~DelayRelay();
  DelayRelay(const DelayRelay&) = delete;
  DelayRelay& operator=(const DelayRelay&) = delete;
  // Where to connect instead of upstream: "tcp://127.0.0.1:PORT".
  const std::string& endpoint() const { return endpoint_; }
  // Bytes relayed so far, each way (participant to SERVER, and back).
  uint64_t bytes_up() const { return up_.load(); }
  uint64_t bytes_down() const { return down_.load(); }

 private:
  DelayRelay() = default;
  void loop();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::string host_, port_, endpoint_;
  double delay_ms_ = 0, jitter_ms_ = 0;
  uint64_t seed_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> up_{0}, down_{0};
  std::thread thread_;
};

}  // namespace tracr::agent
