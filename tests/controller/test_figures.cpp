// The report's figures from a real SQLite results database (two runs that
// differ in codec, written through ResultsDb as a run writes them): which
// figures exist, what their series and CSV hold, the SVG marks, the PDFs
// rsvg-convert writes (rasterised back with pdftoppm, ink counted) and the
// tidy per-split CSV of `results export --summary-csv`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "analysis/figures.hpp"
#include "analysis/plan.hpp"
#include "analysis/report.hpp"
#include "analysis/svg_chart.hpp"
#include "store/export.hpp"
#include "store/results.hpp"
#include "tests/system/system_util.hpp"

namespace {

using namespace tracr::analysis;
using namespace tracr::store;
using tracr::testing::sh;
using tracr::testing::TempDir;

// A frame whose stages add up to its total, as record_fields.def requires.
FrameRecord frame(int64_t run, int split, int i, int64_t total, const std::string& codec) {
  FrameRecord f;
  f.run_id = run;
  f.participant = "edge";
  f.frame = i;
  f.split = split;
  f.batch = 1;
  f.policy = i > 4 ? "command" : "sweep";
  f.codec = codec;
  f.cipher = "aes-256-gcm";
  f.start_ns = 1000000000LL * i;
  f.end_ns = f.start_ns + total;
  f.head_ns = total / 4;
  f.encode_ns = total / 8;
  f.server_ns = total / 4;
  f.return_ns = 10;
  f.post_ns = 5;
  f.network_ns = total - f.head_ns - f.encode_ns - f.server_ns - f.return_ns - f.post_ns;
  f.total_ns = total;
  f.raw_bytes = 900000 / (split + 1);
  f.wire_bytes = f.raw_bytes / (codec == "fp16" ? 2 : 3);
  f.reply_bytes = 100;
  f.ok = 1;
  f.correct = i % 2;
  f.top5_correct = 1;
  f.label = "3";
  f.link_est_mbps = 10.0 + i;
  return f;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t i = 0; (i = text.find(what, i)) != std::string::npos; i += what.size()) ++n;
  return n;
}

class FiguresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok()) << db.error().str();
    for (const char* codec : {"blosc-lz4", "fp16"}) {
      RunInfo info;
      info.name = "sweep";
      info.model = "alexnet";
      info.codec = codec;
      info.cipher = "aes-256-gcm";
      info.config_yaml = "name: sweep\nmodel: alexnet\ntrain:\n  epochs: 1\noutput: x.db\n";
      auto run = db->begin_run(info);
      ASSERT_TRUE(run.ok());
      std::vector<FrameRecord> fr;
      for (int i = 0; i < 9; ++i) fr.push_back(frame(*run, i < 3 ? 0 : i < 6 ? 6 : 22, i, 2000000 + 100000 * i, codec));
      ASSERT_TRUE(db->add_frames(fr).ok());
      std::vector<LayerProfileRecord> lp;
      for (int k = 0; k < 22; ++k) {
        LayerProfileRecord l;
        l.run_id = *run;
        l.device = "edge";
        l.device_role = "PARTICIPANT";
        l.layer_index = k;
        l.name = "features." + std::to_string(k);
        l.type = "Conv2d";
        l.model_fp = "fp";
        l.input_shape = "3,64,64";
        l.batch = 1;
        l.device_kind = "cpu";
        l.reps = 1;
        l.hw_id = "hw";
        lp.push_back(l);
      }
      ASSERT_TRUE(db->add_layer_profiles(lp).ok());
      ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
    }
  }
  TempDir dir;
  std::string path = (dir.path / "r.db").string();
};

// A plan made from run 1 and validated held out against run 2 (plan
// --validate-on) carries run 2's measurements: it is drawn with run 2, never
// as run 1's validation.
TEST_F(FiguresTest, AHeldOutPlanIsDrawnWithTheRunItWasValidatedAgainst) {
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    Plan p;
    p.basis_run = 1;
    p.validation_run = 2;
    p.model = "alexnet";
    p.objective = "latency";
    p.mape_pct = 4.0;
    p.chosen = 0;
    PlanRow r;
    r.split = 0;
    r.codec = "none";
    r.latency_ms = 1.0;
    r.measured_ms = 1.04;
    r.error_pct = -3.8;
    p.rows = {r};
    ASSERT_TRUE(store_plan(*db, p).ok());
  }
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  auto has_plan = [&](int64_t run) {
    auto figs = build_figures(*db, {run});
    EXPECT_TRUE(figs.ok());
    bool found = false;
    if (figs.ok())
      for (const auto& f : *figs) found = found || f.id == "plan";
    return found;
  };
  EXPECT_FALSE(has_plan(1));
  EXPECT_TRUE(has_plan(2));
}

