#include "meters/meters.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

namespace tracr::meters {

namespace {

// ---------------------------------------------------------------------------
// Small sysfs helpers: no exceptions, no iostreams (reads must stay cheap).

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// Reads a small file (sysfs attributes are at most a page). On failure *err
// names the file and the reason; EACCES reads "permission denied: <path>".
bool read_text(const std::string& path, std::string* out, std::string* err) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == EACCES || e == EPERM) *err = "permission denied: " + path;
    else *err = "cannot open " + path + ": " + std::strerror(e);
    return false;
  }
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  const int e = errno;
  ::close(fd);
  if (n < 0) {
    if (e == EACCES || e == EPERM) *err = "permission denied: " + path;
    else *err = "cannot read " + path + ": " + std::strerror(e);
    return false;
  }
  out->assign(buf, static_cast<size_t>(n));
  return true;
}

// Parses a trimmed non-negative decimal integer; anything else (empty,
// negative, garbage, overflow) is a failure naming the file and the text.
bool parse_u64(const std::string& raw, const std::string& path, uint64_t* v, std::string* err) {
  const std::string t = trim(raw);
  bool ok = !t.empty() && t.size() <= 20;
  uint64_t x = 0;
  for (size_t i = 0; ok && i < t.size(); ++i) {
    const char c = t[i];
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (x > (std::numeric_limits<uint64_t>::max() - d) / 10) {
      ok = false;
      break;
    }
    x = x * 10 + d;
  }
  if (!ok) {
    *err = path + ": expected a non-negative integer, found '" + t + "'";
    return false;
  }
  *v = x;
  return true;
}

bool read_u64(const std::string& path, uint64_t* v, std::string* err) {
  std::string text;
  return read_text(path, &text, err) && parse_u64(text, path, v, err);
}

// Trimmed file contents, or "" when unreadable.
std::string read_word(const std::string& path) {
  std::string text, err;
  return read_text(path, &text, &err) ? trim(text) : std::string();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

// Parses "<prefix><digits>(:<digits>)*" into the numbers; false otherwise.
bool parse_indexed(const std::string& name, const std::string& prefix, std::vector<uint64_t>* idx) {
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) return false;
  idx->clear();
  std::string part;
  std::string ignored;
  size_t pos = prefix.size();
  while (true) {
    const size_t colon = name.find(':', pos);
    part = name.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    uint64_t v = 0;
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || !parse_u64(part, name, &v, &ignored))
      return false;
    idx->push_back(v);
    if (colon == std::string::npos) return true;
    pos = colon + 1;
  }
}

// ---------------------------------------------------------------------------
// RAPL (powercap sysfs): cumulative energy_uj wrapping at max_energy_range_uj.

const char* const kRaplPermissionHint = " (root only since Linux 5.10; run the agent as root or chmod o+r)";

class RaplMeter final : public Meter {
 public:
  RaplMeter(std::string name, std::string dir, uint64_t max_range_uj, uint64_t first_uj)
      : name_(std::move(name)), file_(dir + "/energy_uj"), max_range_(max_range_uj), prev_(first_uj) {}
  std::string kind() const override { return "rapl"; }
  std::string name() const override { return name_; }
  double update_period_s() const override { return 0.001; }
  std::optional<double> joules() override {
    uint64_t now = 0;
    if (!read_u64(file_, &now, &error_)) {
      if (error_.rfind("permission denied", 0) == 0) error_ += kRaplPermissionHint;
      return std::nullopt;
    }
    // A lower reading means the counter wrapped to 0 after max_energy_range_uj.
    if (now >= prev_) total_uj_ += now - prev_;
    else total_uj_ += now + max_range_ - prev_;
    prev_ = now;
    error_.clear();
    return static_cast<double>(total_uj_) * 1e-6;
  }
  std::string last_error() const override { return error_; }

 private:
  std::string name_;
  std::string file_;
  uint64_t max_range_;
  uint64_t prev_;
  uint64_t total_uj_ = 0;
  std::string error_;
};

struct RaplDomain {
  std::string entry;              // "intel-rapl:0:1"
  std::string dir;                // full path
  std::vector<uint64_t> index;    // {0, 1}
  bool mmio = false;
};

