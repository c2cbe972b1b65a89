// Real ZeroMQ sockets on tcp://127.0.0.1 with the bound port read back.
#include <atomic>
#include <cstring>
#include <thread>

#include "frame_fixture.hpp"
#include "protocol/channel.hpp"

using namespace tracr;
using namespace tracr::protocol;
using namespace tracr::protocol::testing;

namespace {

ChannelOptions options(bool encrypt, uint8_t secret_byte = 7, bool x25519 = true) {
  ChannelOptions o;
  o.security.encrypt = encrypt;
  o.security.x25519 = x25519;
  o.security.secret.assign(32, secret_byte);
  o.handshake_timeout_ms = 3000;
  return o;
}

// Serves one thread: answers INFER_REQUEST with the same tensors.
struct EchoServer {
  zmq::context_t& ctx;
  std::unique_ptr<Server> server;
  std::thread th;
  std::atomic<bool> stop{false};
  std::vector<Error> errors;
  EchoServer(zmq::context_t& c, ChannelOptions o) : ctx(c) {
    auto s = Server::bind(ctx, "tcp://127.0.0.1:0", o);
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
    th = std::thread([this] {
      while (!stop) {
        auto in = server->recv(50);
        if (!in) {
          if (in.error().code != Errc::timeout) errors.push_back(in.error());
          continue;
        }
        (void)server->send(in->peer, MsgType::infer_result, in->frame.header.split, in->frame.tensors,
                           {{"n", int64_t(in->frame.tensors.size())}});
      }
    });
  }
  void join() {
    stop = true;
    if (th.joinable()) th.join();
  }
  ~EchoServer() { join(); }
};

}  // namespace

TEST(Channel, EncryptedRoundTripWithX25519) {
  zmq::context_t ctx;
  EchoServer srv(ctx, options(true));
  auto c = Client::connect(ctx, srv.server->endpoint(), options(true));
  ASSERT_TRUE(c.ok()) << c.error().str();
  EXPECT_EQ((*c)->cipher(), Cipher::aes256gcm);
  Bundle b{random_tensor("x", DType::float32, {1, 64, 55, 55}, 1), random_tensor("skip", DType::int64, {3, 3}, 2)};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*c)->send(MsgType::infer_request, 5, b).ok());
    auto r = (*c)->recv(5000);
    ASSERT_TRUE(r.ok()) << r.error().str();
    EXPECT_EQ(r->header.type, MsgType::infer_result);
    EXPECT_EQ(r->header.split, 5);
    ASSERT_EQ(r->tensors.size(), 2u);
    EXPECT_EQ(0, std::memcmp(r->tensors[0].data, b[0].data, b[0].nbytes));
    EXPECT_EQ(0, std::memcmp(r->tensors[1].data, b[1].data, b[1].nbytes));
  }
}

TEST(Channel, PlainRoundTrip) {
  zmq::context_t ctx;
  EchoServer srv(ctx, options(false));
  auto c = Client::connect(ctx, srv.server->endpoint(), options(false));
  ASSERT_TRUE(c.ok()) << c.error().str();
  EXPECT_EQ((*c)->cipher(), Cipher::none);
  Bundle b{random_tensor("x", DType::bfloat16, {7, 9}, 1)};
  ASSERT_TRUE((*c)->send(MsgType::infer_request, 0, b).ok());
  auto r = (*c)->recv(5000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(0, std::memcmp(r->tensors[0].data, b[0].data, b[0].nbytes));
}

TEST(Channel, WrongSecretIsRefusedAtHello) {
  zmq::context_t ctx;
  EchoServer srv(ctx, options(true, 7));
  auto c = Client::connect(ctx, srv.server->endpoint(), options(true, 8));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::handshake_failed);
  EXPECT_NE(c.error().message.find("session secret"), std::string::npos) << c.error().message;
}

TEST(Channel, EncryptionDisagreementFailsHandshake) {
  zmq::context_t ctx;
  EchoServer srv(ctx, options(true));
  auto c = Client::connect(ctx, srv.server->endpoint(), options(false));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::handshake_failed);
}

