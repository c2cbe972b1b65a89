// `tracrctl report` rendered in real headless Chromium (Debian's chromium):
// the page opens from a file with no network, every chart draws (canvases
// with ink, counted by the page itself and read back from the DOM Chromium
// dumps after running its scripts), a screenshot is taken, and energy series
// carry their source.
#include <unistd.h>

#include <fstream>
#include <regex>

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

}  // namespace

TEST(Report, RendersInHeadlessChromiumWithEveryChartDrawn) {
  const std::string browser = chromium();
  if (browser.empty()) {
    if (std::getenv("CI")) FAIL() << "chromium missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  }
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file(
      "devices.yaml",
      "devices:\n"
      "  - device_type: SERVER\n    transport: local\n    power_model: {idle_w: 20, busy_w: 120}\n"
      "    connection_params:\n      - host: 127.0.0.1\n        port: 0\n"
      "  - device_type: PARTICIPANT\n    transport: local\n    power_model: {idle_w: 2.5, busy_w: 7.5}\n");
  std::string y = small_experiment(db, "record:\n  layers: true\nprobe:\n  duration_ms: 300\nenergy:\n  radio: wifi\n"
                                       "  layer_window_ms: 2\ncommands:\n  - {at_frame: 3, set_split: 13}\n",
                                   devices);
  y.replace(y.find("split: all"), 10, "split: [0, 6, 22]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 3");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string page = (d.path / "report.html").string();
  auto rep = sh(tracrctl() + " report last -o " + page + " --db " + db);
  ASSERT_EQ(rep.status, 0) << rep.out;
  std::ifstream in(page);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Self-contained: Chart.js inlined, nothing fetched.
  EXPECT_NE(text.find("Chart.js v"), std::string::npos);
  EXPECT_EQ(text.find("src=\"http"), std::string::npos);
  EXPECT_EQ(text.find("href=\"http"), std::string::npos);
  EXPECT_NE(text.find("[modelled:power_model]"), std::string::npos);
  EXPECT_NE(text.find("[modelled:radio-wifi]"), std::string::npos);
  EXPECT_NE(text.find("Predicted against measured latency"), std::string::npos);
  // Chromium runs the page's scripts; the DOM it dumps says what drew.
  const std::string flags = " --headless --no-sandbox --disable-gpu --no-first-run --disable-dev-shm-usage "
                            "--user-data-dir=" + (d.path / "chrome").string() + " --virtual-time-budget=10000 ";
  auto dom = sh(browser + flags + "--dump-dom file://" + page + " 2>/dev/null");
  ASSERT_EQ(dom.status, 0) << dom.out.substr(0, 2000);
  const std::string charts = attr(dom.out, "status", "data-charts");
  ASSERT_FALSE(charts.empty()) << dom.out.substr(0, 3000);
  EXPECT_EQ(charts, "5");  // time, bytes, energy, predicted vs measured, timeline
  EXPECT_EQ(attr(dom.out, "status", "data-drawn"), charts);
  EXPECT_EQ(attr(dom.out, "status", "data-nonblank"), charts);
  for (const char* id : {"time1", "bytes1", "energy1", "plan1", "timeline1"}) {
    const std::string ink = attr(dom.out, id, "data-ink-pixels");
    ASSERT_FALSE(ink.empty()) << id;
    EXPECT_GT(std::stol(ink), 1000) << id << " drew nothing";
  }
  // A screenshot of the page, as a reader would see it.
  const std::string shot = (d.path / "report.png").string();
  auto s = sh("cd " + d.path.string() + " && " + browser + flags + "--window-size=1100,2400 --screenshot=" + shot +
              " file://" + page + " 2>/dev/null");
  EXPECT_EQ(s.status, 0) << s.out;
  std::ifstream png(shot, std::ios::binary);
  char sig[8] = {};
  png.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  EXPECT_GT(std::filesystem::file_size(shot), 20000u);
}

TEST(Report, UnknownRunAndMissingChartJsAreClearErrors) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [5]");
  ASSERT_EQ(sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress").status, 0);
  auto r = sh(tracrctl() + " report 9 -o " + (d.path / "x.html").string() + " --db " + db);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("9"), std::string::npos) << r.out;
  auto c = sh(tracrctl() + " report 1 -o " + (d.path / "x.html").string() + " --db " + db + " --chartjs /nonexistent.js");
  EXPECT_EQ(c.status, 1) << c.out;
  EXPECT_NE(c.out.find("libjs-chart.js"), std::string::npos) << c.out;
  auto u = sh(tracrctl() + " report 1 --db " + db);
  EXPECT_EQ(u.status, 2) << u.out;
}
