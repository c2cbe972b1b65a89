#include "protocol/channel.hpp"
#include "protocol/meta_keys.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace tracr::protocol {

namespace {

using Clock = std::chrono::steady_clock;

// Waits for input; false on timeout.
Result<bool> wait_readable(zmq::socket_t& s, int timeout_ms) {
  zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
  try {
    int n = zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    return n > 0;
  } catch (const zmq::error_t& e) {
    return make_error(Errc::transport, std::string("zmq poll: ") + e.what());
  }
}

// One ZeroMQ message, part by part: at most `max_parts` are kept and the
// rest are drained through one reusable message, their count in *dropped
// (a segment has at most header + max payload parts + seal, plus the
// ROUTER's routing id).
Result<Segment> recv_segment(zmq::socket_t& s, size_t max_parts, size_t* dropped) {
  Segment seg;
  *dropped = 0;
  try {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) return make_error(Errc::timeout, "no message");
    bool more = m.more();
    seg.push_back(std::move(m));
    zmq::message_t sink;
    while (more) {
      // The rest of a multipart message is already queued: these never wait.
      zmq::message_t& into = seg.size() < max_parts ? seg.emplace_back() : sink;
      if (!s.recv(into, zmq::recv_flags::dontwait)) break;
      more = into.more();
      if (&into == &sink) ++*dropped;
    }
  } catch (const zmq::error_t& e) {
    return make_error(Errc::transport, std::string("zmq recv: ") + e.what());
  }
  return seg;
}

size_t max_segment_parts(const Limits& lim) { return size_t{lim.max_parts} + 3; }

Error too_many_parts(size_t kept, size_t dropped) {
  return make_error(Errc::limit_exceeded, "message of " + std::to_string(kept + dropped) +
                                              " parts, above the limit of " + std::to_string(kept) +
                                              " (header, payload parts per frame, seal); dropped unread");
}

// Hands one segment to ZeroMQ. true: queued whole; false: the peer's queue
// is full and nothing of it was sent (only with `dontwait`, or a socket
// send timeout). ZeroMQ checks the high-water mark on a message's first part
// (the ROUTER's routing id), so a segment goes whole or not at all.
Result<bool> put_segment(zmq::socket_t& s, const std::string* route, Segment& seg, bool dontwait) {
  const auto wait = dontwait ? zmq::send_flags::dontwait : zmq::send_flags::none;
  try {
    size_t i = 0;
    if (route) {
      if (!s.send(zmq::buffer(*route), zmq::send_flags::sndmore | wait)) return false;
    } else if (!seg.empty()) {
      if (!s.send(seg[0], (seg.size() > 1 ? zmq::send_flags::sndmore : zmq::send_flags::none) | wait)) return false;
      i = 1;
    }
    for (; i < seg.size(); ++i) {
      auto flags = i + 1 < seg.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!s.send(seg[i], flags | wait))
        return make_error(Errc::transport, "zmq send: part " + std::to_string(i) + " of a message would block");
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH)
      return make_error(Errc::peer_closed, "peer " + (route ? peer_name(*route) : "") + " is not connected");
    return make_error(Errc::transport, std::string("zmq send: ") + e.what());
  }
  return true;
}

// The client's sends: blocking (the server's reading paces it).
Status send_segment(zmq::socket_t& s, const std::string* route, Segment&& seg) {
  auto r = put_segment(s, route, seg, false);
  if (!r) return std::move(r.error());
  if (!*r) return make_error(Errc::timeout, "zmq send: the peer's queue is full (send timeout)");
  return {};
}

uint64_t segment_bytes(const Segment& seg) {
  uint64_t n = 0;
  for (const auto& m : seg) n += m.size();
  return n;
}

// An unauthenticated plain ERROR to a peer this end has no (confirmed)
// session with (PROTOCOL.md 6.3), encoded: with its text when that keeps it
// within `budget` bytes (the size of what it answers), else with its code
// alone; nullopt when even that is larger (nothing is sent).
std::optional<Segment> plain_error(const SendOptions& so, const Error& e, uint64_t budget) {
  for (bool with_text : {true, false}) {
    FrameWriter w;
    Header eh;
    eh.type = MsgType::error;
    eh.error = with_text ? e : Error{e.code, ""};
    Segment out;
    (void)w.write(eh, {}, so, [&](Segment&& seg) {
      out = std::move(seg);
      return Status{};
    });
    if (segment_bytes(out) <= budget) return out;
  }
  return std::nullopt;
}

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

