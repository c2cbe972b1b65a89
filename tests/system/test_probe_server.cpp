// The SERVER's side of the link probe (PROTOCOL.md section 3.1) on real
// sockets: echo, sink and source answered in order with the probe's n; a bad
// op or an oversized source request gets a typed ERROR and the session goes on.
#include "fleet/launcher.hpp"
#include "protocol/channel.hpp"
#include "system/system_util.hpp"

using namespace tracr;
using namespace tracr::fleet;
using namespace tracr::protocol;

namespace {
int64_t meta_int(const Frame& f, const char* k) {
  auto it = f.header.meta.find(k);
  if (it == f.header.meta.end()) return -1;
  auto* v = std::get_if<int64_t>(&it->second);
  return v ? *v : -1;
}
}  // namespace

TEST(ProbeServer, AnswersEchoSinkSourceAndRefusesBadRequests) {
  static const settings::DeviceConfig local = local_device("server");
  const std::vector<uint8_t> secret(32, 3);
  LaunchSpec ls;
  ls.device = &local;
  ls.role = tracr::wire::AgentRole::server;
  ls.args = {"--bind", "tcp://127.0.0.1:0"};
  ls.agent_path = std::string(TRACR_BIN_DIR) + "/tracr-agent";
  ls.secret = secret;
  auto agent = launch_agent(ls);
  ASSERT_TRUE(agent.ok()) << agent.error().str();
  auto ready = (*agent)->wait_ready(20000);
  ASSERT_TRUE(ready.ok()) << ready.error().str();
  // Keep reading the agent's control lines so its pipe never fills.
  std::atomic<bool> stop{false};
  std::thread drain([&] {
    while (!stop) (void)(*agent)->proc().read_line(100);
  });
  zmq::context_t ctx(1);
  ChannelOptions co;
  co.security.secret = secret;
  auto c = Client::connect(ctx, ready->get_or("endpoint", ""), co);
  ASSERT_TRUE(c.ok()) << c.error().str();
  Client& cl = **c;

  ASSERT_TRUE(cl.send(MsgType::probe, -1, {}, {{"op", std::string("echo")}, {"n", int64_t{7}}}).ok());
  auto r = cl.recv(5000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->header.type, MsgType::probe_reply);
  EXPECT_EQ(meta_int(*r, "n"), 7);

  Bundle b{Tensor::allocate("probe", DType::uint8, {100000})};
  ASSERT_TRUE(cl.send(MsgType::probe, -1, b, {{"op", std::string("sink")}, {"n", int64_t{8}}}).ok());
  r = cl.recv(5000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(meta_int(*r, "bytes"), 100000);
  EXPECT_EQ(meta_int(*r, "n"), 8);

  ASSERT_TRUE(cl.send(MsgType::probe, -1, {}, {{"op", std::string("source")}, {"n", int64_t{9}}, {"bytes", int64_t{123457}}}).ok());
  r = cl.recv(5000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->tensors.size(), 1u);
  EXPECT_EQ(r->tensors[0].nbytes, 123457u);

  // Hostile: a huge source request and an unknown op are refused, typed.
  for (Meta bad : {Meta{{"op", std::string("source")}, {"bytes", int64_t{1} << 40}}, Meta{{"op", std::string("flood")}}}) {
    ASSERT_TRUE(cl.send(MsgType::probe, -1, {}, bad).ok());
    r = cl.recv(5000);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->header.type, MsgType::error);
    ASSERT_TRUE(r->header.error.has_value());
    EXPECT_EQ(r->header.error->code, Errc::invalid_argument) << r->header.error->str();
  }
  // The session carries on.
  ASSERT_TRUE(cl.send(MsgType::probe, -1, {}, {{"op", std::string("echo")}, {"n", int64_t{10}}}).ok());
  r = cl.recv(5000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(meta_int(*r, "n"), 10);
  stop = true;
  drain.join();
  EXPECT_EQ((*agent)->stop(3000), 0);
}
