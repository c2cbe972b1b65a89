// Hostile peers on real sockets (tcp://127.0.0.1): what an untrusted peer
// can make a Server spend, and what legitimate participants still get.
#include <sys/mman.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <atomic>
#include <thread>

#include "frame_fixture.hpp"
#include "protocol/channel.hpp"

using namespace tracr;
using namespace tracr::protocol;
using namespace tracr::protocol::testing;

namespace {

using Clock = std::chrono::steady_clock;

ChannelOptions hostile_options(bool encrypt, uint8_t secret_byte = 7) {
  ChannelOptions o;
  o.security.encrypt = encrypt;
  o.security.secret.assign(32, secret_byte);
  o.handshake_timeout_ms = 2000;
  return o;
}

// Serves from one thread: answers INFER_REQUEST with an empty INFER_RESULT.
struct Serving {
  std::unique_ptr<Server> server;
  std::thread th;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> shutdowns{0};  // SHUTDOWNs the server handed to its application
  std::atomic<uint64_t> served{0};     // INFER_REQUESTs the server handed to its application
  std::string last_peer;               // read after join()
  Serving(zmq::context_t& ctx, ChannelOptions o) {
    auto s = Server::bind(ctx, "tcp://127.0.0.1:0", std::move(o));
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
    th = std::thread([this] {
      while (!stop) {
        auto in = server->recv(20);
        if (!in) {
          if (in.error().code != Errc::timeout) ++errors;
          continue;
        }
        last_peer = in->peer;
        if (in->frame.header.type == MsgType::shutdown) ++shutdowns;
        if (in->frame.header.type == MsgType::infer_request) {
          ++served;
          (void)server->send(in->peer, MsgType::infer_result, in->frame.header.split, {});
        }
      }
    });
  }
  void join() {
    stop = true;
    if (th.joinable()) th.join();
  }
  ~Serving() { join(); }
};

void send_segment_raw(zmq::socket_t& s, Segment&& seg) {
  for (size_t i = 0; i < seg.size(); ++i)
    s.send(seg[i], i + 1 < seg.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

// A raw DEALER connected to `ep`, as a stranger (or an attacker) holds one.
zmq::socket_t stranger_socket(zmq::context_t& ctx, const std::string& ep, int rcvtimeo_ms = -1) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, rcvtimeo_ms);
  s.connect(ep);
  return s;
}

// The HEARTBEAT segment `w` writes next (sealed with w's keys, if any).
Segment heartbeat_segment(FrameWriter& w) {
  Header hb;
  hb.type = MsgType::heartbeat;
  Segment seg;
  (void)w.write(hb, {}, {}, [&](Segment&& x) {
    seg = std::move(x);
    return Status{};
  });
  return seg;
}

// The same from a writer without a session, padded with a second part of
// 512 bytes: large enough to deserve a plain answer.
Segment padded_heartbeat(FrameWriter& w) {
  Segment seg = heartbeat_segment(w);
  seg.emplace_back(512);
  return seg;
}

// A HELLO segment as Client::connect sends it, its MAC made with `mac_secret`
// (no MAC part when it is empty).
// `clock` dates it (empty: the system clock); `undated` drops its `ts`.
Segment hello_segment(bool encrypt, const std::vector<uint8_t>& mac_secret,
                      std::function<int64_t()> clock = {}, bool undated = false) {
  Security sec;
  sec.encrypt = encrypt;
  sec.secret.assign(32, 0x55);
  sec.clock = std::move(clock);
  ClientHandshake hs(sec, "PARTICIPANT", "hostile", 1u << 20);
  auto h = hs.hello();
  EXPECT_TRUE(h.ok());
  if (undated) h->hs->ts_ms.reset();
  Segment out;
  FrameWriter w;
  (void)w.write(*h, {}, {}, [&](Segment&& seg) {
    out = std::move(seg);
    return Status{};
  });
  if (!mac_secret.empty()) {
    auto hk = derive_hello_keys(mac_secret);
    EXPECT_TRUE(hk.ok());
    auto mac = hello_mac(*hk, static_cast<const uint8_t*>(out[0].data()), out[0].size());
    out.emplace_back(mac.data(), mac.size());
  }
  return out;
}

// A stranger who does not hold the session secret: sends well-formed HELLOs
// (a fresh connection, so a fresh routing id, for each) at `per_sec`, with a
// MAC made under a wrong secret or with none.
struct HelloFlood {
  std::thread th;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  HelloFlood(zmq::context_t& ctx, const std::string& ep, int per_sec, bool encrypt, bool with_mac) {
    th = std::thread([&ctx, ep, per_sec, encrypt, with_mac, this] {
      const auto period = std::chrono::microseconds(1000000 / per_sec);
      auto next = Clock::now();
      const std::vector<uint8_t> wrong = with_mac ? std::vector<uint8_t>(32, 0x55) : std::vector<uint8_t>{};
      while (!stop) {
        zmq::socket_t s(ctx, zmq::socket_type::dealer);
        s.set(zmq::sockopt::linger, 500);
        s.connect(ep);
        send_segment_raw(s, hello_segment(encrypt, wrong));
        ++sent;
        next += period;
        std::this_thread::sleep_until(next);
      }
    });
  }
  void finish() {
    stop = true;
    if (th.joinable()) th.join();
  }
  ~HelloFlood() { finish(); }
};

// 300 unauthenticated HELLOs per second while a participant that holds the
// secret connects 20 times: every one of its handshakes must succeed.
void flood_then_connect(bool encrypt, bool flood_with_mac) {
  zmq::context_t ctx;
  ChannelOptions so = hostile_options(encrypt);
  so.max_peers = 64;
  Serving srv(ctx, so);
  HelloFlood flood(ctx, srv.server->endpoint(), 300, encrypt, flood_with_mac);
  while (flood.sent < 150) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ChannelOptions co = hostile_options(encrypt);
  co.handshake_timeout_ms = 1000;
  int ok = 0;
  std::string last_error;
  for (int i = 0; i < 20; ++i) {
    auto c = Client::connect(ctx, srv.server->endpoint(), co);
    if (c.ok()) {
      ++ok;
      ASSERT_TRUE((*c)->send(MsgType::infer_request, 1, {}).ok());
      auto r = (*c)->recv(2000);
      ASSERT_TRUE(r.ok()) << r.error().str();
      EXPECT_EQ(r->header.type, MsgType::infer_result);
    } else {
      last_error = c.error().str();
    }
    // Spread the connections over the flood (pacing only; nothing is timed).
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  flood.finish();
  const uint64_t flooded = flood.sent;
  std::printf("[ flood ] %s: %d of 20 legitimate handshakes succeeded under %llu unauthenticated HELLOs\n",
              encrypt ? "aes-256-gcm" : "plain", ok, static_cast<unsigned long long>(flooded));
  EXPECT_EQ(ok, 20) << last_error;
  EXPECT_GT(flooded, 150u);
  // Drain what is still queued, then look at what the flood cost.
  srv.join();
  while (srv.server->recv(300).error().code != Errc::timeout) {
  }
  const RejectCounters rc = srv.server->rejected();
  std::printf("[ flood ] rejected as auth_failed: %llu, sessions held: %zu\n",
              static_cast<unsigned long long>(rc.auth_failed), srv.server->peers());
  EXPECT_GE(rc.auth_failed * 100, flooded * 95);  // a few may be lost when their socket closes
  EXPECT_LE(rc.auth_failed, flooded);
  EXPECT_EQ(srv.server->peers(), 0u);  // no slot to any stranger; the participants said GOODBYE
}

}  // namespace

TEST(Hostile, HelloFloodWithWrongSecretDoesNotLockOutParticipantsEncrypted) { flood_then_connect(true, true); }
TEST(Hostile, HelloFloodWithoutMacDoesNotLockOutParticipantsPlain) { flood_then_connect(false, false); }

TEST(Hostile, StrangersHelloGetsTypedErrorAndNoSession) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(true));
  for (bool with_mac : {false, true}) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect(srv.server->endpoint());
    send_segment_raw(s, hello_segment(true, with_mac ? std::vector<uint8_t>(32, 0x55) : std::vector<uint8_t>{}));
    s.set(zmq::sockopt::rcvtimeo, 3000);
    Segment reply;
    ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)).has_value());
    FrameReader r;
    auto outs = r.feed(reply);
    ASSERT_EQ(outs.size(), 1u);
    ASSERT_TRUE(outs[0].ok()) << outs[0].error().str();
    ASSERT_EQ(outs[0]->header.type, MsgType::error);
    EXPECT_EQ(outs[0]->header.error->code, Errc::auth_failed) << outs[0]->header.error->str();
    EXPECT_LE(reply[0].size(), 300u);  // no amplification: about the size of a HELLO
  }
  srv.join();
  EXPECT_EQ(srv.server->peers(), 0u);
  EXPECT_EQ(srv.server->rejected().auth_failed, 2u);
}

