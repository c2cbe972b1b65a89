// The report's figures from a real SQLite results database (two runs that
// differ in codec, written through ResultsDb as a run writes them): which
// figures exist and what their CSVs and scripts hold (conditions, the log
// axis chosen, spread both ways), then the scripts run by Debian's
// matplotlib: what each drew (legend entries and colours, axis scales, tick
// labels, read from the manifest the scripts write under
// TRACR_FIGURE_MANIFEST), the PDFs rendered with pdftoppm (ink counted) with
// their fonts embedded (pdffonts), and the tidy per-split CSV of `results
// export --summary-csv`.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "analysis/figures.hpp"
#include "analysis/plan.hpp"
#include "analysis/report.hpp"
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

// A figure's CSV column by name.
std::vector<std::string> column(const Figure& f, const std::string& name) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < f.csv_header.size() && f.csv_header[i] != name) ++i;
  EXPECT_LT(i, f.csv_header.size()) << f.id << " has no column " << name;
  if (i >= f.csv_header.size()) return out;
  for (const auto& r : f.csv_rows) out.push_back(r[i]);
  return out;
}

TEST_F(FiguresTest, EachFigureNamesConditionsWithSpreadBothWaysAndALogAxisWhereValuesSpanFar) {
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  auto figs = build_figures(*db, {1, 2});
  ASSERT_TRUE(figs.ok()) << figs.error().str();
  std::map<std::string, const Figure*> by;
  for (const auto& f : *figs) by[f.id] = &f;
  for (const char* id : {"latency", "stages", "bytes", "accuracy", "timeline_split", "timeline_link"})
    EXPECT_TRUE(by.count(id)) << id;
  EXPECT_FALSE(by.count("energy"));  // no energy rows in any run: no figure rather than an empty one
  EXPECT_FALSE(by.count("plan"));    // no validated plan
  const Figure& lat = *by["latency"];
  EXPECT_EQ(lat.kind, "split");
  // The runs differ in codec only: the legend says the codec, not "#1 sweep".
  const auto cond_cells = column(lat, "condition");
  const std::set<std::string> conds(cond_cells.begin(), cond_cells.end());
  EXPECT_EQ(conds, (std::set<std::string>{"blosc-lz4", "fp16"}));
  EXPECT_EQ(column(lat, "tick"), (std::vector<std::string>{"0 (input)", "6 features.5", "22 features.21",
                                                           "0 (input)", "6 features.5", "22 features.21"}));
  // Spread both ways, in order: p5 <= p25 <= median <= p75 <= p95.
  ASSERT_EQ(lat.csv_rows.size(), 6u);
  const auto p5 = column(lat, "p5"), p25 = column(lat, "p25"), med = column(lat, "value"), p75 = column(lat, "p75"),
             p95 = column(lat, "p95");
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_LE(std::stod(p5[i]), std::stod(p25[i]));
    EXPECT_LE(std::stod(p25[i]), std::stod(med[i]));
    EXPECT_LE(std::stod(med[i]), std::stod(p75[i]));
    EXPECT_LE(std::stod(p75[i]), std::stod(p95[i]));
    EXPECT_LT(std::stod(p5[i]), std::stod(p95[i]));  // three frames of different totals per split
  }
  // 2.0-2.8 ms: linear; bytes from 13 kB to 900 kB (69x): log, and the script says why.
  EXPECT_EQ(lat.param("LOG_Y"), "False");
  EXPECT_EQ(by["bytes"]->param("LOG_Y"), "True");
  const std::string script = figure_script(*by["bytes"], {});
  EXPECT_NE(script.find("LOG_Y = True  # chosen: the values span"), std::string::npos) << script.substr(0, 900);
  EXPECT_NE(script.find("SIZE = \"page\""), std::string::npos);
  EXPECT_NE(script.find("import tracr_figure"), std::string::npos);
  // --linear-y / --log-y win over the choice.
  FigureOptions lin;
  lin.log_y = false;
  auto forced = build_figures(*db, {1, 2}, lin);
  ASSERT_TRUE(forced.ok());
  for (const auto& f : *forced) EXPECT_EQ(f.param("LOG_Y"), "False") << f.id;
  // queue_ns is 0 in every frame: not a stage of the figure; the others are.
  std::vector<std::string> stages;
  for (const auto& s : column(*by["stages"], "stage"))
    if (std::find(stages.begin(), stages.end(), s) == stages.end()) stages.push_back(s);
  EXPECT_EQ(stages, (std::vector<std::string>{"head", "encode", "network", "server", "return", "post"}));
  // One label ("3") in every frame: no chance line claimed from one class.
  EXPECT_EQ(by["accuracy"]->param("CHANCE"), "None");
  EXPECT_EQ(column(*by["accuracy"], "point").front(), "0");
  // --only picks figures; a name that is no figure, or a size that is none, is refused.
  FigureOptions only;
  only.only = {"latency", "bytes"};
  auto two = build_figures(*db, {1, 2}, only);
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  only.only = {"latencies"};
  auto bad = build_figures(*db, {1, 2}, only);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--only latencies: no such figure; figures: latency, stages"), std::string::npos);
  FigureOptions big;
  big.size = "poster";
  EXPECT_FALSE(build_figures(*db, {1, 2}, big).ok());
}

