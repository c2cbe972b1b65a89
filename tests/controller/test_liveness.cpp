// When an agent counts as lost (#24): its heartbeat clock starts at its
// first control line; before it, the start-up limit runs from its launch.
// Time points are given, not slept, so the test does not depend on load.
#include <gtest/gtest.h>

#include "controller/session/liveness.hpp"

using tracr::controller::AgentLiveness;
using tracr::controller::kStartLimitMs;
using ms = std::chrono::milliseconds;

TEST(Liveness, StartUpIsNotCountedAgainstTheHeartbeat) {
  AgentLiveness l(5000);
  const auto t0 = AgentLiveness::Clock::now();
  l.launched(1, t0);
  // A slow start: silent for 30 s after launch is still starting, not lost.
  EXPECT_FALSE(l.lost(1, "PARTICIPANT", "pi", t0 + ms(30000)));
  // Past the start-up limit without one line: lost, and the message says it never started.
  auto never = l.lost(1, "PARTICIPANT", "pi", t0 + ms(kStartLimitMs + 1));
  ASSERT_TRUE(never);
  EXPECT_NE(never->find("PARTICIPANT agent on pi lost: not one control line from it in the 120000 ms since its launch"),
            std::string::npos)
      << *never;
  // Once it spoke, heartbeat_timeout_ms runs from its last line.
  l.heard(1, t0 + ms(30000));
  EXPECT_FALSE(l.lost(1, "PARTICIPANT", "pi", t0 + ms(35000)));
  auto silent = l.lost(1, "PARTICIPANT", "pi", t0 + ms(35001));
  ASSERT_TRUE(silent);
  EXPECT_NE(silent->find("no control line (it sends a heartbeat every second) for 5000 ms (heartbeat_timeout_ms)"),
            std::string::npos)
      << *silent;
  // A second launch call keeps the first launch time; an unlaunched agent is never lost.
  l.launched(2, t0);
  l.launched(2, t0 + ms(100000));
  EXPECT_TRUE(l.lost(2, "SERVER", "edge", t0 + ms(kStartLimitMs + 1)));
  EXPECT_FALSE(l.lost(3, "SERVER", "edge", t0 + ms(10 * kStartLimitMs)));
}

TEST(Liveness, AHeartbeatTimeoutAboveTheStartUpLimitIsTheStartUpLimit) {
  AgentLiveness l(300000);
  const auto t0 = AgentLiveness::Clock::now();
  l.launched(0, t0);
  EXPECT_FALSE(l.lost(0, "SERVER", "s", t0 + ms(kStartLimitMs + 1)));
  auto why = l.lost(0, "SERVER", "s", t0 + ms(300001));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("in the 300000 ms since its launch"), std::string::npos) << *why;
}

TEST(Liveness, AnEmptyAgentLogIsSaidToBeEmpty) {
  using tracr::controller::log_tail_text;
  EXPECT_EQ(log_tail_text("Killed\n"), "log tail:\nKilled\n");
  for (const char* empty : {"", "\n", "  \r\n"})
    EXPECT_EQ(log_tail_text(empty).rfind("its log is empty: it wrote nothing before it exited", 0), 0u) << empty;
}

// run and train declare an agent lost once, through newly_lost(), and stop
// a declared one with less patience.
TEST(Liveness, AnAgentIsDeclaredLostOnce) {
  AgentLiveness l(5000);
  const auto t0 = AgentLiveness::Clock::now();
  l.launched(4, t0);
  l.heard(4, t0);
  EXPECT_FALSE(l.newly_lost(4, "PARTICIPANT", "pi", t0 + ms(5000)));
  EXPECT_FALSE(l.declared_lost(4));
  auto first = l.newly_lost(4, "PARTICIPANT", "pi", t0 + ms(5001));
  ASSERT_TRUE(first);
  EXPECT_NE(first->find("PARTICIPANT agent on pi lost"), std::string::npos) << *first;
  EXPECT_TRUE(l.declared_lost(4));
  EXPECT_FALSE(l.newly_lost(4, "PARTICIPANT", "pi", t0 + ms(9000)));
  EXPECT_TRUE(l.lost(4, "PARTICIPANT", "pi", t0 + ms(9000)));  // the query still answers
  EXPECT_FALSE(l.declared_lost(5));
}