TEST_F(FiguresTest, EachFigureComparesTheRunsWithLayerNamesWhiskersAndOnlyStagesThatOccur) {
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  auto figs = build_figures(*db, {1, 2});
  ASSERT_TRUE(figs.ok()) << figs.error().str();
  std::map<std::string, const Figure*> by;
  for (const auto& f : *figs) by[f.id] = &f;
  for (const char* id : {"latency", "stages", "bytes", "accuracy", "timeline_split", "timeline_link"})
    EXPECT_TRUE(by.count(id)) << id;
  EXPECT_FALSE(by.count("energy"));  // no energy rows: no figure rather than an empty one
  EXPECT_FALSE(by.count("plan"));    // no validated plan
  const Figure& lat = *by["latency"];
  ASSERT_EQ(lat.chart.series.size(), 2u);  // one per run
  EXPECT_NE(lat.chart.series[0].name.find("blosc-lz4"), std::string::npos);  // runs differ in codec: named
  EXPECT_EQ(lat.chart.categories, (std::vector<std::string>{"0 (input)", "6 features.5", "22 features.21"}));
  const std::string svg = svg::render(lat.chart);
  EXPECT_EQ(count(svg, "class=\"whisker\""), 6u);
  EXPECT_EQ(count(svg, "class=\"mark\""), 6u);
  EXPECT_EQ(count(svg, "class=\"legend-item\""), 2u);
  // queue_ns is 0 in every frame: not in the legend; the others are.
  const Figure& st = *by["stages"];
  std::vector<std::string> stages;
  for (const auto& s : st.chart.series) stages.push_back(s.name);
  EXPECT_EQ(stages, (std::vector<std::string>{"head", "encode", "network", "server", "return", "post"}));
  // Bytes in byte units on the axis.
  const std::string bytes = svg::render(by["bytes"]->chart);
  EXPECT_NE(bytes.find(" kB</text>"), std::string::npos);
  EXPECT_EQ(svg::format_value(900000, svg::Unit::bytes), "900 kB");
  EXPECT_EQ(svg::format_value(1500000, svg::Unit::bytes), "1.5 MB");
  // The CSV holds what is drawn: p95 >= median, one row per run and split.
  ASSERT_EQ(lat.csv_rows.size(), 6u);
  for (const auto& r : lat.csv_rows) EXPECT_GE(std::stod(r[9]), std::stod(r[8]));
  // The page: SVG inline, no script, no train: block for these inference runs.
  auto page = render_report(*db, {1, 2});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->find("<script"), std::string::npos);
  EXPECT_EQ(page->find("\ntrain:"), std::string::npos);
  EXPECT_NE(page->find("output: x.db"), std::string::npos);
  EXPECT_EQ(count(*page, "<svg"), figs->size());
}

TEST_F(FiguresTest, FiguresAreWrittenAsSvgPdfAndCsvAndTheSummaryCsvIsTidy) {
  if (sh("command -v rsvg-convert && command -v pdftoppm").status != 0) {
    if (std::getenv("CI")) FAIL() << "librsvg2-bin or poppler-utils missing: scripts/setup.sh installs them";
    GTEST_SKIP() << "rsvg-convert or pdftoppm not installed";
  }
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  auto figs = build_figures(*db, {1, 2});
  ASSERT_TRUE(figs.ok());
  const std::string out = (dir.path / "figs").string();
  ASSERT_TRUE(write_figures(*figs, out).ok());
  for (const auto& f : *figs) {
    const std::string stem = out + "/" + f.id;
    EXPECT_EQ(slurp(stem + ".svg"), svg::render(f.chart));
    EXPECT_EQ(slurp(stem + ".csv"), figure_csv(f));
    EXPECT_EQ(slurp(stem + ".pdf").rfind("%PDF", 0), 0u) << f.id;
    auto ppm = sh("pdftoppm -r 72 -singlefile -gray " + stem + ".pdf");
    ASSERT_EQ(ppm.status, 0) << f.id;
    // PGM (P5): count pixels that are not white.
    std::istringstream in(ppm.out);
    std::string magic;
    long w = 0, h = 0, maxv = 0;
    in >> magic >> w >> h >> maxv;
    in.get();
    const std::string px((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    long ink = 0;
    for (unsigned char c : px) ink += c < 200;
    EXPECT_EQ(magic, "P5") << f.id;
    EXPECT_GT(ink, 2500) << f.id << ".pdf renders blank";
  }
  const std::string csv = (dir.path / "summary.csv").string();
  ASSERT_TRUE(export_summary_csv(*db, {1, 2}, csv).ok());
  std::istringstream lines(slurp(csv));
  std::string header;
  std::getline(lines, header);
  size_t rows = 0, totals = 0;
  for (std::string l; std::getline(lines, l);) {
    ++rows;
    totals += l.find(",total,") != std::string::npos;
  }
  EXPECT_EQ(totals, 6u);  // 2 runs x 3 splits
  EXPECT_EQ(rows % 6, 0u);
  EXPECT_NE(header.find("run,name,model,codec"), std::string::npos);
}

}  // namespace