// The drawn figures, as matplotlib drew them: read back from the manifest.
struct Drawn {
  std::string yscale, xscale;
  std::vector<std::string> xticks, labels, colours, styles, notes;
  double width_in = 0;
};
std::map<std::string, Drawn> read_manifest(const std::string& path) {
  std::map<std::string, Drawn> out;
  // One JSON object per line, read with Debian's Python, flattened to tab-separated fields.
  auto r = sh("/usr/bin/python3 -c \"import json,sys\nfor l in open('" + path +
              "'):\n d=json.loads(l)\n print('F', d['figure'], d['yscale'], d['xscale'], d['size_in'][0], sep='\\t')\n"
              " [print('T', d['figure'], t, sep='\\t') for t in d['xticks']]\n"
              " [print('L', d['figure'], e['label'], e['colour'], e['linestyle'], sep='\\t') for e in d['legend']]\n"
              " [print('N', d['figure'], n, sep='\\t') for n in d['notes']]\"");
  EXPECT_EQ(r.status, 0) << r.out;
  std::istringstream rows(r.out);
  for (std::string l; std::getline(rows, l);) {
    std::vector<std::string> c;
    std::stringstream ss(l);
    for (std::string cell; std::getline(ss, cell, '\t');) c.push_back(cell);
    if (c.size() < 3) continue;
    Drawn& d = out[c[1]];
    if (c[0] == "F" && c.size() >= 5) {
      d.yscale = c[2];
      d.xscale = c[3];
      d.width_in = std::stod(c[4]);
    } else if (c[0] == "T") {
      d.xticks.push_back(c[2]);
    } else if (c[0] == "L" && c.size() >= 5) {
      d.labels.push_back(c[2]);
      d.colours.push_back(c[3]);
      d.styles.push_back(c[4]);
    } else if (c[0] == "N") {
      d.notes.push_back(c[2]);
    }
  }
  return out;
}

// Draws `figs` into DIR with the scripts' manifest on, and reads back what they drew.
std::map<std::string, Drawn> draw(const std::vector<Figure>& figs, const std::string& out, const FigureOptions& opt,
                                  const TempDir& dir) {
  const std::string manifest = (dir.path / "drawn.jsonl").string();
  std::filesystem::remove(manifest);
  ::setenv("TRACR_FIGURE_MANIFEST", manifest.c_str(), 1);
  auto st = write_figures(figs, out, opt);
  ::unsetenv("TRACR_FIGURE_MANIFEST");
  EXPECT_TRUE(st.ok()) << st.error().str();
  return read_manifest(manifest);
}

bool have_matplotlib() {
  if (sh("/usr/bin/python3 -c 'import matplotlib' && command -v pdftoppm && command -v pdffonts").status == 0)
    return true;
  if (std::getenv("CI")) ADD_FAILURE() << "python3-matplotlib or poppler-utils missing: scripts/setup.sh installs them";
  return false;
}

