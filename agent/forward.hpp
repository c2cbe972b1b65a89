// A chain's middle tier (#43, PROTOCOL.md 3.4 "Forwarding"): a SERVER started
// with --downstream holds its own authenticated session to the next device.
// An INFER_REQUEST whose meta carries `then` runs its segment [split, last)
// here, goes on to the next device at split `last`, and that device's answer
// comes back through here to the requester, with this tier's own times and
// the next device's reply meta nested under "d.". No LibTorch: the serving
// loop hands it the segment's output.
//
// Nothing here waits: forward() sends and returns, pump() takes what the
// downstream answered so far, so a request waiting on its downstream round
// trip never holds up another session's.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "protocol/channel.hpp"
#include "protocol/frame.hpp"
#include "wire/record.hpp"

namespace tracr::agent {

// The request's forwarding, from its meta: nullopt without `then` (the
// request ends on this device), else the downstream request's meta (`last`
// and `then` from the cuts in `then`, none when it is empty: the next device
// runs to N). Error invalid_argument when `then` is not cut points joined by
// '|', when they go below `last`, or when `then` comes without `last`;
// field_type when `then` is not a string.
Result<std::optional<protocol::Meta>> forward_meta(const protocol::Frame& request);

// A chain's frame, per device after the participant (record_fields.def
// TRACR_HOP_FIELD): from the first device's reply meta, the next devices'
// nested under "d.", "d.d.", ..., and the participant's own figures for the
// first hop (r's encode, network, server and return times and its bytes:
// call it once r has them). `cuts` is the frame's placement, n the model's
// layer count. A figure the reply lacks is NULL, and so is every figure
// computed from it.
std::vector<wire::HopRecord> hops_of_reply(const protocol::Meta& reply, const wire::FrameRecord& r,
                                           const std::vector<int>& cuts, int n);

// One answer to an upstream request: a reply (type, tensors, meta) or an
// ERROR (error set; meta unused).
struct UpAnswer {
  uint64_t up_seq = 0;  // the request's seq (its reply's meta.req_seq)
  int32_t split = 0;
  protocol::MsgType type = protocol::MsgType::infer_result;
  protocol::Bundle tensors;
  protocol::Meta meta;
  std::optional<protocol::SendOptions> so;  // nullopt: the server's default
  std::optional<Error> error;
};

class Forwarder {
 public:
  // Connects to the next device (the handshake included). `timeout_ms`:
  // a forwarded request not answered within it is answered upstream with a
  // timeout ERROR naming the downstream.
  static Result<std::unique_ptr<Forwarder>> connect(zmq::context_t& ctx, const std::string& endpoint,
                                                    protocol::ChannelOptions co, int timeout_ms);
  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_t& socket() { return client_->socket(); }
  // The session to the next device, for the hop's link probe before any
  // frame (agent.cpp): not while requests are pending.
  protocol::Client& client() { return *client_; }
  size_t pending() const { return pending_.size(); }

  // Sends the segment's output (`out`, `seg_meta` as the segment executor
  // made them) on with `down_meta` (forward_meta). On error nothing is
  // pending and the caller answers the request.
  Status forward(const std::string& peer, const protocol::Frame& request, const protocol::Bundle& out,
                 protocol::Meta seg_meta, protocol::Meta down_meta);
  // Answers a request of `peer` that did not go on (an ERROR, or a reply
  // this device made itself): at once, or, while an earlier request of the
  // same session waits on the next device, after it. A session's answers
  // keep the order of its requests (PROTOCOL.md 3.4), so a requester never
  // takes an early answer for a lost one.
  void answer(protocol::Server& up, const std::string& peer, UpAnswer a, std::vector<Error>& failures);
  // Answers upstream what the downstream has answered, and what it left
  // unanswered past the timeout; never waits. Returns failures to note.
  std::vector<Error> pump(protocol::Server& up);

 private:
  Forwarder() = default;
  struct Pending {
    std::string peer;           // the upstream session
    uint64_t up_seq = 0;        // the request's seq there
    int32_t up_split = 0;
    int64_t arrived_ns = 0;     // the upstream request's last segment (steady clock)
    std::chrono::steady_clock::time_point sent_at;
    protocol::Meta meta;        // this tier's segment meta and forwarding figures
  };
  // A session's answers in request order: those still waiting on the next
  // device (down_seq) and those ready behind them.
  struct Slot {
    uint64_t down_seq = 0;
    std::optional<UpAnswer> ready;
  };
  UpAnswer reply_of(Pending& p, const protocol::Frame& reply, std::vector<Error>& failures);
  void settle(protocol::Server& up, const std::string& peer, uint64_t down_seq, UpAnswer a,
              std::vector<Error>& failures);
  void send_up(protocol::Server& up, const std::string& peer, UpAnswer& a, std::vector<Error>& failures);
  std::string endpoint_;
  int timeout_ms_ = 30000;
  std::unique_ptr<protocol::Client> client_;
  std::map<uint64_t, Pending> pending_;                 // by the downstream request's seq
  std::map<std::string, std::deque<Slot>> order_;       // by upstream session
};

}  // namespace tracr::agent
