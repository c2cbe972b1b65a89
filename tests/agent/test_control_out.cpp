// The agent's side of the control channel: what makes it exit, and what its
// HEARTBEAT lines say about its serving loop (issue #24).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "agent/roles.hpp"

using namespace tracr::agent;
using namespace tracr::wire;

namespace {
std::vector<uint8_t> secret() { return std::vector<uint8_t>(32, 9); }
}  // namespace

// Its stdin closes while the main thread is stuck (here: asleep for 60 s, as
// it was when blocked in a send): the agent exits by itself, status 4, once
// the grace has passed, instead of waiting for SIGKILL.
TEST(ControlOutDeathTest, AgentWhoseStdinClosesExitsWhateverItsMainThreadDoes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int fds[2];
        if (::pipe(fds) != 0) std::_Exit(10);
        ::dup2(fds[0], 0);
        ::close(fds[1]);  // the controller's end: closed
        ::dup2(::open("/dev/null", 1), 1);  // control lines go nowhere
        ControlOut ctl(secret(), true, 0);
        std::this_thread::sleep_for(std::chrono::seconds(60));  // stuck
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(ControlOut::kOrphanExitStatus), "after its stdin closed: exiting now");
}

// A serving loop that turns has `loop` in its heartbeats; one that stopped
// turning for stall_ms gets `stalled_ms` too, which the controller ends the
// run on. Nothing before the loop starts (loading a model is not a stall).
TEST(ControlOut, HeartbeatSaysWhenTheServingLoopStopsTurning) {
  ControlOut ctl(secret(), false, 0, 300);
  EXPECT_TRUE(ctl.heartbeat_fields().empty());
  ctl.note_progress();
  ctl.note_progress();
  auto f = ctl.heartbeat_fields();
  EXPECT_EQ(f["loop"], "2");
  EXPECT_EQ(f.count("stalled_ms"), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  f = ctl.heartbeat_fields();
  ASSERT_EQ(f.count("stalled_ms"), 1u);
  EXPECT_GE(std::atoll(f["stalled_ms"].c_str()), 300);
  EXPECT_EQ(f["stall_limit_ms"], "300");
  EXPECT_LT(std::atoll(f["cpu_ms"].c_str()) * 100, std::atoll(f["window_ms"].c_str()) * ControlOut::kMinBusyCpuPct);
  ctl.note_progress();
  EXPECT_EQ(ctl.heartbeat_fields().count("stalled_ms"), 0u);
}

// A loop that has not turned because one frame computes for long (#46: a
// video model's 50 s forward) is not stalled: the heartbeat thread sees the
// process's CPU time advance and says `computing_ms`; once the process goes
// idle with the loop still not turning, it is stalled after stall_ms.
TEST(ControlOut, ALongComputationIsNotAStallButAnIdleLoopStillIs) {
  ControlOut ctl(secret(), false, 0, 300);
  ctl.note_progress();
  std::atomic<bool> spin{true};
  std::thread work([&] {
    volatile uint64_t x = 0;
    while (spin) x = x + 1;  // one core busy: the "forward pass"
  });
  std::map<std::string, std::string> f;
  for (int i = 0; i < 20; ++i) {  // 1 s of heartbeats, every 50 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    f = ctl.heartbeat_fields();
    EXPECT_EQ(f.count("stalled_ms"), 0u) << "at " << (i + 1) * 50 << " ms: cpu " << f["cpu_ms"] << " of "
                                         << f["window_ms"];
  }
  EXPECT_EQ(f.count("computing_ms"), 1u);
  EXPECT_GE(std::atoll(f["computing_ms"].c_str()), 900);
  spin = false;
  work.join();
  // Idle from here: stalled once a whole window has passed without CPU.
  bool stalled = false;
  for (int i = 0; i < 40 && !stalled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stalled = ctl.heartbeat_fields().count("stalled_ms") == 1;
  }
  EXPECT_TRUE(stalled);
}
