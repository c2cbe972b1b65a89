// The planner end to end on a namespace test-bed: a sweep under two emulated
// links with a CPU-limited participant is planned and validated
// automatically, `tracrctl plan` re-plans a stored run and an experiment for
// another link, constraints and objectives behave, and every plan is stored.
// The figures themselves (errors, misses) are reported, not asserted: timing
// on shared CI cores is not a pass/fail criterion.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "store/results.hpp"
#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

}  // namespace

TEST(Plan, SweepIsPlannedValidatedAndStoredPerLink) {
  NetnsPair net("");
  NEED_NETNS(net);
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string devices = net.devices_yaml();
  devices.replace(devices.find("netns: " + net.b), 7 + net.b.size(), "netns: " + net.b + "\n    cpu_quota: 0.5");
  std::string y = small_experiment(db, "record:\n  layers: true\nprobe:\n  duration_ms: 1000\n  chunk_bytes: 16384\n"
                                       "link: [3g, gigabit]\n", d.file("devices.yaml", devices));
  y.replace(y.find("split: all"), 10, "split: [0, 6, 13, 22]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 2");
  const std::string exp = d.file("exp.yaml", y);
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // Each run printed its plan and validation; both are stored.
  EXPECT_NE(r.out.find("plan for alexnet at 3,64,64 from run 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan for alexnet at 3,64,64 from run 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation: latency MAPE"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select count(*) from plans where mape_pct is not null and measured_best is not null and "
                      "chosen is not null and miss_pct is not null"),
            "2");
  EXPECT_EQ(query(db, "select group_concat(link) from plans order by id"), "3g,gigabit");
  // Every split 0..22 predicted; the four the runs measured carry their measurement and error.
  EXPECT_EQ(query(db, "select count(*) from plan_rows where plan_id = 1"), "23");
  EXPECT_EQ(query(db, "select group_concat(split) from plan_rows where plan_id = 1 and measured_ms is not null"),
            "0,6,13,22");
  // The emulated link's bucket is part of the model, and the link figures say where they came from.
  EXPECT_NE(query(db, "select link_source from plans where id = 1").find("emulated with tbf"), std::string::npos);
  EXPECT_NE(query(db, "select overhead from plans where id = 1").find("fitted to run 1"), std::string::npos);
  // Transfer time follows the rate: the input (split 0) takes far longer up on 3g than on gigabit.
  EXPECT_GT(std::stod(query(db, "select up_ms from plan_rows where plan_id = 1 and split = 0")),
            50 * std::stod(query(db, "select up_ms from plan_rows where plan_id = 2 and split = 0")));
  for (const auto& row : query_col(db, "select link || ': MAPE ' || round(mape_pct, 1) || ' %, chosen ' || chosen || "
                                       "', measured best ' || measured_best || ', miss ' || round(miss_pct, 1) || ' %' "
                                       "from plans order by id"))
    std::printf("%s\n", row.c_str());

  // Re-plan the stored 3g run, and plan the experiment for a link it never ran under.
  auto again = sh(tracrctl() + " plan 1 --db " + db + " --validate");
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("stored as plan 3"), std::string::npos) << again.out;
  // Held out (#21): planned from the 3g run alone, for the gigabit run's link profile, and validated against
  // the gigabit run's measurements; both runs are named in the stored plan.
  auto held = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 2");
  EXPECT_EQ(held.status, 0) << held.out;
  EXPECT_NE(held.out.find("from run 1 (objective latency): link gigabit"), std::string::npos) << held.out;
  // Links as delivered (#21): the gigabit profile is planned at the rates run 2's probe measured through tracr's
  // emulation, with the nominal figures beside them; lte, which no run measured, at its nominal rates, said so.
  EXPECT_NE(held.out.find("link profile gigabit as delivered: run 2's probe through tracr's emulation measured "),
            std::string::npos)
      << held.out;
  EXPECT_NE(held.out.find("(nominal 1000 / 1000 Mbit/s, 0 ms delay: "), std::string::npos) << held.out;
  EXPECT_NE(held.out.find("validation against run 2 (held out: planned from run 1 alone): latency MAPE"),
            std::string::npos)
      << held.out;
  EXPECT_EQ(query(db, "select basis_run || ',' || validation_run || ',' || link || ',' || (mape_pct is not null) "
                      "from plans where id = 4"),
            "1,2,gigabit,1");
  EXPECT_EQ(query(db, "select validation_run from plans where id = 3"), "1");  // validated on its own basis
  EXPECT_EQ(query(db, "select count(*) from plans where id <= 2 and validation_run = basis_run"), "2");
  for (const auto& row : query_col(db, "select 'held out, from run ' || basis_run || ' (3g) to run ' || "
                                       "validation_run || ' (gigabit): MAPE ' || round(mape_pct, 1) || ' %, miss ' || "
                                       "round(miss_pct, 1) || ' %' from plans where id = 4"))
    std::printf("%s\n", row.c_str());
  auto nohere = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 99 --no-store");
  EXPECT_EQ(nohere.status, 2) << nohere.out;
  EXPECT_NE(nohere.out.find("--validate-on: "), std::string::npos) << nohere.out;
  auto lte = sh(tracrctl() + " plan " + exp + " --link lte --no-store");
  EXPECT_EQ(lte.status, 0) << lte.out;
  EXPECT_NE(lte.out.find("link profile lte at its nominal rates (nominal 5.85 / 5.85 Mbit/s, 0 ms delay: "
                         "Neurosurgeon"),
            std::string::npos)
      << lte.out;
  EXPECT_NE(lte.out.find("no stored run measured what tracr's emulation delivers"), std::string::npos) << lte.out;
  EXPECT_NE(lte.out.find("* chosen: split"), std::string::npos) << lte.out;
  // An unknown profile on the command line is named as the option's, with a suggestion.
  auto typo = sh(tracrctl() + " plan " + exp + " --link ltee --no-store");
  EXPECT_EQ(typo.status, 2) << typo.out;
  EXPECT_NE(typo.out.find("tracrctl plan: --link: unknown link profile 'ltee' (did you mean 'lte'?); expected one of "),
            std::string::npos)
      << typo.out;
  EXPECT_NE(typo.out.find("or give the link's figures: --up-mbit N [--down-mbit N] [--rtt-ms N]"), std::string::npos)
      << typo.out;
  // Constraints: nothing meets an impossible bound, and it says so.
  auto tight = sh(tracrctl() + " plan 1 --db " + db + " --max-latency-ms 0.001 --no-store");
  EXPECT_EQ(tight.status, 0) << tight.out;
  EXPECT_NE(tight.out.find("no split meets the constraints"), std::string::npos) << tight.out;
  // An energy objective without any energy source is refused with the reason.
  auto energy = sh(tracrctl() + " plan 1 --db " + db + " --objective energy --no-store");
  EXPECT_EQ(energy.status, 1) << energy.out;
  EXPECT_NE(energy.out.find("power_model"), std::string::npos) << energy.out;
  // Codecs: planning one no run used says which run is missing; after a run with it, both codecs are planned.
  auto nocodec = sh(tracrctl() + " plan 1 --db " + db + " --codecs blosc-lz4,fp16 --no-store");
  EXPECT_EQ(nocodec.status, 1) << nocodec.out;
  EXPECT_NE(nocodec.out.find("compression: fp16"), std::string::npos) << nocodec.out;
  // On the devices the basis run was profiled on (a held-out run elsewhere is refused: Plan.AHeldOutRunOn...).
  std::string y16 = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\ncompression: fp16\n",
                                     (d.path / "devices.yaml").string());
  y16.replace(y16.find("compression: blosc-lz4\n"), 23, "");
  y16.replace(y16.find("split: all"), 10, "split: [0, 6, 13, 22]");
  ASSERT_EQ(sh(tracrctl() + " run " + d.file("fp16.yaml", y16) + " --no-progress").status, 0);
  // Held out against the fp16 run (3, unshaped, no probe): it needs a link, then plans and checks fp16's rows.
  auto fp16_noprobe = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 3 --no-store");
  EXPECT_EQ(fp16_noprobe.status, 1) << fp16_noprobe.out;
  EXPECT_NE(fp16_noprobe.out.find("run 3 has no link probe"), std::string::npos) << fp16_noprobe.out;
  auto fp16_held = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 3 --up-mbit 1000 --no-store");
  EXPECT_EQ(fp16_held.status, 0) << fp16_held.out;
  EXPECT_NE(fp16_held.out.find("validation against run 3"), std::string::npos) << fp16_held.out;
  EXPECT_NE(fp16_held.out.find(" fp16 "), std::string::npos) << fp16_held.out;
  auto both = sh(tracrctl() + " plan 1 --db " + db + " --codecs blosc-lz4,fp16");
  EXPECT_EQ(both.status, 0) << both.out;
  const std::string pid = query(db, "select max(id) from plans");
  EXPECT_EQ(query(db, "select group_concat(distinct codec) from plan_rows where plan_id = " + pid), "blosc-lz4,fp16");
  EXPECT_FALSE(query(db, "select chosen_codec from plans where id = " + pid).empty());
  // fp16 halves the bytes crossing at a split where the run measured them.
  EXPECT_LT(std::stod(query(db, "select wire_bytes from plan_rows where plan_id = " + pid + " and codec = 'fp16' and split = 0")),
            0.6 * std::stod(query(db, "select wire_bytes from plan_rows where plan_id = " + pid + " and codec = 'blosc-lz4' and split = 0")));
  // Limited to the measured splits: each codec's run measured 4 of the 23 (a table of 46 rows becomes 8).
  auto measured = sh(tracrctl() + " plan 1 --db " + db + " --codecs blosc-lz4,fp16 --splits measured");
  EXPECT_EQ(measured.status, 0) << measured.out;
  EXPECT_NE(measured.out.find("splits: the 8 of 46 rows whose bytes a run measured"), std::string::npos) << measured.out;
  const std::string mid = query(db, "select max(id) from plans");
  for (const char* c : {"fp16", "blosc-lz4"})
    EXPECT_EQ(query(db, std::string("select group_concat(split) from (select split from plan_rows where codec = '") + c +
                            "' and plan_id = " + mid + " order by split)"),
              "0,6,13,22")
        << c;
  // Or to named splits; the choice is among them.
  auto named = sh(tracrctl() + " plan 1 --db " + db + " --splits 6,13 --no-store");
  EXPECT_EQ(named.status, 0) << named.out;
  EXPECT_NE(named.out.find("splits: 6,13 as asked (2 of 23 rows)"), std::string::npos) << named.out;
  EXPECT_TRUE(named.out.find("* chosen: split 6\n") != std::string::npos ||
              named.out.find("* chosen: split 13\n") != std::string::npos)
      << named.out;
  // By the layer a split cuts after (#45 item 9): features.5 is split 6.
  auto by_name = sh(tracrctl() + " plan 1 --db " + db + " --splits features.5,13 --no-store");
  EXPECT_EQ(by_name.status, 0) << by_name.out;
  EXPECT_NE(by_name.out.find("splits: features.5,13 as asked (2 of 23 rows)"), std::string::npos) << by_name.out;
  EXPECT_EQ(by_name.out.substr(by_name.out.find("* chosen: split")).substr(0, 20),
            named.out.substr(named.out.find("* chosen: split")).substr(0, 20));
  auto misspelt = sh(tracrctl() + " plan 1 --db " + db + " --splits featurs.5 --no-store");
  EXPECT_EQ(misspelt.status, 2) << misspelt.out;
  EXPECT_NE(misspelt.out.find("--splits: 'featurs.5' is not a split of alexnet"), std::string::npos) << misspelt.out;
  auto outside = sh(tracrctl() + " plan 1 --db " + db + " --splits 6,99 --no-store");
  EXPECT_EQ(outside.status, 2) << outside.out;
  EXPECT_NE(outside.out.find("--splits: '99' is not a split of alexnet (expected all, measured, or split points 0..22"),
            std::string::npos)
      << outside.out;
  auto bad = sh(tracrctl() + " plan 1 --db " + db + " --objective fastest --no-store");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("expected latency, energy, throughput or weighted:W"), std::string::npos) << bad.out;
}

