// ZeroMQ transport for frames. A Server binds a ROUTER socket and keeps one
// session per connected peer; a Client connects a DEALER socket and holds one
// session. Both run the handshake, then send and receive frames whose
// segments stream through ZeroMQ as soon as each is encoded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "protocol/frame.hpp"
#include "protocol/session.hpp"

namespace tracr::protocol {

// The HELLO role of a controlling session, the only one whose SHUTDOWN a
// Server accepts (PROTOCOL.md 3.3).
inline constexpr char kControllerRole[] = "CONTROLLER";

struct ChannelOptions {
  Security security;
  SendOptions send;
  ReadOptions read;  // threads decoding each received frame's parts
  Limits limits;
  std::string role = "PARTICIPANT";  // kControllerRole for a session that may send SHUTDOWN
  std::string agent = "tracr/0.1";
  int handshake_timeout_ms = 5000;
  int max_peers = 1024;  // server: sessions kept at once
  // server: a confirmed session that sends nothing for this long is ended
  // (a participant that said GOODBYE or closed cleanly is gone at once).
  int session_idle_ms = 600000;
  // server: when the session table is full, a verified HELLO takes the slot
  // of (1) an unconfirmed session past the handshake timeout, else (2) the
  // oldest unconfirmed session, else (3) the confirmed session idle longest,
  // if idle for at least this long. Counted as sessions_evicted.
  int evict_idle_ms = 30000;
  // server: a frame whose next segment does not arrive within this is
  // dropped (truncated) and its memory freed. ZeroMQ's ROUTER reports no
  // per-peer disconnect, so this is also how a peer that left mid-frame is
  // noticed. The memory one session may hold is limits.session_budget_bytes.
  int partial_frame_timeout_ms = 30000;
  // server: the server loop never waits on a peer. A reply that ZeroMQ
  // cannot take at once (the peer's queue is full: it does not read) waits
  // in that session's outbox; a session whose outbox passes these bounds, or
  // whose oldest queued reply has not moved for partial_frame_timeout_ms,
  // is ended (counted in Server::send_counters()). A peer without a session
  // gets one try per answer: what would wait is dropped and counted.
  uint64_t max_outbox_bytes = 0;    // 0: limits.max_frame_bytes + 16 MiB (one whole reply can wait)
  size_t max_outbox_segments = 0;   // 0: limits.max_parts + 1024
  // server: plain (unauthenticated) ERRORs to peers without a session, per
  // second (a bucket of as many); beyond it they are dropped and counted.
  int plain_errors_per_s = 64;
  // server: HELLO freshness (PROTOCOL.md 6.3). A HELLO whose `ts` is more
  // than this far from the server's clock (security.clock), or that has no
  // `ts`, is refused without a key exchange or a session slot.
  int hello_window_ms = 120000;
  // server: MACs of accepted HELLOs remembered against replay within the
  // window (about 80 B each). When it is full the oldest is forgotten, and a
  // HELLO no newer than a forgotten one is refused as a possible replay.
  size_t hello_replay_memory = 65536;
};

// What a Server did with replies it could not send at once (see
// ChannelOptions::max_outbox_bytes).
struct SendCounters {
  uint64_t deferred = 0;          // segments queued because the peer's queue was full
  uint64_t replies_dropped = 0;   // answers never sent: the peer's queue was full, or its session was being ended
  uint64_t sessions_dropped = 0;  // sessions ended because the peer did not read its replies
  uint64_t errors_suppressed = 0; // plain ERRORs not sent: over the rate, or larger than what they answered
  uint64_t sessions_evicted = 0;  // sessions ended to make room for a verified HELLO (ChannelOptions::evict_idle_ms)
};

class Client {
 public:
  // Connects and completes the handshake (HELLO, WELCOME, then an encrypted
  // HEARTBEAT each way as key confirmation). Errors: timeout when no server
  // answers, handshake_failed when the ends disagree or the keys differ.
  // A server that ended the half-open session before its key confirmation
  // arrived (evicted to make room, PROTOCOL.md section 6.3) answers it with
  // wrong_session: connect starts over with a fresh HELLO on a new socket,
  // at most three times, all within handshake_timeout_ms.
  static Result<std::unique_ptr<Client>> connect(zmq::context_t& ctx, const std::string& endpoint,
                                                 ChannelOptions opt);
  ~Client();