long ink_of_pdf(const std::string& pdf) {
  auto ppm = sh("pdftoppm -r 72 -singlefile -gray " + pdf);
  if (ppm.status != 0) return -1;
  std::istringstream in(ppm.out);
  std::string magic;
  long w = 0, h = 0, maxv = 0;
  in >> magic >> w >> h >> maxv;
  in.get();
  const std::string px((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  long ink = 0;
  for (unsigned char c : px) ink += c < 200;
  return magic == "P5" ? ink : -1;
}

TEST_F(FiguresTest, MatplotlibDrawsEachFigureFromItsCsvAndScriptWithConditionLegendsAndEmbeddedFonts) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib or poppler-utils not installed";
  {  // a plan validated against run 2: predicted and measured of one condition
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    Plan p;
    p.basis_run = 2;
    p.model = "alexnet";
    p.objective = "latency";
    p.mape_pct = 4.0;
    for (int s : {0, 6, 22}) {
      PlanRow r;
      r.split = s;
      r.codec = "fp16";
      r.latency_ms = 2.0 + s / 10.0;
      r.measured_ms = 2.1 + s / 11.0;
      r.error_pct = 1;
      p.rows.push_back(r);
    }
    ASSERT_TRUE(store_plan(*db, p).ok());
  }
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  FigureOptions opt;
  opt.size = "column";
  auto figs = build_figures(*db, {1, 2}, opt);
  ASSERT_TRUE(figs.ok());
  const std::string out = (dir.path / "figs").string();
  auto drawn = draw(*figs, out, opt, dir);
  for (const auto& f : *figs) {
    const std::string stem = out + "/" + f.id;
    EXPECT_EQ(slurp(stem + ".csv"), figure_csv(f));
    EXPECT_EQ(slurp(stem + ".py"), figure_script(f, opt));
    EXPECT_EQ(slurp(stem + ".pdf").rfind("%PDF", 0), 0u) << f.id;
    EXPECT_NE(slurp(stem + ".svg").find("<svg"), std::string::npos) << f.id;
    EXPECT_EQ(slurp(stem + ".png").substr(1, 3), "PNG") << f.id;
    EXPECT_GT(ink_of_pdf(stem + ".pdf"), 800) << f.id << ".pdf renders blank";
    // Fonts embedded (TrueType, not Type 3): every font line of pdffonts says "yes" under emb.
    auto fonts = sh("pdffonts " + stem + ".pdf");
    ASSERT_EQ(fonts.status, 0);
    EXPECT_NE(fonts.out.find("TrueType"), std::string::npos) << fonts.out;
    EXPECT_EQ(fonts.out.find("Type 3"), std::string::npos) << fonts.out;
    ASSERT_TRUE(drawn.count(f.id)) << f.id << " not in the manifest";
    EXPECT_NEAR(drawn[f.id].width_in, 3.3, 1e-6) << f.id;  // --size column
  }
  // Legends by condition, one colour each; the predicted series of a
  // condition in its measured colour, dashed.
  EXPECT_EQ(drawn["latency"].labels, (std::vector<std::string>{"blosc-lz4", "fp16"}));
  EXPECT_NE(drawn["latency"].colours[0], drawn["latency"].colours[1]);
  EXPECT_EQ(drawn["latency"].yscale, "linear");
  EXPECT_EQ(drawn["bytes"].yscale, "log");
  ASSERT_EQ(drawn["plan"].labels.size(), 2u);
  EXPECT_EQ(drawn["plan"].labels[0], "fp16 measured");
  EXPECT_EQ(drawn["plan"].labels[1].rfind("fp16 predicted (plan 1", 0), 0u) << drawn["plan"].labels[1];
  EXPECT_EQ(drawn["plan"].colours[0], drawn["plan"].colours[1]);
  EXPECT_NE(drawn["plan"].styles[0], drawn["plan"].styles[1]);
  EXPECT_EQ(drawn["latency"].xticks, (std::vector<std::string>{"0 (input)", "6 features.5", "22 features.21"}));
  // The stages are the legend (the conditions are its panels' titles).
  EXPECT_EQ(drawn["stages"].labels, (std::vector<std::string>{"head", "encode", "network", "server", "return", "post"}));
  EXPECT_EQ(drawn["stages"].yscale, "linear");
  // A researcher's edit: the script alone draws its figure again.
  std::filesystem::remove(out + "/latency.pdf");
  auto again = sh("cd / && /usr/bin/python3 " + out + "/latency.py");
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_TRUE(std::filesystem::exists(out + "/latency.pdf"));
  // The page inlines the same drawings: one SVG per figure, no script.
  auto page = render_report(*db, {1, 2}, *figs, out);
  ASSERT_TRUE(page.ok()) << page.error().str();
  EXPECT_EQ(page->find("<script"), std::string::npos);
  EXPECT_EQ(page->find("\ntrain:"), std::string::npos);
  EXPECT_NE(page->find("output: x.db"), std::string::npos);
  EXPECT_EQ(count(*page, "<svg"), figs->size());
  EXPECT_EQ(page->find("<?xml"), std::string::npos);
}

// 176 splits (ResNet-50's cuts) do not draw 176 tick labels; a run with
// energy beside one without gets a note, not silence.
TEST(FiguresMany, TickLabelsAreThinnedToWhatFitsAndAMissingSeriesIsSaid) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib or poppler-utils not installed";
  TempDir dir;
  const std::string path = (dir.path / "m.db").string();
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    for (int run_no = 0; run_no < 2; ++run_no) {
      RunInfo info;
      info.name = run_no ? "with $energy_$" : "without";  // "$": text, never matplotlib math
      info.model = "resnet50";
      info.codec = "none";
      info.cipher = "none";
      info.link = run_no ? "wifi" : "3g";
      info.config_yaml = "name: x\n";
      auto run = db->begin_run(info);
      ASSERT_TRUE(run.ok());
      std::vector<FrameRecord> fr;
      for (int s = 0; s < 176; ++s) fr.push_back(frame(*run, s, s, 1000000 * (run_no ? 1 : 40) + 1000 * s, "none"));
      ASSERT_TRUE(db->add_frames(fr).ok());
      if (run_no) {
        std::vector<EnergyRow> es;
        for (int s = 0; s < 352; ++s) {  // two sources on one device and stage: two series
          EnergyRow e;
          e.run_id = *run;
          e.participant = "edge";
          e.side = "participant";
          e.frame = s % 176;
          e.split = s % 176;
          e.window_ns = 1000000;
          e.reps = 1;
          e.device = "edge";
          e.stage = "frame";
          e.source = s < 176 ? "modelled:power_model" : "measured:rapl:package-0";
          e.joules = s < 176 ? 0.01 + s * 1e-4 : 0.03;
          es.push_back(e);
        }
        ASSERT_TRUE(db->add_energy(es).ok());
      }
      ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
    }
  }
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  FigureOptions opt;
  opt.size = "column";
  opt.only = {"latency", "energy"};
  auto figs = build_figures(*db, {1, 2}, opt);
  ASSERT_TRUE(figs.ok()) << figs.error().str();
  ASSERT_EQ(figs->size(), 2u);
  EXPECT_EQ((*figs)[0].param("LOG_Y"), "True");  // 40 ms against 1 ms: the crossing must stay visible
  const std::string out = (dir.path / "figs").string();
  auto drawn = draw(*figs, out, opt, dir);
  const auto& ticks = drawn["latency"].xticks;
  EXPECT_GE(ticks.size(), 8u);
  EXPECT_LE(ticks.size(), 30u);  // in 3.3 inches
  EXPECT_EQ(ticks.front(), "0 (input)");
  EXPECT_EQ(drawn["latency"].labels, (std::vector<std::string>{"3g", "wifi"}));
  EXPECT_EQ(drawn["latency"].yscale, "log");
  ASSERT_EQ(drawn["energy"].labels.size(), 2u);  // one line per source, never one zig-zag between them
  EXPECT_NE(drawn["energy"].labels[0], drawn["energy"].labels[1]);
  ASSERT_EQ(drawn["energy"].notes.size(), 1u);
  EXPECT_NE(drawn["energy"].notes[0].find("3g (run 1): no energy rows stored"), std::string::npos) << drawn["energy"].notes[0];
  // One run alone is named by its name, "$" and all.
  opt.only = {"latency"};
  auto one = build_figures(*db, {2}, opt);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(draw(*one, out, opt, dir)["latency"].labels, (std::vector<std::string>{"with $energy_$"}));
}