TEST(Plan, RunWithoutProfilesSaysHowToGetThem) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [5]");
  ASSERT_EQ(sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress").status, 0);
  auto r = sh(tracrctl() + " plan last --db " + db);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("record: {layers: true}"), std::string::npos) << r.out;
}

// A traced model (#23) runs as frozen, optimised graph segments, which fuse
// across layers: the sum of its layers timed one by one is not what a frame
// costs. Each side times the segments it runs at the sweep's splits (the
// PARTICIPANT its heads, the SERVER its tails), and the planner uses them.
// The figures (segment vs layer sums against the frames' own head and tail
// times) are printed, not asserted.
TEST(Plan, ATracedModelIsPlannedFromItsSegmentsTimedWhole) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string pt = (d.path / "mnv2.pt").string();
  auto ex = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/export_model.py mobilenet_v2 " + pt +
               " --input-shape 3,64,64");
  ASSERT_EQ(ex.status, 0) << ex.out;
  std::string y = small_experiment(db, "record:\n  layers: true\nprobe:\n  duration_ms: 300\n  chunk_bytes: 16384\n");
  y.replace(y.find("model: alexnet"), 14, "model: torchscript:" + pt);
  y.replace(y.find("split: all"), 10, "split: [0, 12, 60, 152]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 3");
  // Warm frames: a segment's first runs build and optimise it.
  y.replace(y.find("warmup: 0"), 9, "warmup: 2");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // Heads where there is one (k > 0) from the participant, tails (k < N) from the server, as frames run them.
  EXPECT_EQ(query(db, "select group_concat(split) from (select split from segment_profiles where side = 'head' and "
                      "device_role = 'PARTICIPANT' order by split)"),
            "12,60,152");
  EXPECT_EQ(query(db, "select group_concat(split) from (select split from segment_profiles where side = 'tail' and "
                      "device_role = 'SERVER' order by split)"),
            "0,12,60");
  EXPECT_EQ(query(db, "select count(*) from segment_profiles where execution = 'graph-optimized' and mean_ns > 0 and "
                      "median_ns > 0 and p95_ns >= median_ns and reps >= 10"),
            "6");
  // The run's own plan takes head and tail from them at the swept splits, from layer sums elsewhere.
  EXPECT_NE(r.out.find("head and tail: timed whole as frames run them (segment profiles) at 4 splits"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(query(db, "select group_concat(split) from (select split from plan_rows where plan_id = 1 and "
                      "compute_from = 'segments' order by split)"),
            "0,12,60,152");
  EXPECT_EQ(query(db, "select count(*) from plan_rows where plan_id = 1 and compute_from <> 'layers' and "
                      "compute_from <> 'segments'"),
            "0");
  EXPECT_EQ(query(db, "select round(head_ms * 1e6) from plan_rows where plan_id = 1 and split = 60"),
            query(db, "select round(mean_ns * 1.0) from segment_profiles where side = 'head' and split = 60"));
  // Exported with the run.
  const std::string json = (d.path / "r.json").string();
  auto exj = sh(tracrctl() + " results export 1 --db " + db + " --json " + json);
  ASSERT_EQ(exj.status, 0) << exj.out;
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"segment_profiles\": [\n  {\"run_id\":1,\"device\":"), std::string::npos)
      << text.substr(text.find("\"segment_profiles\""), 400);
  // Figures: per swept split, the frames' median head / tail against the segment and the layer sum.
  for (const auto& row : query_col(
           db, "with f as (select split, head_ns, tail_ns from frames where warmup = 0 and ok = 1), "
               "l as (select device_role, layer_index, mean_ns from layer_profiles) "
               "select 'split ' || s.split || ' ' || s.side || ': frames ' || "
               "round((select avg(case when s.side = 'head' then head_ns else tail_ns end) from f where f.split = "
               "s.split) / 1e6, 3) || ' ms, segment ' || round(s.mean_ns / 1e6, 3) || ' ms, layer sum ' || "
               "round((select sum(mean_ns) from l where l.device_role = s.device_role and "
               "(case when s.side = 'head' then l.layer_index < s.split else l.layer_index >= s.split end)) / 1e6, 3) "
               "|| ' ms' from segment_profiles s order by s.side, s.split"))
    std::printf("%s\n", row.c_str());
  // And the run's plan against its measured totals, beside the same plan with layer sums in place of segments.
  std::printf("%s\n",
              query(db, "with l as (select device_role, layer_index, mean_ns from layer_profiles), "
                        "p as (select measured_ms, latency_ms, latency_ms - head_ms - tail_ms + "
                        "coalesce((select sum(mean_ns) from l where device_role = 'PARTICIPANT' and layer_index < "
                        "plan_rows.split), 0) / 1e6 + coalesce((select sum(mean_ns) from l where device_role = 'SERVER' "
                        "and layer_index >= plan_rows.split), 0) / 1e6 as layers_ms from plan_rows where plan_id = 1 and "
                        "measured_ms is not null) select 'plan MAPE over ' || count(*) || ' splits: segments ' || "
                        "round(avg(abs(latency_ms - measured_ms) / measured_ms) * 100, 1) || ' %, layer sums ' || "
                        "round(avg(abs(layers_ms - measured_ms) / measured_ms) * 100, 1) || ' %' from p")
                  .c_str());
  // The same file named another way (a relative path, run from its
  // directory) is the same model: same fingerprint, so it can calibrate and
  // validate a plan of run 1.
  std::string y2 = y;
  y2.replace(y2.find("model: torchscript:" + pt), 19 + pt.size(), "model: torchscript:mnv2.pt");
  d.file("exp2.yaml", y2);
  auto r2 = sh("cd " + d.path.string() + " && " + tracrctl() + " run exp2.yaml --no-progress");
  ASSERT_EQ(r2.status, 0) << r2.out;
  ASSERT_EQ(query(db, "select model from runs where id = 2"), "torchscript:mnv2.pt");
  auto cal = sh(tracrctl() + " plan 1 --db " + db + " --participant-from 2 --validate-on 2 --no-store");
  EXPECT_EQ(cal.status, 0) << cal.out;
  EXPECT_NE(cal.out.find("with run 2's PARTICIPANT profiles"), std::string::npos) << cal.out;
}

