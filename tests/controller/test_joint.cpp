// The joint planner's queueing (analysis/joint.hpp): the multi-class mean
// value analysis against the single-class recursion and a case solved by
// hand, the approximation's bounds, and the search on a saturated SERVER.
// The end-to-end path (participant_splits, plan --joint --validate-on) is in
// tests/system/test_plan.cpp.
#include <cmath>

#include <gtest/gtest.h>

#include "analysis/joint.hpp"

using namespace tracr::analysis;

namespace {

PlanRow row(int split, double service_ms, double alone_ms, double variability = 1) {
  PlanRow r;
  r.split = split;
  r.codec = "none";
  r.service_ms = service_ms;
  r.alone_ms = r.latency_ms = alone_ms;
  r.variability = variability;
  return r;
}

Plan plan_of(std::vector<PlanRow> rows) {
  Plan p;
  p.basis_codec = "none";
  p.objective = "latency";
  p.rows = std::move(rows);
  return p;
}

}  // namespace

// With one class, n participants at one split: plan.hpp's recursion, R(i) = S (1 + Q(i - 1)).
TEST(Joint, OneClassIsTheSingleClassRecursion) {
  const double s = 4, alone = 10, z = alone - s;
  const Plan p = plan_of({row(3, s, alone)});
  double q = 0, resp = s;
  for (int n = 1; n <= 8; ++n) {
    resp = s * (1 + q);
    q = n / (z + resp) * resp;
    auto j = solve_assignment(p, {{0, n}});
    ASSERT_TRUE(j) << j.error().message;
    ASSERT_EQ(j->classes.size(), 1u);
    EXPECT_NEAR(j->classes[0].latency_ms, z + resp, 1e-9) << n;
    EXPECT_NEAR(j->classes[0].queue_ms, resp - s, 1e-9) << n;
    EXPECT_NEAR(j->total_fps, 1e3 * n / (z + resp), 1e-9) << n;
    EXPECT_NEAR(j->server_busy, n / (z + resp) * s, 1e-12) << n;
    EXPECT_EQ(j->model.rfind("modelled:mva-bound-exact(1 class, one per split;", 0), 0u) << j->model;
  }
}

// One class of frames whose times do not vary (v = 0) follows the constant-times bound: no wait below the knee
// (n S <= Z + S), and past it each frame waits for the n - 1 others, the cycle n S (the SERVER always busy).
// Halfway (v = 0.5) is halfway between the bound and the MVA, which waits near the knee too and meets the
// bound far past it.
TEST(Joint, SteadyFramesFollowTheConstantTimesBound) {
  const double s = 4, alone = 10, z = alone - s;  // the knee: n S = Z + S at n = 2.5
  for (int n = 1; n <= 8; ++n) {
    auto steady = solve_assignment(plan_of({row(3, s, alone, 0.0)}), {{0, n}});
    auto mva = solve_assignment(plan_of({row(3, s, alone, 1.0)}), {{0, n}});
    auto half = solve_assignment(plan_of({row(3, s, alone, 0.5)}), {{0, n}});
    ASSERT_TRUE(steady && mva && half);
    const double bound = std::max(s, n * s - z);
    EXPECT_NEAR(steady->classes[0].latency_ms, z + bound, 1e-9) << n;
    EXPECT_NEAR(steady->server_busy, std::min(1.0, n * s / (z + s)), 1e-9) << n;
    EXPECT_NEAR(half->classes[0].queue_ms, (steady->classes[0].queue_ms + mva->classes[0].queue_ms) / 2, 1e-9) << n;
    EXPECT_GE(mva->classes[0].queue_ms, steady->classes[0].queue_ms - 1e-9) << n;  // MVA: above the bound
    if (n >= 2 && n <= 3) {                                                        // at the knee
      EXPECT_GT(mva->classes[0].queue_ms, steady->classes[0].queue_ms + 1.0) << n;
    }
  }
  // Several classes: the MVA whatever the rows' variability (a FIFO SERVER does not serve unlike classes in
  // equal rounds).
  auto two_steady = solve_assignment(plan_of({row(0, 10, 12, 0.0), row(16, 3, 43, 0.0)}), {{0, 3}, {1, 2}});
  auto two_mva = solve_assignment(plan_of({row(0, 10, 12, 1.0), row(16, 3, 43, 1.0)}), {{0, 3}, {1, 2}});
  ASSERT_TRUE(two_steady && two_mva);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_NEAR(two_steady->classes[i].latency_ms, two_mva->classes[i].latency_ms, 1e-12) << i;
  EXPECT_EQ(two_steady->model.rfind("modelled:mva-exact(2 classes", 0), 0u) << two_steady->model;
}

