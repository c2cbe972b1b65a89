// tracr-meters: lists the energy meters of this machine (available or not,
// with why) and, with --watch SECONDS, the joules each counts over that long.
// Statically linked against libstdc++/libgcc so it can be copied to a
// device without tracr's packages.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meters/meters.hpp"

namespace {

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--watch SECONDS] [--subdomains] [--no-nvml] [--nvml-library PATH]\n"
      "          [--powercap-root DIR] [--hwmon-root DIR] [--power-supply-root DIR] [--period SECONDS]\n"
      "Lists every energy meter found (available or not, with why). With --watch, reads each\n"
      "available meter before and after sleeping SECONDS and prints joules and average watts.\n",
      argv0);
}

bool parse_seconds(const char* s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s, &end);
  return end != s && *end == '\0' && *v > 0;
}

}  // namespace

int main(int argc, char** argv) {
  tracr::meters::DiscoverOptions opt;
  double watch = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return 0;
    } else if (a == "--watch") {
      if (!parse_seconds(value(), &watch)) {
        std::fprintf(stderr, "--watch needs a positive number of seconds\n");
        return 2;
      }
    } else if (a == "--period") {
      if (!parse_seconds(value(), &opt.ina3221_period_s)) {
        std::fprintf(stderr, "--period needs a positive number of seconds\n");
        return 2;
      }
    } else if (a == "--subdomains") {
      opt.rapl_subdomains = true;
    } else if (a == "--no-nvml") {
      opt.nvml_library.clear();
    } else if (a == "--nvml-library") {
      opt.nvml_library = value();
    } else if (a == "--powercap-root") {
      opt.powercap_root = value();
    } else if (a == "--hwmon-root") {
      opt.hwmon_root = value();
    } else if (a == "--power-supply-root") {
      opt.power_supply_root = value();
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      usage(argv[0]);
      return 2;
    }
  }

  auto found = tracr::meters::discover(opt);
  std::printf("%-28s %-8s %-11s %s\n", "meter", "kind", "state", "path / why");
  for (const auto& m : found.all) {
    // Unavailable: the reason (with the path when the reason does not name it).
    std::string text = m.path;
    if (!m.available) text = m.why.find(m.path) == std::string::npos ? m.why + " [" + m.path + "]" : m.why;
    std::printf("%-28s %-8s %-11s %s\n", m.name.c_str(), m.kind.c_str(), m.available ? "available" : "unavailable",
                text.c_str());
  }
  if (found.all.empty()) std::printf("(no meter found)\n");
  if (watch <= 0) return 0;
  if (found.meters.empty()) {
    std::fprintf(stderr, "no available meter to watch\n");
    return 1;
  }

  std::vector<std::optional<double>> before;
  for (auto& m : found.meters) before.push_back(m->joules());
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nwatched %.3f s\n%-28s %14s %14s %12s  %s\n", dt, "meter", "before_J", "after_J", "avg_W", "notes");
  for (size_t i = 0; i < found.meters.size(); ++i) {
    auto& m = found.meters[i];
    const std::optional<double> after = m->joules();
    if (!before[i] || !after) {
      std::printf("%-28s %14s %14s %12s  read failed: %s\n", m->name().c_str(), "-", "-", "-",
                  m->last_error().c_str());
      continue;
    }
    std::string notes = "update period " + std::to_string(m->update_period_s()) + " s";
    if (m->integrated()) notes += ", integrated from power samples";
    std::printf("%-28s %14.3f %14.3f %12.3f  %s\n", m->name().c_str(), *before[i], *after,
                (*after - *before[i]) / dt, notes.c_str());
  }
  return 0;
}