// #23: with `record: {segments: all}` a sweep of one split times every head and tail whole, so that its plan
// over every split takes compute from segments throughout, never from layer sums on another footing.
TEST(Plan, RecordSegmentsAllTimesEveryHeadAndTailForAPlanOverEverySplit) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string pt = (d.path / "r18.pt").string();
  auto ex = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/export_model.py resnet18 " + pt +
               " --input-shape 3,32,32");
  ASSERT_EQ(ex.status, 0) << ex.out;
  std::string y = small_experiment(db, "record:\n  layers: true\n  segments: all\nprobe:\n  duration_ms: 200\n");
  y.replace(y.find("model: alexnet"), 14, "model: torchscript:" + pt);
  y.replace(y.find("input_size: [3, 64, 64]"), 23, "input_size: [3, 32, 32]");
  y.replace(y.find("split: all"), 10, "split: [5]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string n = query(db, "select count(*) from layer_profiles where device_role = 'PARTICIPANT'");
  ASSERT_GT(std::stoi(n), 20);
  // Every split but 0 has a head on the participant, every split but N a tail on the server.
  EXPECT_EQ(query(db, "select count(*) from segment_profiles where side = 'head' and device_role = 'PARTICIPANT'"), n);
  EXPECT_EQ(query(db, "select count(*) from segment_profiles where side = 'tail' and device_role = 'SERVER'"), n);
  EXPECT_EQ(query(db, "select min(split) || ',' || max(split) from segment_profiles where side = 'head'"), "1," + n);
  // The plan over every split takes compute from segments throughout.
  auto plan = sh(tracrctl() + " plan 1 --db " + db);
  ASSERT_EQ(plan.status, 0) << plan.out;
  EXPECT_NE(plan.out.find("(segment profiles) at " + std::to_string(std::stoi(n) + 1) + " splits"), std::string::npos)
      << plan.out;
  EXPECT_EQ(query(db, "select count(*) from plan_rows where plan_id = 1"), std::to_string(std::stoi(n) + 1));
  EXPECT_EQ(query(db, "select count(*) from plan_rows where plan_id = 1 and compute_from <> 'segments'"), "0");
  // A value it does not know is refused with the choices.
  std::string bad = y;
  bad.replace(bad.find("segments: all"), 13, "segments: every");
  auto b = sh(tracrctl() + " run " + d.file("bad.yaml", bad) + " --no-progress");
  EXPECT_EQ(b.status, 2) << b.out;
  EXPECT_NE(b.out.find("record.segments"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("swept"), std::string::npos) << b.out;
}

// #21: the planner's error over repetitions: a sweep run three times (`run --repeat 3`), planned from the
// first and validated on each of the others (held out), with the MAPE's median and range over them. The
// figures are printed, not asserted (they depend on the moment each run was timed).
TEST(Plan, ValidatedOnARepeatedSeriesReportsTheErrorsMedianAndRange) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "probe:\n  duration_ms: 200\n");
  y.replace(y.find("split: all"), 10, "split: [0, 5, 22]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 3");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress --repeat 3");
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(query(db, "select count(*) from runs where status = 'completed'"), "3");
  auto p = sh(tracrctl() + " plan 1 --validate-on 2,3 --db " + db);
  ASSERT_EQ(p.status, 0) << p.out;
  // The first held-out plan whole, the second by its validation line, each stored.
  EXPECT_NE(p.out.find("* chosen: split"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("validation against run 2 (held out: planned from run 1 alone)"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("validation against run 3 (held out: planned from run 1 alone)"), std::string::npos) << p.out;
  EXPECT_EQ(query(db, "select group_concat(validation_run) from (select validation_run from plans where basis_run = 1 "
                      "and validation_run <> 1 order by id)"),
            "2,3");
  const size_t at = p.out.find("over 2 held-out runs: latency MAPE median ");
  ASSERT_NE(at, std::string::npos) << p.out;
  EXPECT_NE(p.out.find("the chosen split was the measured best in ", at), std::string::npos) << p.out;
  std::printf("%s\n", p.out.substr(at, p.out.find('\n', at) - at).c_str());
  // The median lies within the range it prints, and the range is the two runs' own MAPEs.
  const auto mapes = query_col(db, "select mape_pct from plans where basis_run = 1 and validation_run in (2, 3) "
                                   "order by mape_pct");
  ASSERT_EQ(mapes.size(), 2u);
  EXPECT_NE(p.out.find(fmt::format("(lowest {:.1f} %, highest {:.1f} %)", std::stod(mapes[0]), std::stod(mapes[1])),
                       at),
            std::string::npos)
      << p.out;
  // Beside it, the floor: the held-out runs against each other (with two, each against the other's median
  // per split), recomputed here from their frames.
  auto median_ms = [&](int run, int split) {
    auto v = query_col(db, fmt::format("select total_ns from frames where run_id = {} and split = {} and warmup = 0 "
                                       "and ok = 1 order by total_ns",
                                       run, split));
    EXPECT_FALSE(v.empty()) << run << " " << split;
    if (v.empty()) return 0.0;
    const size_t n = v.size();
    return (n % 2 ? std::stod(v[n / 2]) : (std::stod(v[n / 2 - 1]) + std::stod(v[n / 2])) / 2) / 1e6;
  };
  std::vector<double> floor;
  for (int run : {2, 3}) {
    double err = 0;
    for (int k : {0, 5, 22}) err += std::fabs(median_ms(5 - run, k) - median_ms(run, k)) / median_ms(run, k) * 100;
    floor.push_back(err / 3);
  }
  std::sort(floor.begin(), floor.end());
  const size_t among = p.out.find(
      "the held-out runs among themselves (each against the median of the others, 3 "
      "splits): MAPE median ");
  ASSERT_NE(among, std::string::npos) << p.out;
  EXPECT_NE(p.out.find(fmt::format("(lowest {:.1f} %, highest {:.1f} %); their measured best split agrees in ",
                                   floor[0], floor[1]),
                       among),
            std::string::npos)
      << p.out;
  // And how far the profiles were from each held-out run's frames, compute only (stored with the plan): the
  // median over splits of (planned head - the run's median head_ns) / that, and the same for the tails.
  const std::string p2 = query(db, "select id from plans where basis_run = 1 and validation_run = 2");
  for (const auto& [field, column, splits] :
       {std::tuple{"head_ns", "head", "5, 22"}, std::tuple{"tail_ns", "tail", "0, 5"}}) {
    auto d = query_col(db, fmt::format("select (r.{1}_ms - s.median_ns / 1e6) / (s.median_ns / 1e6) * 100 from "
                                       "plan_rows r join stage_stats s on s.run_id = 2 and s.split = r.split and "
                                       "s.field = '{0}' where r.plan_id = {2} and r.split in ({3}) order by 1",
                                       field, column, p2, splits));
    ASSERT_EQ(d.size(), 2u) << field;
    EXPECT_NEAR(std::stod(query(db, fmt::format("select {}_vs_frames_pct from plans where id = {}", column, p2))),
                (std::stod(d[0]) + std::stod(d[1])) / 2, 1e-6)
        << field;
  }
  EXPECT_NE(p.out.find("profiles against run 2's frames, compute only: PARTICIPANT heads "), std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("profiles against run 3's frames, compute only: PARTICIPANT heads "), std::string::npos)
      << p.out;
  auto bad = sh(tracrctl() + " plan 1 --validate-on 2,,3 --no-store --db " + db);
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--validate-on: expected runs RUN1,RUN2,..., got '2,,3'"), std::string::npos) << bad.out;
  auto missing = sh(tracrctl() + " plan 1 --validate-on 2,99 --no-store --db " + db);
  EXPECT_EQ(missing.status, 2) << missing.out;
  EXPECT_NE(missing.out.find("--validate-on: "), std::string::npos) << missing.out;
}

// #21: a SERVER shared by four participants, one frame in flight each, planned from a run with one
// participant and validated on a run with four (held out). Asserted: what does not depend on the moment
// things were timed: the plan is made for four and says how; its queue follows the queueing model from the
// stored terms; and the four-participant run itself shows the structure the model assumes (at the
// server-bound split, a frame takes about four of the server's per-frame times). The held-out errors are
// printed, not asserted: the basis run's profiles and the other run's frames are timed at different moments,
// and a CPU hog beside this test took the error at split 0 from -7 % to +53 % (config/README.md, "Planning").
TEST(Plan, AServerSharedByFourParticipantsIsPlannedFromARunWithOne) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto devices = [&](int n) {
    std::string y = "devices:\n  - {device_type: SERVER, transport: local}\n";
    for (int i = 1; i <= n; ++i) y += "  - {device_type: PARTICIPANT, name: p" + std::to_string(i) + ", transport: local}\n";
    return d.file("devices" + std::to_string(n) + ".yaml", y);
  };
  for (int n : {1, 4}) {
    std::string y = small_experiment(db, "probe:\n  duration_ms: 300\n", devices(n));
    y.replace(y.find("split: all"), 10, "split: [0, 22]");
    y.replace(y.find("repetitions: 1"), 14, "repetitions: 6");
    y.replace(y.find("name: system"), 12, "name: shared" + std::to_string(n));
    auto r = sh(tracrctl() + " run " + d.file("exp" + std::to_string(n) + ".yaml", y) + " --no-progress");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  // Each run planned itself for as many participants as it had.
  EXPECT_EQ(query(db,
                  "select participants || ',' || (server_model like 'modelled:mva-bound(4 participants%') from plans "
                  "where basis_run = 2"),
            "4,1");
  EXPECT_EQ(query(db, "select participants || ',' || coalesce(server_model, 'NULL') from plans where basis_run = 1"),
            "1,NULL");
  // Held out: planned from run 1 for run 2's four participants, and as if each were alone.
  auto held = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 2");
  ASSERT_EQ(held.status, 0) << held.out;
  EXPECT_NE(held.out.find("queue ms: the wait for the shared SERVER, modelled:mva-bound(4 participants (as many as "
                          "held-out run 2 had, each sweeping at its own pace (lockstep: false)"),
            std::string::npos)
      << held.out;
  auto alone = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 2 --participants 1");
  ASSERT_EQ(alone.status, 0) << alone.out;
  EXPECT_EQ(query(db, "select group_concat(participants) from plans where id in (3, 4) order by id"), "4,1");
  EXPECT_EQ(query(db, "select queue_ms from plan_rows where plan_id = 4 and split = 0"), "0.0");
  // The model from the stored terms: at split 0 the rest of the frame (Z) is small beside the tail (S), so four
  // participants wait for about three other frames: 2.5 S < queue <= 3 S (S = the tail plus the server's own
  // work, under a millisecond here).
  const double tail = std::stod(query(db, "select tail_ms from plan_rows where plan_id = 3 and split = 0"));
  const double queue = std::stod(query(db, "select queue_ms from plan_rows where plan_id = 3 and split = 0"));
  EXPECT_GT(queue, 2.5 * tail) << held.out;
  EXPECT_LE(queue, 3.0 * (tail + 1.0)) << held.out;
  EXPECT_NEAR(std::stod(query(db, "select latency_ms - head_ms - up_ms - rtt_ms - tail_ms - down_ms - other_ms - "
                                  "queue_ms from plan_rows where plan_id = 3 and split = 0")),
              0.0, 1e-6);
  // What the model assumes, measured within run 2 alone: one frame at a time on the server, so a frame's total
  // is about four of the server's per-frame times. Printed, not asserted: on a loaded 2-core machine it read
  // 2.52 once (CI with other jobs), and timing is no pass/fail criterion. A frame's total holds its server time.
  const double ratio = std::stod(query(db, "select t.median_ns / s.median_ns from stage_stats t join stage_stats s "
                                           "on s.run_id = t.run_id and s.split = t.split and s.field = 'server_ns' "
                                           "where t.run_id = 2 and t.split = 0 and t.field = 'total_ns'"));
  EXPECT_GE(ratio, 1.0);
  std::printf("run 2, split 0: total / server time %.2f (4 participants; the model assumes about 4)\n", ratio);
  for (const auto& row : query_col(db, "select 'held out, 1 -> 4 participants, split ' || a.split || ': shared model ' || "
                                       "round(a.error_pct, 1) || ' %, alone ' || round(b.error_pct, 1) || ' % (measured ' "
                                       "|| round(a.measured_ms, 1) || ' ms)' from plan_rows a join plan_rows b on "
                                       "b.plan_id = 4 and b.split = a.split where a.plan_id = 3 and a.measured_ms is not "
                                       "null order by a.split"))
    std::printf("%s\n", row.c_str());
}

// #21: joint planning. Four participants of one run at two splits (participant_splits: p1, p2 at 0; p3, p4
// at 22), the joint plan made from a run with one participant, validated on that run's own assignment, and
// stored per split. Asserted: each participant ran only its split; the joint rows add up to the four and
// carry the run's medians over the frames that ended while all four were running; the error is (predicted - measured) /
// measured; the joint plan of one split is the single-class plan's; a run whose participants swept is refused for joint
// validation, and so are participant_splits naming no participant or a split past the model. The errors are printed,
// not asserted.
TEST(Plan, AJointPlanIsValidatedOnARunWhoseParticipantsEachRanTheirOwnSplit) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto devices = [&](int n) {
    std::string y = "devices:\n  - {device_type: SERVER, transport: local}\n";
    for (int i = 1; i <= n; ++i)
      y += "  - {device_type: PARTICIPANT, name: p" + std::to_string(i) + ", transport: local}\n";
    return d.file("devices" + std::to_string(n) + ".yaml", y);
  };
  auto experiment = [&](int n, const std::string& extra) {
    std::string y = small_experiment(db, "probe:\n  duration_ms: 300\n" + extra, devices(n));
    y.replace(y.find("split: all"), 10, "split: [0, 22]");
    y.replace(y.find("repetitions: 1"), 14, "repetitions: 4");
    return d.file("exp" + std::to_string(n) + ".yaml", y);
  };
  auto one = sh(tracrctl() + " run " + experiment(1, "") + " --no-progress");
  ASSERT_EQ(one.status, 0) << one.out;
  auto four = sh(tracrctl() + " run " + experiment(4, "participant_splits: {p1: 0, p2: 0, p3: 22, p4: 22}\n") +
                 " --no-progress");
  ASSERT_EQ(four.status, 0) << four.out;
  EXPECT_EQ(query(db,
                  "select group_concat(participant || ':' || s, ' ') from (select participant, "
                  "group_concat(distinct split) as s from frames where run_id = 2 group by participant order by "
                  "participant)"),
            "p1:0 p2:0 p3:22 p4:22");
  EXPECT_NE(query(db, "select config_yaml from runs where id = 2")
                .find("participant_splits: {p1: 0, p2: 0, p3: 22, "
                      "p4: 22}"),
            std::string::npos);
  // Planned jointly for four, from run 1.
  auto plan = sh(tracrctl() + " plan 1 --db " + db + " --joint --participants 4");
  ASSERT_EQ(plan.status, 0) << plan.out;
  EXPECT_NE(plan.out.find("joint plan for 4 participants sharing the SERVER (modelled:mva-"), std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find("all 4 at the best common split "), std::string::npos) << plan.out;
  EXPECT_EQ(query(db, "select sum(participants) from plan_assignments where plan_id = (select max(id) from plans)"),
            "4");
  // Validated on run 2's own assignment.
  auto held = sh(tracrctl() + " plan 1 --db " + db + " --joint --validate-on 2");
  ASSERT_EQ(held.status, 0) << held.out;
  EXPECT_NE(held.out.find("joint validation against run 2 (its participants' own splits): MAPE "), std::string::npos)
      << held.out;
  const std::string id = query(db, "select max(id) from plans");
  EXPECT_EQ(query(db,
                  "select group_concat(split || ':' || participants, ' ') from (select * from plan_assignments "
                  "where plan_id = " +
                      id + " order by split)"),
            "0:2 22:2");
  EXPECT_EQ(query(db, "select validation_run || ',' || (mape_pct is not null) from plans where id = " + id), "2,1");
  // Measured: the frames that ended while all four were running (each participant's clock from its first
  // frame; the first to finish its frames closes the window).
  EXPECT_NE(held.out.find(" of 32 timed frames, those that ended while all 4 participants were running"),
            std::string::npos)
      << held.out;
  for (int k : {0, 22}) {
    auto v =
        query_col(db, fmt::format("with s as (select participant, min(start_ns) as t0, max(end_ns) - min(start_ns) "
                                  "as d from frames where run_id = 2 group by participant) select f.total_ns from "
                                  "frames f join s using (participant) where f.run_id = 2 and f.split = {} and "
                                  "f.warmup = 0 and f.ok = 1 and f.end_ns - s.t0 <= (select min(d) from s) order "
                                  "by f.total_ns",
                                  k));
    ASSERT_FALSE(v.empty()) << k;  // the first participant to finish kept all of its frames
    const size_t n = v.size();
    const double median = (n % 2 ? std::stod(v[n / 2]) : (std::stod(v[n / 2 - 1]) + std::stod(v[n / 2])) / 2) / 1e6;
    const auto row =
        query_col(db, fmt::format("select measured_ms || '|' || latency_ms || '|' || error_pct from plan_assignments "
                                  "where plan_id = {} and split = {}",
                                  id, k));
    ASSERT_EQ(row.size(), 1u);
    std::vector<double> f;
    std::istringstream in(row[0]);
    for (std::string x; std::getline(in, x, '|');) f.push_back(std::stod(x));
    ASSERT_EQ(f.size(), 3u) << row[0];
    EXPECT_NEAR(f[0], median, 1e-6);
    EXPECT_NEAR(f[2], (f[1] - f[0]) / f[0] * 100, 1e-6);
    std::printf("joint, 2 of 4 participants at split %d: predicted %.2f ms, measured %.2f ms (%+.1f %%)\n", k, f[1],
                f[0], f[2]);
  }
  // One split to choose from: the joint plan is the single-class plan for four.
  auto only0 = sh(tracrctl() + " plan 1 --db " + db + " --joint --participants 4 --splits 0");
  ASSERT_EQ(only0.status, 0) << only0.out;
  const std::string id0 = query(db, "select max(id) from plans");
  EXPECT_NEAR(std::stod(query(db, "select latency_ms from plan_assignments where plan_id = " + id0)),
              std::stod(query(db, "select latency_ms from plan_rows where split = 0 and plan_id = " + id0)), 1e-6);
  // Refused: joint validation on a run whose participant swept, a joint energy plan, and participant_splits
  // that name no participant or a split the model does not have.
  auto swept = sh(tracrctl() + " plan 2 --db " + db + " --joint --validate-on 1 --no-store");
  EXPECT_EQ(swept.status, 2) << swept.out;
  EXPECT_NE(swept.out.find("participant p1 ran splits 0, 22"), std::string::npos) << swept.out;
  auto energy = sh(tracrctl() + " plan 1 --db " + db + " --joint --objective energy --no-store");
  EXPECT_NE(energy.status, 0) << energy.out;
  auto nobody = sh(tracrctl() + " run " + experiment(4, "participant_splits: {p9: 0}\n") + " --no-progress");
  EXPECT_EQ(nobody.status, 2) << nobody.out;
  EXPECT_NE(nobody.out.find("participant_splits.p9: is no device in devices file"), std::string::npos) << nobody.out;
  EXPECT_NE(nobody.out.find("(p1, p2, p3, p4)"), std::string::npos) << nobody.out;
  auto past = sh(tracrctl() + " run " + experiment(4, "participant_splits: {p2: [0, 99]}\n") + " --no-progress");
  EXPECT_EQ(past.status, 2) << past.out;
  EXPECT_NE(past.out.find("participant_splits: p2: split point 99 is beyond model"), std::string::npos) << past.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "2");  // nothing started for either
}

