// The SERVER's rejection summary: a flood of junk becomes at most one LOG
// line per period, with counts per kind, never one line per message.
#include <gtest/gtest.h>

#include "agent/reject_log.hpp"

using tracr::Errc;
using tracr::make_error;
using tracr::agent::RejectionLog;

TEST(RejectionLog, TwentyThousandRejectionsOverFiveSecondsMakeAtMostSixLines) {
  RejectionLog log;
  auto t = RejectionLog::Clock::time_point{} + std::chrono::hours(1);
  uint64_t lines = 0, counted = 0;
  std::string last;
  for (int i = 0; i < 20000; ++i) {
    t += std::chrono::microseconds(250);  // 4,000 per second for 5 s
    log.note(make_error(i % 4 ? Errc::auth_failed : Errc::replay, "junk " + std::to_string(i)));
    if (auto line = log.due(t)) {
      ++lines;
      last = *line;
      // "N rejected message(s)...": the counts add up to every note.
      counted += std::stoull(*line);
    }
  }
  if (auto line = log.flush(t)) {
    ++lines;
    counted += std::stoull(*line);
  }
  EXPECT_EQ(counted, 20000u);
  EXPECT_LE(lines, 7u);  // the first at once, then one per second, then the flush
  EXPECT_GE(lines, 5u);
  EXPECT_NE(last.find("auth_failed 3000, replay 1000"), std::string::npos) << last;
  EXPECT_NE(last.find("; latest: replay: junk 16000"), std::string::npos) << last;
}

TEST(RejectionLog, NothingNotedNothingDue) {
  RejectionLog log;
  const auto t = RejectionLog::Clock::now();
  EXPECT_FALSE(log.due(t).has_value());
  EXPECT_FALSE(log.flush(t).has_value());
  log.note(make_error(Errc::malformed_header, "x"));
  auto first = log.due(t);
  ASSERT_TRUE(first.has_value());  // the first after a quiet spell is due at once
  EXPECT_EQ(*first, "1 rejected message(s): malformed_header 1; latest: malformed_header: x");
  log.note(make_error(Errc::malformed_header, "y"));
  EXPECT_FALSE(log.due(t + std::chrono::milliseconds(999)).has_value());
  EXPECT_TRUE(log.due(t + std::chrono::milliseconds(1000)).has_value());
  EXPECT_EQ(log.lines(), 2u);
}
