// Agents that outlive their controller (issue #12): tracrctl sends every agent
// a HEARTBEAT control line each second; an agent started with
// --heartbeat-timeout-ms stops when it hears nothing for that long, even
// while its stdin stays open (what a network partition does to the stdin of
// an agent behind sshd), and keeps running as long as the heartbeats come.
// The partition itself (a namespace link taken down under an SSH agent) is
// RunSshPartition in test_run_ssh.cpp.
#include <atomic>
#include <chrono>
#include <thread>

#include "agent/roles.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "protocol/crypto.hpp"
#include "system/system_util.hpp"

using namespace tracr;
using namespace tracr::core;
using namespace tracr::fleet;
using namespace tracr::testing;
using Clock = std::chrono::steady_clock;

namespace {
const std::string kAgent = std::string(TRACR_BIN_DIR) + "/tracr-agent";
}  // namespace

TEST(AgentHeartbeat, SilentControllerStopsAnAgentWhoseStdinStaysOpen) {
  TempDir d;
  const std::string log = (d.path / "agent.log").string();
  auto p = ChildProcess::spawn({kAgent, "--role", "SERVER", "--bind", "tcp://127.0.0.1:0", "--heartbeat-timeout-ms", "2000"},
                               log);
  ASSERT_TRUE(p.ok()) << p.error().str();
  const std::vector<uint8_t> secret(32, 5);
  // The secret, then nothing: stdin stays open, no heartbeat ever comes.
  ASSERT_TRUE(p->write_stdin(protocol::to_hex(secret.data(), secret.size()) + "\n").ok());
  auto ready = p->read_line(20000);
  ASSERT_TRUE(ready.ok()) << ready.error().str();
  EXPECT_NE(ready->find(" READY "), std::string::npos) << *ready;
  const auto t0 = Clock::now();
  // Its own heartbeats keep coming while it waits; it must end by itself.
  while (p->running() && Clock::now() - t0 < std::chrono::seconds(30)) (void)p->read_line(100);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("agent with stdin open and a silent controller exited %.1f s after READY (timeout 2 s)\n", secs);
  ASSERT_FALSE(p->running()) << "the agent still runs 30 s after its controller went silent";
  EXPECT_EQ(p->stop(0), agent::ControlOut::kOrphanExitStatus);
  std::string text;
  {
    std::ifstream f(log);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  EXPECT_NE(text.find("no control line from the controller for 2000 ms"), std::string::npos) << text;
}

TEST(AgentHeartbeat, ControllerHeartbeatsKeepAnIdleAgentRunning) {
  static const settings::DeviceConfig local = local_device("server");
  LaunchSpec ls;
  ls.device = &local;
  ls.role = tracr::wire::AgentRole::server;
  ls.args = {"--bind", "tcp://127.0.0.1:0"};
  ls.agent_path = kAgent;
  ls.secret = std::vector<uint8_t>(32, 6);
  ls.heartbeat_timeout_ms = 2000;
  auto agent = launch_agent(ls);
  ASSERT_TRUE(agent.ok()) << agent.error().str();
  ASSERT_TRUE((*agent)->wait_ready(20000).ok());
  std::atomic<bool> stop{false};
  std::thread drain([&] {
    while (!stop) (void)(*agent)->proc().read_line(100);
  });
  // Nothing but heartbeats for 3 timeouts: the agent is still there.
  std::this_thread::sleep_for(std::chrono::milliseconds(6000));
  EXPECT_TRUE(alive((*agent)->proc().pid()));
  stop = true;
  drain.join();
  EXPECT_EQ((*agent)->stop(3000), 0);  // stdin closed: a normal exit
}

TEST(AgentHeartbeat, TimeoutOptionIsChecked) {
  agent::AgentOptions o;
  auto st = agent::parse_agent_args({"--role", "SERVER", "--heartbeat-timeout-ms", "10"}, o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("--heartbeat-timeout-ms: expected an integer 1000..3600000"), std::string::npos);
  agent::AgentOptions ok;
  ASSERT_TRUE(agent::parse_agent_args({"--role", "SERVER", "--heartbeat-timeout-ms", "4000"}, ok).ok());
  EXPECT_EQ(ok.heartbeat_timeout_ms, 4000);
}