void discover_rapl(const DiscoverOptions& opt, Discovered* out) {
  if (opt.powercap_root.empty()) return;
  // Real sysfs lists every zone at the top level (symlinks); sub-zones also
  // appear nested in their parent. Take both, once each.
  std::vector<RaplDomain> domains;
  std::set<std::string> seen;
  auto scan = [&](const std::string& dir) {
    for (const auto& n : list_dir(dir)) {
      RaplDomain d;
      d.entry = n;
      d.dir = dir + "/" + n;
      if (parse_indexed(n, "intel-rapl-mmio:", &d.index)) d.mmio = true;
      else if (!parse_indexed(n, "intel-rapl:", &d.index)) continue;
      if (d.index.size() > 2 || !is_dir(d.dir) || !seen.insert(n).second) continue;
      domains.push_back(d);
    }
  };
  scan(opt.powercap_root);
  for (size_t i = 0, n = domains.size(); i < n; ++i)
    if (domains[i].index.size() == 1) scan(domains[i].dir);
  std::sort(domains.begin(), domains.end(), [](const RaplDomain& a, const RaplDomain& b) {
    return std::tie(a.mmio, a.index) < std::tie(b.mmio, b.index);
  });

  std::set<std::string> names;
  for (const auto& d : domains) {
    if (d.index.size() == 2 && !opt.rapl_subdomains) continue;
    const std::string prefix = d.mmio ? "rapl-mmio:" : "rapl:";
    auto zone_name = [&](const std::string& dir, const std::string& entry) {
      const std::string n = read_word(dir + "/name");
      return n.empty() ? entry : n;
    };
    std::string name;
    if (d.index.size() == 1) {
      name = prefix + zone_name(d.dir, d.entry);
    } else {
      const std::string parent_entry = (d.mmio ? "intel-rapl-mmio:" : "intel-rapl:") + std::to_string(d.index[0]);
      std::string parent_dir = opt.powercap_root + "/" + parent_entry;
      if (!is_dir(parent_dir)) parent_dir = d.dir + "/..";
      name = prefix + zone_name(parent_dir, parent_entry) + "/" + zone_name(d.dir, d.entry);
    }
    if (!names.insert(name).second) name += "@" + d.entry;  // two zones with one name: keep labels unique
    names.insert(name);

    MeterInfo info;
    info.name = name;
    info.kind = "rapl";
    info.path = d.dir;
    std::string err;
    uint64_t range = 0, first = 0;
    if (!read_u64(d.dir + "/max_energy_range_uj", &range, &err) || !read_u64(d.dir + "/energy_uj", &first, &err)) {
      if (err.rfind("permission denied", 0) == 0) err += kRaplPermissionHint;
      info.why = err;
    } else if (range == 0) {
      info.why = d.dir + "/max_energy_range_uj is 0 (cannot handle wrap-around)";
    } else {
      info.available = true;
      out->meters.push_back(std::make_unique<RaplMeter>(name, d.dir, range, first));
    }
    out->all.push_back(std::move(info));
  }
}

// ---------------------------------------------------------------------------
// NVML through dlopen: no NVIDIA headers or packages at build time.

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;

struct NvmlLib {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  bool initialised = false;

  std::string error(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return (s ? std::string(s) : "NVML error") + " (" + std::to_string(r) + ")";
  }
  // The last NVML meter (holding the last reference) shuts NVML down.
  ~NvmlLib() {
    if (initialised && shutdown) shutdown();
    if (handle) ::dlclose(handle);
  }
};

class NvmlMeter final : public Meter {
 public:
  NvmlMeter(std::shared_ptr<NvmlLib> lib, nvmlDevice_t dev, std::string name, unsigned long long first_mj)
      : lib_(std::move(lib)), dev_(dev), name_(std::move(name)), start_(first_mj), prev_(first_mj) {}
  std::string kind() const override { return "nvml"; }
  std::string name() const override { return name_; }
  // NVML refreshes the energy counter every ~20-100 ms depending on the GPU.
  double update_period_s() const override { return 0.1; }
  std::optional<double> joules() override {
    unsigned long long now = 0;
    const nvmlReturn_t r = lib_->energy(dev_, &now);
    if (r != kNvmlSuccess) {
      error_ = "nvmlDeviceGetTotalEnergyConsumption: " + lib_->error(r);
      return std::nullopt;
    }
    if (now < prev_) {
      error_ = "nvml energy counter went backwards (" + std::to_string(prev_) + " -> " + std::to_string(now) +
               " mJ; driver reloaded?)";
      return std::nullopt;
    }
    prev_ = now;
    error_.clear();
    return static_cast<double>(now - start_) * 1e-3;
  }
  std::string last_error() const override { return error_; }