TEST(Hostile, ReplayedHelloIsRefused) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(false));
  Segment hello = hello_segment(false, std::vector<uint8_t>(32, 7));  // the server's secret
  std::vector<Segment> replies;
  for (int i = 0; i < 2; ++i) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 3000);
    s.connect(srv.server->endpoint());
    send_segment_raw(s, copy_segment(hello));
    Segment reply;
    ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)).has_value());
    replies.push_back(std::move(reply));
  }
  // The first is welcomed (header and MAC), the copy refused as a replay.
  ASSERT_EQ(replies[0].size(), 2u);
  FrameReader r0, r1;
  Segment w{copy_segment(replies[0])};
  w.pop_back();
  auto first = r0.feed(w);
  ASSERT_TRUE(first.at(0).ok());
  EXPECT_EQ(first[0]->header.type, MsgType::welcome);
  auto second = r1.feed(replies[1]);
  ASSERT_TRUE(second.at(0).ok());
  ASSERT_EQ(second[0]->header.type, MsgType::error);
  EXPECT_EQ(second[0]->header.error->code, Errc::replay);
  srv.join();
  EXPECT_EQ(srv.server->rejected().replay, 1u);
}

// What the server answers one HELLO on a fresh connection: its header.
Header answer_to_hello(zmq::context_t& ctx, const std::string& ep, Segment hello) {
  zmq::socket_t s = stranger_socket(ctx, ep, 3000);
  send_segment_raw(s, std::move(hello));
  Segment reply;
  EXPECT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)).has_value());
  if (reply.size() == 2 && reply[1].size() == kHelloMacBytes) reply.pop_back();  // a WELCOME's MAC
  FrameReader r;
  auto out = r.feed(reply);
  EXPECT_EQ(out.size(), 1u);
  if (out.size() != 1 || !out[0]) return Header{};
  return out[0]->header;
}


// PROTOCOL.md 6.3 "Freshness": a HELLO dated outside the server's window, or
// not dated at all, is refused before any key exchange; the server's clock
// is the one it was handed (an agent's controller clock), not the system's.
TEST(Hostile, StaleOrUndatedHelloIsRefused) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  const int64_t hour_ms = 3600 * 1000;
  o.security.clock = anchored_clock(hello_clock_ms(Security{}) - hour_ms);  // a server handed a clock an hour behind
  Serving srv(ctx, o);
  const std::string ep = srv.server->endpoint();
  const std::vector<uint8_t> key(32, 7);  // the server's secret: every MAC verifies
  // On this machine's clock, an hour ahead of the server's: refused, with the offset.
  Header ahead = answer_to_hello(ctx, ep, hello_segment(false, key));
  ASSERT_EQ(ahead.type, MsgType::error);
  EXPECT_EQ(ahead.error->code, Errc::replay);
  EXPECT_NE(ahead.error->message.find("ahead of the server's clock"), std::string::npos) << ahead.error->message;
  // Two hours behind this machine (an hour behind the server's): refused.
  Header behind = answer_to_hello(ctx, ep, hello_segment(false, key, anchored_clock(hello_clock_ms(Security{}) - 2 * hour_ms)));
  ASSERT_EQ(behind.type, MsgType::error);
  EXPECT_EQ(behind.error->code, Errc::replay);
  EXPECT_NE(behind.error->message.find("behind the server's clock"), std::string::npos) << behind.error->message;
  // No `ts` at all (a peer that predates it): refused, saying so.
  Header undated = answer_to_hello(ctx, ep, hello_segment(false, key, anchored_clock(hello_clock_ms(Security{}) - hour_ms), true));
  ASSERT_EQ(undated.type, MsgType::error);
  EXPECT_EQ(undated.error->code, Errc::handshake_failed);
  EXPECT_NE(undated.error->message.find("no timestamp 'ts'"), std::string::npos) << undated.error->message;
  // On the server's clock (both handed the same controller clock): welcomed.
  Header ok = answer_to_hello(ctx, ep, hello_segment(false, key, anchored_clock(hello_clock_ms(Security{}) - hour_ms)));
  EXPECT_EQ(ok.type, MsgType::welcome);
  srv.join();
  EXPECT_EQ(srv.server->rejected().replay, 2u);
}

// A replay the bounded memory no longer holds is still refused: once an
// accepted HELLO inside the window is forgotten, nothing dated no later than
// it is accepted (here a memory of 4, so 6 newer HELLOs push the first out).
TEST(Hostile, ReplayedHelloIsRefusedAfterTheMemoryForgetsIt) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  o.hello_replay_memory = 4;
  Serving srv(ctx, o);
  const std::string ep = srv.server->endpoint();
  const std::vector<uint8_t> key(32, 7);
  Segment first = hello_segment(false, key);
  EXPECT_EQ(answer_to_hello(ctx, ep, copy_segment(first)).type, MsgType::welcome);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // each dated after the first
    EXPECT_EQ(answer_to_hello(ctx, ep, hello_segment(false, key)).type, MsgType::welcome) << i;
  }
  Header replayed = answer_to_hello(ctx, ep, copy_segment(first));
  ASSERT_EQ(replayed.type, MsgType::error);
  EXPECT_EQ(replayed.error->code, Errc::replay);
  EXPECT_NE(replayed.error->message.find("had to forget"), std::string::npos) << replayed.error->message;
  // A fresh HELLO still gets in.
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  EXPECT_EQ(answer_to_hello(ctx, ep, hello_segment(false, key)).type, MsgType::welcome);
  srv.join();
  EXPECT_EQ(srv.server->rejected().replay, 1u);
}

TEST(Hostile, ServerWithoutSecretRefusesToBindEvenInPlainMode) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  o.security.secret.clear();
  auto s = Server::bind(ctx, "tcp://127.0.0.1:0", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::handshake_failed);
}

// ---- Plain sessions: control messages are sealed (PROTOCOL.md 5.1) --------

