// Energy meters against sysfs-shaped trees built in a temporary directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "meters/meters.hpp"

namespace fs = std::filesystem;
using tracr::meters::DiscoverOptions;
using tracr::meters::Discovered;
using tracr::meters::Meter;
using tracr::meters::MeterInfo;

namespace {

class MetersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tracr-meters-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    for (const char* d : {"powercap", "hwmon", "power_supply"}) fs::create_directories(root_ + "/" + d);
    opt_.powercap_root = root_ + "/powercap";
    opt_.hwmon_root = root_ + "/hwmon";
    opt_.power_supply_root = root_ + "/power_supply";
    opt_.nvml_library = "";  // NVML tests set their own path
  }
  void TearDown() override {
    std::error_code ec;
    for (const auto& p : fs::recursive_directory_iterator(root_, ec))
      ::chmod(p.path().c_str(), 0755);  // chmod 000 files of the permission test
    fs::remove_all(root_, ec);
  }

  // Writes atomically (temporary + rename) so a sampling thread never sees a
  // half-written file.
  void put(const std::string& rel, const std::string& text) {
    const fs::path p = root_ + "/" + rel;
    fs::create_directories(p.parent_path());
    const std::string tmp = p.string() + ".tmp";
    {
      std::ofstream f(tmp);
      f << text << "\n";
    }
    fs::rename(tmp, p);
  }
  std::string path(const std::string& rel) const { return root_ + "/" + rel; }

  void rapl_zone(const std::string& zone, const std::string& name, const std::string& energy,
                 const std::string& range = "262143328850") {
    put("powercap/" + zone + "/name", name);
    put("powercap/" + zone + "/energy_uj", energy);
    put("powercap/" + zone + "/max_energy_range_uj", range);
  }

  static const MeterInfo* info(const Discovered& d, const std::string& name) {
    for (const auto& i : d.all)
      if (i.name == name) return &i;
    return nullptr;
  }
  static Meter* meter(const Discovered& d, const std::string& name) {
    for (const auto& m : d.meters)
      if (m->name() == name) return m.get();
    return nullptr;
  }
  static std::vector<std::string> names(const Discovered& d) {
    std::vector<std::string> v;
    for (const auto& i : d.all) v.push_back(i.name);
    std::sort(v.begin(), v.end());
    return v;
  }

  std::string root_;
  DiscoverOptions opt_;
};

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---------------------------------------------------------------------------
// RAPL

TEST_F(MetersTest, RaplReadsPackageCounterInJoules) {
  rapl_zone("intel-rapl:0", "package-0", "5000000");
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_EQ(d.all[0].name, "rapl:package-0");
  EXPECT_EQ(d.all[0].kind, "rapl");
  EXPECT_TRUE(d.all[0].available) << d.all[0].why;
  EXPECT_EQ(d.all[0].path, path("powercap/intel-rapl:0"));
  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  EXPECT_EQ(m.name(), "rapl:package-0");
  EXPECT_EQ(m.kind(), "rapl");
  EXPECT_FALSE(m.integrated());
  EXPECT_DOUBLE_EQ(m.update_period_s(), 0.001);
  ASSERT_TRUE(m.joules().has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*m.joules(), 0.0);

  put("powercap/intel-rapl:0/energy_uj", "6000000");
  auto j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 1.0);
  put("powercap/intel-rapl:0/energy_uj", "  6500000  \n");
  j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 1.5);
  EXPECT_EQ(m.last_error(), "");
}

TEST_F(MetersTest, RaplAddsMaxRangeWhenTheCounterWraps) {
  rapl_zone("intel-rapl:0", "package-0", "900000", "1000000");
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  put("powercap/intel-rapl:0/energy_uj", "100000");  // wrapped: 100000 + 1000000 - 900000
  auto j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 0.2);
  put("powercap/intel-rapl:0/energy_uj", "300000");
  j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 0.4);
  put("powercap/intel-rapl:0/energy_uj", "200000");  // wrapped again
  j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 1.3);
}

TEST_F(MetersTest, RaplMissingEnergyFileIsListedUnavailable) {
  put("powercap/intel-rapl:0/name", "package-0");
  put("powercap/intel-rapl:0/max_energy_range_uj", "262143328850");
  auto d = tracr::meters::discover(opt_);
  EXPECT_TRUE(d.meters.empty());
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_EQ(d.all[0].name, "rapl:package-0");
  EXPECT_FALSE(d.all[0].available);
  EXPECT_NE(d.all[0].why.find(path("powercap/intel-rapl:0/energy_uj")), std::string::npos) << d.all[0].why;
  EXPECT_NE(d.all[0].why.find("No such file"), std::string::npos) << d.all[0].why;
}

