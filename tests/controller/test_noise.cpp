// `results compare` says whether a difference exceeds the runs' own spread:
// the bootstrap interval of the change of the median (analysis/noise.hpp),
// on values drawn from known distributions, then through the command on a
// real SQLite database.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/noise.hpp"
#include "analysis/plan.hpp"
#include "store/results.hpp"
#include "tests/system/system_util.hpp"

namespace {

using namespace tracr::analysis;
using namespace tracr::store;

std::vector<int64_t> draw(double median_ms, double spread_ms, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(median_ms * 1e6, spread_ms * 1e6);
  std::vector<int64_t> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(std::max(1.0, d(rng))));
  return v;
}

TEST(Noise, OverlappingRunsAreTheSameAndSeparatedRunsDiffer) {
  // Two draws of one distribution (10 ms, sd 3 ms): whatever their medians
  // differ by, the interval includes 0.
  auto same = median_change(draw(10, 3, 30, 1), draw(10, 3, 30, 2));
  ASSERT_TRUE(same.has_value());
  EXPECT_FALSE(same->exceeds_spread()) << same->change_pct << " [" << same->lo_pct << ", " << same->hi_pct << "]";
  EXPECT_LE(same->lo_pct, same->change_pct);
  EXPECT_GE(same->hi_pct, same->change_pct);
  // 10 ms against 7.5 ms, sd 0.5 ms: a real change of about -25 %, interval around it.
  auto faster = median_change(draw(10, 0.5, 30, 3), draw(7.5, 0.5, 30, 4));
  ASSERT_TRUE(faster.has_value());
  EXPECT_TRUE(faster->exceeds_spread());
  EXPECT_NEAR(faster->change_pct, -25, 5);
  EXPECT_LT(faster->hi_pct, 0);
  // The same runs give the same interval (fixed seed).
  auto again = median_change(draw(10, 0.5, 30, 3), draw(7.5, 0.5, 30, 4));
  EXPECT_EQ(again->lo_pct, faster->lo_pct);
  EXPECT_EQ(again->hi_pct, faster->hi_pct);
  // Too few frames to say anything.
  EXPECT_FALSE(median_change(draw(10, 1, 4, 5), draw(10, 1, 30, 6)).has_value());
}

TEST(Noise, ResultsCompareSaysSameForOverlappingRuns) {
  tracr::testing::TempDir dir;
  const std::string path = (dir.path / "n.db").string();
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    int seed = 10;
    for (double ms : {10.0, 10.4, 7.0}) {
      RunInfo info;
      info.name = "n";
      info.model = "alexnet";
      info.codec = "none";
      info.cipher = "none";
      info.config_yaml = "name: n\n";
      auto run = db->begin_run(info);
      ASSERT_TRUE(run.ok());
      std::vector<FrameRecord> frames;
      int i = 0;
      for (int64_t total : draw(ms, ms == 7.0 ? 0.3 : 3, 25, static_cast<uint64_t>(seed++))) {
        FrameRecord f;
        f.run_id = *run;
        f.participant = "edge";
        f.frame = i;
        f.split = 3;
        f.batch = 1;
        f.policy = "sweep";
        f.codec = "none";
        f.cipher = "none";
        f.start_ns = 1000000000LL * i++;
        f.end_ns = f.start_ns + total;
        f.head_ns = total;
        f.total_ns = total;
        f.ok = 1;
        f.correct = -1;
        f.top5_correct = -1;
        frames.push_back(f);
      }
      auto added = db->add_frames(frames);
      ASSERT_TRUE(added.ok()) << added.error().str();
      ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
    }
  }
  auto r = tracr::testing::sh(std::string(TRACR_BIN_DIR) + "/tracrctl results compare 1 2 3 --db " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  // B (10.4 ms, sd 3) overlaps A (10 ms, sd 3): "within noise"; C (7 ms, sd 0.3) does not.
  EXPECT_NE(r.out.find("within noise ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bootstrap interval"), std::string::npos) << r.out;
  const size_t at = r.out.find("within noise (");
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t row = r.out.rfind('\n', at);
  const std::string line = r.out.substr(row + 1, r.out.find('\n', at) - row - 1);
  EXPECT_EQ(line.find("within noise"), line.rfind("within noise")) << "only B is within noise of A: " << line;
  EXPECT_NE(line.find("% [-"), std::string::npos) << line;
}

// plan --validate warns when the basis run's profiles were far from its
// frames (a loaded machine while profiling): the error says more about the
// load than the model, and a repeated series is the remedy.
TEST(Noise, AValidatedPlanWarnsWhenItsProfilesWereFarFromItsFrames) {
  Plan p;
  p.basis_run = 3;
  p.validation_run = 3;
  p.model = "alexnet";
  p.objective = "latency";
  p.chosen = 0;
  p.mape_pct = 41.0;
  PlanRow r;
  r.split = 0;
  r.codec = "none";
  r.latency_ms = 100;
  r.measured_ms = 141;
  r.error_pct = -29;
  p.rows = {r};
  p.head_vs_frames_pct = 1.7;
  p.head_vs_frames_splits = 1;
  p.tail_vs_frames_pct = 239;
  p.tail_vs_frames_splits = 1;
  const std::string far = format_plan(p, 200);
  EXPECT_NE(far.find("warning: run 3's layer profiles are 239 % from run 3's frames"), std::string::npos) << far;
  EXPECT_NE(far.find("--repeat N"), std::string::npos) << far;
  p.tail_vs_frames_pct = -8;
  const std::string near = format_plan(p, 200);
  EXPECT_EQ(near.find("warning:"), std::string::npos) << near;
  EXPECT_NE(near.find("SERVER tails -8.0 %"), std::string::npos) << near;
}

}  // namespace