namespace {

// A header-only segment of `type` for `sid`, unsealed, as a stranger on the
// path could forge it (the sid travels in clear on a plain session).
Segment forged(MsgType type, uint64_t sid, uint64_t seq) {
  Header h;
  h.type = type;
  h.session = sid;
  h.seq = seq;
  if (type == MsgType::error) h.error = make_error(Errc::internal, "forged");
  std::vector<uint8_t> bytes;
  encode_header(h, bytes);
  Segment seg;
  seg.emplace_back(bytes.data(), bytes.size());
  return seg;
}

void round_trip(Client& c) {
  ASSERT_TRUE(c.send(MsgType::infer_request, 2, {}).ok());
  auto r = c.recv(3000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->header.type, MsgType::infer_result);
}

}  // namespace

TEST(Hostile, PlainSessionRefusesForgedControlMessagesAndSaysSo) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(false));
  auto c = Client::connect(ctx, srv.server->endpoint(), hostile_options(false));
  ASSERT_TRUE(c.ok()) << c.error().str();
  const uint64_t sid = (*c)->session();
  // Unsealed SHUTDOWN, GOODBYE and HEARTBEAT with the right sid and a fresh seq.
  uint64_t seq = 100;
  for (MsgType t : {MsgType::shutdown, MsgType::goodbye, MsgType::heartbeat}) {
    ASSERT_TRUE((*c)->send_raw(forged(t, sid, seq++)).ok());
    // Not silent: a sealed ERROR names the refusal.
    auto e = (*c)->recv(3000);
    ASSERT_TRUE(e.ok()) << e.error().str();
    ASSERT_EQ(e->header.type, MsgType::error);
    EXPECT_EQ(e->header.error->code, Errc::auth_failed) << e->header.error->str();
  }
  round_trip(**c);  // the session carries on
  srv.join();
  EXPECT_EQ(srv.shutdowns, 0u);
  EXPECT_EQ(srv.server->rejected().auth_failed, 3u);
  auto mine = srv.server->rejected_by(srv.last_peer);
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(mine->auth_failed, 3u);
  EXPECT_EQ(mine->total(), 3u);
  EXPECT_FALSE(srv.server->rejected_by("no such peer").has_value());
}

TEST(Hostile, ShutdownOnlyFromTheControllingSessionAndAcknowledged) {
  for (bool encrypt : {false, true}) {
    zmq::context_t ctx;
    Serving srv(ctx, hostile_options(encrypt));
    auto participant = Client::connect(ctx, srv.server->endpoint(), hostile_options(encrypt));
    ASSERT_TRUE(participant.ok()) << participant.error().str();
    ASSERT_TRUE((*participant)->send(MsgType::shutdown, -1, {}).ok());
    auto refused = (*participant)->recv(3000);
    ASSERT_TRUE(refused.ok()) << refused.error().str();
    ASSERT_EQ(refused->header.type, MsgType::error);
    EXPECT_EQ(refused->header.error->code, Errc::unexpected_message);
    EXPECT_NE(refused->header.error->message.find("CONTROLLER"), std::string::npos);
    round_trip(**participant);

    ChannelOptions co = hostile_options(encrypt);
    co.role = kControllerRole;
    auto controller = Client::connect(ctx, srv.server->endpoint(), co);
    ASSERT_TRUE(controller.ok()) << controller.error().str();
    ASSERT_TRUE((*controller)->send(MsgType::shutdown, -1, {}).ok());
    auto ack = (*controller)->recv(3000);
    ASSERT_TRUE(ack.ok()) << ack.error().str();
    EXPECT_EQ(ack->header.type, MsgType::shutdown);
    srv.join();
    EXPECT_EQ(srv.shutdowns, 1u) << (encrypt ? "encrypted" : "plain");
    EXPECT_EQ(srv.server->rejected().other, 1u);
  }
}

TEST(Hostile, PlainReaderWithControlKeyChecksSealsOnControlMessagesOnly) {
  Key256 k{};
  Iv96 iv{};
  k[0] = 1;
  FrameWriter w;
  FrameReader r;
  w.set_session(9);
  r.set_session(9);
  ASSERT_TRUE(w.set_control_key(k, iv).ok());
  ASSERT_TRUE(r.set_control_key(k, iv).ok());
  std::vector<Segment> segs;
  auto sink = [&](Segment&& s) {
    segs.push_back(std::move(s));
    return Status{};
  };
  Header hb;
  hb.type = MsgType::heartbeat;
  ASSERT_TRUE(w.write(hb, {}, {}, sink).ok());
  Header req;
  req.type = MsgType::infer_request;
  Bundle b{random_tensor("x", DType::float32, {8}, 1)};
  ASSERT_TRUE(w.write(req, b, {}, sink).ok());
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].size(), 2u);  // header and seal
  EXPECT_EQ(segs[1].size(), 2u);  // header and one payload part in clear
  EXPECT_EQ(0, std::memcmp(segs[1][1].data(), b[0].data, b[0].nbytes));
  for (auto& s : segs) {
    auto out = r.feed(s);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].ok()) << out[0].error().str();
  }
  // Replayed sealed HEARTBEAT, unsealed HEARTBEAT, unsealed ERROR, a control
  // message with a payload.
  Segment replayed = copy_segment(segs[0]);
  EXPECT_EQ(r.feed(replayed).at(0).error().code, Errc::replay);
  Segment plain_hb = forged(MsgType::heartbeat, 9, 50);
  EXPECT_EQ(r.feed(plain_hb).at(0).error().code, Errc::auth_failed);
  EXPECT_EQ(r.last_remote_code(), Errc::ok);
  Segment plain_err = forged(MsgType::error, 9, 51);
  EXPECT_EQ(r.feed(plain_err).at(0).error().code, Errc::remote);
  // The code it named is kept apart from its text (Client::connect acts on
  // wrong_session by the code, never by parsing the peer's words).
  EXPECT_EQ(r.last_remote_code(), Errc::internal);
  Header bad;
  bad.type = MsgType::goodbye;
  EXPECT_EQ(w.write(bad, b, {}, sink).error().code, Errc::invalid_argument);
}

// ---- Bounded resources -------------------------------------------------------

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// A server driven from the test's own thread, so its accessors can be read
// between calls.
std::unique_ptr<Server> bind_local(zmq::context_t& ctx, ChannelOptions o) {
  auto s = Server::bind(ctx, "tcp://127.0.0.1:0", std::move(o));
  EXPECT_TRUE(s.ok());
  return s.ok() ? std::move(*s) : nullptr;
}

// Connects while `srv` is served from this thread.
std::unique_ptr<Client> connect_served(zmq::context_t& ctx, Server& srv, const ChannelOptions& o) {
  std::unique_ptr<Client> c;
  std::atomic<bool> done{false};
  std::thread th([&] {
    auto r = Client::connect(ctx, srv.endpoint(), o);
    EXPECT_TRUE(r.ok()) << r.error().str();
    if (r.ok()) c = std::move(*r);
    done = true;
  });
  while (!done) (void)srv.recv(10);
  th.join();
  return c;
}

// Segments of one plain INFER frame of `bytes` (uint8, codec sparse, so it
// is cut in segments of about `seg_bytes`), for session `sid`, frame seq `seq`.
std::vector<Segment> big_frame(uint64_t sid, uint64_t seq, uint64_t bytes, size_t seg_bytes) {
  FrameWriter w;
  w.set_session(sid);
  Header h;
  h.type = MsgType::infer_request;
  std::vector<Segment> segs;
  for (uint64_t i = 1; i < seq; ++i)  // spend the sequence numbers before it
    (void)w.write(h, {}, {}, [](Segment&&) { return Status{}; });
  Tensor t = Tensor::allocate("x", DType::uint8, {static_cast<int64_t>(bytes)});
  std::memset(t.mutable_data(), 0xff, bytes);
  SendOptions so;
  so.codec = *CodecSpec::parse("sparse");
  so.chunk_bytes = seg_bytes;
  so.segment_bytes = seg_bytes;
  EXPECT_TRUE(w.write(h, Bundle{t}, so, [&](Segment&& s) {
                 segs.push_back(std::move(s));
                 return Status{};
               }).ok());
  return segs;
}

}  // namespace

