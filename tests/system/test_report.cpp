// `tracrctl report` comparing two real runs (two codecs), drawn by Debian's
// matplotlib and rendered in real headless Chromium (Debian's chromium): the
// page opens from a file with no network and no script, every figure is an
// SVG in the DOM Chromium dumps, with the marks and legend entries (by
// condition) the data calls for, and a screenshot is taken. `--figures DIR`
// writes each figure as PDF (rasterised back with pdftoppm and its ink
// counted), SVG, PNG, CSV (parsed back) and the script that draws it.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

std::string attr(const std::string& dom, const std::string& id, const std::string& name) {
  std::smatch m;
  const std::regex re("id=\"" + id + "\"[^>]*" + name + "=\"([^\"]*)\"");
  if (std::regex_search(dom, m, re)) return m[1];
  const std::regex re2(name + "=\"([^\"]*)\"[^>]*id=\"" + id + "\"");
  return std::regex_search(dom, m, re2) ? std::string(m[1]) : std::string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t i = 0; (i = text.find(what, i)) != std::string::npos; i += what.size()) ++n;
  return n;
}

// RFC 4180 rows (quoted fields with "" escapes, commas and newlines inside quotes).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += text[++i];
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
    } else if (c == '\r') {
      continue;
    } else if (c == '\n') {
      rows.back().push_back(std::move(field));
      field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

// One <figure> element of the page (from the DOM Chromium dumped).
std::string figure_of(const std::string& dom, const std::string& id) {
  const size_t a = dom.find("id=\"fig-" + id + "\"");
  if (a == std::string::npos) return {};
  return dom.substr(a, dom.find("</figure>", a) - a);
}

// Pixels that are not white in a binary PPM (P6, what pdftoppm writes by default).
long ink_in_ppm(const std::string& ppm) {
  std::istringstream in(ppm);
  std::string magic;
  long w = 0, h = 0, maxv = 0;
  in >> magic >> w >> h >> maxv;
  in.get();
  if (magic != "P6" || w <= 0 || h <= 0) return -1;
  std::string px((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  long ink = 0;
  for (size_t i = 0; i + 2 < px.size(); i += 3)
    if (static_cast<unsigned char>(px[i]) < 240 || static_cast<unsigned char>(px[i + 1]) < 240 ||
        static_cast<unsigned char>(px[i + 2]) < 240)
      ++ink;
  return ink;
}

}  // namespace

TEST(Report, ComparesRunsInMatplotlibFiguresThatChromiumRendersWithCsvAndScripts) {
  const std::string browser = chromium();
  if (browser.empty()) {
    if (std::getenv("CI")) FAIL() << "chromium missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  }
  if (sh("/usr/bin/python3 -c 'import matplotlib' && command -v pdftoppm").status != 0) {
    if (std::getenv("CI")) FAIL() << "python3-matplotlib or poppler-utils missing: scripts/setup.sh installs them";
    GTEST_SKIP() << "python3-matplotlib or poppler-utils not installed";
  }
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file(
      "devices.yaml",
      "devices:\n"
      "  - device_type: SERVER\n    transport: local\n    power_model: {idle_w: 20, busy_w: 120}\n"
      "    connection_params:\n      - host: 127.0.0.1\n        port: 0\n"
      "  - device_type: PARTICIPANT\n    transport: local\n    power_model: {idle_w: 2.5, busy_w: 7.5}\n");
  // Two runs that differ in their codec; the first changes split by command.
  for (const char* codec : {"blosc-lz4", "fp16"}) {
    std::string y = small_experiment(db, std::string("record:\n  layers: true\nprobe:\n  duration_ms: 300\nenergy:\n  radio: wifi\n"
                                                     "  layer_window_ms: 2\n") +
                                             (std::string(codec) == "fp16" ? "" : "commands:\n  - {at_frame: 3, set_split: 13}\n"),
                                     devices);
    y.replace(y.find("split: all"), 10, "split: [0, 6, 22]");
    y.replace(y.find("repetitions: 1"), 14, "repetitions: 3");
    y.replace(y.find("compression: blosc-lz4"), 22, std::string("compression: ") + codec);
    auto r = sh(tracrctl() + " run " + d.file(std::string("exp-") + codec + ".yaml", y) + " --no-progress");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  const std::string page = (d.path / "report.html").string();
  const std::string figdir = (d.path / "figs").string();
  auto rep = sh(tracrctl() + " report 1 2 -o " + page + " --figures " + figdir + " --db " + db);
  ASSERT_EQ(rep.status, 0) << rep.out;
  const std::string text = slurp(page);
  // Self-contained: no script, nothing fetched.
  EXPECT_EQ(text.find("<script"), std::string::npos);
  EXPECT_EQ(text.find("src=\"http"), std::string::npos);
  EXPECT_EQ(text.find("href=\"http"), std::string::npos);
  // Inference runs: the settings dump has no train: block.
  EXPECT_EQ(text.find("\ntrain:"), std::string::npos);
  EXPECT_NE(text.find("[modelled:power_model]"), std::string::npos);
  EXPECT_NE(text.find("[modelled:radio-wifi]"), std::string::npos);

  // Chromium parses the page; the figures are in the DOM it dumps, as matplotlib drew them.
  const std::string flags = " --headless --no-sandbox --disable-gpu --no-first-run --disable-dev-shm-usage "
                            "--user-data-dir=" + (d.path / "chrome").string() + " --virtual-time-budget=5000 ";
  auto dom = sh(browser + flags + "--dump-dom file://" + page + " 2>/dev/null");
  ASSERT_EQ(dom.status, 0) << dom.out.substr(0, 2000);
  const std::vector<std::string> expected = {"latency", "stages", "bytes", "energy", "plan", "plan_error",
                                             "timeline_split"};
  for (const auto& id : expected) {
    const std::string fig = figure_of(dom.out, id);
    ASSERT_FALSE(fig.empty()) << id << " missing from the page";
    EXPECT_NE(fig.find("<svg"), std::string::npos) << id;
    EXPECT_TRUE(fig.find("id=\"line2d_") != std::string::npos || fig.find("id=\"patch_") != std::string::npos)
        << id << " drew no marks";
  }
  // Latency: legend by condition (the runs differ in codec only), x named by layer.
  const std::string lat = figure_of(dom.out, "latency");
  EXPECT_NE(lat.find(">blosc-lz4<"), std::string::npos) << lat.substr(0, 3000);
  EXPECT_NE(lat.find(">fp16<"), std::string::npos);
  EXPECT_EQ(lat.find("#1 system"), std::string::npos) << "the legend names runs, not conditions";
  EXPECT_NE(lat.find("(input)"), std::string::npos);
  EXPECT_NE(lat.find("features"), std::string::npos) << "x axis not named by layer";
  // Bytes read as 20k or 2000, never as a bare 900,000 or an offset 1e6.
  const std::string bytes = figure_of(dom.out, "bytes");
  EXPECT_FALSE(std::regex_search(bytes, std::regex(">[0-9]{1,3},[0-9]{3}")));
  EXPECT_EQ(bytes.find("1e6"), std::string::npos);
  // Energy series name their source.
  EXPECT_NE(figure_of(dom.out, "energy").find("[modelled:"), std::string::npos);

  // Stages: the legend lists exactly the stages with time in some run (read back from the figure's CSV).
  auto stages = parse_csv(slurp(figdir + "/stages.csv"));
  ASSERT_GT(stages.size(), 1u);
  auto col = [](const std::vector<std::string>& header, const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const size_t kStage = col(stages[0], "stage"), kValue = col(stages[0], "value");
  ASSERT_LT(kValue, stages[0].size());
  std::map<std::string, bool> occurs;
  for (size_t i = 1; i < stages.size(); ++i)
    occurs[stages[i][kStage]] = occurs[stages[i][kStage]] || std::stod(stages[i][kValue]) > 0;
  const std::string st = figure_of(dom.out, "stages");
  for (const auto& [stage, yes] : occurs) EXPECT_NE(st.find(">" + stage + "<"), std::string::npos) << stage;
  EXPECT_TRUE(occurs["head"] || occurs["server"]);

  // Latency CSV: one row per run and measured split, p5 <= median <= p95, runs 1 and 2 both present.
  auto lc = parse_csv(slurp(figdir + "/latency.csv"));
  ASSERT_GE(lc.size(), 6u);  // header + run 2's 3 splits + run 1's (its command moves it to split 13)
  const size_t kRun = col(lc[0], "run_id"), kMed = col(lc[0], "value"), kP5 = col(lc[0], "p5"), kP95 = col(lc[0], "p95");
  ASSERT_LT(kP95, lc[0].size());
  std::map<std::string, int> per_run;
  for (size_t i = 1; i < lc.size(); ++i) {
    ASSERT_EQ(lc[i].size(), lc[0].size());
    per_run[lc[i][kRun]]++;
    EXPECT_GE(std::stod(lc[i][kP95]), std::stod(lc[i][kMed])) << "p95 below the median in row " << i;
    EXPECT_LE(std::stod(lc[i][kP5]), std::stod(lc[i][kMed])) << "p5 above the median in row " << i;
  }
  EXPECT_GE(per_run["1"], 2);
  EXPECT_EQ(per_run["2"], 3);
  // The exported SVG is the page's figure.
  const std::string lat_svg = slurp(figdir + "/latency.svg");
  EXPECT_NE(text.find(lat_svg.substr(lat_svg.find("<svg"), 400)), std::string::npos);

  // Every figure as PDF, SVG, PNG, CSV and script; each PDF rasterised by pdftoppm has ink.
  for (const auto& id : expected) {
    for (const char* ext : {".svg", ".pdf", ".png", ".csv", ".py"})
      EXPECT_TRUE(std::filesystem::exists(figdir + "/" + id + ext)) << id << ext;
    EXPECT_EQ(slurp(figdir + "/" + id + ".pdf").rfind("%PDF", 0), 0u) << id;
    auto ppm = sh("pdftoppm -r 72 -singlefile " + figdir + "/" + id + ".pdf");
    ASSERT_EQ(ppm.status, 0) << id;
    EXPECT_GT(ink_in_ppm(ppm.out), 2000) << id << ".pdf renders blank";
  }

  // A screenshot of the page, as a reader would see it (kept beside the build for a look).
  const std::string shot = (d.path / "report.png").string();
  auto s = sh("cd " + d.path.string() + " && " + browser + flags + "--window-size=1200,3000 --screenshot=" + shot +
              " file://" + page + " 2>/dev/null");
  EXPECT_EQ(s.status, 0) << s.out;
  EXPECT_EQ(slurp(shot).substr(1, 3), "PNG");
  EXPECT_GT(std::filesystem::file_size(shot), 20000u);
  if (const char* keep = std::getenv("TRACR_KEEP_REPORT")) {
    std::filesystem::copy(d.path, keep, std::filesystem::copy_options::recursive |
                                            std::filesystem::copy_options::overwrite_existing);
  }
}

TEST(Report, UnknownRunMissingOutputAndMissingConverterAreClearErrors) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [5]");
  ASSERT_EQ(sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress").status, 0);
  auto r = sh(tracrctl() + " report 9 -o " + (d.path / "x.html").string() + " --db " + db);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("9"), std::string::npos) << r.out;
  auto u = sh(tracrctl() + " report 1 --db " + db);
  EXPECT_EQ(u.status, 2) << u.out;
  EXPECT_NE(u.out.find("--figures"), std::string::npos) << u.out;
  // No Python, or a Python without matplotlib: the error names the package; the CSVs and scripts stay.
  const std::string figs = (d.path / "f").string();
  auto c = sh("TRACR_PYTHON=/nonexistent/python3 " + tracrctl() + " report 1 --figures " + figs + " --db " + db);
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("python3-matplotlib"), std::string::npos) << c.out;
  const std::string bare = d.file("bare-python", "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n");
  ::chmod(bare.c_str(), 0755);
  auto m = sh("TRACR_PYTHON=" + bare + " " + tracrctl() + " report 1 --figures " + figs + " --db " + db);
  EXPECT_EQ(m.status, 1) << m.out;
  EXPECT_NE(m.out.find("has no matplotlib"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("python3-matplotlib"), std::string::npos) << m.out;
  EXPECT_TRUE(std::filesystem::exists(figs + "/latency.csv"));
  EXPECT_TRUE(std::filesystem::exists(figs + "/latency.py"));
  // Options that name nothing are refused with what was expected (exit 2).
  auto o = sh(tracrctl() + " report 1 --figures " + figs + " --only latencies --db " + db);
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("--only latencies: no such figure; figures: latency"), std::string::npos) << o.out;
}

// #20: `tracrctl run --report FILE.html` writes the report of the runs it made (a codec series here: both runs,
// as `tracrctl report 1 2 -o FILE` would) once every run completed; a report path in a directory that does
// not exist is refused before anything runs.
TEST(Report, RunWithReportWritesThePageOfEveryRunItMade) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: [blosc-lz4, fp16]");
  const std::string exp = d.file("exp.yaml", y);
  auto bad = sh(tracrctl() + " run " + exp + " --no-progress --report " + (d.path / "no/such/dir/r.html").string());
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--report " + (d.path / "no/such/dir/r.html").string() + ": directory '"), std::string::npos)
      << bad.out;
  EXPECT_FALSE(std::filesystem::exists(db)) << "nothing runs before the report path is checked";
  const std::string page = (d.path / "series.html").string();
  auto r = sh(tracrctl() + " run " + exp + " --no-progress --report " + page);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + page + " (2 runs from "), std::string::npos) << r.out;
  const std::string html = slurp(page);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("system/blosc-lz4"), std::string::npos) << html.substr(0, 2000);
  EXPECT_NE(html.find("system/fp16"), std::string::npos) << html.substr(0, 2000);
  EXPECT_NE(html.find(">fp16<"), std::string::npos) << "the legend names the codec the runs differ in";
}
