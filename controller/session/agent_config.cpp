#include "controller/session/agent_config.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "wire/identity.hpp"
#include "wire/control.hpp"
#include "protocol/crypto.hpp"
#include "store/results.hpp"

namespace tracr::controller {

using namespace tracr::store;  // the floors below, by their short names

using namespace tracr::settings;  // ExperimentConfig by its short name

namespace fs = std::filesystem;

Result<std::string> new_run_stamp() {
  uint8_t rnd[3] = {};
  TRACR_TRY(protocol::random_bytes(rnd, sizeof rnd));
  std::string t = utc_now_iso();  // 2026-11-22T16:00:00.123Z
  t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return c == '-' || c == ':' || c == '.'; }), t.end());
  return t + "-" + protocol::to_hex(rnd, sizeof rnd);
}

ExperimentConfig agent_experiment(const ExperimentConfig& cfg) {
  ExperimentConfig c = cfg;
  auto abs = [](std::string& p) {
    if (!p.empty()) p = fs::absolute(p).string();
  };
  abs(c.weights);
  abs(c.dataset.path);
  abs(c.dataset.class_names_file);
  static const std::string ts = "torchscript:";
  if (c.model.rfind(ts, 0) == 0) {
    std::string p = c.model.substr(ts.size());
    abs(p);
    c.model = ts + p;
  }
  // Every exit's head file, absolute and named (a linear head's default too).
  for (size_t i = 0; i < c.exits.size(); ++i) {
    std::string p = exit_head_file(cfg, i);
    abs(p);
    c.exits[i].file = p;
    if (c.exits[i].head != "linear") c.exits[i].head = ts + p;
  }
  return c;
}

std::string agent_config_yaml(const ExperimentConfig& cfg) { return to_yaml(agent_experiment(cfg)); }

std::string server_identity(const ExperimentConfig& cfg) {
  const ExperimentConfig c = agent_experiment(cfg);
  std::string shape;
  for (auto d : c.input_size) shape += std::to_string(d) + ",";
  // Percent-encoded values joined by spaces: unambiguous for any path.
  return fmt::format("agent={} model={} weights={} input={} seed={} encryption={} key_exchange={}", wire::kAgentVersion,
                     wire::pct_encode(c.model), wire::pct_encode(c.weights), shape, c.seed, c.encryption,
                     c.key_exchange);
}

}  // namespace tracr::controller