// Next queued segment; polls only when none is queued. Errc::timeout when
// nothing arrives by the deadline (timeout_ms < 0: wait forever).
Result<Segment> next_segment(zmq::socket_t& s, Clock::time_point deadline, int timeout_ms, size_t max_parts,
                             size_t* dropped) {
  while (true) {
    auto seg = recv_segment(s, max_parts, dropped);
    if (seg || seg.error().code != Errc::timeout) return seg;
    auto readable = wait_readable(s, timeout_ms < 0 ? -1 : remaining_ms(deadline));
    if (!readable) return std::move(readable.error());
    if (!*readable) return make_error(Errc::timeout, "no frame within " + std::to_string(timeout_ms) + " ms");
  }
}

}  // namespace

std::string peer_name(const std::string& id) {
  std::string s;
  for (unsigned char c : id) s += fmt::format("{:02x}", c);
  return s;
}

// ---- Client ----------------------------------------------------------------

namespace {
// ZeroMQ buffers each part of a message before we see it; ZMQ_MAXMSGSIZE
// (bytes per part) refuses a part larger than the spec allows (a header, or
// one chunk with its codec overhead and tag) before buffering it, and drops
// that connection.
int64_t max_message_bytes(const Limits& lim) { return static_cast<int64_t>(max_part_bytes(lim)); }
}  // namespace

Client::Client(zmq::context_t& ctx, ChannelOptions opt)
    : opt_(std::move(opt)), sock_(ctx, zmq::socket_type::dealer), reader_(opt_.limits, opt_.read) {
  sock_.set(zmq::sockopt::linger, 0);
  sock_.set(zmq::sockopt::maxmsgsize, max_message_bytes(opt_.limits));
}
void Client::close() {
  if (!established_) return;
  established_ = false;
  // Tells the server to end the session now rather than after its idle
  // timeout; given a moment to leave before the socket closes.
  Header bye;
  bye.type = MsgType::goodbye;
  if (writer_.write(bye, {}, opt_.send, [&](Segment&& s) { return send_segment(sock_, nullptr, std::move(s)); }))
    sock_.set(zmq::sockopt::linger, 200);
}

Client::~Client() { close(); }

Result<std::unique_ptr<Client>> Client::connect(zmq::context_t& ctx, const std::string& endpoint,
                                                ChannelOptions opt) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(opt.handshake_timeout_ms);
  for (int attempt = 1;; ++attempt) {
    bool evicted = false;
    auto c = connect_once(ctx, endpoint, opt, deadline, &evicted);
    if (c || !evicted || attempt == 3 || Clock::now() >= deadline) return c;
  }
}

Result<std::unique_ptr<Client>> Client::connect_once(zmq::context_t& ctx, const std::string& endpoint,
                                                     const ChannelOptions& opt, Clock::time_point deadline,
                                                     bool* evicted) {
  std::unique_ptr<Client> c(new Client(ctx, opt));
  try {
    c->sock_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::transport, "connect " + endpoint + ": " + e.what());
  }
  ClientHandshake hs(c->opt_.security, c->opt_.role, c->opt_.agent, c->opt_.limits.max_frame_bytes);
  auto hk = derive_hello_keys(c->opt_.security.secret);
  if (!hk) return std::move(hk.error());
  auto hello = hs.hello();
  if (!hello) return std::move(hello.error());
  auto sink = [&](Segment&& s) { return send_segment(c->sock_, nullptr, std::move(s)); };
  // HELLO: header, then its MAC (PROTOCOL.md §6.3).
  std::array<uint8_t, kHelloMacBytes> hmac{};
  TRACR_TRY(c->writer_.write(*hello, {}, c->opt_.send, [&](Segment&& s) {
    hmac = hello_mac(*hk, static_cast<const uint8_t*>(s[0].data()), s[0].size());
    s.emplace_back(hmac.data(), hmac.size());
    return send_segment(c->sock_, nullptr, std::move(s));
  }));
  auto welcome = c->recv_welcome(*hk, hmac.data(), deadline);
  if (!welcome) {
    if (welcome.error().code == Errc::timeout)
      return make_error(Errc::timeout, "no WELCOME from " + endpoint + " within " +
                                           std::to_string(c->opt_.handshake_timeout_ms) + " ms");
    return make_error(Errc::handshake_failed, "handshake with " + endpoint + ": " + welcome.error().str());
  }
  auto keys = hs.on_welcome(welcome->header);
  if (!keys) return make_error(keys.error().code, endpoint + ": " + keys.error().message);
  c->writer_.set_session(keys->session);
  c->reader_.set_session(keys->session);
  if (keys->cipher != Cipher::none) {
    TRACR_TRY(c->writer_.set_key(keys->c2s.key, keys->c2s.iv));
    TRACR_TRY(c->reader_.set_key(keys->s2c.key, keys->s2c.iv));
  } else {
    TRACR_TRY(c->writer_.set_control_key(keys->c2s.key, keys->c2s.iv));
    TRACR_TRY(c->reader_.set_control_key(keys->s2c.key, keys->s2c.iv));
  }
  // Key confirmation: one HEARTBEAT each way under the new keys.
  Header hb;
  hb.type = MsgType::heartbeat;
  TRACR_TRY(c->writer_.write(hb, {}, c->opt_.send, sink));
  auto ack = c->recv(remaining_ms(deadline));
  // The server no longer holds this half-open session (its plain ERROR).
  if (!ack && ack.error().code == Errc::remote && c->reader_.last_remote_code() == Errc::wrong_session)
    *evicted = true;
  if (!ack || ack->header.type != MsgType::heartbeat)
    return make_error(Errc::handshake_failed,
                      "key confirmation with " + endpoint + " failed: " +
                          (ack ? "unexpected " + std::string(msg_type_name(ack->header.type))
                               : ack.error().str()) +
                          " (do both ends hold the same session secret?)");
  c->established_ = true;
  return c;
}