 private:
  std::shared_ptr<NvmlLib> lib_;
  nvmlDevice_t dev_;
  std::string name_;
  unsigned long long start_;
  unsigned long long prev_;
  std::string error_;
};

void discover_nvml(const DiscoverOptions& opt, Discovered* out) {
  if (opt.nvml_library.empty()) return;
  auto unavailable = [&](const std::string& name, const std::string& path, const std::string& why) {
    MeterInfo info;
    info.name = name;
    info.kind = "nvml";
    info.path = path;
    info.why = why;
    out->all.push_back(std::move(info));
  };
  auto lib = std::make_shared<NvmlLib>();
  lib->handle = ::dlopen(opt.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char* e = ::dlerror();
    std::string why = opt.nvml_library + " not found (no NVIDIA driver)";
    // A present but unloadable library deserves its own message.
    if (e && !std::strstr(e, "No such file or directory")) why += ": " + std::string(e);
    unavailable("nvml", opt.nvml_library, why);
    return;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib->handle, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  sym(lib->init, "nvmlInit_v2");
  sym(lib->shutdown, "nvmlShutdown");
  sym(lib->count, "nvmlDeviceGetCount_v2");
  sym(lib->by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(lib->energy, "nvmlDeviceGetTotalEnergyConsumption");
  sym(lib->name, "nvmlDeviceGetName");
  sym(lib->error_string, "nvmlErrorString");
  if (!missing.empty()) {
    unavailable("nvml", opt.nvml_library, opt.nvml_library + " lacks " + missing + " (driver too old?)");
    return;
  }
  if (const nvmlReturn_t r = lib->init(); r != kNvmlSuccess) {
    unavailable("nvml", opt.nvml_library, "nvmlInit_v2: " + lib->error(r));
    return;
  }
  lib->initialised = true;
  unsigned n = 0;
  if (const nvmlReturn_t r = lib->count(&n); r != kNvmlSuccess) {
    unavailable("nvml", opt.nvml_library, "nvmlDeviceGetCount_v2: " + lib->error(r));
    return;
  }
  if (n == 0) {
    unavailable("nvml", opt.nvml_library, "NVML reports no GPU");
    return;
  }
  for (unsigned i = 0; i < n; ++i) {
    const std::string name = "nvml:gpu" + std::to_string(i);
    nvmlDevice_t dev = nullptr;
    if (const nvmlReturn_t r = lib->by_index(i, &dev); r != kNvmlSuccess) {
      unavailable(name, opt.nvml_library, "nvmlDeviceGetHandleByIndex_v2: " + lib->error(r));
      continue;
    }
    char model[96] = {0};
    std::string path = opt.nvml_library + " GPU " + std::to_string(i);
    if (lib->name(dev, model, sizeof model - 1) == kNvmlSuccess && model[0]) path += " (" + std::string(model) + ")";
    unsigned long long first = 0;
    if (const nvmlReturn_t r = lib->energy(dev, &first); r != kNvmlSuccess) {
      unavailable(name, path, "nvmlDeviceGetTotalEnergyConsumption: " + lib->error(r));
      continue;
    }
    MeterInfo info;
    info.name = name;
    info.kind = "nvml";
    info.available = true;
    info.path = path;
    out->all.push_back(std::move(info));
    out->meters.push_back(std::make_unique<NvmlMeter>(lib, dev, name, first));
  }
}

// ---------------------------------------------------------------------------
// INA3221 rails (hwmon): instantaneous power integrated by a sampling thread.

struct RailFiles {
  std::string power;    // power<N>_input, uW ("" when absent)
  std::string voltage;  // in<N>_input, mV
  std::string current;  // curr<N>_input, mA
};

// Watts now, or false with *err naming the file.
bool read_rail(const RailFiles& f, double* watts, std::string* err) {
  uint64_t a = 0, b = 0;
  if (!f.power.empty()) {
    if (!read_u64(f.power, &a, err)) return false;
    *watts = static_cast<double>(a) * 1e-6;
    return true;
  }
  if (!read_u64(f.voltage, &a, err) || !read_u64(f.current, &b, err)) return false;
  *watts = static_cast<double>(a) * static_cast<double>(b) * 1e-6;
  return true;
}

class Ina3221Meter final : public Meter {
 public:
  Ina3221Meter(std::string name, RailFiles files, double period_s, double first_watts)
      : name_(std::move(name)), files_(std::move(files)), period_(period_s > 0 ? period_s : 0.01) {
    prev_w_ = first_watts;
    prev_t_ = std::chrono::steady_clock::now();
    have_prev_ = true;
    thread_ = std::thread([this] { run(); });
  }
  ~Ina3221Meter() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::string kind() const override { return "ina3221"; }
  std::string name() const override { return name_; }
  double update_period_s() const override { return period_; }
  bool integrated() const override { return true; }
  std::optional<double> joules() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!sample_error_.empty()) {
      error_ = sample_error_;
      return std::nullopt;
    }
    error_.clear();
    return total_j_;
  }
  std::string last_error() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return error_;
  }

 private:
  void run() {
    const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(period_));
    auto next = std::chrono::steady_clock::now() + period;
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_until(lk, next, [this] { return stop_; })) {
      lk.unlock();
      double w = 0;
      std::string err;
      const bool ok = read_rail(files_, &w, &err);
      const auto t = std::chrono::steady_clock::now();
      lk.lock();
      if (ok) {
        // Trapezoid rule; a failed sample breaks the chain (the gap is not counted).
        if (have_prev_) total_j_ += 0.5 * (prev_w_ + w) * std::chrono::duration<double>(t - prev_t_).count();
        prev_w_ = w;
        prev_t_ = t;
        have_prev_ = true;
        sample_error_.clear();
      } else {
        have_prev_ = false;
        sample_error_ = err;
      }
      next += period;
      if (next < t) next = t + period;  // fell behind (suspended, overloaded): do not burst
    }
  }

  const std::string name_;
  const RailFiles files_;
  const double period_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool have_prev_ = false;
  double prev_w_ = 0;
  std::chrono::steady_clock::time_point prev_t_;
  double total_j_ = 0;
  std::string sample_error_;
  std::string error_;
  std::thread thread_;  // last: started after every member above exists
};

