// Link profiles: the built-in ones (Neurosurgeon's measured rates) and the
// experiment's own under `links`.
#include "settings/yaml_reader.hpp"

#include <fmt/format.h>

namespace tracr::settings {

const std::vector<LinkSpec>& builtin_links() {
  // Kang et al., "Neurosurgeon: Collaborative Intelligence Between the Cloud
  // and Mobile Edge", ASPLOS 2017, section 5: average uplink throughput
  // measured for 3G, LTE and Wi-Fi (1.1, 5.85, 18.88 Mbps); applied both ways.
  static const std::vector<LinkSpec> v = {
      {"3g", 1.1, 1.1, 0, 0, 0, "Neurosurgeon (ASPLOS 2017) 3G uplink, 1.1 Mbit/s, both ways"},
      {"lte", 5.85, 5.85, 0, 0, 0, "Neurosurgeon (ASPLOS 2017) LTE uplink, 5.85 Mbit/s, both ways"},
      {"wifi", 18.88, 18.88, 0, 0, 0, "Neurosurgeon (ASPLOS 2017) Wi-Fi uplink, 18.88 Mbit/s, both ways"},
      {"gigabit", 1000, 1000, 0, 0, 0, "nominal Gigabit Ethernet, 1000 Mbit/s both ways"},
      // A chain's edge -> cloud hop (#43): a wide-area path, not a measurement.
      {"wan", 50, 50, 20, 0, 0, "nominal WAN for a chain's edge-cloud hop: 50 Mbit/s both ways, 40 ms RTT (20 ms each way)"},
      {"unlimited", 0, 0, 0, 0, 0, "no shaping: the link as it is"},
  };
  return v;
}

Result<LinkSpec> resolve_link(const ExperimentConfig& cfg, const std::string& name, const std::string& flag) {
  if (auto it = cfg.links.find(name); it != cfg.links.end()) return it->second;
  std::vector<std::string> names;
  for (const auto& l : builtin_links()) {
    if (l.name == name) return l;
    names.push_back(l.name);
  }
  for (const auto& [n, l] : cfg.links) names.push_back(n);
  const std::string dym = did_you_mean(name, names);
  // `plan --link` sees the experiment's `links` only when it plans from an EXPERIMENT.yaml.
  const char* const other = flag == "--link"
                                ? "or give the link's figures: --up-mbit N [--down-mbit N] [--rtt-ms N]; or plan from "
                                  "an EXPERIMENT.yaml that defines it under links"
                                : "or define it under links";
  const std::string msg = fmt::format("unknown link profile '{}'{}; expected one of {} ({})", name,
                                      dym.empty() ? "" : " (did you mean '" + dym + "'?)", join(names), other);
  if (!flag.empty()) return make_error(Errc::config, fmt::format("{}: {}", flag, msg));
  return err_at(cfg.pos_of("link"), "link", msg);
}

}  // namespace tracr::settings