TEST_F(MetersTest, RaplUnreadableEnergyFileNamesTheFile) {
  // A directory in place of energy_uj fails to read for root too (EISDIR).
  put("powercap/intel-rapl:0/name", "package-0");
  put("powercap/intel-rapl:0/max_energy_range_uj", "262143328850");
  fs::create_directories(path("powercap/intel-rapl:0/energy_uj"));
  auto d = tracr::meters::discover(opt_);
  EXPECT_TRUE(d.meters.empty());
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_FALSE(d.all[0].available);
  EXPECT_NE(d.all[0].why.find(path("powercap/intel-rapl:0/energy_uj")), std::string::npos) << d.all[0].why;
}

TEST_F(MetersTest, RaplPermissionDeniedSaysRootOnly) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: chmod 000 does not stop root's reads";
  rapl_zone("intel-rapl:0", "package-0", "5000000");
  rapl_zone("intel-rapl:1", "psys", "7000000");
  const std::string file = path("powercap/intel-rapl:0/energy_uj");
  ASSERT_EQ(::chmod(file.c_str(), 0), 0);
  auto d = tracr::meters::discover(opt_);
  const MeterInfo* i = info(d, "rapl:package-0");
  ASSERT_NE(i, nullptr);
  EXPECT_FALSE(i->available);
  EXPECT_EQ(i->why.rfind("permission denied: " + file, 0), 0u) << i->why;
  EXPECT_NE(i->why.find("Linux 5.10"), std::string::npos) << i->why;
  ASSERT_EQ(d.meters.size(), 1u);  // psys still usable

  // Losing access after open: the read fails with the same reason.
  Meter& psys = *d.meters[0];
  const std::string psys_file = path("powercap/intel-rapl:1/energy_uj");
  ASSERT_EQ(::chmod(psys_file.c_str(), 0), 0);
  EXPECT_FALSE(psys.joules().has_value());
  EXPECT_EQ(psys.last_error().rfind("permission denied: " + psys_file, 0), 0u) << psys.last_error();
}

TEST_F(MetersTest, RaplSubdomainsOnlyWhenAsked) {
  rapl_zone("intel-rapl:0", "package-0", "1");
  rapl_zone("intel-rapl:0:0", "core", "2");
  rapl_zone("intel-rapl:0:1", "dram", "3");
  rapl_zone("intel-rapl:0/intel-rapl:0:2", "uncore", "4");  // only nested in its parent
  rapl_zone("intel-rapl:1", "psys", "5");
  rapl_zone("intel-rapl-mmio:0", "package-0", "6");
  put("powercap/intel-rapl/enabled", "1");  // the control type, not a zone

  auto off = tracr::meters::discover(opt_);
  EXPECT_EQ(names(off), (std::vector<std::string>{"rapl-mmio:package-0", "rapl:package-0", "rapl:psys"}));
  EXPECT_EQ(off.meters.size(), 3u);

  opt_.rapl_subdomains = true;
  auto on = tracr::meters::discover(opt_);
  EXPECT_EQ(names(on), (std::vector<std::string>{"rapl-mmio:package-0", "rapl:package-0", "rapl:package-0/core",
                                                 "rapl:package-0/dram", "rapl:package-0/uncore", "rapl:psys"}));
  EXPECT_EQ(on.meters.size(), 6u);
  for (const auto& m : on.meters) EXPECT_EQ(m->kind(), "rapl");
  Meter* dram = meter(on, "rapl:package-0/dram");
  ASSERT_NE(dram, nullptr);
  put("powercap/intel-rapl:0:1/energy_uj", "2000003");
  auto j = dram->joules();
  ASSERT_TRUE(j.has_value()) << dram->last_error();
  EXPECT_DOUBLE_EQ(*j, 2.0);
}

TEST_F(MetersTest, RaplGarbageValueFailsNamingFileAndText) {
  rapl_zone("intel-rapl:0", "package-0", "1000");
  rapl_zone("intel-rapl:1", "psys", "-5");
  auto d = tracr::meters::discover(opt_);
  const MeterInfo* psys = info(d, "rapl:psys");
  ASSERT_NE(psys, nullptr);
  EXPECT_FALSE(psys->available);
  EXPECT_NE(psys->why.find(path("powercap/intel-rapl:1/energy_uj")), std::string::npos) << psys->why;
  EXPECT_NE(psys->why.find("'-5'"), std::string::npos) << psys->why;

  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  put("powercap/intel-rapl:0/energy_uj", "12abc");
  EXPECT_FALSE(m.joules().has_value());
  EXPECT_NE(m.last_error().find(path("powercap/intel-rapl:0/energy_uj")), std::string::npos) << m.last_error();
  EXPECT_NE(m.last_error().find("'12abc'"), std::string::npos) << m.last_error();
  put("powercap/intel-rapl:0/energy_uj", "1001000");  // recovers
  auto j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 1.0);
}