  Status send(MsgType type, int32_t split, const Bundle& bundle, const Meta& meta = {},
              FrameStats* stats = nullptr);
  // Same, with explicit codec/chunking for this frame.
  Status send_with(const SendOptions& so, MsgType type, int32_t split, const Bundle& bundle,
                   const Meta& meta = {}, FrameStats* stats = nullptr);
  // Next complete frame, or the typed error that rejected one (the session
  // carries on), or timeout. timeout_ms < 0 waits forever.
  Result<Frame> recv(int timeout_ms);
  RejectCounters rejected() const {
    RejectCounters t = reader_.rejected();
    t += refused_;
    return t;
  }
  uint64_t session() const { return writer_.session(); }
  Cipher cipher() const { return writer_.cipher(); }
  zmq::socket_t& socket() { return sock_; }
  // Sends raw bytes as a segment (tests use it to inject hostile input).
  Status send_raw(Segment&& seg);
  // Ends the session: sends GOODBYE (the destructor does it too).
  void close();

 private:
  static Result<std::unique_ptr<Client>> connect_once(zmq::context_t& ctx, const std::string& endpoint,
                                                      const ChannelOptions& opt, std::chrono::steady_clock::time_point deadline,
                                                      bool* evicted);
  Client(zmq::context_t& ctx, ChannelOptions opt);
  // The answer to HELLO: a WELCOME whose MAC verifies, or the server's ERROR.
  Result<Frame> recv_welcome(const HelloKeys& hk, const uint8_t* hello_mac,
                             std::chrono::steady_clock::time_point deadline);
  bool established_ = false;
  ChannelOptions opt_;
  zmq::socket_t sock_;
  FrameWriter writer_;
  FrameReader reader_;
  RejectCounters refused_;  // messages dropped before the reader (too many parts)
  std::deque<Result<Frame>> ready_;
};

class Server {
 public:
  // Binds (e.g. "tcp://127.0.0.1:0"); endpoint() gives the bound address.
  // handshake_failed when the options hold no session secret (>= 16 bytes):
  // HELLOs are authenticated with it in plain mode too.
  static Result<std::unique_ptr<Server>> bind(zmq::context_t& ctx, const std::string& endpoint,
                                              ChannelOptions opt);
  ~Server();
  const std::string& endpoint() const { return endpoint_; }
  // The ROUTER socket, to poll with others (a middle tier's downstream);
  // read it only through recv().
  zmq::socket_t& socket() { return sock_; }

  struct Incoming {
    std::string peer;  // ZeroMQ routing id
    Frame frame;
  };
  // Next frame from any established peer. Handshakes and heartbeats are
  // answered internally; a SHUTDOWN is acknowledged and returned only when
  // it comes from a controlling session, and refused with an ERROR otherwise. Errors carry the peer in their message and in
  // last_error_peer(); the session carries on.
  Result<Incoming> recv(int timeout_ms);
  Status send(const std::string& peer, MsgType type, int32_t split, const Bundle& bundle,
              const Meta& meta = {}, FrameStats* stats = nullptr);
  // Same, with explicit codec/chunking for this frame.
  Status send_with(const std::string& peer, const SendOptions& so, MsgType type, int32_t split, const Bundle& bundle,
                   const Meta& meta = {}, FrameStats* stats = nullptr);
  Status send_error(const std::string& peer, const Error& err, int32_t split = -1);
  const std::string& last_error_peer() const { return last_error_peer_; }
  // Sessions held now; safe to read from any thread (tests and monitors
  // read it while the serving thread inserts and drops).
  size_t peers() const { return peer_count_.load(std::memory_order_relaxed); }
  RejectCounters rejected() const;
  // One session's rejections by kind; nullopt when `peer` has no session
  // (peers without one are counted in rejected() only: a stranger costs no
  // state).
  std::optional<RejectCounters> rejected_by(const std::string& peer) const;
  // Tensor bytes held for frames still in progress, over all sessions.
  uint64_t partial_frame_bytes() const;
  // Replies that could not be sent at once, and what became of them. Safe to
  // read from any thread.
  SendCounters send_counters() const;