Result<Frame> Client::recv_welcome(const HelloKeys& hk, const uint8_t* hello_mac_bytes,
                                   Clock::time_point deadline) {
  size_t dropped = 0;
  auto seg = next_segment(sock_, deadline, opt_.handshake_timeout_ms, max_segment_parts(opt_.limits), &dropped);
  if (!seg) return std::move(seg.error());
  if (dropped) {
    refused_.add(Errc::limit_exceeded);
    return too_many_parts(seg->size(), dropped);
  }
  bool authentic = false;
  if (seg->size() == 2 && (*seg)[1].size() == kHelloMacBytes) {
    auto want = welcome_mac(hk, static_cast<const uint8_t*>((*seg)[0].data()), (*seg)[0].size(), hello_mac_bytes);
    if (!ct_equal(want.data(), static_cast<const uint8_t*>((*seg)[1].data()), want.size()))
      return make_error(Errc::handshake_failed,
                        "the WELCOME's MAC does not verify (do both ends hold the same session secret?)");
    authentic = true;
    seg->pop_back();
  }
  auto outs = reader_.feed(*seg);
  if (outs.empty()) return make_error(Errc::handshake_failed, "the server's answer to HELLO is incomplete");
  for (size_t i = 1; i < outs.size(); ++i) ready_.push_back(std::move(outs[i]));
  // An ERROR answering a HELLO is unauthenticated (the server may not know
  // this end): it only explains the failure.
  if (outs[0] && outs[0]->header.type == MsgType::welcome && !authentic)
    return make_error(Errc::handshake_failed, "the WELCOME carries no MAC part (PROTOCOL.md section 6.3)");
  return std::move(outs[0]);
}

Status Client::send_raw(Segment&& seg) { return send_segment(sock_, nullptr, std::move(seg)); }

Status Client::send(MsgType type, int32_t split, const Bundle& bundle, const Meta& meta,
                    FrameStats* stats) {
  return send_with(opt_.send, type, split, bundle, meta, stats);
}

Status Client::send_with(const SendOptions& so, MsgType type, int32_t split, const Bundle& bundle,
                         const Meta& meta, FrameStats* stats) {
  Header h;
  h.type = type;
  h.split = split;
  h.meta = meta;
  return writer_.write(std::move(h), bundle, so,
                       [&](Segment&& s) { return send_segment(sock_, nullptr, std::move(s)); }, stats);
}

Result<Frame> Client::recv(int timeout_ms) {
  const auto deadline = timeout_ms < 0 ? Clock::time_point::max()
                                       : Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (!ready_.empty()) {
      auto r = std::move(ready_.front());
      ready_.pop_front();
      return r;
    }
    size_t dropped = 0;
    auto seg = next_segment(sock_, deadline, timeout_ms, max_segment_parts(opt_.limits), &dropped);
    if (!seg) return std::move(seg.error());
    if (dropped) {
      refused_.add(Errc::limit_exceeded);
      return too_many_parts(seg->size(), dropped);
    }
    for (auto& r : reader_.feed(*seg)) ready_.push_back(std::move(r));
  }
}

// ---- Server ----------------------------------------------------------------

Server::Server(zmq::context_t& ctx, ChannelOptions opt)
    : opt_(std::move(opt)), sock_(ctx, zmq::socket_type::router) {
  sock_.set(zmq::sockopt::linger, 0);
  sock_.set(zmq::sockopt::router_mandatory, 1);
  sock_.set(zmq::sockopt::maxmsgsize, max_message_bytes(opt_.limits));
}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::bind(zmq::context_t& ctx, const std::string& endpoint,
                                             ChannelOptions opt) {
  auto hk = derive_hello_keys(opt.security.secret);
  if (!hk) return make_error(hk.error().code, "server: " + hk.error().message);
  std::unique_ptr<Server> s(new Server(ctx, std::move(opt)));
  s->hello_keys_ = *hk;
  try {
    s->sock_.bind(endpoint);
    s->endpoint_ = s->sock_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::transport, "bind " + endpoint + ": " + e.what());
  }
  return s;
}

