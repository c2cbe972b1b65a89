// The offline threshold sweep of early exits (analysis/exits.hpp) on frames
// written by hand: which exit each frame takes, frames whose final answer the
// run never computed, latency from the stored times, the Pareto front. The
// end-to-end check against re-runs and an independent script is
// tests/system/test_exits.cpp.
#include <gtest/gtest.h>

#include "analysis/exits.hpp"

using namespace tracr::analysis;

namespace {

ExitFrame frame(std::optional<int64_t> exit_index, const std::string& results, const std::string& times,
                int64_t total_ms, int64_t correct, int64_t label) {
  ExitFrame f;
  f.split = 8;
  f.placement = "8";
  f.exit_index = exit_index;
  f.exit_results = results;
  f.exit_times = times;
  f.total_ns = total_ms * 1000000;
  f.post_ns = 0;
  f.sent_bytes = exit_index ? 0 : 1000;
  f.correct = correct;
  f.label = label;
  return f;
}

}  // namespace

TEST(ExitSweep, EachFrameTakesTheFirstExitThatReachesTheThreshold) {
  // Run at threshold 0.9: frame a exited at exit 0, b and c were sent.
  std::vector<ExitFrame> fs = {
      frame(0, "0=3:0.95:0.5 1=3:0.99:0.9", "1000000 2000000", 1, 1, 3),
      frame(std::nullopt, "0=1:0.7:0.3 1=2:0.85:0.6", "1000000 2000000", 10, 0, 2),
      frame(std::nullopt, "0=4:0.2:0.1 1=5:0.3:0.2", "1000000 2000000", 12, 1, 5),
  };
  auto rows = sweep_exits(fs, {0.6, 0.8, 0.9, 0.97}, "max_softmax");
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 4u);
  const auto& t06 = (*rows)[0];  // a at exit 0 (correct), b at exit 0 (class 1, label 2: wrong), c sent (correct)
  EXPECT_EQ(t06.exited, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(t06.sent, 1);
  EXPECT_EQ(t06.unknown, 0);
  ASSERT_TRUE(t06.accuracy);
  EXPECT_DOUBLE_EQ(*t06.accuracy, 2.0 / 3);
  EXPECT_DOUBLE_EQ(*t06.mean_ms, (1 + 1 + 12) / 3.0);
  EXPECT_DOUBLE_EQ(t06.bytes_per_frame, 1000 / 3.0);
  const auto& t08 = (*rows)[1];  // b now at exit 1 (class 2: right)
  EXPECT_EQ(t08.exited, (std::vector<int64_t>{1, 1}));
  EXPECT_DOUBLE_EQ(*t08.accuracy, 1.0);
  EXPECT_DOUBLE_EQ(*t08.mean_ms, (1 + 2 + 12) / 3.0);
  const auto& t09 = (*rows)[2];  // the run's own threshold: as it ran
  EXPECT_EQ(t09.exited, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(t09.sent, 2);
  EXPECT_DOUBLE_EQ(*t09.mean_ms, (1 + 10 + 12) / 3.0);
  const auto& t097 = (*rows)[3];  // a: exit 1 reaches 0.99: known; nothing unknown
  EXPECT_EQ(t097.exited, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(t097.unknown, 0);
  // Front: 0.6 (0.667 at 4.67 ms) and 0.8 (1.0 at 5 ms); 0.9 (0.667, 7.67 ms) and 0.97 (0.667, 8 ms) are beaten.
  EXPECT_TRUE(t06.pareto);
  EXPECT_TRUE(t08.pareto);
  EXPECT_FALSE(t09.pareto);
  EXPECT_FALSE(t097.pareto);
}

TEST(ExitSweep, AFrameTheRunEndedEarlyIsUnknownWhereNoExitTakesIt) {
  std::vector<ExitFrame> fs = {frame(0, "0=3:0.95:0.5 1=3:0.96:0.9", "1000000 2000000", 1, 1, 3),
                               frame(std::nullopt, "0=1:0.5:0.3 1=1:0.6:0.4", "1000000 2000000", 9, 1, 1)};
  auto rows = sweep_exits(fs, {0.99}, "max_softmax");
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].unknown, 1);
  EXPECT_EQ((*rows)[0].sent, 1);
  EXPECT_FALSE((*rows)[0].accuracy);  // left out, not guessed
  EXPECT_FALSE((*rows)[0].mean_ms);
  // The entropy measure reads the third figure.
  auto e = sweep_exits(fs, {0.85}, "entropy");
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)[0].exited, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ((*e)[0].sent, 1);
}

