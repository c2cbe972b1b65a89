// The experiment as the agents of a session get it, and the names a session
// is known by.
#pragma once

#include <string>

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

// The experiment as agents get it: paths made absolute (agents may run in
// another directory or on another machine with the same paths).
settings::ExperimentConfig agent_experiment(const settings::ExperimentConfig& cfg);
// to_yaml(agent_experiment(cfg)): what the CONFIG line and --experiment files hold.
std::string agent_config_yaml(const settings::ExperimentConfig& cfg);
// A name unique per run across databases and controllers: UTC time and 24
// random bits ("20261122T160000123Z-a1b2c3"); agent logs and checkpoint
// directories are named with it. Error when no random bytes can be drawn.
Result<std::string> new_run_stamp();
// What a SERVER agent must have been started with to serve this experiment.
std::string server_identity(const settings::ExperimentConfig& cfg);

}  // namespace tracr::controller