void discover_ina3221(const DiscoverOptions& opt, Discovered* out) {
  if (opt.hwmon_root.empty()) return;
  std::vector<std::pair<std::vector<uint64_t>, std::string>> hwmons;
  for (const auto& n : list_dir(opt.hwmon_root)) {
    std::vector<uint64_t> idx;
    if (parse_indexed(n, "hwmon", &idx) && idx.size() == 1) hwmons.emplace_back(idx, n);
  }
  std::sort(hwmons.begin(), hwmons.end());
  std::set<std::string> names;
  for (const auto& h : hwmons) {
    const std::string top = opt.hwmon_root + "/" + h.second;
    // Some kernels put the attributes in hwmonN/device/.
    const std::vector<std::string> bases = {top, top + "/device"};
    bool ina = false;
    for (const auto& b : bases) {
      const std::string n = read_word(b + "/name");
      if (n == "ina3221" || n == "ina3221x") ina = true;
    }
    if (!ina) continue;
    auto find = [&](const std::string& file) -> std::string {
      for (const auto& b : bases)
        if (exists(b + "/" + file)) return b + "/" + file;
      return {};
    };
    for (int ch = 1; ch <= 3; ++ch) {
      const std::string c = std::to_string(ch);
      RailFiles f;
      f.power = find("power" + c + "_input");
      f.voltage = find("in" + c + "_input");
      f.current = find("curr" + c + "_input");
      if (f.power.empty() && (f.voltage.empty() || f.current.empty())) continue;  // channel not wired
      const std::string label_file = find("in" + c + "_label");
      std::string label = label_file.empty() ? std::string() : read_word(label_file);
      if (label.empty()) label = "ch" + c;
      std::string name = "ina3221:" + label;
      if (!names.insert(name).second) name += "@" + h.second;  // two boards with one rail name
      names.insert(name);

      MeterInfo info;
      info.name = name;
      info.kind = "ina3221";
      info.path = !f.power.empty() ? f.power : f.voltage;
      info.path = info.path.substr(0, info.path.rfind('/'));
      const std::string enable = find("in" + c + "_enable");
      double w = 0;
      std::string err;
      if (!enable.empty() && read_word(enable) == "0") {
        info.why = "channel disabled (" + enable + " is 0)";
      } else if (!read_rail(f, &w, &err)) {
        info.why = err;
      } else {
        try {
          out->meters.push_back(std::make_unique<Ina3221Meter>(name, f, opt.ina3221_period_s, w));
          info.available = true;
        } catch (const std::system_error& e) {
          info.why = std::string("cannot start the sampling thread: ") + e.what();
        }
      }
      out->all.push_back(std::move(info));
    }
  }
}

