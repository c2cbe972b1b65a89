// Energy end to end on this machine: a sweep with a power model on both
// devices and the LTE radio model stores labelled per-layer and per-frame
// energy on both sides plus transmission energy, and every figure follows its
// model exactly. Where the machine has meters (RAPL, NVML, ...) their rows
// appear beside the model's, labelled measured:<meter>. A run with neither a
// meter nor a model stores no energy at all.
#include <cmath>
#include <cstdio>
#include <tuple>

#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

template <class... A>
std::string fmt_sql(const char* f, A... a) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

std::string devices_with_models(const TempDir& d) {
  return d.file("devices.yaml",
                "devices:\n"
                "  - device_type: SERVER\n    transport: local\n    cpu_cores: 1\n"
                "    power_model: {idle_w: 20, busy_w: 120}\n"
                "    connection_params:\n      - host: 127.0.0.1\n        port: 0\n"
                "  - device_type: PARTICIPANT\n    transport: local\n    cpu_cores: 1\n"
                "    power_model: {idle_w: 2.5, busy_w: 7.5}\n");
}

}  // namespace

TEST(Energy, ModelledEnergyIsStoredLabelledAndFollowsTheModels) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: true\nprobe:\n  enabled: false\nenergy:\n  radio: lte\n"
                                       "  layer_window_ms: 5\n", devices_with_models(d));
  y.replace(y.find("split: all"), 10, "split: [0, 5, 22]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 2");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // The table printed after the run names every figure's source.
  EXPECT_NE(r.out.find("energy per frame"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("modelled:power_model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("modelled:radio-lte"), std::string::npos) << r.out;
  // Per-frame rows on both sides, per-layer rows on both sides, transmission.
  const auto q = [&](const std::string& sql) { return query(db, sql); };
  const std::string frames = q("select count(*) from frames");
  EXPECT_EQ(frames, "12");  // 3 splits x 2 samples x 2 repetitions
  EXPECT_EQ(q("select count(*) from energy where side = 'participant' and stage = 'head' and source = 'modelled:power_model'"), frames);
  EXPECT_EQ(q("select count(*) from energy where side = 'participant' and stage = 'frame' and source = 'modelled:power_model'"), frames);
  EXPECT_EQ(q("select count(*) from energy where side = 'server' and device = 'server' and stage = 'tail' and source = 'modelled:power_model'"), frames);
  EXPECT_EQ(q("select count(*) from energy where stage = 'transmit' and source = 'modelled:radio-lte'"), frames);
  EXPECT_EQ(q("select count(*) from energy where stage = 'layer' and device = 'participant'"), "22");
  EXPECT_EQ(q("select count(*) from energy where stage = 'layer' and device = 'server'"), "22");
  EXPECT_EQ(q("select count(*) from energy where stage = 'layer' and (window_ns < 5000000 or reps < 1)"), "0");
  // No figure without its label.
  EXPECT_EQ(q("select count(*) from energy where source not like 'measured:%' and source not like 'modelled:%'"), "0");
  // The power model, exactly: joules x reps = idle_w x window + (busy - idle) x cpu / cores (1 CPU each).
  for (const auto& [dev, idle, busy] : {std::tuple{"participant", 2.5, 7.5}, std::tuple{"server", 20.0, 120.0}}) {
    const std::string worst = q(fmt_sql(
        "select max(abs(joules * reps - (%g * window_ns + %g * cpu_ns) / 1e9) / (joules * reps)), "
        "max(abs(net_joules * reps - %g * cpu_ns / 1e9) / (joules * reps)), count(*) from energy "
        "where source = 'modelled:power_model' and device = '%s'",
        idle, busy - idle, busy - idle, dev));
    SCOPED_TRACE(worst);
    const double gross_err = std::stod(worst.substr(0, worst.find('|')));
    const double net_err = std::stod(worst.substr(worst.find('|') + 1));
    EXPECT_LT(gross_err, 1e-9);
    EXPECT_LT(net_err, 1e-9);
  }
  // The radio model, exactly, from the frame's own bytes and network time.
  const std::string radio_err = q(
      "select max(abs(e.joules - (0.43839 * f.wire_bytes * 8 / 1e6 + 0.05197 * f.reply_bytes * 8 / 1e6 + "
      "1.28804 * max(f.network_ns, 0) / 1e9)) / e.joules) from energy e join frames f on f.run_id = e.run_id and "
      "f.frame = e.frame and f.participant = e.participant where e.stage = 'transmit'");
  EXPECT_LT(std::stod(radio_err), 1e-9) << radio_err;
  // Per-split statistics, and the same in `results show`.
  EXPECT_EQ(q("select count(*) from energy_stats where stage = 'tail' and device = 'server'"), "3");
  auto show = sh(tracrctl() + " results show 1 --db " + db);
  EXPECT_EQ(show.status, 0) << show.out;
  EXPECT_NE(show.out.find("modelled:radio-lte"), std::string::npos) << show.out;
}

TEST(Energy, NoMeterAndNoModelStoresNoEnergy) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [5]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // This machine's meters, if it has any, are the only source: measured rows,
  // never a modelled guess.
  EXPECT_EQ(query(db, "select count(*) from energy where source not like 'measured:%'"), "0");
  const bool meters = sh(std::string(TRACR_BIN_DIR) + "/tracr-agent --meters | grep -q ' available'").status == 0;
  if (!meters) {
    EXPECT_EQ(query(db, "select count(*) from energy"), "0");
    EXPECT_EQ(r.out.find("energy per frame"), std::string::npos) << r.out;
  }
}
