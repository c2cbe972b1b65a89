// `tracrctl agents start`: a SERVER agent left running detached
// (fleet/detached.hpp) for later runs of the same model to reuse.
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "controller/commands/run.hpp"
#include "controller/session/agent_config.hpp"
#include "controller/session/prelude.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"
#include "fleet/deploy.hpp"
#include "fleet/detached.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "fleet/staging.hpp"
#include "protocol/crypto.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::fleet;

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

namespace fs = std::filesystem;

namespace {

// One detached SERVER being started: what it is started with, and what is
// known of it so far (written to its state file once it is READY).
struct DetachedStart {
  const DeviceConfig& server;
  const SessionPrelude& pre;
  std::vector<uint8_t> secret;
  std::string secret_hex;
  ExperimentConfig experiment;    // without layer profiling: it serves many runs
  std::vector<std::string> args;  // after the agent's path
  bool trust = false;
  DetachedServer d;
};

// A local agent: its secret and experiment in files beside its state,
// started in its own session, READY read from its log.
Result<wire::ControlMsg> start_local(DetachedStart& st, const std::string& state) {
  const DeviceConfig& server = st.server;
  const std::string dir = fs::path(state).parent_path().string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string secret_file = dir + "/" + server.name + ".secret";
  const std::string exp_file = dir + "/" + server.name + ".experiment.yaml";
  for (const auto& [file, text] : {std::pair{secret_file, fleet::agent_secret_line(st.secret_hex)},
                                   std::pair{exp_file, agent_config_yaml(st.experiment)}})
    if (auto w = write_owner_only(file, text); !w) return w.error();
  st.d.log = dir + "/" + server.name + ".log";
  std::vector<std::string> argv = netns_exec_argv(server.netns);
  argv.push_back(st.pre.agent_path);
  argv.insert(argv.end(), st.args.begin(), st.args.end());
  argv.insert(argv.end(), {"--experiment", exp_file, "--secret-file", secret_file});
  auto pid = spawn_detached(argv, st.d.log, {"OMP_WAIT_POLICY=PASSIVE"});
  if (!pid) return pid.error();
  st.d.pid = *pid;
  st.d.start_ticks = process_start_ticks(st.d.pid);
  auto ready = wait_ready_in_log([&]() -> Result<std::string> { return read_local(st.d.log); }, st.secret, 600000);
  if (!ready) return make_error(ready.error().code, server.name + ": " + user_text(ready.error()));
  return ready;
}

// Writes `text` to a file only its owner can read, on the device.
Status write_remote(SshSession& s, const std::string& device, const std::string& path, const std::string& text,
                    const std::string& what) {
  auto w = s.run("umask 077 && cat > " + shell_quote(path), text);
  if (!w || w->exit_status != 0) return make_error(Errc::io, fmt::format("device {}: cannot write the {}", device, what));
  return {};
}

// Over SSH: the agent deployed, the files a SERVER reads staged, its secret
// and experiment written beside it, started with setsid, READY read from
// its log on the device.
Result<wire::ControlMsg> start_remote(DetachedStart& st) {
  const DeviceConfig& server = st.server;
  const std::string dev = "device " + server.name;
  auto s = SshSession::connect(device_ssh_target(server, st.pre.devices.source, st.trust));
  if (!s) return make_error(s.error().code, dev + ": " + user_text(s.error()));
  auto dep = deploy_agent(**s, st.pre.agent_path, server.work_dir);
  if (!dep) return make_error(dep.error().code, dev + ": deploy: " + user_text(dep.error()));
  auto missing = remote_missing_libraries(**s, dep->remote_path);
  if (missing && !missing->empty())
    return make_error(Errc::not_found, missing_libraries_message(dev, dep->remote_path, *missing));
  // The files a SERVER reads (model, weights): at the device's paths.
  const ExperimentConfig abs_cfg = agent_experiment(st.experiment);
  auto staged = stage_files(**s, server, agent_files(abs_cfg, wire::AgentRole::server));
  if (!staged) return staged.error();
  for (const auto& f : *staged) fmt::print("{}: {}\n", server.name, f.describe());
  const std::string dir = dep->remote_path.substr(0, dep->remote_path.rfind('/') + 1);
  const std::string secret_file = dir + server.name + ".secret";
  const std::string exp_file = dir + server.name + ".experiment.yaml";
  st.d.log = dir + server.name + "-detached.log";
  TRACR_TRY(write_remote(**s, server.name, secret_file, fleet::agent_secret_line(st.secret_hex), "secret file"));
  TRACR_TRY(write_remote(**s, server.name, exp_file, to_yaml(with_device_paths(abs_cfg, *staged)), "experiment file"));
  // Its log readable by the device's user only (0600), as the secret file is.
  std::string cmd = "(umask 077 && : >> " + shell_quote(st.d.log) + " && chmod 600 " + shell_quote(st.d.log) +
                    ") || exit 1; setsid nohup " + shell_quote(dep->remote_path);
  for (const auto& x : st.args) cmd += " " + shell_quote(x);
  cmd += " --experiment " + shell_quote(exp_file) + " --secret-file " + shell_quote(secret_file) + " > " +
         shell_quote(st.d.log) + " 2>&1 < /dev/null & p=$!; echo $p; " + start_ticks_shell("$p");
  auto r = (*s)->run(cmd);
  if (!r || r->exit_status != 0)
    return make_error(Errc::remote, fmt::format("{}: cannot start the agent: {}", dev, r ? r->err : user_text(r.error())));
  st.d.pid = std::atol(r->out.c_str());
  if (const auto nl = r->out.find('\n'); nl != std::string::npos) st.d.start_ticks = std::atoll(r->out.c_str() + nl + 1);
  auto ready = wait_ready_in_log([&]() { return (*s)->read_file_tail(st.d.log, 1u << 20); }, st.secret, 600000);
  if (!ready) return make_error(ready.error().code, server.name + ": " + user_text(ready.error()));
  return ready;
}

// The READY agent's state file, where `agents stop` finds it.
Status record_detached(DetachedStart& st, const wire::ControlMsg& ready, const std::string& state,
                       const std::string& model) {
  const DeviceConfig& server = st.server;
  st.d.endpoint = ready.get_or("endpoint", "");
  if (server.transport != Transport::local) st.d.endpoint = reachable_endpoint(st.d.endpoint, server.connection().host);
  st.d.ready = ready.fields;
  st.d.secret_hex = st.secret_hex;
  if (!st.pre.devices.embedded)
    st.d.devices_file = fs::absolute(st.pre.devices.source).lexically_normal().string();
  if (auto w = write_detached(state, st.d); !w) {
    return core::command_failed(user_text(w.error()));
  }
  // `agents stop` finds it wherever the experiment's output is (#24).
  const std::string dir = fs::path(state).parent_path().string();
  if (auto w = remember_detached_dir(dir); !w)
    TRACR_LOG(warn, "tracrctl agents start: warning: {}; `tracrctl agents stop --state-dir {}` will still stop it",
              user_text(w.error()), dir);
  fmt::print("SERVER agent on {} running detached: pid {}, {}, serving {}; runs of this model reuse it until "
             "`tracrctl agents stop`\n",
             server.name, st.d.pid, st.d.endpoint, model);
  return {};
}

}  // namespace