RejectCounters Server::rejected() const {
  RejectCounters t = rejected_closed_;
  t += rejected_strangers_;
  for (const auto& [id, p] : peers_) {
    t += p->reader.rejected();
    t += p->refused;
  }
  return t;
}

Error Server::reject_stranger(const std::string& peer, Error e) {
  rejected_strangers_.add(e.code);
  e.message = "peer " + peer_name(peer) + ": " + e.message;
  return e;
}

Status Server::check_hello_fresh(const Handshake& hs) {
  // The texts are short: a plain ERROR is never larger than the HELLO it answers (6.3).
  if (!hs.ts_ms) return make_error(Errc::handshake_failed, "HELLO has no timestamp 'ts' (PROTOCOL.md 6.3)");
  const int64_t now = hello_clock_ms(opt_.security);
  const uint64_t ts = *hs.ts_ms;
  const uint64_t window = static_cast<uint64_t>(std::max(opt_.hello_window_ms, 0));
  const uint64_t now_u = static_cast<uint64_t>(std::max<int64_t>(now, 0));
  const uint64_t off = ts > now_u ? ts - now_u : now_u - ts;
  if (off > window)
    return make_error(Errc::replay, fmt::format("HELLO ts {:.1f} s {} the server's clock (window +-{} s)",
                                                static_cast<double>(off) / 1000.0, ts > now_u ? "ahead of" : "behind",
                                                window / 1000));
  if (hello_floor_ms_ && static_cast<int64_t>(ts) <= *hello_floor_ms_)
    return make_error(Errc::replay, "HELLO no newer than one the server had to forget (replay memory full)");
  return {};
}

void Server::remember_hello(const std::array<uint8_t, kHelloMacBytes>& mac, int64_t ts_ms) {
  // What has left the window is refused by its timestamp: forget it freely.
  const int64_t oldest = hello_clock_ms(opt_.security) - std::max(opt_.hello_window_ms, 0);
  while (!hello_seen_order_.empty() && hello_seen_order_.front().ts_ms < oldest) {
    hello_seen_.erase(hello_seen_order_.front().mac);
    hello_seen_order_.pop_front();
  }
  hello_seen_.insert(mac);
  hello_seen_order_.push_back({mac, ts_ms});
  while (hello_seen_order_.size() > std::max<size_t>(opt_.hello_replay_memory, 1)) {
    const auto& f = hello_seen_order_.front();
    hello_floor_ms_ = std::max(hello_floor_ms_.value_or(f.ts_ms), f.ts_ms);
    hello_seen_.erase(f.mac);
    hello_seen_order_.pop_front();
  }
}

