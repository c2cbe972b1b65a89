// What run, train and agents start do before the first agent starts, and
// what run and train do after the last one stopped (#22). Each step returns
// its error for the command to end with (core/user_error.hpp): a usage error
// (exit 2) for a mistake in the experiment, the devices file or the command
// line (nothing started, nothing written), any other for a failure at run
// time (exit 1).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/session/run_row.hpp"
#include "fleet/launcher.hpp"
#include "settings/config.hpp"
#include "store/recorder.hpp"
#include "store/results.hpp"

namespace tracr::controller {

// The checks before anything starts: the experiment's files, its model
// (input shape, splits, cuts), its devices file and every device's agent
// binary. `agent_path` is the controller's tracr-agent (--agent, else the
// one beside tracrctl). Cuts given by layer name in cfg become numbers
// (resolve_layer_names). What they found, or a usage error.
struct SessionPrelude {
  settings::DevicesConfig devices;
  std::string agent_path;
  std::vector<std::string> layer_names;  // the model's layers, as the check built it (model_layers rows)
};
Status check_session(settings::ExperimentConfig& cfg, settings::RoleCheck roles, const std::string& agent_option,
                     SessionPrelude& out);

// What every agent of one session is launched with (the session secret,
// the effective experiment, its log names), set once; spec() is one launch.
struct SessionLaunch {
  SessionLaunch(const settings::ExperimentConfig& cfg, const SessionPrelude& pre, std::vector<uint8_t> secret,
                std::string stamp, int64_t run_id, bool trust_new_hosts);
  // Touches nothing shared: agents may be launched concurrently.
  fleet::LaunchSpec spec(const settings::DeviceConfig& dev, wire::AgentRole role,
                         std::vector<std::string> args) const;

  const SessionPrelude& pre;
  std::vector<uint8_t> secret;
  std::string stamp;
  int64_t run_id;
  bool trust_new_hosts;
  std::string log_dir;      // agents' logs: "logs" beside the database
  std::string config_yaml;  // agent_config_yaml(cfg): the CONFIG line
  settings::ExperimentConfig experiment;  // agent_experiment(cfg)
  // participant_splits: per PARTICIPANT name, its CONFIG line and experiment (`split` its own).
  std::map<std::string, std::pair<std::string, settings::ExperimentConfig>> own_splits;
  // A chain of two or more devices: every hop's codec is its chain entry's
  // compression, else the run's. The device before a hop encodes it: the
  // participants (hop 1) and each chain device but the last get the
  // experiment with that codec, by device name ("" = every participant).
  std::map<std::string, std::pair<std::string, settings::ExperimentConfig>> hop_codecs;
  int heartbeat_timeout_ms;
  std::string profiles_known;  // every agent's CONFIG line: the database's profiles (profiles_known_text)
};

// The run row's description of a session (its name, the experiment as
// YAML, versions, model, codec, cipher, devices).
store::RunInfo session_run_info(const settings::ExperimentConfig& cfg, const SessionPrelude& pre, std::string name);

// A session secret: 32 random bytes (a failure when none can be drawn: a
// predictable secret would authenticate nothing).
Status draw_session_secret(std::vector<uint8_t>& out);

// The profiles `db` holds, by profile key, as the CONFIG line's
// profiles_known ("KEY layers=N head=0,3 tail=3,7;..."): an agent whose key
// is listed reuses them (#45 friction 2). "" when there are none, or when
// they cannot be read (a warning: every profile is then timed).
std::string profiles_known_text(store::ResultsDb& db);

// The run row of a session: begin_run, then a note beside the database with
// room reserved for the cause of a run that cannot be finished in it (the
// disk may be full by then). A failure when the row cannot be written.
Status begin_session_row(store::ResultsDb& db, const store::RunInfo& info, int64_t& run_id);

// How the session ended, recorded: the rows still buffered are flushed; a
// database that stopped taking rows is the cause (the received rows it did
// not take saved to $TMPDIR, named in the cause); a signal makes the run
// interrupted. The row is finished; when even that fails, the session has
// failed with that cause too, kept in the note for the next open. Returns
// the outcome.
SessionOutcome finish_session(store::Recorder& rec, RunRowGuard& row, std::string failure, const std::string& db_path,
                              int64_t run_id, const std::string& command);

}  // namespace tracr::controller
