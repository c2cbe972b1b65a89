// Energy meters: hardware energy counters read from the kernel or a vendor
// library, each naming itself in every figure it produces. No dependency
// beyond libc and libdl, so a small binary carrying this library runs on a
// machine without tracr's packages (tools/tracr-meters).
//
// Every meter exposes a cumulative energy counter in joules since the meter
// was opened (wrap-around handled inside). Meters that only offer
// instantaneous power (INA3221 rails through hwmon) integrate it in a
// background sampling thread and say so (integrated = true).
//
// Discovery reads directory trees (roots are parameters so tests can build
// sysfs-shaped trees): a meter that cannot be used is not an error, it is
// listed as unavailable with the reason (permission denied, missing file,
// library absent).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tracr::meters {

class Meter {
 public:
  virtual ~Meter() = default;
  // "rapl", "nvml", "ina3221", "battery".
  virtual std::string kind() const = 0;
  // Unique label, e.g. "rapl:package-0", "rapl:package-0/core", "rapl:psys", "nvml:gpu0",
  // "ina3221:VDD_IN", "battery:BAT0".
  virtual std::string name() const = 0;
  // How often the underlying counter or sample changes, seconds (RAPL ~0.001,
  // NVML ~0.02-0.1, hwmon sampling period, battery several seconds). Callers
  // size measurement windows from it.
  virtual double update_period_s() const = 0;
  // True when the figure is integrated from power samples rather than read
  // from an energy counter.
  virtual bool integrated() const { return false; }
  // Joules since open (monotonic non-decreasing while the counter works).
  // nullopt when the read failed now (reason in last_error()).
  virtual std::optional<double> joules() = 0;
  virtual std::string last_error() const = 0;
};

// A meter found, or a meter that exists and cannot be used.
struct MeterInfo {
  std::string name;        // as Meter::name()
  std::string kind;
  bool available = false;
  std::string why;         // when unavailable: "permission denied: /sys/.../energy_uj", ...
  std::string path;        // sysfs directory or library
};

struct DiscoverOptions {
  std::string powercap_root = "/sys/class/powercap";
  std::string hwmon_root = "/sys/class/hwmon";
  std::string power_supply_root = "/sys/class/power_supply";
  std::string nvml_library = "libnvidia-ml.so.1";  // dlopen name or path; "" = skip NVML
  bool rapl_subdomains = false;  // core/uncore/dram too (package and psys domains always)
  double ina3221_period_s = 0.01; // sampling period of integrated meters
};

struct Discovered {
  std::vector<std::unique_ptr<Meter>> meters;  // available, opened, counters started
  std::vector<MeterInfo> all;                   // every meter seen, available or not
};

// Finds every meter under the roots. RAPL: each intel-rapl:N (and
// intel-rapl:N:M with rapl_subdomains) with a readable energy_uj and
// max_energy_range_uj (wraps added back). NVML: the library's total-energy
// counter per GPU (nvmlDeviceGetTotalEnergyConsumption, mJ), loaded with
// dlopen; absent library = listed unavailable. INA3221: hwmon devices whose
// name is ina3221 (or ina3221x), one meter per rail with in<N>_input (mV)
// and curr<N>_input (mA) (or power<N>_input, uW), labelled by in<N>_label.
// Battery: power_supply entries of type Battery while discharging, from
// energy_now (uWh) or charge_now (uAh) x voltage_now (uV).
Discovered discover(const DiscoverOptions& opt = {});

}  // namespace tracr::meters