Status Server::handle_hello(const std::string& peer, Segment& seg, uint64_t provoked_bytes) {
  auto refuse = [&](Error e) {
    // Unauthenticated (this end cannot know the peer): a typed reason, no
    // larger than the HELLO it answers.
    send_plain_error(peer, e, provoked_bytes);
    return reject_stranger(peer, std::move(e));
  };
  // The MAC first: nothing else is spent on a peer without the secret.
  if (seg.size() != 2 || seg[1].size() != kHelloMacBytes)
    return refuse(make_error(Errc::auth_failed,
                             "HELLO must be 2 parts, its header then a 32-byte MAC (PROTOCOL.md section 6.3); got " +
                                 std::to_string(seg.size()) + " parts"));
  std::array<uint8_t, kHelloMacBytes> mac{};
  std::memcpy(mac.data(), seg[1].data(), mac.size());
  const auto want = hello_mac(hello_keys_, static_cast<const uint8_t*>(seg[0].data()), seg[0].size());
  if (!ct_equal(want.data(), mac.data(), mac.size()))
    return refuse(make_error(Errc::auth_failed,
                             "HELLO MAC does not verify: the peer does not hold this server's session secret"));
  if (hello_seen_.count(mac))
    return refuse(make_error(Errc::replay, "HELLO was already used (replayed)"));
  seg.pop_back();
  // A HELLO is never encrypted: decode it with a fresh reader.
  FrameReader r(opt_.limits);
  auto outs = r.feed(seg);
  if (outs.size() != 1 || !outs[0])
    return refuse(outs.empty() ? make_error(Errc::handshake_failed, "incomplete HELLO") : Error(outs.back().error()));
  if (outs[0]->header.hs)
    if (auto fresh = check_hello_fresh(*outs[0]->header.hs); !fresh) return refuse(fresh.error());
  if (!peers_.count(peer) && static_cast<int>(peers_.size()) >= opt_.max_peers) make_room();
  if (!peers_.count(peer) && static_cast<int>(peers_.size()) >= opt_.max_peers)
    return refuse(make_error(Errc::limit_exceeded, "this server holds its limit of " +
                                                       std::to_string(opt_.max_peers) + " sessions; try later"));
  auto acc = server_accept(opt_.security, outs[0]->header, opt_.agent, opt_.limits.max_frame_bytes);
  if (!acc) return refuse(acc.error());
  // Remembered only once accepted, so a bounded set holds real HELLOs.
  remember_hello(mac, static_cast<int64_t>(*outs[0]->header.hs->ts_ms));
  auto p = std::make_unique<Peer>();
  p->reader = FrameReader(opt_.limits, opt_.read);
  p->writer.set_session(acc->keys.session);
  p->reader.set_session(acc->keys.session);
  // WELCOME: header, then a MAC bound to this HELLO's. One try: a peer
  // whose queue is already full gets no session.
  TRACR_TRY(p->writer.write(acc->welcome, {}, opt_.send, [&](Segment&& s) -> Status {
    auto wm = welcome_mac(hello_keys_, static_cast<const uint8_t*>(s[0].data()), s[0].size(), mac.data());
    s.emplace_back(wm.data(), wm.size());
    auto sent = put_segment(sock_, &peer, s, true);
    if (!sent) return std::move(sent.error());
    if (!*sent) {
      ++send_counters_.replies_dropped;
      return make_error(Errc::limit_exceeded, "peer " + peer_name(peer) +
                                                  ": its queue is full (it does not read); WELCOME dropped, no session");
    }
    return {};
  }));
  if (acc->keys.cipher != Cipher::none) {
    TRACR_TRY(p->writer.set_key(acc->keys.s2c.key, acc->keys.s2c.iv));
    TRACR_TRY(p->reader.set_key(acc->keys.c2s.key, acc->keys.c2s.iv));
  } else {
    TRACR_TRY(p->writer.set_control_key(acc->keys.s2c.key, acc->keys.s2c.iv));
    TRACR_TRY(p->reader.set_control_key(acc->keys.c2s.key, acc->keys.c2s.iv));
  }
  p->controller = outs[0]->header.hs->role == kControllerRole;
  p->hello_bytes = provoked_bytes;
  p->last_seen = Clock::now();
  drop_peer(peers_.find(peer));  // a HELLO on a known routing id restarts its session
  peers_[peer] = std::move(p);
  peer_count_ = peers_.size();
  return {};
}