// ---------------------------------------------------------------------------
// NVML

TEST_F(MetersTest, NvmlAbsentLibraryIsListedUnavailable) {
  opt_.nvml_library = path("nowhere/libnvidia-ml.so.1");
  auto d = tracr::meters::discover(opt_);
  EXPECT_TRUE(d.meters.empty());
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_EQ(d.all[0].name, "nvml");
  EXPECT_EQ(d.all[0].kind, "nvml");
  EXPECT_FALSE(d.all[0].available);
  EXPECT_EQ(d.all[0].why, opt_.nvml_library + " not found (no NVIDIA driver)");

  opt_.nvml_library = "";  // skipped altogether
  EXPECT_TRUE(tracr::meters::discover(opt_).all.empty());
}

TEST_F(MetersTest, NvmlLibraryWithoutTheSymbolsIsListedUnavailable) {
  opt_.nvml_library = "libc.so.6";  // loads, but is not NVML
  auto d = tracr::meters::discover(opt_);
  EXPECT_TRUE(d.meters.empty());
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_FALSE(d.all[0].available);
  EXPECT_NE(d.all[0].why.find("nvmlInit_v2"), std::string::npos) << d.all[0].why;
  EXPECT_NE(d.all[0].why.find("nvmlDeviceGetTotalEnergyConsumption"), std::string::npos) << d.all[0].why;
}

// ---------------------------------------------------------------------------
// INA3221 (hwmon)

TEST_F(MetersTest, Ina3221IntegratesVoltageTimesCurrent) {
  put("hwmon/hwmon0/name", "coretemp");
  put("hwmon/hwmon0/temp1_input", "40000");
  put("hwmon/hwmon1/name", "ina3221");
  put("hwmon/hwmon1/in1_label", "VDD_IN");
  put("hwmon/hwmon1/in1_input", "5000");    // mV
  put("hwmon/hwmon1/curr1_input", "1000");  // mA => 5 W
  put("hwmon/hwmon1/in2_input", "1000");    // no label
  put("hwmon/hwmon1/curr2_input", "0");
  put("hwmon/hwmon1/in3_input", "1000");    // no current: not a rail
  opt_.ina3221_period_s = 0.01;
  const auto t0 = std::chrono::steady_clock::now();
  auto d = tracr::meters::discover(opt_);
  EXPECT_EQ(names(d), (std::vector<std::string>{"ina3221:VDD_IN", "ina3221:ch2"}));
  ASSERT_EQ(d.meters.size(), 2u);
  Meter* m = meter(d, "ina3221:VDD_IN");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->kind(), "ina3221");
  EXPECT_TRUE(m->integrated());
  EXPECT_DOUBLE_EQ(m->update_period_s(), 0.01);
  EXPECT_EQ(info(d, "ina3221:VDD_IN")->path, path("hwmon/hwmon1"));

  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto j = m->joules();
  const double elapsed = secs_since(t0);
  ASSERT_TRUE(j.has_value()) << m->last_error();
  // Wide bounds: about 1.5 J; never more than 5 W times the time it could have run.
  EXPECT_GE(*j, 1.0);
  EXPECT_LE(*j, 5.0 * elapsed + 0.05);

  put("hwmon/hwmon1/curr1_input", "0");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto j1 = m->joules();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto j2 = m->joules();
  ASSERT_TRUE(j1.has_value() && j2.has_value()) << m->last_error();
  EXPECT_GE(*j1, *j);
  EXPECT_NEAR(*j2, *j1, 0.05);
  auto ch2 = meter(d, "ina3221:ch2")->joules();
  ASSERT_TRUE(ch2.has_value());
  EXPECT_DOUBLE_EQ(*ch2, 0.0);
}