// ---------------------------------------------------------------------------
// Battery (power_supply): energy drained since open while discharging.

bool not_discharging(const std::string& status) {
  return status == "Charging" || status == "Full" || status == "Not charging";
}

struct BatteryFiles {
  std::string energy;   // energy_now, uWh ("" when absent)
  std::string charge;   // charge_now, uAh
  std::string voltage;  // voltage_now, uV
};

bool read_battery(const BatteryFiles& f, double* joules, std::string* err) {
  uint64_t a = 0, b = 0;
  if (!f.energy.empty()) {
    if (!read_u64(f.energy, &a, err)) return false;
    *joules = static_cast<double>(a) * 0.0036;  // 1 uWh = 3600 uJ
    return true;
  }
  if (!read_u64(f.charge, &a, err) || !read_u64(f.voltage, &b, err)) return false;
  *joules = static_cast<double>(a) * static_cast<double>(b) * 3.6e-9;  // 1e-6 Ah * 1e-6 V * 3600 s
  return true;
}

class BatteryMeter final : public Meter {
 public:
  BatteryMeter(std::string name, std::string dir, BatteryFiles files, double start_j)
      : name_(std::move(name)), status_file_(dir + "/status"), files_(std::move(files)), start_j_(start_j) {}
  std::string kind() const override { return "battery"; }
  std::string name() const override { return name_; }
  // Fuel gauges refresh every few seconds (often 5-15 s).
  double update_period_s() const override { return 5.0; }
  std::optional<double> joules() override {
    const std::string status = read_word(status_file_);
    if (not_discharging(status)) {
      error_ = "battery began charging (status " + status + ")";
      return std::nullopt;
    }
    double now = 0;
    if (!read_battery(files_, &now, &error_)) return std::nullopt;
    error_.clear();
    return std::max(0.0, start_j_ - now);
  }
  std::string last_error() const override { return error_; }

 private:
  std::string name_;
  std::string status_file_;
  BatteryFiles files_;
  double start_j_;
  std::string error_;
};

void discover_battery(const DiscoverOptions& opt, Discovered* out) {
  if (opt.power_supply_root.empty()) return;
  auto entries = list_dir(opt.power_supply_root);
  std::sort(entries.begin(), entries.end());
  for (const auto& n : entries) {
    const std::string dir = opt.power_supply_root + "/" + n;
    if (read_word(dir + "/type") != "Battery") continue;
    MeterInfo info;
    info.name = "battery:" + n;
    info.kind = "battery";
    info.path = dir;
    BatteryFiles f;
    if (exists(dir + "/energy_now")) {
      f.energy = dir + "/energy_now";
    } else if (exists(dir + "/charge_now") && exists(dir + "/voltage_now")) {
      f.charge = dir + "/charge_now";
      f.voltage = dir + "/voltage_now";
    }
    const std::string status = read_word(dir + "/status");
    double start = 0;
    std::string err;
    if (f.energy.empty() && f.charge.empty()) {
      info.why = "no energy_now nor charge_now + voltage_now in " + dir;
    } else if (not_discharging(status)) {
      info.why = "not discharging (status " + status + ")";
    } else if (!read_battery(f, &start, &err)) {
      info.why = err;
    } else {
      info.available = true;
      out->meters.push_back(std::make_unique<BatteryMeter>(info.name, dir, f, start));
    }
    out->all.push_back(std::move(info));
  }
}

}  // namespace

Discovered discover(const DiscoverOptions& opt) {
  Discovered d;
  discover_rapl(opt, &d);
  discover_nvml(opt, &d);
  discover_ina3221(opt, &d);
  discover_battery(opt, &d);
  return d;
}

}  // namespace tracr::meters
