#include "controller/session/prelude.hpp"
#include "core/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wire/identity.hpp"
#include "controller/session/agent_config.hpp"
#include "controller/session/model_check.hpp"
#include "core/user_error.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "protocol/codec.hpp"
#include "protocol/crypto.hpp"
#include "protocol/header.hpp"

namespace tracr::controller {

using namespace tracr::core;
using namespace tracr::store;

namespace {

// The note's size: written in place, never grown, so it fits on a full disk.
constexpr size_t kNoteBytes = 4096;


// What a run on a chain of two or more devices cannot do yet (#43), refused
// before anything starts: the adaptive policy, and record.outputs for
// placements that share their first cut (its files and rows are keyed by
// participant, split and codec). Links are shaped per hop (run.cpp
// shape_chain).
Status check_chain_run(const settings::ExperimentConfig& cfg, const settings::DevicesConfig& devices) {
  const std::string chain = fmt::format("chain: [{}]", fmt::join(devices.chain, ", "));
  auto refuse = [&](const std::string& key, const std::string& why) {
    return bad_input(fmt::format("{}: {}: {}", cfg.pos_of(key).known() ? cfg.pos_of(key).str() : cfg.pos_of("chain").str(),
                                 chain, why));
  };
  if (cfg.adapt.enabled) return refuse("adapt.enabled", "the adaptive policy plans two tiers only");
  if (!cfg.record.outputs) return {};
  auto shared = [&](const settings::SplitSpec& sp, const std::string& key) -> Status {
    if (sp.all || sp.plan)
      return refuse("record.outputs", fmt::format("record.outputs keeps one file per participant, split and codec, and "
                                                  "split: {} sweeps placements that may share their first cut; list "
                                                  "placements with distinct first cuts, or record outputs in separate "
                                                  "runs",
                                                  sp.plan ? "plan" : "all"));
    std::map<int, std::string> first;
    for (const auto& p : sp.entries)
      if (auto [it, fresh] = first.emplace(p.cuts.front(), p.text()); !fresh)
        return refuse(key, fmt::format("placements {} and {} share their first cut {}: record.outputs keeps one "
                                       "file per participant, split and codec; put them in separate runs",
                                       it->second, p.text(), p.cuts.front()));
    return {};
  };
  TRACR_TRY(shared(cfg.split, "split"));
  for (const auto& [name, sp] : cfg.participant_splits) TRACR_TRY(shared(sp, "participant_splits"));
  return {};
}

}  // namespace

Status check_session(settings::ExperimentConfig& cfg, settings::RoleCheck roles, const std::string& agent_option,
                     SessionPrelude& out) {
  if (auto st = settings::check_experiment_files(cfg); !st) return bad_input(st.error());
  // Model, input shape, split points and cuts: before any agent starts or any row is written.
  if (auto st = resolve_layer_names(cfg); !st) return bad_input(st.error());
  if (auto n = check_experiment_model(cfg, true, &out.layer_names); !n) return bad_input(n.error());
  auto devices = settings::load_experiment_devices(cfg, roles);
  if (!devices) return bad_input(devices.error());
  if (devices->chain.size() > 1 && roles == settings::RoleCheck::inference) TRACR_TRY(check_chain_run(cfg, *devices));
  for (const auto& [name, sp] : cfg.participant_splits) {
    const settings::DeviceConfig* d = devices->find(name);
    const auto parts = devices->participants();
    if (d && std::find(parts.begin(), parts.end(), d) != parts.end()) continue;
    std::string names;
    for (const auto* pd : devices->participants()) names += (names.empty() ? "" : ", ") + pd->name;
    return bad_input(fmt::format("participant_splits.{}: {} in devices file {}; expected one of its PARTICIPANTs ({})",
                                 name,
                                 !d                                            ? "is no device"
                                 : d->role == settings::DeviceRole::server ? "is the SERVER"
                                                                           : "is in the chain",
                                 devices->source, names));
  }
  out.devices = std::move(*devices);
  out.agent_path = agent_option.empty() ? fleet::self_dir() + "/tracr-agent" : agent_option;
  if (auto st = fleet::check_device_agents(out.devices); !st) return bad_input(st.error());
  if (access(out.agent_path.c_str(), X_OK) != 0)
    return bad_input(fmt::format("cannot find tracr-agent at {} (pass --agent PATH)", out.agent_path));
  return {};
}

SessionLaunch::SessionLaunch(const settings::ExperimentConfig& cfg, const SessionPrelude& pre_,
                             std::vector<uint8_t> secret_, std::string stamp_, int64_t run_id_, bool trust)
    : pre(pre_),
      secret(std::move(secret_)),
      stamp(std::move(stamp_)),
      run_id(run_id_),
      trust_new_hosts(trust),
      log_dir((std::filesystem::path(cfg.output).parent_path() / "logs").string()),
      config_yaml(agent_config_yaml(cfg)),
      experiment(agent_experiment(cfg)),
      heartbeat_timeout_ms(cfg.heartbeat_timeout_ms) {
  // The codec of the hop into chain device i: its entry's, else the run's.
  auto with_codec = [](settings::ExperimentConfig c, const std::string& codec) {
    if (auto spec = protocol::CodecSpec::parse(codec)) {  // checked when the experiment was read
      c.compression = codec;
      c.codec = *spec;
      c.compression_list.clear();
    }
    return c;
  };
  const bool chained = cfg.chain.size() > 1;
  settings::ExperimentConfig part = experiment;
  if (chained && !cfg.chain[0].compression.empty()) {
    part = with_codec(part, cfg.chain[0].compression);
    hop_codecs[""] = {settings::to_yaml(part), part};
  }
  for (size_t i = 0; chained && i + 1 < cfg.chain.size(); ++i)
    if (!cfg.chain[i + 1].compression.empty()) {
      const auto c = with_codec(experiment, cfg.chain[i + 1].compression);
      hop_codecs[cfg.chain[i].device] = {settings::to_yaml(c), c};
    }
  // A PARTICIPANT with splits of its own gets the experiment with them as `split`.
  for (const auto& [name, sp] : cfg.participant_splits) {
    settings::ExperimentConfig c = part;
    c.split = sp;
    own_splits[name] = {settings::to_yaml(c), c};
  }
}

fleet::LaunchSpec SessionLaunch::spec(const settings::DeviceConfig& dev, wire::AgentRole role,
                                      std::vector<std::string> args) const {
  fleet::LaunchSpec ls;
  ls.device = &dev;
  ls.role = role;
  ls.args = std::move(args);
  ls.agent_path = fleet::device_agent_path(dev, pre.agent_path);
  ls.secret = secret;
  ls.log_dir = log_dir.empty() ? "." : log_dir;
  // Unique per run across databases and controllers (run ids repeat per database).
  ls.log_name = fmt::format("run-{}-{}-{}.log", stamp, run_id, dev.name);
  ls.devices_file = pre.devices.source;
  ls.trust_new_hosts = trust_new_hosts;
  ls.config_yaml = config_yaml;
  ls.experiment = &experiment;
  const bool participant = role == wire::AgentRole::participant;
  if (auto it = hop_codecs.find(participant ? std::string() : dev.name); it != hop_codecs.end()) {
    ls.config_yaml = it->second.first;
    ls.experiment = &it->second.second;
  }
  if (auto it = own_splits.find(dev.name); it != own_splits.end() && participant) {
    ls.config_yaml = it->second.first;
    ls.experiment = &it->second.second;
  }
  ls.heartbeat_timeout_ms = heartbeat_timeout_ms;
  ls.profiles_known = profiles_known;
  return ls;
}

RunInfo session_run_info(const settings::ExperimentConfig& cfg, const SessionPrelude& pre, std::string name) {
  RunInfo info;
  info.name = std::move(name);
  info.config_yaml = settings::to_yaml(cfg);
  info.tracr_version = wire::kAgentVersion;
  info.protocol_version = static_cast<int>(protocol::kVersion);
  info.model = cfg.model;
  info.codec = cfg.compression;
  info.cipher = cfg.encryption ? "aes-256-gcm" : "none";
  info.devices_json = pre.devices.to_json();
  info.layer_names = pre.layer_names;
  return info;
}

std::string profiles_known_text(ResultsDb& db) {
  auto known = db.known_profiles();
  if (!known) {
    core::log_line(core::LogLevel::warn, "warning: stored profiles not read (" + user_text(known.error()) +
                                             "): every device profiles its model anew");
    return "";
  }
  std::string out;
  for (const auto& k : *known) {
    out += (out.empty() ? "" : ";") + k.key;
    if (k.layers > 0) out += fmt::format(" layers={}", k.layers);
    if (!k.head.empty()) out += fmt::format(" head={}", fmt::join(k.head, ","));
    if (!k.tail.empty()) out += fmt::format(" tail={}", fmt::join(k.tail, ","));
  }
  return out;
}

Status draw_session_secret(std::vector<uint8_t>& out) {
  out.assign(32, 0);
  if (auto rb = protocol::random_bytes(out.data(), out.size()); !rb)
    return command_failed("cannot draw the session secret: " + user_text(rb.error()));
  return {};
}

Status begin_session_row(ResultsDb& db, const RunInfo& info, int64_t& run_id) {
  auto id = db.begin_run(info);
  if (!id) return command_failed(user_text(id.error()));
  run_id = *id;
  std::ofstream f(failure_note_path(db.path(), run_id), std::ios::trunc);
  if (f) f << std::string(kNoteBytes, ' ');
  return {};
}

namespace {

// The cause of a run that could not be finished in its database: on stderr,
// and in the note reserved beside it for the next open's interruption reason.
void keep_cause(const std::string& db_path, int64_t run_id, const std::string& cause, const std::string& command) {
  TRACR_LOG(error, "tracrctl {}: run {} could not be finished in {}: {}", command, run_id, db_path, cause);
  const std::string text = cause.substr(0, kNoteBytes - 1) + "\n";
  if (std::FILE* f = std::fopen(failure_note_path(db_path, run_id).c_str(), "r+")) {  // in place, no truncation
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}

// "database: <error>", with where the rows it did not take went.
std::string write_error_cause(Recorder& rec, int64_t run_id) {
  std::string cause = "database: " + rec.write_error();
  if (!rec.unwritten()) return cause;
  // Received rows the database did not take are saved elsewhere, not dropped.
  const char* tmp = std::getenv("TMPDIR");
  const std::string path =
      fmt::format("{}/tracr-run{}-unwritten-{}.jsonl", tmp && *tmp ? tmp : "/tmp", run_id, getpid());
  auto saved = rec.save_unwritten(path);
  return cause + (saved ? fmt::format(" ({} received rows the database did not take are saved in {})", rec.unwritten(),
                                      *saved)
                        : fmt::format(" ({} received rows could not be written anywhere: {})", rec.unwritten(),
                                      user_text(saved.error())));
}

}  // namespace

SessionOutcome finish_session(Recorder& rec, RunRowGuard& row, std::string failure, const std::string& db_path,
                              int64_t run_id, const std::string& command) {
  rec.flush();
  if (!rec.write_error().empty()) {
    const std::string cause = write_error_cause(rec, run_id);
    // The loop's "database: <error>" is the same cause, now with its rows' fate.
    if (failure.empty() || failure == "database: " + rec.write_error()) failure = cause;
    else failure += "; " + cause;
  }
  SessionOutcome end = session_outcome(std::move(failure), fleet::SignalCatcher::signal());
  if (auto fin = row.finish(end); !fin) {
    // Not recorded is not completed: the session fails with this cause too.
    end.failure = end.failure.empty() ? user_text(fin.error()) : end.failure + "; " + user_text(fin.error());
    if (end.status == RunStatus::completed) end.status = RunStatus::failed;
    keep_cause(db_path, run_id, end.failure, command);
  } else {
    std::error_code ec;
    std::filesystem::remove(failure_note_path(db_path, run_id), ec);
  }
  return end;
}

}  // namespace tracr::controller