// A two-link x two-codec sweep: colour is the link, line style the codec,
// each legend entry one condition, whole.
TEST(FiguresSweep, ALinkByCodecSweepMapsLinkToColourAndCodecToLineStyle) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib or poppler-utils not installed";
  TempDir dir;
  const std::string path = (dir.path / "s.db").string();
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    for (const char* link : {"3g", "wifi"})
      for (const char* codec : {"none", "fp16"}) {
        RunInfo info;
        info.name = "plan_links";
        info.model = "alexnet";
        info.codec = codec;
        info.cipher = "aes-256-gcm";
        info.link = link;
        info.config_yaml = "name: plan_links\n";
        auto run = db->begin_run(info);
        ASSERT_TRUE(run.ok());
        std::vector<FrameRecord> fr;
        for (int i = 0; i < 9; ++i)
          fr.push_back(frame(*run, i < 3 ? 0 : i < 6 ? 6 : 22, i,
                             (std::string(link) == "3g" ? 4000000000LL : 100000000LL) / (i % 3 + 1), codec));
        ASSERT_TRUE(db->add_frames(fr).ok());
        ASSERT_TRUE(db->finish_run(*run, RunStatus::completed).ok());
      }
  }
  {  // each run validated by a plan of its own
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok());
    for (int64_t run = 1; run <= 4; ++run) {
      Plan p;
      p.basis_run = run;
      p.model = "alexnet";
      p.objective = "latency";
      p.mape_pct = 5;
      for (int s : {0, 6, 22}) {
        PlanRow r;
        r.split = s;
        r.codec = "none";
        r.latency_ms = 100.0 * run + s;
        r.measured_ms = 110.0 * run + s;
        r.error_pct = -9;
        p.rows.push_back(r);
      }
      ASSERT_TRUE(store_plan(*db, p).ok());
    }
  }
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
  FigureOptions opt;
  opt.only = {"latency", "plan"};
  auto figs = build_figures(*db, {1, 2, 3, 4}, opt);
  ASSERT_TRUE(figs.ok());
  const std::string out = (dir.path / "figs").string();
  auto drawn = draw(*figs, out, opt, dir);
  auto d = drawn["latency"];
  ASSERT_EQ(d.labels, (std::vector<std::string>{"3g, none", "3g, fp16", "wifi, none", "wifi, fp16"}));
  EXPECT_EQ(d.colours[0], d.colours[1]);  // one link, one colour
  EXPECT_EQ(d.colours[2], d.colours[3]);
  EXPECT_NE(d.colours[0], d.colours[2]);
  EXPECT_EQ(d.styles[0], d.styles[2]);    // one codec, one line style
  EXPECT_EQ(d.styles[1], d.styles[3]);
  EXPECT_NE(d.styles[0], d.styles[1]);
  EXPECT_EQ(d.yscale, "log");  // 4 s against 0.1 s
  EXPECT_GT(ink_of_pdf(out + "/latency.pdf"), 800);
  // Beside predicted series, every measured one is solid and every predicted one dashed, paired by colour.
  const auto& pl = drawn["plan"];
  ASSERT_EQ(pl.labels.size(), 8u);
  for (size_t i = 0; i < 8; i += 2) {
    EXPECT_NE(pl.labels[i].find("measured"), std::string::npos) << pl.labels[i];
    EXPECT_EQ(pl.styles[i], "-") << pl.labels[i];
    EXPECT_EQ(pl.styles[i + 1], "--") << pl.labels[i + 1];
    EXPECT_EQ(pl.colours[i], pl.colours[i + 1]) << pl.labels[i];
  }
}

TEST_F(FiguresTest, TheSummaryCsvIsTidy) {
  auto db = ResultsDb::open_readonly(path);
  ASSERT_TRUE(db.ok());
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
  EXPECT_NE(header.find("run_id,run_name,model,codec"), std::string::npos);
}

}  // namespace