 private:
  struct Peer {
    FrameWriter writer;
    FrameReader reader;
    bool confirmed = false;
    bool controller = false;   // role CONTROLLER at HELLO: may send SHUTDOWN
    RejectCounters refused;    // valid messages refused (e.g. SHUTDOWN from a participant)
    std::chrono::steady_clock::time_point last_seen;
    // Segments ZeroMQ could not take yet (the peer is not reading), in order.
    std::deque<Segment> outbox;
    uint64_t outbox_bytes = 0;
    std::chrono::steady_clock::time_point outbox_moved;  // last time its head left
    bool ending = false;  // over its outbox bounds: dropped at the next turn of recv()
    uint64_t hello_bytes = 0;  // its HELLO's size: a failed key confirmation is answered within it
  };
  Server(zmq::context_t& ctx, ChannelOptions opt);
  Status handle_hello(const std::string& peer, Segment& seg, uint64_t provoked_bytes);
  // Every segment to a peer goes through here: sent now if ZeroMQ takes it,
  // else queued in the peer's outbox (never waits). Errors: peer_closed,
  // limit_exceeded when the outbox is over its bounds (the session is ending).
  Status deliver(const std::string& peer, Segment&& seg);
  // Sends what outboxes hold, as far as ZeroMQ takes it; marks sessions whose
  // outbox has not moved for the partial-frame wait; drops marked sessions.
  void flush_outboxes();
  void end_slow_peer(Peer& p);
  // A plain, unauthenticated ERROR to a peer without a (confirmed) session:
  // rate-limited, never larger than the `provoked_bytes` it answers, one try.
  void send_plain_error(const std::string& peer, const Error& e, uint64_t provoked_bytes);
  // Rejection of a message from a peer with no session: counted, and
  // returned with the peer named.
  Error reject_stranger(const std::string& peer, Error e);
  void drop_peer(std::map<std::string, std::unique_ptr<Peer>>::iterator it);
  // The session table is full and a HELLO verified: frees one slot if one
  // may go (see ChannelOptions::evict_idle_ms).
  void make_room();
  // Ends idle sessions and unconfirmed handshakes, drops stalled partial frames.
  void sweep();
  std::chrono::milliseconds sweep_interval() const;
  std::chrono::steady_clock::time_point last_sweep_{};
  ChannelOptions opt_;
  zmq::socket_t sock_;
  std::string endpoint_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;
  std::atomic<size_t> peer_count_{0};  // peers_.size(), for peers() from other threads
  std::deque<Result<Incoming>> ready_;
  std::string last_error_peer_;
  RejectCounters rejected_closed_;  // counters of peers that were replaced
  RejectCounters rejected_strangers_;  // messages from peers without a session (e.g. bad HELLOs)
  HelloKeys hello_keys_;
  // MACs of recently accepted HELLOs: a replayed HELLO is refused before it
  // costs a key exchange or a slot (bounded; PROTOCOL.md §6.3).
  std::set<std::array<uint8_t, kHelloMacBytes>> hello_seen_;
  struct SeenHello {
    std::array<uint8_t, kHelloMacBytes> mac;
    int64_t ts_ms;
  };
  std::deque<SeenHello> hello_seen_order_;  // in acceptance order
  // Set once an accepted HELLO still inside the window had to be forgotten:
  // HELLOs whose ts is not newer are refused (the memory cannot vouch).
  std::optional<int64_t> hello_floor_ms_;
  Status check_hello_fresh(const Handshake& hs);
  void remember_hello(const std::array<uint8_t, kHelloMacBytes>& mac, int64_t ts_ms);
  struct AtomicSendCounters {
    std::atomic<uint64_t> deferred{0}, replies_dropped{0}, sessions_dropped{0}, errors_suppressed{0},
        sessions_evicted{0};
  } send_counters_;
  double plain_error_tokens_ = 0;
  std::chrono::steady_clock::time_point plain_error_refill_{};
};

// Hex form of a routing id, for messages.
std::string peer_name(const std::string& id);

}  // namespace tracr::protocol
