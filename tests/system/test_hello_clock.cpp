// HELLO freshness on the controller's clock (PROTOCOL.md 6.3 "Freshness"):
// an agent reads "HEX clock_ms=N" as its first line and dates and checks
// HELLOs on that clock, not on its device's, so a board whose clock was never
// set still agrees with its peers, and a HELLO off by more than the window is
// refused with the offset.
#include <chrono>
#include <fstream>

#include "wire/control.hpp"
#include "fleet/process.hpp"
#include "protocol/channel.hpp"
#include "protocol/crypto.hpp"
#include "system/system_util.hpp"

using namespace tracr;
using namespace tracr::fleet;
using namespace tracr::testing;

namespace {
const std::string kAgent = std::string(TRACR_BIN_DIR) + "/tracr-agent";
}  // namespace

TEST(HelloClock, AnAgentDatesAndChecksHellosOnTheClockItsControllerHandsIt) {
  TempDir d;
  auto p = ChildProcess::spawn({kAgent, "--role", "SERVER", "--bind", "tcp://127.0.0.1:0"},
                               (d.path / "server.log").string());
  ASSERT_TRUE(p.ok()) << p.error().str();
  const std::vector<uint8_t> secret(32, 9);
  // The controller's clock is an hour behind this machine's.
  const int64_t controller_ms = protocol::hello_clock_ms(protocol::Security{}) - 3600 * 1000;
  ASSERT_TRUE(
      p->write_stdin(protocol::to_hex(secret.data(), secret.size()) + " clock_ms=" + std::to_string(controller_ms) + "\n")
          .ok());
  wire::ControlCodec codec(secret, wire::ControlDir::agent_to_controller);
  std::string endpoint;
  for (int i = 0; i < 200 && endpoint.empty(); ++i) {
    auto line = p->read_line(20000);
    ASSERT_TRUE(line.ok()) << line.error().str();
    auto m = codec.decode(*line);
    ASSERT_TRUE(m.ok()) << m.error().str();
    if (m->kind == "READY") endpoint = m->get_or("endpoint", "");
  }
  ASSERT_FALSE(endpoint.empty());

  zmq::context_t ctx(1);
  protocol::ChannelOptions on_controller;
  on_controller.security.secret = secret;
  on_controller.security.clock = protocol::anchored_clock(controller_ms + 50);  // launched a moment later
  auto in = protocol::Client::connect(ctx, endpoint, on_controller);
  ASSERT_TRUE(in.ok()) << in.error().str();
  (*in)->close();

  // A peer on this machine's clock is an hour ahead of the agent's: refused.
  protocol::ChannelOptions on_system;
  on_system.security.secret = secret;
  on_system.handshake_timeout_ms = 5000;
  auto out = protocol::Client::connect(ctx, endpoint, on_system);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("ahead of the server's clock (window +-120 s)"), std::string::npos)
      << out.error().str();
  EXPECT_EQ(p->stop(5000), 0);  // stdin closed: a normal exit
}

TEST(HelloClock, AMalformedClockIsRefusedAtStart) {
  TempDir d;
  const std::string log = (d.path / "server.log").string();
  auto p = ChildProcess::spawn({kAgent, "--role", "SERVER", "--bind", "tcp://127.0.0.1:0"}, log);
  ASSERT_TRUE(p.ok()) << p.error().str();
  const std::vector<uint8_t> secret(32, 9);
  ASSERT_TRUE(p->write_stdin(protocol::to_hex(secret.data(), secret.size()) + " clock_ms=yesterday\n").ok());
  for (int i = 0; i < 100 && p->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(p->running());
  EXPECT_EQ(p->stop(0), 2);
  std::ifstream f(log);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("expected 'clock_ms=N'"), std::string::npos) << text;
}