Result<Server::Incoming> Server::recv(int timeout_ms) {
  const auto deadline = timeout_ms < 0 ? Clock::time_point::max()
                                       : Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    // Idle sessions, stalled partial frames and unconfirmed handshakes end
    // here, with or without traffic: a peer whose session ended is told to
    // reconnect below, never silently dropped.
    sweep();
    flush_outboxes();
    if (!ready_.empty()) {
      auto r = std::move(ready_.front());
      ready_.pop_front();
      return r;
    }
    // Wait in slices so that the sweep runs while nothing arrives, and
    // outboxes are retried often while any holds something.
    bool queued = false;
    for (const auto& [id, p] : peers_) queued = queued || !p->outbox.empty();
    const auto slice_end =
        std::min(deadline, Clock::now() + (queued ? std::chrono::milliseconds(5) : sweep_interval()));
    size_t dropped = 0;
    auto segr = next_segment(sock_, slice_end, remaining_ms(slice_end), max_segment_parts(opt_.limits), &dropped);
    if (!segr) {
      if (segr.error().code != Errc::timeout) return std::move(segr.error());
      if (Clock::now() < deadline) continue;
      return make_error(Errc::timeout, "no frame within " + std::to_string(timeout_ms) + " ms");
    }
    Segment& seg = *segr;
    if (seg.size() < 2) continue;  // ROUTER always prepends the routing id
    std::string peer(static_cast<const char*>(seg[0].data()), seg[0].size());
    seg.erase(seg.begin());
    const uint64_t provoked = segment_bytes(seg);  // no plain answer is larger
    last_error_peer_ = peer;
    auto it = peers_.find(peer);
    if (dropped) {
      // Never decoded: the cap held what this end keeps of it.
      Error e = too_many_parts(seg.size() + 1, dropped);
      if (it != peers_.end()) {
        it->second->refused.add(e.code);
        if (it->second->confirmed) (void)send_error(peer, e);
        e.message = "peer " + peer_name(peer) + ": " + e.message;
        return e;
      }
      return reject_stranger(peer, std::move(e));
    }
    // HELLO from an unknown peer starts its session; a known peer's HELLO,
    // confirmed or not, starts it over (PROTOCOL.md 6.1, 8): it passes the
    // same checks (MAC, replay) and the old session ends only when the new
    // one is accepted. A HELLO is 2 parts, the second 32 bytes; nothing
    // else on a session is (a sealed message's second part is a payload
    // part or its 16-byte seal), so only such segments are decoded here.
    const bool hello_shaped = seg.size() == 2 && seg[1].size() == kHelloMacBytes;
    if (it == peers_.end() || !it->second->confirmed || hello_shaped) {
      auto h = decode_header(static_cast<const uint8_t*>(seg[0].data()), seg[0].size(), opt_.limits);
      if (h && h->type == MsgType::hello && h->seg == 0) {
        auto st = handle_hello(peer, seg, provoked);
        if (!st) return std::move(st.error());
        continue;
      }
      if (!h && it == peers_.end()) {
        // A header that does not decode, from a peer without a session (a
        // malformed HELLO, most likely): its own error (PROTOCOL.md 6.3
        // step 0), not wrong_session.
        send_plain_error(peer, h.error(), provoked);
        return reject_stranger(peer, std::move(h.error()));
      }
    }
    if (it == peers_.end()) {
      // Most likely this server restarted under a live participant: tell it
      // (unauthenticated, since there are no keys) instead of leaving it waiting.
      send_plain_error(peer,
                       make_error(Errc::wrong_session, "this server has no session with you (it may have "
                                                       "restarted); reconnect with HELLO"),
                       provoked);
      return reject_stranger(peer, make_error(Errc::unexpected_message, "sent a frame before HELLO; told it to reconnect"));
    }
    Peer& p = *it->second;
    bool gone = false;
    for (auto& r : p.reader.feed(seg)) {
      if (!r) {
        // Tell the participant at once (over its authenticated session)
        // rather than leave it waiting for a reply that will never come.
        if (p.confirmed) {
          Header eh;
          eh.type = MsgType::error;
          eh.error = r.error();
          if (r.error().frame_seq != 0) eh.meta[meta_key::kReqSeq] = static_cast<int64_t>(r.error().frame_seq);
          (void)p.writer.write(eh, {}, opt_.send, [&](Segment&& s) { return deliver(peer, std::move(s)); });
        } else {
          // Key confirmation failed (PROTOCOL.md 6.1): the peer's keys do not
          // match ours, so it could not verify a sealed answer; a plain one
          // tells it why instead of leaving it to time out.
          Error why = r.error();
          why.message = "key confirmation failed: " + why.message;
          send_plain_error(peer, why, provoked + p.hello_bytes);
        }
        Error e = std::move(r.error());
        e.message = "peer " + peer_name(peer) + ": " + e.message;
        ready_.push_back(std::move(e));
        continue;
      }
      if (r->header.type == MsgType::goodbye) {
        gone = true;  // an authenticated goodbye ends the session, confirmed or not (PROTOCOL.md 3.2)
        break;
      }
      auto reply = [&](Header h) {
        return p.writer.write(std::move(h), {}, opt_.send, [&](Segment&& s) { return deliver(peer, std::move(s)); });
      };
      if (!p.confirmed && r->header.type != MsgType::heartbeat) {
        // Before key confirmation nothing is served and the handshake clock
        // keeps running from the HELLO (PROTOCOL.md 6.1): on a plain session
        // a data frame passes its checks without any key, so serving it
        // would serve whoever replayed a HELLO.
        Error e = make_error(Errc::unexpected_message,
                             std::string(msg_type_name(r->header.type)) +
                                 " before key confirmation: nothing is served until the session's key-confirming "
                                 "HEARTBEAT (PROTOCOL.md 6.1)");
        e.frame_seq = r->header.seq;
        p.refused.add(e.code);
        Header ans;
        ans.type = MsgType::error;
        ans.error = e;
        ans.meta[meta_key::kReqSeq] = static_cast<int64_t>(r->header.seq);
        (void)reply(ans);
        e.message = "peer " + peer_name(peer) + ": " + e.message;
        ready_.push_back(std::move(e));
        continue;
      }
      p.last_seen = Clock::now();
      if (r->header.type == MsgType::heartbeat) {
        p.confirmed = true;
        Header hb;
        hb.type = MsgType::heartbeat;
        (void)reply(hb);  // a reply that cannot go is counted in send_counters()
        continue;
      }
      if (r->header.type == MsgType::shutdown) {
        // Only a controlling session may stop the server (PROTOCOL.md 3.3);
        // either way the sender hears the outcome.
        Header ans;
        if (!p.confirmed || !p.controller) {
          Error e = make_error(Errc::unexpected_message,
                               std::string("SHUTDOWN is accepted only from a confirmed controlling session (role '") +
                                   kControllerRole + "' in its HELLO); this session is not one");
          p.refused.add(e.code);
          ans.type = MsgType::error;
          ans.error = e;
          (void)reply(ans);
          e.message = "peer " + peer_name(peer) + ": " + e.message;
          ready_.push_back(std::move(e));
          continue;
        }
        ans.type = MsgType::shutdown;  // the acknowledgement
        (void)reply(ans);
      }
      ready_.push_back(Incoming{peer, std::move(*r)});
    }
    if (gone) drop_peer(peers_.find(peer));
  }
}