// A participant sends 255 of the 256 one-MiB segments of a frame and goes
// silent (as one that crashed does: ZeroMQ reports no disconnect). The
// server frees the frame after partial_frame_timeout_ms and says so.
TEST(Hostile, PartialFrameOfAPeerThatLeftIsFreed) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  o.partial_frame_timeout_ms = 1000;
  auto srv = bind_local(ctx, o);
  auto c = connect_served(ctx, *srv, hostile_options(false));
  ASSERT_TRUE(c);
  auto segs = big_frame(c->session(), 3, 256 * kMiB, kMiB);  // HELLO and HEARTBEAT used seq 1 and 2
  ASSERT_EQ(segs.size(), 256u);
  segs.pop_back();
  for (auto& s : segs) ASSERT_TRUE(c->send_raw(std::move(s)).ok());
  segs.clear();
  uint64_t peak = 0;
  std::optional<Error> truncated;
  for (int i = 0; i < 400 && !truncated; ++i) {  // at most about 20 s
    auto in = srv->recv(50);
    peak = std::max(peak, srv->partial_frame_bytes());
    if (!in && in.error().code == Errc::truncated) truncated = in.error();
  }
  std::printf("[ partial ] held while the frame was in progress: %llu bytes; after it was dropped: %llu bytes\n",
              static_cast<unsigned long long>(peak), static_cast<unsigned long long>(srv->partial_frame_bytes()));
  ASSERT_TRUE(truncated.has_value());
  EXPECT_NE(truncated->message.find("did not arrive in time"), std::string::npos) << truncated->str();
  EXPECT_EQ(peak, 256 * kMiB);
  EXPECT_EQ(srv->partial_frame_bytes(), 0u);
  EXPECT_EQ(srv->rejected().truncated, 1u);
  // The participant was told too (over its session).
  auto e = c->recv(3000);
  ASSERT_TRUE(e.ok()) << e.error().str();
  ASSERT_EQ(e->header.type, MsgType::error);
  EXPECT_EQ(e->header.error->code, Errc::truncated);
}

// The same, with a session that is evicted (idle) long before the frame
// would time out: the frame goes with it. The idle limit leaves room for
// building the 16 MiB frame (about 1 s under ASan on a loaded machine: with
// 500 ms the session was evicted before its first segment arrived).
TEST(Hostile, PartialFrameIsFreedWhenItsSessionIsEvicted) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  o.session_idle_ms = 4000;
  o.partial_frame_timeout_ms = 600000;
  auto srv = bind_local(ctx, o);
  auto c = connect_served(ctx, *srv, hostile_options(false));
  ASSERT_TRUE(c);
  const auto built_from = std::chrono::steady_clock::now();
  auto segs = big_frame(c->session(), 3, 16 * kMiB, kMiB);
  const auto build_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - built_from).count();
  segs.pop_back();
  for (auto& s : segs) ASSERT_TRUE(c->send_raw(std::move(s)).ok());
  uint64_t held = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (held < 16 * kMiB && std::chrono::steady_clock::now() < deadline) {
    (void)srv->recv(20);
    held = srv->partial_frame_bytes();
  }
  EXPECT_EQ(held, 16 * kMiB) << "building the frame took " << build_ms << " ms against an idle limit of 4000 ms";
  while (srv->peers() > 0 && std::chrono::steady_clock::now() < deadline) (void)srv->recv(20);
  EXPECT_EQ(srv->peers(), 0u);
  EXPECT_EQ(srv->partial_frame_bytes(), 0u);
}

TEST(Hostile, FrameAboveTheSessionBudgetIsRefusedBeforeAllocation) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(true);
  o.limits.session_budget_bytes = 4 * kMiB;
  auto srv = bind_local(ctx, o);
  auto c = connect_served(ctx, *srv, hostile_options(true));
  ASSERT_TRUE(c);
  Bundle big{random_tensor("x", DType::uint8, {int64_t(8 * kMiB)}, 1)};
  ASSERT_TRUE(c->send(MsgType::infer_request, 1, big).ok());
  uint64_t peak = 0;
  std::optional<Error> refused;
  for (int i = 0; i < 200 && !refused; ++i) {
    auto in = srv->recv(20);
    peak = std::max(peak, srv->partial_frame_bytes());
    if (!in && in.error().code != Errc::timeout) refused = in.error();
  }
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, Errc::limit_exceeded);
  EXPECT_NE(refused->message.find("memory budget of 4194304 bytes"), std::string::npos) << refused->str();
  EXPECT_EQ(peak, 0u);
  auto e = c->recv(3000);
  ASSERT_TRUE(e.ok()) << e.error().str();
  ASSERT_EQ(e->header.type, MsgType::error);
  EXPECT_EQ(e->header.error->code, Errc::limit_exceeded);
  // A frame within the budget is served.
  Bundle small{random_tensor("x", DType::uint8, {int64_t(kMiB)}, 2)};
  ASSERT_TRUE(c->send(MsgType::infer_request, 1, small).ok());
  std::optional<Server::Incoming> got;
  for (int i = 0; i < 200 && !got; ++i) {
    auto in = srv->recv(20);
    if (in) got = std::move(*in);
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->frame.tensors.at(0).nbytes, kMiB);
}

// A message of 100,000 empty parts: the server keeps at most the cap
// (header + max_parts + seal), drains the rest unread and counts it.
TEST(Hostile, PartsBeyondTheCapAreDroppedUnread) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(true);
  auto srv = bind_local(ctx, o);
  auto c = connect_served(ctx, *srv, hostile_options(true));
  ASSERT_TRUE(c);
  Segment many(100000);
  ASSERT_TRUE(c->send_raw(std::move(many)).ok());
  std::optional<Error> refused;
  for (int i = 0; i < 200 && !refused; ++i) {
    auto in = srv->recv(20);
    if (!in && in.error().code != Errc::timeout) refused = in.error();
  }
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, Errc::limit_exceeded);
  EXPECT_NE(refused->message.find("message of 100001 parts, above the limit of 65539"), std::string::npos)
      << refused->str();
  EXPECT_EQ(srv->rejected().malformed, 1u);
  auto e = c->recv(3000);
  ASSERT_TRUE(e.ok()) << e.error().str();
  EXPECT_EQ(e->header.type, MsgType::error);
  // The session carries on.
  ASSERT_TRUE(c->send(MsgType::infer_request, 1, {}).ok());
  std::optional<Server::Incoming> got;
  for (int i = 0; i < 200 && !got; ++i) {
    auto in = srv->recv(20);
    if (in) got = std::move(*in);
  }
  ASSERT_TRUE(got.has_value());
}