// #21: a plan says whose profiles it applies, and a held-out run made on another device (here the participant
// pinned to one CPU) is refused, naming both devices, instead of being predicted with the wrong layer times.
TEST(Plan, AHeldOutRunOnAnotherDeviceIsRefusedNamingBoth) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  for (const std::string limits : {"", "    cpu_cores: 1\n"}) {
    const std::string devices = d.file(limits.empty() ? "d1.yaml" : "d2.yaml",
                                       "devices:\n  - device_type: SERVER\n    transport: local\n"
                                       "  - device_type: PARTICIPANT\n    transport: local\n" + limits);
    std::string y = small_experiment(db, "probe:\n  duration_ms: 200\n", devices);
    y.replace(y.find("split: all"), 10, "split: [0, 22]");
    auto r = sh(tracrctl() + " run " + d.file(limits.empty() ? "e1.yaml" : "e2.yaml", y) + " --no-progress");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  auto own = sh(tracrctl() + " plan 1 --db " + db + " --validate --no-store");
  ASSERT_EQ(own.status, 0) << own.out;
  EXPECT_NE(own.out.find("profiles of run 1: PARTICIPANT participant ("), std::string::npos) << own.out;
  EXPECT_NE(own.out.find("; SERVER server ("), std::string::npos) << own.out;
  auto other = sh(tracrctl() + " plan 1 --db " + db + " --validate-on 2");
  EXPECT_EQ(other.status, 2) << other.out;
  EXPECT_NE(other.out.find("--validate-on 2: run 2's PARTICIPANT participant ("), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("pinned to 1 CPUs"), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("is another device than the one run 1's profiles describe"), std::string::npos)
      << other.out;
  EXPECT_EQ(query(db, "select count(*) from plans where basis_run = 1 and validation_run = 2"), "0");
  EXPECT_NE(other.out.find("--participant-from RUN"), std::string::npos) << other.out;
  // Calibrated for the other device (#21): run 2's PARTICIPANT profiles with
  // run 1's SERVER, bytes and link, validated on run 2.
  auto cal = sh(tracrctl() + " plan 1 --db " + db + " --participant-from 2 --validate-on 2");
  ASSERT_EQ(cal.status, 0) << cal.out;
  EXPECT_NE(cal.out.find("profiles: PARTICIPANT participant ("), std::string::npos) << cal.out;
  EXPECT_NE(cal.out.find("pinned to 1 CPUs"), std::string::npos) << cal.out;
  EXPECT_NE(cal.out.find(") of run 2; SERVER server ("), std::string::npos) << cal.out;
  EXPECT_NE(cal.out.find(") of run 1"), std::string::npos) << cal.out;
  EXPECT_NE(cal.out.find("latency MAPE"), std::string::npos) << cal.out;
  // The all-local split's head is run 2's PARTICIPANT layers, summed.
  const std::string plan_id = query(db, "select max(id) from plans where basis_run = 1 and validation_run = 2");
  ASSERT_FALSE(plan_id.empty());
  EXPECT_EQ(query(db, "select participant_run from plans where id = " + plan_id), "2");  // stored where it came from
  const double head = std::stod(query(db, "select head_ms from plan_rows where plan_id = " + plan_id + " and split = 22"));
  const double sum2 = std::stod(query(db, "select sum(coalesce(mean_ns, median_ns)) / 1e6 from layer_profiles where "
                                          "run_id = 2 and device_role = 'PARTICIPANT'"));
  EXPECT_NEAR(head, sum2, 1e-6 * sum2 + 1e-9) << cal.out;
  // The per-frame work outside the layers and the link at each measured split: the participant's (encode,
  // return, post) from run 2's frames, the server's own (server_ns - tail_ns) from run 1's.
  EXPECT_NE(cal.out.find("at the 2 splits both measured, the median over calibration runs 2 of their encode, return "
                         "and post medians, plus run 1's server-overhead median"),
            std::string::npos)
      << cal.out;
  {
    auto h = tracr::store::ResultsDb::open(db);
    ASSERT_TRUE(h.ok()) << h.error().message;
    auto calib = h->split_table(2), basis = h->split_table(1);
    ASSERT_TRUE(calib.ok() && basis.ok());
    int n = 0;
    for (const auto& c : *calib)
      for (const auto& b : *basis)
        if (c.split == b.split && c.frames > 0 && b.frames > 0) {
          const double want =
              (c.stage("encode_ns").median_ns + c.stage("return_ns").median_ns + c.stage("post_ns").median_ns +
               b.stage("server_ns").median_ns - b.stage("tail_ns").median_ns) /
              1e6;
          const std::string got = query(db, "select other_ms from plan_rows where plan_id = " + plan_id +
                                                " and split = " + std::to_string(c.split));
          ASSERT_FALSE(got.empty()) << c.split;
          EXPECT_NEAR(std::stod(got), want, 1e-6) << "split " << c.split << "\n" << cal.out;
          ++n;
        }
    EXPECT_EQ(n, 2);
  }
  // Several calibration runs of that device: each layer's time is their
  // median (with two, the mean), so one slow calibration run does not carry
  // the plan; a calibration run of another device is refused.
  {
    const std::string devices = d.file("d2.yaml",
                                       "devices:\n  - device_type: SERVER\n    transport: local\n"
                                       "  - device_type: PARTICIPANT\n    transport: local\n"
                                       "    cpu_cores: 1\n");
    std::string y = small_experiment(db, "probe:\n  duration_ms: 200\n", devices);
    y.replace(y.find("split: all"), 10, "split: [0, 22]");
    auto r = sh(tracrctl() + " run " + d.file("e3.yaml", y) + " --no-progress");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  auto cal2 = sh(tracrctl() + " plan 1 --db " + db + " --participant-from 2,3 --validate-on 2");
  ASSERT_EQ(cal2.status, 0) << cal2.out;
  EXPECT_NE(cal2.out.find("(the PARTICIPANT's: median per layer over runs 2, 3)"), std::string::npos) << cal2.out;
  EXPECT_NE(cal2.out.find("with the PARTICIPANT profiles of runs 2, 3 (median per layer)"), std::string::npos)
      << cal2.out;
  const std::string plan2 = query(db, "select max(id) from plans where basis_run = 1 and validation_run = 2");
  const double head2 =
      std::stod(query(db, "select head_ms from plan_rows where plan_id = " + plan2 + " and split = 22"));
  const double mid = std::stod(query(db,
                                     "select sum(x) / 1e6 from (select avg(coalesce(mean_ns, median_ns)) as x "
                                     "from layer_profiles where run_id in (2, 3) and device_role = 'PARTICIPANT' "
                                     "group by layer_index)"));
  EXPECT_NEAR(head2, mid, 1e-6 * mid + 1e-4) << cal2.out;  // each layer's median rounded to a nanosecond
  auto mixed = sh(tracrctl() + " plan 1 --db " + db + " --participant-from 2,1 --validate-on 2 --no-store");
  EXPECT_EQ(mixed.status, 2) << mixed.out;
  EXPECT_NE(mixed.out.find("is another device"), std::string::npos) << mixed.out;
  // Of another model, or with no PARTICIPANT profiles: refused, naming the run.
  auto bad = sh(tracrctl() + " plan 1 --db " + db + " --participant-from 99 --no-store");
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("99"), std::string::npos) << bad.out;
}