Status cmd_agents_start(const RunOptions& opt) {
  auto cfg = load_experiment(opt.experiment, opt.sets);
  if (!cfg) {
    return core::bad_input(user_text(cfg.error()));
  }
  if (!cfg->model_list.empty()) {
    return core::bad_input(
        fmt::format("model: {} models given; a detached SERVER serves one: start one per model (--set model=ID)",
                    cfg->model_list.size()));
  }
  if (!cfg->input_size_list.empty()) {
    return core::bad_input(fmt::format(
        "input_size: {} sizes given; a detached SERVER serves one: start one per size (--set input_size=C,H,W)",
        cfg->input_size_list.size()));
  }
  // The same checks as run's before anything starts.
  SessionPrelude pre;
  TRACR_TRY(check_session(*cfg, RoleCheck::inference, opt.agent_path, pre));
  const DeviceConfig& server = pre.devices.server();
  const std::string state = detached_state_path(cfg->output, server.name);
  if (auto old = read_detached(state);
      old && (old->transport != "local" || process_alive(old->pid, old->start_ticks))) {
    fmt::print("SERVER agent on {} already running (pid {}, {}); `tracrctl agents stop` first\n", server.name, old->pid,
               old->endpoint);
    if (old->identity == server_identity(*cfg)) return {};
    return core::command_failed(
        fmt::format("the detached SERVER agent on {} serves another model or settings", server.name));
  }
  DetachedStart st{server, pre, {}, {}, *cfg, {}, opt.trust_new_hosts, {}};
  TRACR_TRY(draw_session_secret(st.secret));
  st.secret_hex = protocol::to_hex(st.secret.data(), st.secret.size());
  st.experiment.record.layers = false;
  st.args = {"--role", std::string(wire::role_name(wire::AgentRole::server)), "--bind", fmt::format("tcp://{}:{}", server_bind_host(server), server.connection().port)};
  for (const auto& x : device_limit_args(server)) st.args.push_back(x);
  st.d.device = server.name;
  st.d.transport = std::string(transport_name(server.transport));
  st.d.identity = server_identity(*cfg);
  auto ready = server.transport == Transport::local ? start_local(st, state) : start_remote(st);
  if (!ready) {
    return core::command_failed(user_text(ready.error()));
  }
  return record_detached(st, *ready, state, cfg->model);
}

}  // namespace tracr::controller