TEST_F(MetersTest, Ina3221PowerInputUnderDevice) {
  put("hwmon/hwmon3/device/name", "ina3221x");
  put("hwmon/hwmon3/device/in1_label", "VDD_GPU");
  put("hwmon/hwmon3/device/power1_input", "2000000");  // uW => 2 W
  opt_.ina3221_period_s = 0.01;
  const auto t0 = std::chrono::steady_clock::now();
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_EQ(d.all[0].name, "ina3221:VDD_GPU");
  EXPECT_TRUE(d.all[0].available) << d.all[0].why;
  EXPECT_EQ(d.all[0].path, path("hwmon/hwmon3/device"));
  ASSERT_EQ(d.meters.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto j = d.meters[0]->joules();
  const double elapsed = secs_since(t0);
  ASSERT_TRUE(j.has_value()) << d.meters[0]->last_error();
  EXPECT_GE(*j, 0.4);
  EXPECT_LE(*j, 2.0 * elapsed + 0.02);
}

TEST_F(MetersTest, Ina3221GarbageSampleFailsNamingFile) {
  put("hwmon/hwmon0/name", "ina3221");
  put("hwmon/hwmon0/power1_input", "1000000");
  put("hwmon/hwmon0/in2_label", "VDD_SOC");
  put("hwmon/hwmon0/in2_input", "bogus");
  put("hwmon/hwmon0/curr2_input", "10");
  opt_.ina3221_period_s = 0.005;
  auto d = tracr::meters::discover(opt_);
  const MeterInfo* soc = info(d, "ina3221:VDD_SOC");
  ASSERT_NE(soc, nullptr);
  EXPECT_FALSE(soc->available);
  EXPECT_NE(soc->why.find(path("hwmon/hwmon0/in2_input")), std::string::npos) << soc->why;
  EXPECT_NE(soc->why.find("'bogus'"), std::string::npos) << soc->why;

  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  EXPECT_EQ(m.name(), "ina3221:ch1");
  put("hwmon/hwmon0/power1_input", "junk");
  // Wait (bounded) for the sampling thread to read the bad value.
  std::optional<double> j = 0.0;
  for (int i = 0; i < 400 && j.has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    j = m.joules();
  }
  EXPECT_FALSE(j.has_value());
  EXPECT_NE(m.last_error().find(path("hwmon/hwmon0/power1_input")), std::string::npos) << m.last_error();
  EXPECT_NE(m.last_error().find("'junk'"), std::string::npos) << m.last_error();
}

TEST_F(MetersTest, Ina3221DisabledChannelIsListedUnavailable) {
  put("hwmon/hwmon0/name", "ina3221");
  put("hwmon/hwmon0/in1_input", "5000");
  put("hwmon/hwmon0/curr1_input", "100");
  put("hwmon/hwmon0/in1_enable", "0");
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_FALSE(d.all[0].available);
  EXPECT_NE(d.all[0].why.find("disabled"), std::string::npos) << d.all[0].why;
  EXPECT_TRUE(d.meters.empty());
}

// ---------------------------------------------------------------------------
// Battery (power_supply)

TEST_F(MetersTest, BatteryEnergyNowDrain) {
  put("power_supply/AC/type", "Mains");
  put("power_supply/AC/online", "0");
  put("power_supply/BAT0/type", "Battery");
  put("power_supply/BAT0/status", "Discharging");
  put("power_supply/BAT0/energy_now", "50000000");  // uWh
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.all.size(), 1u);
  EXPECT_EQ(d.all[0].name, "battery:BAT0");
  EXPECT_EQ(d.all[0].kind, "battery");
  EXPECT_TRUE(d.all[0].available) << d.all[0].why;
  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  EXPECT_EQ(m.name(), "battery:BAT0");
  EXPECT_DOUBLE_EQ(m.update_period_s(), 5.0);
  auto j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_DOUBLE_EQ(*j, 0.0);
  put("power_supply/BAT0/energy_now", "49990000");  // 10000 uWh = 36 J drained
  j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_NEAR(*j, 36.0, 1e-6);
}

TEST_F(MetersTest, BatteryChargeTimesVoltage) {
  put("power_supply/BAT1/type", "Battery");
  put("power_supply/BAT1/status", "Discharging");
  put("power_supply/BAT1/charge_now", "4000000");    // uAh
  put("power_supply/BAT1/voltage_now", "12000000");  // uV
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  EXPECT_EQ(m.name(), "battery:BAT1");
  put("power_supply/BAT1/charge_now", "3990000");  // 0.01 Ah * 12 V * 3600 = 432 J
  auto j = m.joules();
  ASSERT_TRUE(j.has_value()) << m.last_error();
  EXPECT_NEAR(*j, 432.0, 1e-6);
}