void Server::make_room() {
  // 1. Peers that never confirmed their keys in time.
  const auto now = Clock::now();
  const auto stale = now - std::chrono::milliseconds(opt_.handshake_timeout_ms);
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto next = std::next(it);
    if (!it->second->confirmed && it->second->last_seen < stale) drop_peer(it);
    it = next;
  }
  if (static_cast<int>(peers_.size()) < opt_.max_peers) return;
  // 2. The oldest unconfirmed session: a replayed HELLO's slot can never be
  // confirmed, a participant's is within one round trip.
  // 3. Else the confirmed session idle longest, once idle for evict_idle_ms
  // (peers that vanished without GOODBYE do not lock others out).
  auto oldest_unconfirmed = peers_.end(), most_idle = peers_.end();
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    auto& best = it->second->confirmed ? most_idle : oldest_unconfirmed;
    if (best == peers_.end() || it->second->last_seen < best->second->last_seen) best = it;
  }
  if (oldest_unconfirmed != peers_.end()) {
    drop_peer(oldest_unconfirmed);
    ++send_counters_.sessions_evicted;
  } else if (most_idle != peers_.end() &&
             most_idle->second->last_seen < now - std::chrono::milliseconds(opt_.evict_idle_ms)) {
    drop_peer(most_idle);
    ++send_counters_.sessions_evicted;
  }
}

void Server::drop_peer(std::map<std::string, std::unique_ptr<Peer>>::iterator it) {
  if (it == peers_.end()) return;
  rejected_closed_ += it->second->reader.rejected();
  rejected_closed_ += it->second->refused;
  peers_.erase(it);
  peer_count_ = peers_.size();
}

std::chrono::milliseconds Server::sweep_interval() const {
  // Often enough for the shortest of the limits it enforces; at most 1 s.
  const int shortest = std::min({opt_.session_idle_ms, opt_.partial_frame_timeout_ms, opt_.handshake_timeout_ms});
  return std::chrono::milliseconds(std::clamp(shortest / 4, 10, 1000));
}

void Server::sweep() {
  const auto now = Clock::now();
  if (now - last_sweep_ < sweep_interval()) return;
  last_sweep_ = now;
  const auto idle = now - std::chrono::milliseconds(opt_.session_idle_ms);
  const auto stalled = now - std::chrono::milliseconds(opt_.partial_frame_timeout_ms);
  const auto unconfirmed = now - std::chrono::milliseconds(opt_.handshake_timeout_ms);
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto next = std::next(it);
    Peer& p = *it->second;
    if (p.confirmed ? p.last_seen < idle : p.last_seen < unconfirmed) {
      drop_peer(it);  // frees its partial frame with it
    } else if (auto e = p.reader.abandon_stale(stalled)) {
      if (p.confirmed) (void)send_error(it->first, *e);
      e->message = "peer " + peer_name(it->first) + ": " + e->message;
      ready_.push_back(std::move(*e));
    }
    it = next;
  }
}

std::optional<RejectCounters> Server::rejected_by(const std::string& peer) const {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  RejectCounters t = it->second->reader.rejected();
  t += it->second->refused;
  return t;
}

uint64_t Server::partial_frame_bytes() const {
  uint64_t n = 0;
  for (const auto& [id, p] : peers_) n += p->reader.pending_bytes();
  return n;
}

Status Server::send(const std::string& peer, MsgType type, int32_t split, const Bundle& bundle,
                    const Meta& meta, FrameStats* stats) {
  return send_with(peer, opt_.send, type, split, bundle, meta, stats);
}

Status Server::send_with(const std::string& peer, const SendOptions& so, MsgType type, int32_t split,
                         const Bundle& bundle, const Meta& meta, FrameStats* stats) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return make_error(Errc::peer_closed, "no session with peer " + peer_name(peer));
  Header h;
  h.type = type;
  h.split = split;
  h.meta = meta;
  return it->second->writer.write(
      std::move(h), bundle, so,
      [&](Segment&& s) { return deliver(peer, std::move(s)); }, stats);
}