TEST(Channel, NoServerTimesOut) {
  zmq::context_t ctx;
  auto o = options(true);
  o.handshake_timeout_ms = 300;
  // A bound-then-closed port: nothing listens there.
  std::string ep;
  {
    zmq::socket_t s(ctx, zmq::socket_type::router);
    s.bind("tcp://127.0.0.1:0");
    ep = s.get(zmq::sockopt::last_endpoint);
  }
  auto c = Client::connect(ctx, ep, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::timeout);
}

TEST(Channel, ServerKeepsSeparateSessionsForManyParticipants) {
  zmq::context_t ctx;
  EchoServer srv(ctx, options(true));
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) {
    auto c = Client::connect(ctx, srv.server->endpoint(), options(true));
    ASSERT_TRUE(c.ok()) << c.error().str();
    clients.push_back(std::move(*c));
  }
  for (int round = 0; round < 2; ++round)
    for (size_t i = 0; i < clients.size(); ++i) {
      Bundle b{random_tensor("x", DType::float32, {int64_t(100 + i)}, uint32_t(i))};
      ASSERT_TRUE(clients[i]->send(MsgType::infer_request, int32_t(i), b).ok());
      auto r = clients[i]->recv(5000);
      ASSERT_TRUE(r.ok()) << r.error().str();
      EXPECT_EQ(r->header.split, int32_t(i));
      EXPECT_EQ(r->tensors[0].shape[0], int64_t(100 + i));
    }
  srv.join();
  EXPECT_EQ(srv.server->peers(), 4u);
}

TEST(Channel, InjectedGarbageIsRejectedAndSessionCarriesOn) {
  zmq::context_t ctx;
  EchoServer srv(ctx, options(true));
  auto c = Client::connect(ctx, srv.server->endpoint(), options(true));
  ASSERT_TRUE(c.ok());
  // Garbage, then a replay-looking forged header, then a good frame.
  Segment junk;
  junk.emplace_back(std::string("\x81\xa5magic\xa4XXXX"));
  ASSERT_TRUE((*c)->send_raw(std::move(junk)).ok());
  Bundle b{random_tensor("x", DType::float32, {1000}, 3)};
  ASSERT_TRUE((*c)->send(MsgType::infer_request, 1, b).ok());
  // The server reports the rejection over the session, then answers the good frame.
  auto e = (*c)->recv(5000);
  ASSERT_TRUE(e.ok()) << e.error().str();
  ASSERT_EQ(e->header.type, MsgType::error);
  ASSERT_TRUE(e->header.error.has_value());
  EXPECT_EQ(e->header.error->code, Errc::bad_magic);
  auto r = (*c)->recv(5000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->tensors.size(), 1u);
  EXPECT_EQ(0, std::memcmp(r->tensors[0].data, b[0].data, b[0].nbytes));
  srv.join();
  EXPECT_EQ(srv.server->rejected().malformed, 1u);
}

// The client's socket events (ZMQ_EVENT_CONNECTED, ..._DISCONNECTED) in order.
class SocketEvents {
 public:
  SocketEvents(zmq::context_t& ctx, zmq::socket_t& watched, const std::string& name)
      : pair_(ctx, zmq::socket_type::pair) {
    const std::string ep = "inproc://" + name;
    EXPECT_EQ(0, zmq_socket_monitor(watched.handle(), ep.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED));
    pair_.connect(ep);
  }
  // Waits for `event`; false when it does not come within timeout_ms.
  bool wait_for(uint16_t event, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{pair_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      zmq::message_t head, addr;
      if (!pair_.recv(head) || !pair_.recv(addr)) return false;
      uint16_t got = 0;
      std::memcpy(&got, head.data(), sizeof got);
      if (got == event) return true;
    }
    return false;
  }

 private:
  zmq::socket_t pair_;
};