// The first checks on a message from a peer without a session (PROTOCOL.md
// 6.3): a header that does not decode is answered with its own error (a
// malformed HELLO used to get wrong_session), a well-formed non-HELLO with
// wrong_session; both plain, small, and counted.
TEST(Hostile, MalformedHeaderFromAStrangerGetsItsOwnError) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(true));
  auto ask = [&](Segment seg) -> Error {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 3000);
    s.connect(srv.server->endpoint());
    send_segment_raw(s, std::move(seg));
    Segment reply;
    if (!zmq::recv_multipart(s, std::back_inserter(reply)).has_value()) return make_error(Errc::timeout, "no reply");
    EXPECT_LE(reply[0].size(), 400u);
    FrameReader r;
    auto outs = r.feed(reply);
    if (outs.size() != 1 || !outs[0] || outs[0]->header.type != MsgType::error) return make_error(Errc::internal, "not an ERROR");
    return *outs[0]->header.error;
  };
  // Each padded to 512 bytes with a second part: a plain answer is never
  // larger than what it answers (a 15-byte provocation gets none, below).
  auto header_only = [](std::vector<uint8_t> bytes) {
    Segment seg;
    seg.emplace_back(bytes.data(), bytes.size());
    seg.emplace_back(512);
    return seg;
  };
  // {"magic": "XXXX", "v": 1}
  EXPECT_EQ(ask(header_only({0x82, 0xa5, 'm', 'a', 'g', 'i', 'c', 0xa4, 'X', 'X', 'X', 'X', 0xa1, 'v', 0x01})).code,
            Errc::bad_magic);
  // {"magic": "TRCR", "v": 2}
  EXPECT_EQ(ask(header_only({0x82, 0xa5, 'm', 'a', 'g', 'i', 'c', 0xa4, 'T', 'R', 'C', 'R', 0xa1, 'v', 0x02})).code,
            Errc::unsupported_version);
  // Not msgpack at all.
  EXPECT_EQ(ask(header_only({0xc1})).code, Errc::malformed_header);
  // A well-formed HEARTBEAT without a session: reconnect with HELLO.
  FrameWriter w;
  EXPECT_EQ(ask(padded_heartbeat(w)).code, Errc::wrong_session);
  // The same 15-byte bad magic without padding gets no answer: any ERROR
  // would be larger. A padded one sent after it on the same connection is
  // the first (and only) answer.
  {
    zmq::socket_t s = stranger_socket(ctx, srv.server->endpoint(), 10000);
    const std::vector<uint8_t> tiny{0x82, 0xa5, 'm', 'a', 'g', 'i', 'c', 0xa4, 'X', 'X', 'X', 'X', 0xa1, 'v', 0x01};
    Segment small;
    small.emplace_back(tiny.data(), tiny.size());
    send_segment_raw(s, std::move(small));
    send_segment_raw(s, header_only({0xc1}));
    Segment reply;
    ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)).has_value());
    FrameReader r;
    auto outs = r.feed(reply);
    ASSERT_TRUE(outs.at(0).ok());
    EXPECT_EQ(outs[0]->header.error->code, Errc::malformed_header) << "the 15-byte message was answered";
    EXPECT_LE(reply[0].size(), 513u);
  }
  srv.join();
  EXPECT_EQ(srv.server->peers(), 0u);
  EXPECT_EQ(srv.server->rejected().malformed, 5u);
  EXPECT_EQ(srv.server->send_counters().errors_suppressed, 1u);
}

// Key confirmation (PROTOCOL.md 6.1) that fails (the peer derived other
// keys) is answered with a plain ERROR naming the cause, not silence.
TEST(Hostile, FailedKeyConfirmationIsAnsweredWithAPlainError) {
  for (bool encrypt : {true, false}) {
    zmq::context_t ctx;
    Serving srv(ctx, hostile_options(encrypt));
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 3000);
    s.connect(srv.server->endpoint());
    send_segment_raw(s, hello_segment(encrypt, std::vector<uint8_t>(32, 7)));  // the server's secret
    Segment welcome;
    ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(welcome)).has_value());
    ASSERT_EQ(welcome.size(), 2u);
    welcome.pop_back();
    FrameReader wr;
    auto wf = wr.feed(welcome);
    ASSERT_TRUE(wf.at(0).ok());
    ASSERT_EQ(wf[0]->header.type, MsgType::welcome);
    // The confirming HEARTBEAT, sealed under keys the server does not have.
    FrameWriter w;
    w.set_session(wf[0]->header.session);
    Key256 k{};
    k.fill(0x42);
    Iv96 iv{};
    ASSERT_TRUE((encrypt ? w.set_key(k, iv) : w.set_control_key(k, iv)).ok());
    send_segment_raw(s, heartbeat_segment(w));
    Segment reply;
    ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)).has_value()) << "no answer: the failure is silent";
    FrameReader r;
    auto outs = r.feed(reply);
    ASSERT_TRUE(outs.at(0).ok()) << outs[0].error().str();
    ASSERT_EQ(outs[0]->header.type, MsgType::error);
    EXPECT_EQ(outs[0]->header.cipher, Cipher::none);
    EXPECT_EQ(outs[0]->header.error->code, Errc::auth_failed);
    EXPECT_NE(outs[0]->header.error->message.find("key confirmation failed"), std::string::npos);
    srv.join();
  }
}

// ---- Peers that never read their replies (issue #24) -------------------------

namespace {

// A fresh participant connects and gets one request answered; returns the
// milliseconds that took (this process's steady clock), or why it failed.
Result<double> serve_one(zmq::context_t& ctx, const std::string& ep, bool encrypt) {
  ChannelOptions co = hostile_options(encrypt);
  co.handshake_timeout_ms = 10000;  // generous: the outcome is asserted, the time printed
  const auto t0 = Clock::now();
  auto c = Client::connect(ctx, ep, co);
  if (!c) return std::move(c.error());
  TRACR_TRY((*c)->send(MsgType::infer_request, 1, {}));
  auto r = (*c)->recv(10000);
  if (!r) return std::move(r.error());
  if (r->header.type != MsgType::infer_result)
    return make_error(Errc::unexpected_message, std::string("expected INFER_RESULT, got ") +
                                                    std::string(msg_type_name(r->header.type)));
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Reads (without waiting) everything queued for `s`: messages and bytes.
std::pair<uint64_t, uint64_t> drain(zmq::socket_t& s) {
  uint64_t msgs = 0, bytes = 0;
  zmq::message_t m;
  while (s.recv(m, zmq::recv_flags::dontwait)) {
    ++msgs;
    bytes += m.size();
  }
  return {msgs, bytes};
}

}  // namespace

// A stranger's DEALER sends 50,000 one-byte messages and never reads. It
// used to earn a 104-114 B error each, until the server's send to it
// blocked and the whole server stopped. Now: it gets nothing larger than
// what it sent, and a legitimate participant is served right after.
TEST(Hostile, NonReadingStrangerCannotFreezeTheServer) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(true));
  zmq::socket_t s = stranger_socket(ctx, srv.server->endpoint());
  s.set(zmq::sockopt::sndhwm, 0);  // the whole attack queues at once
  uint64_t sent = 0;
  const uint8_t junk = 0x01;
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (sent < 50000 && Clock::now() < until) {
    if (s.send(zmq::buffer(&junk, 1), zmq::send_flags::dontwait)) ++sent;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(sent, 50000u);
  // The server rejects each (Serving counts the errors recv() returns): wait
  // until it has read them all, or has stopped reading for 5 s (it is stuck).
  uint64_t seen = 0;
  auto moved = Clock::now();
  while (srv.errors < sent && Clock::now() - moved < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (srv.errors != seen) {
      seen = srv.errors;
      moved = Clock::now();
    }
  }
  const uint64_t read = srv.errors;
  EXPECT_EQ(read, sent) << "the server stopped reading after " << read << " of the attacker's messages";
  auto served = serve_one(ctx, srv.server->endpoint(), true);
  ASSERT_TRUE(served.ok()) << "a legitimate participant was not served after the attack: " << served.error().str();
  std::printf("[ non-reading stranger ] 50000 one-byte messages, then a legitimate handshake and request served in "
              "%.1f ms (steady clock, this process)\n",
              *served);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto [msgs, bytes] = drain(s);
  std::printf("[ non-reading stranger ] it got back %llu messages, %llu bytes for %llu bytes sent\n",
              static_cast<unsigned long long>(msgs), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(sent));
  EXPECT_EQ(bytes, 0u) << "an answer to a 1-byte message is larger than what provoked it";
  s.close();
  srv.join();
}

