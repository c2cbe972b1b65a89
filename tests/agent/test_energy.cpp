// The agent's energy accounting: windows over a RAPL-shaped tree the test
// builds (real parsing through meters/), idle subtraction, the power model's
// and radio model's arithmetic, and the server rows' trip through reply meta.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/energy.hpp"

namespace fs = std::filesystem;
using namespace tracr::agent;
using namespace tracr::wire;

namespace {

struct Tree {
  std::string root;
  Tree() {
    char tmpl[] = "/tmp/tracr-energy-XXXXXX";
    root = ::mkdtemp(tmpl);
    for (const char* d : {"powercap", "hwmon", "power_supply"}) fs::create_directories(root + "/" + d);
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void put(const std::string& rel, const std::string& text) const {
    const fs::path p = root + "/" + rel;
    fs::create_directories(p.parent_path());
    {
      std::ofstream f(p.string() + ".tmp");
      f << text << "\n";
    }
    fs::rename(p.string() + ".tmp", p);
  }
  tracr::meters::DiscoverOptions opt() const {
    tracr::meters::DiscoverOptions o;
    o.powercap_root = root + "/powercap";
    o.hwmon_root = root + "/hwmon";
    o.power_supply_root = root + "/power_supply";
    o.nvml_library = "";
    return o;
  }
};

double secs(const EnergyRecord& r) { return static_cast<double>(r.window_ns) / 1e9; }

}  // namespace

// A meter slow to read (NVML took milliseconds a read on an H100 machine,
// inside encode_ns and server_ns) is read by a background thread; a mark
// takes its latest reading and its rows say so. The threshold is 0 here so
// the file-backed RAPL counter counts as slow.
TEST(Energy, ASlowMeterIsSampledInTheBackgroundAndItsRowsSaySo) {
  Tree t;
  t.put("powercap/intel-rapl:0/name", "package-0");
  t.put("powercap/intel-rapl:0/max_energy_range_uj", "262143328850");
  t.put("powercap/intel-rapl:0/energy_uj", "1000000");
  {
    auto fast = EnergyMeter::open(std::nullopt, t.opt());  // the default threshold: read at each mark
    bool said = false;
    for (const auto& l : fast->describe()) said |= l.find("background") != std::string::npos;
    EXPECT_FALSE(said);
    const auto a = fast->mark();
    t.put("powercap/intel-rapl:0/energy_uj", "1250000");
    auto rows = fast->between(a, fast->mark(), 1);
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_TRUE(rows[0].joules);
    EXPECT_DOUBLE_EQ(*rows[0].joules, 0.25);  // read at the mark itself
    EXPECT_EQ(rows[0].flags.find("sampled"), std::string::npos) << rows[0].flags;
  }
  auto em = EnergyMeter::open(std::nullopt, t.opt(), 0.0);
  std::string described;
  for (const auto& l : em->describe()) described += l + "\n";
  EXPECT_NE(described.find("measured:rapl:package-0: a read takes "), std::string::npos) << described;
  EXPECT_NE(described.find("in the background"), std::string::npos) << described;
  EXPECT_GE(em->max_period_s(), 0.005);  // windows span 10 samples, not 10 of the counter's 1 ms updates
  const auto a = em->mark();
  ASSERT_TRUE(a.joules.at(0));
  const double start = *a.joules[0];
  t.put("powercap/intel-rapl:0/energy_uj", "3250000");
  // The sampler picks the new value up within its period (5 ms); allow a loaded machine 20 s.
  EnergyMeter::Mark b = em->mark();
  for (int i = 0; i < 2000 && !(b.joules[0] && *b.joules[0] > start); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    b = em->mark();
  }
  auto rows = em->between(a, b, 1);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0].joules);
  EXPECT_DOUBLE_EQ(*rows[0].joules, 2.0);
  EXPECT_NE(rows[0].flags.find("sampled"), std::string::npos) << rows[0].flags;
  // A counter that can no longer be read gives read_failed, not a stale figure forever.
  fs::remove(t.root + "/powercap/intel-rapl:0/energy_uj");
  EnergyMeter::Mark c = em->mark();
  for (int i = 0; i < 2000 && c.joules[0]; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    c = em->mark();
  }
  auto failed = em->between(b, c, 1);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_FALSE(failed[0].joules);
  EXPECT_NE(failed[0].flags.find("read_failed"), std::string::npos) << failed[0].flags;
}