// #21: under a CPU quota a frame's head runs ahead of the quota and its encode pays the debt in whole
// throttle waits, which the profiled head (timed back to back) already holds. At each split the run
// measured, the plan's other_ms is the encode's share (what the frames' median head + encode exceed the
// profiled head by, between 0 and the encode's median) plus the medians of return and
// post and the server's own work, checked here against the stored frames; without a quota it is the
// stages' medians as before. The plan says which.
TEST(Plan, UnderACpuQuotaTheEncodeAddsOnlyWhatTheProfiledHeadLacks) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml",
                                     "devices:\n  - device_type: SERVER\n    transport: local\n"
                                     "  - device_type: PARTICIPANT\n    transport: local\n    cpu_quota: 0.25\n");
  std::string y = small_experiment(db, "probe:\n  duration_ms: 200\n", devices);
  y.replace(y.find("split: all"), 10, "split: [0, 6, 22]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 4");
  auto r = sh(tracrctl() + " run " + d.file("e.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  auto p = sh(tracrctl() + " plan 1 --db " + db + " --validate");
  ASSERT_EQ(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("under the participant's CPU quota (0.25 of a core) the encode at those splits is what the "
                       "frames' median head + encode exceed the profiled head by, between 0 and the encode's "
                       "median"),
            std::string::npos)
      << p.out;
  const std::string id = query(db, "select max(id) from plans");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  auto column = [&](const std::string& expr, int k) {
    std::vector<double> v;
    for (const auto& x : query_col(db, fmt::format("select {} from frames where run_id = 1 and split = {} and "
                                                   "warmup = 0 and ok = 1",
                                                   expr, k)))
      v.push_back(std::stod(x) / 1e6);
    return v;
  };
  for (int k : {0, 6, 22}) {
    const auto enc = column("encode_ns", k);
    ASSERT_EQ(enc.size(), 8u) << k;  // 2 samples x 4 repetitions
    const double head = std::stod(query(db, fmt::format("select head_ms from plan_rows where plan_id = {} and "
                                                        "split = {}",
                                                        id, k)));
    const double share = std::clamp(median(column("head_ns + encode_ns", k)) - head, 0.0, median(enc));
    const double want = share + median(column("return_ns", k)) + median(column("post_ns", k)) +
                        median(column("server_ns", k)) - median(column("tail_ns", k));
    const double got = std::stod(query(db, fmt::format("select other_ms from plan_rows where plan_id = {} and "
                                                       "split = {}",
                                                       id, k)));
    EXPECT_NEAR(got, want, 1e-6) << "split " << k << "\n" << p.out;
    std::printf("split %d: encode median %.3f ms, counted %.3f (head profiled %.3f ms)\n", k, median(enc), share, head);
  }
}