TEST(Channel, ServerRestartIsReportedToClientAtOnce) {
  zmq::context_t ctx;
  std::string ep;
  std::unique_ptr<Client> client;
  std::unique_ptr<SocketEvents> events;
  {
    EchoServer first(ctx, options(true));
    ep = first.server->endpoint();
    auto c = Client::connect(ctx, ep, options(true));
    ASSERT_TRUE(c.ok()) << c.error().str();
    client = std::move(*c);
    events = std::make_unique<SocketEvents>(ctx, client->socket(), "restart-events");
  }
  // A frame sent before the client has noticed the old server's end goes down
  // the dead connection and is lost (ZeroMQ cannot tell), so the test sends
  // only once the client has dropped that connection (under load on 2 cores
  // that came after the send once, and the answer never came).
  ASSERT_TRUE(events->wait_for(ZMQ_EVENT_DISCONNECTED, 30000));
  // A new server on the same endpoint knows nothing of the session. ZeroMQ
  // releases the old port asynchronously: retry the bind briefly.
  auto rebound = Server::bind(ctx, ep, options(true));
  for (int i = 0; i < 100 && !rebound.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rebound = Server::bind(ctx, ep, options(true));
  }
  ASSERT_TRUE(rebound.ok()) << rebound.error().str();
  ASSERT_TRUE(events->wait_for(ZMQ_EVENT_CONNECTED, 30000));
  // The new server serves until the client has its answer: under load the
  // client's reconnection can come late (once, after a single 3 s recv).
  std::atomic<bool> answered{false};
  std::thread th([&] {
    while (!answered) (void)(*rebound)->recv(100);
  });
  Bundle b{random_tensor("x", DType::float32, {16}, 1)};
  ASSERT_TRUE(client->send(MsgType::infer_request, 0, b).ok());
  auto r = client->recv(30000);
  answered = true;
  th.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::remote) << r.error().str();
  EXPECT_NE(r.error().message.find("restarted"), std::string::npos) << r.error().message;
}

// Sessions end: a client that closes says GOODBYE, so a server that serves
// participant after participant (a detached SERVER) never fills its table.
// Skipped under ASan (the suite's sanitizer run), where 10,000 handshakes are slow.
#if !defined(__SANITIZE_ADDRESS__)
TEST(Channel, TenThousandSequentialSessionsThenANormalOne) {
  zmq::context_t ctx;
  ChannelOptions o = options(true);
  o.security.x25519 = false;
  EchoServer srv(ctx, o);
  size_t most = 0;
  for (int i = 0; i < 10000; ++i) {
    auto c = Client::connect(ctx, srv.server->endpoint(), o);
    ASSERT_TRUE(c.ok()) << "session " << i << ": " << c.error().str();
    most = std::max(most, srv.server->peers());
  }  // each client closes: GOODBYE
  // Far below the 1024-session limit the whole time.
  EXPECT_LT(most, 64u);
  auto c = Client::connect(ctx, srv.server->endpoint(), o);
  ASSERT_TRUE(c.ok()) << c.error().str();
  Bundle b{random_tensor("x", DType::float32, {1, 16, 8, 8}, 3)};
  ASSERT_TRUE((*c)->send(MsgType::infer_request, 2, b).ok());
  auto r = (*c)->recv(5000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->tensors.size(), 1u);
  EXPECT_TRUE(srv.errors.empty()) << srv.errors.front().str();
}
#endif

TEST(Channel, AnIdleSessionEndsAndItsPeerIsToldToReconnect) {
  zmq::context_t ctx;
  ChannelOptions o = options(true);
  o.session_idle_ms = 300;
  EchoServer srv(ctx, o);
  auto c = Client::connect(ctx, srv.server->endpoint(), o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(srv.server->peers(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));  // idle, and past one sweep
  // The next frame finds no session: a typed ERROR says so.
  Bundle b{random_tensor("x", DType::float32, {4}, 1)};
  ASSERT_TRUE((*c)->send(MsgType::infer_request, 1, b).ok());
  auto r = (*c)->recv(5000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::remote) << r.error().str();
  EXPECT_NE(r.error().message.find("no session"), std::string::npos) << r.error().str();
}