TEST(Energy, RaplWindowIdleAndNetFromTheCounter) {
  Tree t;
  t.put("powercap/intel-rapl:0/name", "package-0");
  t.put("powercap/intel-rapl:0/max_energy_range_uj", "262143328850");
  t.put("powercap/intel-rapl:0/energy_uj", "1000000");
  auto em = EnergyMeter::open(std::nullopt, t.opt());
  ASSERT_TRUE(em->any());
  // Idle: the counter moves 0.5 J during the idle window.
  std::thread bump([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    t.put("powercap/intel-rapl:0/energy_uj", "1500000");
  });
  auto idle = em->measure_idle(200);
  bump.join();
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0].stage, "idle");
  EXPECT_EQ(idle[0].source, "measured:rapl:package-0");
  ASSERT_TRUE(idle[0].joules && idle[0].idle_w);
  EXPECT_DOUBLE_EQ(*idle[0].joules, 0.5);
  const double idle_w = *idle[0].idle_w;
  EXPECT_NEAR(idle_w, 0.5 / secs(idle[0]), 1e-9);
  EXPECT_NEAR(*idle[0].net_joules, 0.0, 1e-9);  // the idle window minus its own idle power
  // A window of 4 repetitions in which the counter moves 2 J.
  const auto a = em->mark();
  t.put("powercap/intel-rapl:0/energy_uj", "3500000");
  const auto b = em->mark();
  auto rows = em->between(a, b, 4);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(*rows[0].joules, 0.5);  // per repetition
  EXPECT_EQ(rows[0].reps, 4);
  EXPECT_NEAR(*rows[0].net_joules, 0.5 - idle_w * secs(rows[0]) / 4, 1e-12);
  // A window far shorter than 10 RAPL updates is flagged, the figure kept.
  EXPECT_NE(rows[0].flags.find("short_window"), std::string::npos) << rows[0].flags;
  // A counter that cannot be read gives no figure and says so; never a zero.
  t.put("powercap/intel-rapl:0/energy_uj", "garbage");
  const auto c = em->mark();
  rows = em->between(b, c, 1);
  EXPECT_FALSE(rows[0].joules.has_value());
  EXPECT_NE(rows[0].flags.find("read_failed"), std::string::npos);
}

TEST(Energy, PowerModelFollowsTheLinearUtilisationModel) {
  Tree t;  // no meters
  PowerModel pm{2.5, 7.5, 2};
  auto em = EnergyMeter::open(pm, t.opt());
  ASSERT_TRUE(em->any());
  EXPECT_TRUE(em->measure_idle(100).empty());  // the model states its idle power; nothing measured
  const auto a = em->mark();
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;  // CPU time in the window
  const auto b = em->mark();
  auto rows = em->between(a, b, 2);
  ASSERT_EQ(rows.size(), 1u);
  const EnergyRecord& r = rows[0];
  EXPECT_EQ(r.source, "modelled:power_model");
  ASSERT_TRUE(r.cpu_ns && *r.cpu_ns > 0);
  const double cpu_s = static_cast<double>(*r.cpu_ns) / 1e9;
  EXPECT_NEAR(*r.joules, (2.5 * secs(r) + (7.5 - 2.5) * cpu_s / 2) / 2, 1e-12);
  EXPECT_NEAR(*r.net_joules, (7.5 - 2.5) * cpu_s / 2 / 2, 1e-12);
  EXPECT_DOUBLE_EQ(*r.idle_w, 2.5);
}

TEST(Energy, NoMeterAndNoModelMeansNoEnergy) {
  Tree t;
  auto em = EnergyMeter::open(std::nullopt, t.opt());
  EXPECT_FALSE(em->any());
  EXPECT_TRUE(em->between(em->mark(), em->mark(), 1).empty());
}

TEST(Energy, RadioModelsArePublishedFiguresAppliedToBytesAndTime) {
  ASSERT_NE(find_radio("lte"), nullptr);
  EXPECT_EQ(find_radio("5g"), nullptr);
  // LTE (Huang et al. 2012): 438.39 mW/Mbps up, 51.97 down, 1288.04 mW base.
  auto r = radio_energy(*find_radio("lte"), 1000000, 250000, 500000000);
  EXPECT_EQ(r.source, "modelled:radio-lte");
  EXPECT_EQ(r.stage, "transmit");
  EXPECT_NEAR(*r.joules, 0.43839 * 8 + 0.05197 * 2 + 1.28804 * 0.5, 1e-12);
  EXPECT_FALSE(r.idle_w.has_value());
  auto neg = radio_energy(*find_radio("wifi"), 8000, 0, -5);
  EXPECT_NEAR(*neg.joules, 0.28317 * 0.064, 1e-12);
  EXPECT_EQ(neg.flags, "negative_network");
}

TEST(Energy, ServerRowsTravelInReplyMetaAndBadOnesAreRefused) {
  EnergyRecord a;
  a.side = "server";
  a.stage = "tail";
  a.split = 4;
  a.source = "measured:nvml:gpu0";
  a.joules = 1.25;
  a.window_ns = 123456789;
  a.cpu_ns = 42;
  a.flags = "short_window";
  EnergyRecord b = a;
  b.source = "modelled:power_model";
  b.joules.reset();
  b.net_joules = -0.5;
  auto back = unpack_energy(pack_energy({a, b}));
  ASSERT_TRUE(back.ok()) << back.error().str();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ(to_control((*back)[0]), to_control(a));
  EXPECT_EQ(to_control((*back)[1]), to_control(b));
  // A peer's row without a label, or with the wrong shape, is refused by name.
  EnergyRecord c = a;
  c.source = "rapl";
  auto bad = unpack_energy(pack_energy({c}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("measured: or modelled:"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(unpack_energy("a\tb\n").ok());
}