TEST_F(MetersTest, BatteryChargingIsUnavailableAndLaterChargingFailsReads) {
  put("power_supply/BAT0/type", "Battery");
  put("power_supply/BAT0/status", "Charging");
  put("power_supply/BAT0/energy_now", "50000000");
  put("power_supply/BAT1/type", "Battery");
  put("power_supply/BAT1/status", "Full");
  put("power_supply/BAT1/energy_now", "50000000");
  put("power_supply/BAT2/type", "Battery");
  put("power_supply/BAT2/status", "Discharging");
  put("power_supply/BAT2/energy_now", "50000000");
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.all.size(), 3u);
  EXPECT_EQ(info(d, "battery:BAT0")->why, "not discharging (status Charging)");
  EXPECT_FALSE(info(d, "battery:BAT0")->available);
  EXPECT_EQ(info(d, "battery:BAT1")->why, "not discharging (status Full)");
  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  EXPECT_EQ(m.name(), "battery:BAT2");
  ASSERT_TRUE(m.joules().has_value()) << m.last_error();
  put("power_supply/BAT2/status", "Charging");
  EXPECT_FALSE(m.joules().has_value());
  EXPECT_NE(m.last_error().find("battery began charging"), std::string::npos) << m.last_error();
}

TEST_F(MetersTest, BatteryGarbageValueFailsNamingFile) {
  put("power_supply/BAT0/type", "Battery");
  put("power_supply/BAT0/status", "Discharging");
  put("power_supply/BAT0/energy_now", "50000000");
  auto d = tracr::meters::discover(opt_);
  ASSERT_EQ(d.meters.size(), 1u);
  Meter& m = *d.meters[0];
  put("power_supply/BAT0/energy_now", "n/a");
  EXPECT_FALSE(m.joules().has_value());
  EXPECT_NE(m.last_error().find(path("power_supply/BAT0/energy_now")), std::string::npos) << m.last_error();
  EXPECT_NE(m.last_error().find("'n/a'"), std::string::npos) << m.last_error();
}

// ---------------------------------------------------------------------------
// Odd trees

TEST_F(MetersTest, WeirdTreesDoNotCrash) {
  fs::create_directories(path("powercap/intel-rapl:0"));  // no files at all
  put("powercap/intel-rapl:x/name", "package-x");         // not a zone index
  put("powercap/intel-rapl:2", "a file, not a directory");
  fs::create_symlink(path("missing"), path("powercap/intel-rapl:3"));
  rapl_zone("intel-rapl:4", "package-4", "10", "0");      // range 0: cannot unwrap
  fs::create_directories(path("hwmon/hwmon0/name"));      // name is a directory
  put("hwmon/hwmonX/name", "ina3221");
  put("hwmon/hwmonX/power1_input", "1");
  put("power_supply/BAT0/type", "Battery");               // no energy file
  fs::create_symlink(path("missing"), path("power_supply/BAT9"));
  auto d = tracr::meters::discover(opt_);
  EXPECT_TRUE(d.meters.empty());
  EXPECT_EQ(names(d), (std::vector<std::string>{"battery:BAT0", "rapl:intel-rapl:0", "rapl:package-4"}));
  for (const auto& i : d.all) {
    EXPECT_FALSE(i.available);
    EXPECT_FALSE(i.why.empty()) << i.name;
  }

  opt_.powercap_root = path("nope");
  opt_.hwmon_root = path("nope");
  opt_.power_supply_root = path("nope");
  EXPECT_TRUE(tracr::meters::discover(opt_).all.empty());
}

// ---------------------------------------------------------------------------
// This machine

TEST(MetersRealTest, RealRaplCountersDoNotGoBackwards) {
  const char* file = "/sys/class/powercap/intel-rapl:0/energy_uj";
  if (::access(file, R_OK) != 0) GTEST_SKIP() << file << " is not readable here (absent, or root only)";
  DiscoverOptions opt;
  opt.hwmon_root = "";
  opt.power_supply_root = "";
  opt.nvml_library = "";
  auto d = tracr::meters::discover(opt);
  ASSERT_FALSE(d.meters.empty());
  std::vector<double> before;
  for (auto& m : d.meters) {
    auto j = m->joules();
    ASSERT_TRUE(j.has_value()) << m->name() << ": " << m->last_error();
    before.push_back(*j);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (size_t i = 0; i < d.meters.size(); ++i) {
    auto j = d.meters[i]->joules();
    ASSERT_TRUE(j.has_value()) << d.meters[i]->name() << ": " << d.meters[i]->last_error();
    EXPECT_GE(*j, 0.0);
    EXPECT_GE(*j, before[i]) << d.meters[i]->name();
  }
}

}  // namespace