// Two classes of one participant each, solved by hand: each finds the other at the SERVER with the
// probability the other alone spends there, S / (Z + S).
TEST(Joint, TwoParticipantsAtDifferentSplitsAreSolvedExactly) {
  const Plan p = plan_of({row(0, 4, 10), row(22, 1, 10)});  // S 4, Z 6; S 1, Z 9
  auto j = solve_assignment(p, {{0, 1}, {1, 1}});
  ASSERT_TRUE(j) << j.error().message;
  ASSERT_EQ(j->classes.size(), 2u);
  const double r0 = 4 * (1 + 1.0 / 10), r1 = 1 * (1 + 4.0 / 10);
  EXPECT_NEAR(j->classes[0].latency_ms, 6 + r0, 1e-12);
  EXPECT_NEAR(j->classes[1].latency_ms, 9 + r1, 1e-12);
  EXPECT_NEAR(j->classes[0].queue_ms, r0 - 4, 1e-12);
  EXPECT_NEAR(j->mean_latency_ms, (6 + r0 + 9 + r1) / 2, 1e-12);
  EXPECT_NEAR(j->server_busy, 4 / (6 + r0) + 1 / (9 + r1), 1e-12);
  // Zero counts are no class; an empty assignment or a row that is not there is refused.
  auto same = solve_assignment(p, {{0, 1}, {1, 1}, {0, 0}});
  ASSERT_TRUE(same);
  EXPECT_EQ(same->classes.size(), 2u);
  EXPECT_FALSE(solve_assignment(p, {{0, 0}}));
  EXPECT_FALSE(solve_assignment(p, {{5, 1}}));
}

// Past 100,000 population vectors the approximation is used, says so, and stays within the SERVER's
// capacity: busy at most 1, and close to 1 when 180 participants each need it for half their frame.
TEST(Joint, ManyClassesUseTheApproximationWithinTheServersCapacity) {
  const Plan p = plan_of({row(0, 5, 10), row(1, 4, 10), row(2, 6, 10)});
  auto j = solve_assignment(p, {{0, 60}, {1, 60}, {2, 60}});
  ASSERT_TRUE(j) << j.error().message;
  EXPECT_EQ(j->model.rfind("modelled:mva-schweitzer(3 classes", 0), 0u) << j->model;
  EXPECT_LE(j->server_busy, 1.0 + 1e-9);
  EXPECT_GT(j->server_busy, 0.97);
  EXPECT_EQ(j->participants, 180);
  // Fewer vectors: exact.
  auto small = solve_assignment(p, {{0, 20}, {1, 20}, {2, 20}});  // 9,261 vectors: exact
  ASSERT_TRUE(small);
  EXPECT_EQ(small->model.rfind("modelled:mva-exact(", 0), 0u);
}

// A SERVER that one split saturates: every participant there queues, every participant at the local split
// is slow; the joint plan mixes them and beats the best common split, and says by how much.
TEST(Joint, ASaturatedServerIsSharedByMovingSomeParticipantsToTheirOwnDevice) {
  Plan p = plan_of({row(0, 10, 12), row(22, 0, 30)});  // offload: 10 ms of SERVER; local: 30 ms, no SERVER
  PlanOptions opt;
  auto j = plan_jointly(p, 4, opt);
  ASSERT_TRUE(j) << j.error().message;
  ASSERT_EQ(j->classes.size(), 2u);
  EXPECT_EQ(j->classes[0].participants + j->classes[1].participants, 4);
  EXPECT_LT(j->mean_latency_ms, j->common_mean_ms);
  // Best common: all four offloading (about 4 x 10 ms at the SERVER) or all local (30 ms).
  auto all0 = solve_assignment(p, {{0, 4}});
  ASSERT_TRUE(all0);
  EXPECT_NEAR(j->common_mean_ms, std::min(all0->mean_latency_ms, 30.0), 1e-9);
  // No assignment of four is better than the one chosen (the search moved until none was).
  for (int k = 0; k <= 4; ++k) {
    auto a = solve_assignment(p, {{0, k}, {1, 4 - k}});
    ASSERT_TRUE(a);
    EXPECT_GE(a->mean_latency_ms, j->mean_latency_ms - 1e-9) << k;
  }
  const std::string text = format_joint(p, *j);
  EXPECT_NE(text.find("joint plan for 4 participants sharing the SERVER (modelled:mva-exact(2 classes"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(the joint plan: -"), std::string::npos) << text;
  // Throughput: the SERVER kept busy, at least as many frames/s as the best common split.
  opt.objective = "throughput";
  auto t = plan_jointly(p, 4, opt);
  ASSERT_TRUE(t);
  EXPECT_GE(t->total_fps, t->common_total_fps - 1e-9);
  // A latency bound no class may exceed: 20 ms leaves only assignments where everyone offloads and few queue.
  opt.objective = "latency";
  opt.max_latency_ms = 20;
  auto bound = plan_jointly(p, 4, opt);
  EXPECT_FALSE(bound);  // 30 ms locally, and four at the SERVER wait past 20 ms
  opt.max_latency_ms = 25;
  auto two = plan_jointly(p, 2, opt);
  ASSERT_TRUE(two) << two.error().message;
  for (const auto& c : two->classes) EXPECT_LE(c.latency_ms, 25.0);
  // More participants than the search places, or none, are refused.
  opt.max_latency_ms.reset();
  EXPECT_FALSE(plan_jointly(p, 1001, opt));
  EXPECT_FALSE(plan_jointly(p, 0, opt));
  auto many = plan_jointly(p, 1000, opt);
  ASSERT_TRUE(many) << many.error().message;
  EXPECT_EQ(many->participants, 1000);
  // Objectives other than latency and throughput are refused, naming the flag.
  opt.objective = "energy";
  auto e = plan_jointly(p, 4, opt);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("--joint: objective 'energy'"), std::string::npos) << e.error().message;
}