// The junk flood of issue #24: 20,000 malformed messages and 4 messages of
// 8 MiB from strangers, on four connections, while a participant with a
// session sends requests with a 1 MiB tensor. Every request is answered
// within the client's 30 s wait, and the worst round trip during the flood
// is printed against a quiet baseline. (This bounds the flood at the Server;
// it does not reproduce the 60 s stall of a real run the issue saw once in
// four under load 12: the same test passed on the code before the server
// loop stopped waiting on peers, 1f033ae^, 6 of 6 runs under load 12.)
TEST(Hostile, JunkFloodDoesNotStallASession) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(true));
  const std::string ep = srv.server->endpoint();
  auto c = Client::connect(ctx, ep, hostile_options(true));
  ASSERT_TRUE(c.ok()) << c.error().str();
  Bundle b{Tensor::allocate("act", DType::float32, {1, 256, 1024})};
  auto round_trips = [&](int n, std::vector<double>& ms) -> Status {
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      TRACR_TRY((*c)->send(MsgType::infer_request, 1, b));
      auto r = (*c)->recv(30000);
      if (!r) return std::move(r.error());
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return {};
  };
  std::vector<double> quiet, flooded;
  ASSERT_TRUE(round_trips(10, quiet).ok());
  std::atomic<bool> done{false};
  std::atomic<uint64_t> junk_sent{0};
  std::thread flood([&] {
    std::vector<zmq::socket_t> socks;
    for (int i = 0; i < 4; ++i) {
      socks.push_back(stranger_socket(ctx, ep));
      socks.back().set(zmq::sockopt::sndhwm, 0);
    }
    std::vector<uint8_t> big(8u << 20, 0xa5);
    for (int i = 0; i < 4; ++i) socks[i].send(zmq::buffer(big), zmq::send_flags::none);
    const uint8_t bad[] = {0x81, 0xa5, 'm', 'a', 'g', 'i', 'c', 0xa4, 'X', 'X', 'X', 'X'};
    for (int i = 0; i < 20000; ++i)
      if (socks[i % 4].send(zmq::buffer(bad, sizeof bad), zmq::send_flags::none)) ++junk_sent;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  const Status st = round_trips(50, flooded);
  done = true;
  flood.join();
  ASSERT_TRUE(st.ok()) << "a request was not answered during the junk flood: " << st.error().str();
  std::sort(quiet.begin(), quiet.end());
  std::sort(flooded.begin(), flooded.end());
  std::printf("[ junk flood ] %llu malformed + 4 x 8 MiB from strangers: 50 of 50 requests (1 MiB) answered; "
              "round trip median %.1f ms, worst %.1f ms (quiet: median %.1f, worst %.1f; steady clock)\n",
              static_cast<unsigned long long>(junk_sent.load()), flooded[flooded.size() / 2], flooded.back(),
              quiet[quiet.size() / 2], quiet.back());
  (*c)->close();
  srv.join();
}

// A peer that holds the secret floods HEARTBEATs (each answered) and never
// reads: its replies pile up at the server, never the server loop. Others
// are served meanwhile; it loses its session once its replies stop moving
// for the partial-frame wait, and that loss is counted.
TEST(Hostile, NonReadingSessionLosesItsSessionNotTheServer) {
  zmq::context_t ctx;
  ChannelOptions so = hostile_options(false);
  so.partial_frame_timeout_ms = 1000;
  Serving srv(ctx, so);
  auto attacker = Client::connect(ctx, srv.server->endpoint(), hostile_options(false));
  ASSERT_TRUE(attacker.ok()) << attacker.error().str();
  (*attacker)->socket().set(zmq::sockopt::sndtimeo, 100);  // the attacker itself never blocks for long
  uint64_t sent = 0;
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (sent < 100000 && Clock::now() < until)
    if ((*attacker)->send(MsgType::heartbeat, -1, {}).ok()) ++sent;
  std::printf("[ non-reading session ] %llu HEARTBEATs sent, none read\n", static_cast<unsigned long long>(sent));
  ASSERT_GE(sent, 50000u);
  auto served = serve_one(ctx, srv.server->endpoint(), false);
  ASSERT_TRUE(served.ok()) << "a legitimate participant was not served during the attack: " << served.error().str();
  std::printf("[ non-reading session ] a legitimate handshake and request served in %.1f ms (steady clock)\n", *served);
  // Its session goes once its replies have not moved for the wait.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (srv.server->send_counters().sessions_dropped == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The attacker vanishes (linger 0, no GOODBYE) while the server still
  // runs. (A socket left lingering mid-message while its peer's socket closes
  // makes libzmq 4.3.4 abort in session_base_t::clean_pipes, libzmq #3442.)
  (*attacker)->socket().close();
  srv.join();
  // The drop and the GOODBYE, served from here (behind the attacker's drained HEARTBEATs).
  const auto served_by = Clock::now() + std::chrono::seconds(30);
  while (srv.server->peers() > 0 && Clock::now() < served_by) (void)srv.server->recv(20);
  const auto sc = srv.server->send_counters();
  std::printf("[ non-reading session ] sessions dropped %llu, replies dropped %llu, deferred %llu\n",
              static_cast<unsigned long long>(sc.sessions_dropped), static_cast<unsigned long long>(sc.replies_dropped),
              static_cast<unsigned long long>(sc.deferred));
  EXPECT_EQ(sc.sessions_dropped, 1u);
  EXPECT_GT(sc.deferred, 0u);
  EXPECT_EQ(srv.server->peers(), 0u) << "the legitimate participant said GOODBYE, the attacker was dropped";
}

// Plain ERRORs to strangers are rate-limited: 2,000 well-formed frames
// without a session (each worth a wrong_session answer) earn at most the
// bucket (64) plus 64 per second the attack lasted; the rest are counted.
TEST(Hostile, PlainErrorsToStrangersAreRateLimited) {
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(true));
  zmq::socket_t s = stranger_socket(ctx, srv.server->endpoint());
  FrameWriter w;
  const auto t0 = Clock::now();
  for (int i = 0; i < 2000; ++i) send_segment_raw(s, padded_heartbeat(w));
  while (srv.errors < 2000 && Clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto [msgs, bytes] = drain(s);
  srv.join();
  const auto sc = srv.server->send_counters();
  std::printf("[ rate ] 2000 frames without a session in %.2f s: %llu answered, %llu suppressed\n", elapsed_s,
              static_cast<unsigned long long>(msgs), static_cast<unsigned long long>(sc.errors_suppressed));
  EXPECT_EQ(srv.errors, 2000u);
  EXPECT_GE(msgs, 1u);
  EXPECT_LE(msgs, static_cast<uint64_t>(64 + 64 * (elapsed_s + 0.5)));
  EXPECT_EQ(msgs + sc.errors_suppressed, 2000u);
}

namespace {
// Peak resident memory of this process (VmHWM), in bytes; reset_peak()
// starts a new peak from the current RSS (Linux: clear_refs 5).
uint64_t peak_rss() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %llu kB", reinterpret_cast<unsigned long long*>(&kb)) == 1) break;
  std::fclose(f);
  return kb * 1024;
}
bool reset_peak() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}
}  // namespace