Status Server::send_error(const std::string& peer, const Error& err, int32_t split) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return make_error(Errc::peer_closed, "no session with peer " + peer_name(peer));
  Header h;
  h.type = MsgType::error;
  h.split = split;
  h.error = err;
  if (err.frame_seq != 0) h.meta[meta_key::kReqSeq] = static_cast<int64_t>(err.frame_seq);
  return it->second->writer.write(
      std::move(h), {}, opt_.send, [&](Segment&& s) { return deliver(peer, std::move(s)); });
}

SendCounters Server::send_counters() const {
  SendCounters c;
  c.deferred = send_counters_.deferred;
  c.replies_dropped = send_counters_.replies_dropped;
  c.sessions_dropped = send_counters_.sessions_dropped;
  c.errors_suppressed = send_counters_.errors_suppressed;
  c.sessions_evicted = send_counters_.sessions_evicted;
  return c;
}

Status Server::deliver(const std::string& peer, Segment&& seg) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return make_error(Errc::peer_closed, "no session with peer " + peer_name(peer));
  Peer& p = *it->second;
  if (p.ending) {
    ++send_counters_.replies_dropped;
    return make_error(Errc::peer_closed, "peer " + peer_name(peer) + ": its session is ending (it does not read)");
  }
  if (p.outbox.empty()) {
    auto sent = put_segment(sock_, &peer, seg, true);
    if (!sent) return std::move(sent.error());
    if (*sent) return {};
    p.outbox_moved = Clock::now();
  }
  const uint64_t n = segment_bytes(seg);
  const uint64_t max_bytes = opt_.max_outbox_bytes ? opt_.max_outbox_bytes : opt_.limits.max_frame_bytes + (16u << 20);
  const size_t max_segs = opt_.max_outbox_segments ? opt_.max_outbox_segments : size_t{opt_.limits.max_parts} + 1024;
  if (p.outbox.size() + 1 > max_segs || p.outbox_bytes + n > max_bytes) {
    const std::string why = "peer " + peer_name(peer) + " does not read its replies: " +
                            std::to_string(p.outbox.size()) + " segments (" + std::to_string(p.outbox_bytes) +
                            " bytes) wait for it; its session is ended";
    ++send_counters_.replies_dropped;
    end_slow_peer(p);
    return make_error(Errc::limit_exceeded, why);
  }
  p.outbox.push_back(std::move(seg));
  p.outbox_bytes += n;
  ++send_counters_.deferred;
  return {};
}

void Server::end_slow_peer(Peer& p) {
  if (p.ending) return;
  p.ending = true;
  ++send_counters_.sessions_dropped;
  send_counters_.replies_dropped += p.outbox.size();
  p.outbox.clear();
  p.outbox_bytes = 0;
}

void Server::flush_outboxes() {
  const auto now = Clock::now();
  const auto stuck = now - std::chrono::milliseconds(opt_.partial_frame_timeout_ms);
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto next = std::next(it);
    Peer& p = *it->second;
    while (!p.outbox.empty()) {
      auto sent = put_segment(sock_, &it->first, p.outbox.front(), true);
      if (!sent) {  // the peer is gone: what waited for it goes with its session
        end_slow_peer(p);
        break;
      }
      if (!*sent) {
        if (p.outbox_moved < stuck) end_slow_peer(p);
        break;
      }
      p.outbox_bytes -= segment_bytes(p.outbox.front());
      p.outbox.pop_front();
      p.outbox_moved = now;
    }
    if (p.ending) {
      Error e = make_error(Errc::limit_exceeded, "peer " + peer_name(it->first) +
                                                     ": session ended: it does not read its replies (none left for " +
                                                     std::to_string(opt_.partial_frame_timeout_ms) +
                                                     " ms, or more waited than its outbox holds)");
      drop_peer(it);
      ready_.push_back(std::move(e));
    }
    it = next;
  }
}

void Server::send_plain_error(const std::string& peer, const Error& e, uint64_t provoked_bytes) {
  // A bucket of plain_errors_per_s tokens, refilled continuously.
  const auto now = Clock::now();
  const double rate = std::max(1, opt_.plain_errors_per_s);
  const double since = std::chrono::duration<double>(now - plain_error_refill_).count();
  plain_error_tokens_ = std::min(rate, plain_error_tokens_ + since * rate);
  plain_error_refill_ = now;
  if (plain_error_tokens_ < 1) {
    ++send_counters_.errors_suppressed;
    return;
  }
  auto seg = plain_error(opt_.send, e, provoked_bytes);
  if (!seg) {
    ++send_counters_.errors_suppressed;
    return;
  }
  plain_error_tokens_ -= 1;
  auto sent = put_segment(sock_, &peer, *seg, true);
  if (sent && !*sent) ++send_counters_.replies_dropped;
}


}  // namespace tracr::protocol