TEST(ExitSweep, ThresholdsAndStoredAnswersAreReadOrRefusedByName) {
  auto r = parse_thresholds("0.5:0.99:0.01");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size(), 50u);
  EXPECT_DOUBLE_EQ(r->front(), 0.5);
  EXPECT_EQ(r->at(40), 0.9);  // exactly the double a YAML 0.9 is
  EXPECT_EQ(r->back(), 0.99);
  auto l = parse_thresholds("0.3,0.7");
  ASSERT_TRUE(l);
  EXPECT_EQ(*l, (std::vector<double>{0.3, 0.7}));
  for (const char* bad : {"0.9:0.5:0.1", "0.5:1.5:0.1", "0.5:0.9:0", "x", "1.2"}) {
    auto b = parse_thresholds(bad);
    ASSERT_FALSE(b) << bad;
    EXPECT_NE(b.error().message.find("expected from:to:step"), std::string::npos) << b.error().message;
  }
  auto bad = parse_exit_answers("0=3:0.9", "100");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("expected <exit>=<class>:<max softmax>"), std::string::npos);
  EXPECT_FALSE(parse_exit_answers("0=3:0.9:0.5 1=2:0.1:0.1", "100"));  // one time for two exits
  EXPECT_FALSE(sweep_exits({}, {0.5}, "margin"));
}

TEST(ExitPlan, ALatencyBoundTakesTheMostAccuratePairWithinItOnTheLinkPlanned) {
  // Two frames at split 8 (exit costs 0.5 ms each), both sent in the basis run.
  std::vector<ExitFrame> fs = {frame(std::nullopt, "0=3:0.95:0.5 1=3:0.99:0.9", "1000000 2000000", 10, 1, 3),
                               frame(std::nullopt, "0=1:0.6:0.3 1=2:0.7:0.6", "1000000 2000000", 10, 1, 2)};
  for (auto& f : fs) f.exit_ns = 500000;
  // Sent at split 8: 20 ms predicted on the link planned for.
  auto plan = plan_exits(fs, {{8, 20.0}}, {0.5, 0.65, 0.9, 1.0}, "max_softmax", 12.0, std::nullopt);
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->rows.size(), 4u);
  // 0.5: both exit at exit 0 (1 ms each); the second wrongly (class 1, label 2).
  EXPECT_DOUBLE_EQ(plan->rows[0].latency_ms, 1.0);
  EXPECT_DOUBLE_EQ(*plan->rows[0].accuracy, 0.5);
  // 0.65: the second exits at exit 1 (2 ms, right).
  EXPECT_DOUBLE_EQ(plan->rows[1].latency_ms, 1.5);
  EXPECT_DOUBLE_EQ(*plan->rows[1].accuracy, 1.0);
  // 0.9: the second is sent: 20 ms + its exits' 0.5 ms.
  EXPECT_DOUBLE_EQ(plan->rows[2].sent_ms, 20.5);
  EXPECT_DOUBLE_EQ(plan->rows[2].latency_ms, (1.0 + 20.5) / 2);
  EXPECT_FALSE(plan->rows[3].feasible);  // 1.0: both sent, 20.5 ms > 12
  EXPECT_EQ(plan->chosen, 1);            // the most accurate within 12 ms, then the faster
  // An accuracy floor takes the fastest pair that reaches it.
  auto floor = plan_exits(fs, {{8, 20.0}}, {0.5, 0.65, 0.9, 1.0}, "max_softmax", std::nullopt, 0.9);
  ASSERT_TRUE(floor);
  EXPECT_EQ(floor->chosen, 1);
  EXPECT_FALSE(floor->rows[0].feasible);
  // A split the offload plan has no row for is named, not guessed.
  auto none = plan_exits(fs, {{6, 20.0}}, {0.5}, "max_softmax", std::nullopt, std::nullopt);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->rows.empty());
  EXPECT_EQ(none->unplanned, (std::vector<int64_t>{8}));
  EXPECT_EQ(none->chosen, -1);
}