// One ZeroMQ message part of 512 MiB (from untouched zero pages, so that
// only the receiver could make it resident): ZMQ_MAXMSGSIZE, set from the
// largest part the spec allows, refuses it before the server holds it; a
// legitimate participant is served after it.
TEST(Hostile, OversizedMessageIsRefusedBeforeTheServerHoldsIt) {
  if (!reset_peak()) GTEST_SKIP() << "this kernel cannot reset the peak RSS (/proc/self/clear_refs)";
  zmq::context_t ctx;
  Serving srv(ctx, hostile_options(true));
  constexpr size_t kBytes = size_t{512} << 20;
  void* zeros = ::mmap(nullptr, kBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  std::atomic<bool> released{false};
  const uint64_t before = peak_rss();
  {
    zmq::socket_t s = stranger_socket(ctx, srv.server->endpoint());
    zmq::message_t big(zeros, kBytes, [](void*, void* hint) { static_cast<std::atomic<bool>*>(hint)->store(true); },
                       &released);
    ASSERT_TRUE(s.send(big, zmq::send_flags::none).has_value());
    // Until this end's ZeroMQ is done with the buffer (written out, or the
    // connection refused it), at most 60 s.
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (!released && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto served = serve_one(ctx, srv.server->endpoint(), true);
    ASSERT_TRUE(served.ok()) << served.error().str();
    s.close();
  }
  srv.join();
  const uint64_t grown = peak_rss() - before;
  std::printf("[ oversized ] a %zu MiB part: peak RSS grew by %.1f MiB (buffer released by the sender: %s)\n",
              kBytes >> 20, grown / 1048576.0, released ? "yes" : "no");
  EXPECT_LT(grown, uint64_t{128} << 20) << "the server held the oversized message";
  ::munmap(zeros, kBytes);
}

// A second HELLO on a confirmed session starts it over (PROTOCOL.md 6.1,
// 8): it is answered with a WELCOME for a new session, not wrong_session.
TEST(Hostile, SecondHelloOnAConfirmedSessionStartsItOver) {
  zmq::context_t ctx;
  auto srv = bind_local(ctx, hostile_options(true));
  auto c = connect_served(ctx, *srv, hostile_options(true));
  ASSERT_TRUE(c);
  const uint64_t old_sid = c->session();
  ASSERT_TRUE(c->send_raw(hello_segment(true, std::vector<uint8_t>(32, 7))).ok());  // the server's secret
  c->socket().set(zmq::sockopt::rcvtimeo, 0);
  Segment reply;
  for (int i = 0; i < 500 && reply.empty(); ++i) {  // serve until the answer is there (at most about 10 s)
    (void)srv->recv(20);
    (void)zmq::recv_multipart(c->socket(), std::back_inserter(reply));
  }
  ASSERT_EQ(reply.size(), 2u) << "not a WELCOME (its header and MAC)";
  reply.pop_back();
  FrameReader r;
  auto outs = r.feed(reply);
  ASSERT_TRUE(outs.at(0).ok()) << outs[0].error().str();
  EXPECT_EQ(outs[0]->header.type, MsgType::welcome);
  EXPECT_NE(outs[0]->header.session, old_sid);
  EXPECT_EQ(srv->peers(), 1u);
}

// A replay campaign: 300 HELLOs that verify (recorded ones the replay set no
// longer holds look exactly like these: same secret, never confirmed), each
// from its own connection, into a table of 16 sessions with a 10 s
// handshake timeout. Every legitimate participant after it still gets in:
// a verified HELLO takes the slot of the oldest unconfirmed session.
TEST(Hostile, ReplayedHellosDoNotLockOutParticipants) {
  zmq::context_t ctx;
  ChannelOptions so = hostile_options(true);
  so.max_peers = 16;
  so.handshake_timeout_ms = 10000;
  Serving srv(ctx, so);
  std::vector<zmq::socket_t> replayers;
  for (int i = 0; i < 300; ++i) {
    replayers.push_back(stranger_socket(ctx, srv.server->endpoint()));
    send_segment_raw(replayers.back(), hello_segment(true, std::vector<uint8_t>(32, 7)));  // verifies
  }
  ChannelOptions co = hostile_options(true);
  co.handshake_timeout_ms = 10000;
  int ok = 0;
  std::string last_error;
  for (int i = 0; i < 20; ++i) {
    auto c = Client::connect(ctx, srv.server->endpoint(), co);
    if (c.ok()) ++ok;
    else last_error = c.error().str();
  }
  replayers.clear();
  srv.join();
  const auto sc = srv.server->send_counters();
  std::printf("[ replay ] 300 verified, never confirmed HELLOs into 16 slots: %d of 20 participants got in; %llu "
              "sessions evicted\n",
              ok, static_cast<unsigned long long>(sc.sessions_evicted));
  EXPECT_EQ(ok, 20) << last_error;
  EXPECT_GT(sc.sessions_evicted, 0u);
}

// Confirmed sessions whose peers vanished without GOODBYE fill the table;
// a new participant takes the slot of the one idle longest once it has
// been idle for evict_idle_ms, instead of being refused until the idle
// limit (10 minutes) ends them.
TEST(Hostile, VanishedPeersDoNotLockOthersOut) {
  zmq::context_t ctx;
  ChannelOptions so = hostile_options(false);
  so.max_peers = 8;
  so.evict_idle_ms = 300;
  Serving srv(ctx, so);
  for (int i = 0; i < 8; ++i) {
    auto c = Client::connect(ctx, srv.server->endpoint(), hostile_options(false));
    ASSERT_TRUE(c.ok()) << c.error().str();
    (*c)->socket().close();  // gone without GOODBYE
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto c = Client::connect(ctx, srv.server->endpoint(), hostile_options(false));
  EXPECT_TRUE(c.ok()) << c.error().str();
  srv.join();
  EXPECT_EQ(srv.server->send_counters().sessions_evicted, 1u);
}

// Requests lose a segment on the way: the middle one of frame 3, the first
// of frame 5, the last of frame 7 (4, 6 and 8 arrive whole). The server
// answers each broken frame with exactly one ERROR that names it (meta
// req_seq), absorbs the rest of its segments, and serves the next request
// as itself: the participant sees one answer per request, in order, each
// naming its request. Before, every later segment of a broken frame earned
// an ERROR of its own, and the replies slipped behind the requests.
TEST(Hostile, ALostSegmentCostsItsOwnRequestOnly) {
  zmq::context_t ctx;
  auto srv = bind_local(ctx, hostile_options(false));
  auto c = connect_served(ctx, *srv, hostile_options(false));
  ASSERT_TRUE(c);
  enum Lose { none, first, middle, last };
  const std::vector<std::pair<uint64_t, Lose>> frames = {{3, middle}, {4, none}, {5, first},
                                                         {6, none},   {7, last}, {8, none}};
  for (const auto& [seq, lose] : frames) {  // HELLO and HEARTBEAT used seq 1 and 2
    auto segs = big_frame(c->session(), seq, 4 * 65536, 65536);
    ASSERT_GE(segs.size(), 4u);
    if (lose == first) segs.erase(segs.begin());
    if (lose == middle) segs.erase(segs.begin() + 1);
    if (lose == last) segs.pop_back();
    for (auto& s : segs) ASSERT_TRUE(c->send_raw(std::move(s)).ok());
  }
  std::vector<uint64_t> served;
  std::vector<std::pair<Errc, uint64_t>> refused;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (served.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    auto in = srv->recv(50);
    if (!in) {
      if (in.error().code != Errc::timeout) refused.emplace_back(in.error().code, in.error().frame_seq);
      continue;
    }
    served.push_back(in->frame.header.seq);
    ASSERT_TRUE(srv->send(in->peer, MsgType::infer_result, in->frame.header.split, {},
                          {{"req_seq", static_cast<int64_t>(in->frame.header.seq)}})
                    .ok());
  }
  EXPECT_EQ(served, (std::vector<uint64_t>{4, 6, 8}));
  const std::vector<std::pair<Errc, uint64_t>> want_refused = {
      {Errc::unexpected_message, 3}, {Errc::unexpected_message, 5}, {Errc::truncated, 7}};
  EXPECT_EQ(refused, want_refused);
  // What the participant sees: one answer per request, in order, each named.
  std::vector<std::string> answers;
  while (true) {
    auto f = c->recv(answers.size() < 6 ? 5000 : 300);
    if (!f) {
      EXPECT_EQ(f.error().code, Errc::timeout) << f.error().str();
      break;
    }
    auto it = f->header.meta.find("req_seq");
    const std::string req =
        it == f->header.meta.end() ? "?" : std::to_string(std::get<int64_t>(it->second));
    answers.push_back(f->header.type == MsgType::error ? "error(" + std::string(errc_name(f->header.error->code)) + ")@" + req
                                                       : std::string(msg_type_name(f->header.type)) + "@" + req);
  }
  EXPECT_EQ(answers, (std::vector<std::string>{"error(unexpected_message)@3", "INFER_RESULT@4",
                                               "error(unexpected_message)@5", "INFER_RESULT@6", "error(truncated)@7",
                                               "INFER_RESULT@8"}));
}

namespace {

// A peer that completes HELLO/WELCOME with the right secret and derives the
// session keys, but does not confirm them: what a participant is between
// WELCOME and its HEARTBEAT, and what a HELLO replayed on a plain session
// can send frames as.
struct HalfOpen {
  zmq::socket_t sock;
  FrameWriter w;
  FrameReader r;
  uint64_t session = 0;
  HalfOpen(zmq::context_t& ctx, const std::string& ep, const ChannelOptions& o)
      : sock(stranger_socket(ctx, ep, 10000)) {
    ClientHandshake hs(o.security, "PARTICIPANT", "half-open", 1u << 20);
    auto hk = derive_hello_keys(o.security.secret);
    EXPECT_TRUE(hk.ok());
    auto hello = hs.hello();
    EXPECT_TRUE(hello.ok());
    std::array<uint8_t, kHelloMacBytes> mac{};
    (void)w.write(*hello, {}, {}, [&](Segment&& s) {
      mac = hello_mac(*hk, static_cast<const uint8_t*>(s[0].data()), s[0].size());
      s.emplace_back(mac.data(), mac.size());
      send_segment_raw(sock, std::move(s));
      return Status{};
    });
    Segment welcome;
    for (;;) {
      zmq::message_t m;
      if (!sock.recv(m)) break;  // the receive timeout: no WELCOME
      const bool more = m.more();
      welcome.push_back(std::move(m));
      if (!more) break;
    }
    EXPECT_FALSE(welcome.empty()) << "no WELCOME";
    if (welcome.empty()) return;
    auto h = decode_header(static_cast<const uint8_t*>(welcome[0].data()), welcome[0].size(), Limits{});
    EXPECT_TRUE(h.ok() && h->type == MsgType::welcome);
    if (!h.ok()) return;
    auto keys = hs.on_welcome(*h);
    EXPECT_TRUE(keys.ok()) << keys.error().str();
    if (!keys.ok()) return;
    session = keys->session;
    w.set_session(session);
    r.set_session(session);
    EXPECT_TRUE(w.set_control_key(keys->c2s.key, keys->c2s.iv).ok());  // plain session: control frames sealed
    EXPECT_TRUE(r.set_control_key(keys->s2c.key, keys->s2c.iv).ok());
    sock.set(zmq::sockopt::rcvtimeo, 1000);  // answers to frames: a second is plenty, none is fine
  }
  void send(MsgType type) {
    Header h;
    h.type = type;
    (void)w.write(h, {}, {}, [&](Segment&& s) {
      send_segment_raw(sock, std::move(s));
      return Status{};
    });
  }
  // The next frame the server sent, read with the session's keys.
  std::optional<Frame> recv_frame() {
    Segment seg;
    for (;;) {
      zmq::message_t m;
      if (!sock.recv(m)) return std::nullopt;
      const bool more = m.more();
      seg.push_back(std::move(m));
      if (!more) break;
    }
    for (auto& f : r.feed(seg))
      if (f) return std::move(*f);
    return std::nullopt;
  }
};

}  // namespace

// Before key confirmation nothing is served (PROTOCOL.md 6.1): on a plain
// session an INFER_REQUEST passes its checks without any key, so a peer
// that replayed a HELLO could otherwise have its frames served and keep
// its slot alive for ever by sending them. Each such frame gets an ERROR
// over the session naming it, and the handshake clock keeps running from
// the HELLO.
TEST(Hostile, NothingIsServedBeforeKeyConfirmation) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  o.handshake_timeout_ms = 3000;
  Serving s(ctx, o);
  {
    HalfOpen p(ctx, s.server->endpoint(), o);
    ASSERT_NE(p.session, 0u);
    // INFER_REQUESTs every 250 ms for 9 s: each is refused, and the session
    // still ends at its handshake timeout (3 s after the HELLO).
    int refused = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(9);
    while (std::chrono::steady_clock::now() < until) {
      p.send(MsgType::infer_request);
      auto f = p.recv_frame();
      if (f && f->header.type == MsgType::error && f->header.error->code == Errc::unexpected_message) {
        EXPECT_NE(f->header.error->message.find("before key confirmation"), std::string::npos)
            << f->header.error->message;
        EXPECT_EQ(f->header.meta.count("req_seq"), 1u);
        ++refused;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    EXPECT_GE(refused, 1);
    EXPECT_EQ(s.served.load(), 0u) << "an unconfirmed session was served";
    EXPECT_EQ(s.server->peers(), 0u) << "frames before key confirmation kept the half-open session alive";
  }
  // A participant that confirms its keys is served as before.
  auto c = Client::connect(ctx, s.server->endpoint(), o);
  ASSERT_TRUE(c.ok()) << c.error().str();
  ASSERT_TRUE((*c)->send(MsgType::infer_request, 0, {}).ok());
  auto reply = (*c)->recv(5000);
  ASSERT_TRUE(reply.ok()) << reply.error().str();
  EXPECT_EQ(reply->header.type, MsgType::infer_result);
  EXPECT_EQ(s.served.load(), 1u);
}

// An authenticated GOODBYE ends a half-open session at once (PROTOCOL.md
// 3.2): with a 60 s handshake timeout, nothing else could have ended it.
TEST(Hostile, GoodbyeEndsAHalfOpenSession) {
  zmq::context_t ctx;
  ChannelOptions o = hostile_options(false);
  o.handshake_timeout_ms = 60000;
  Serving s(ctx, o);
  HalfOpen p(ctx, s.server->endpoint(), o);
  ASSERT_NE(p.session, 0u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (s.server->peers() != 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(s.server->peers(), 1u);
  p.send(MsgType::goodbye);
  while (s.server->peers() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.server->peers(), 0u);
}
