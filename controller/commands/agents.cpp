// `tracrctl agents start`: a SERVER agent left running detached
// (fleet/detached.hpp) for later runs of the same model to reuse.
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "controller/commands/run.hpp"
#include "controller/session/agent_config.hpp"
#include "controller/session/model_check.hpp"
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

int cmd_agents_start(const RunOptions& opt) {
  const bool trust = opt.trust_new_hosts;
  const std::string agent_path = opt.agent_path.empty() ? self_dir() + "/tracr-agent" : opt.agent_path;
  auto cfg = load_experiment(opt.experiment, opt.sets);
  if (!cfg) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(cfg.error()));
    return 2;
  }
  if (!cfg->model_list.empty()) {
    fmt::print(stderr, "tracrctl agents start: model: {} models given; a detached SERVER serves one: start one per "
                       "model (--set model=ID)\n", cfg->model_list.size());
    return 2;
  }
  if (auto n = check_experiment_model(*cfg); !n) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(n.error()));
    return 2;
  }
  auto devices = load_experiment_devices(*cfg);
  if (!devices) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(devices.error()));
    return 2;
  }
  const DeviceConfig& server = devices->server();
  const std::string state = detached_state_path(cfg->output, server.name);
  if (auto old = read_detached(state);
      old && (old->transport != "local" || process_alive(old->pid, old->start_ticks))) {
    fmt::print("SERVER agent on {} already running (pid {}, {}); `tracrctl agents stop` first\n", server.name, old->pid,
               old->endpoint);
    return old->identity == server_identity(*cfg) ? 0 : 1;
  }
  std::vector<uint8_t> secret(32);
  if (auto rb = protocol::random_bytes(secret.data(), secret.size()); !rb) {
    // A predictable session secret would authenticate nothing.
    fmt::print(stderr, "tracrctl agents start: cannot draw the session secret: {}\n", user_text(rb.error()));
    return 1;
  }
  const std::string secret_hex = protocol::to_hex(secret.data(), secret.size());
  // The detached agent reads the effective experiment from a file beside its
  // secret (no layer profiling: it serves many runs).
  ExperimentConfig no_profile = *cfg;
  no_profile.record.layers = false;
  std::string config_yaml = agent_config_yaml(no_profile);
  std::vector<std::string> a = {"--role", "SERVER", "--bind",
                                fmt::format("tcp://{}:{}", server_bind_host(server), server.connection().port)};
  for (const auto& x : device_limit_args(server)) a.push_back(x);

  DetachedServer d;
  d.device = server.name;
  d.transport = std::string(transport_name(server.transport));
  d.identity = server_identity(*cfg);
  Result<agent::ControlMsg> ready = make_error(Errc::internal, "");
  if (server.transport == Transport::local) {
    const std::string dir = fs::path(state).parent_path().string();
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string secret_file = dir + "/" + server.name + ".secret";
    const std::string exp_file = dir + "/" + server.name + ".experiment.yaml";
    for (const auto& [file, text] : {std::pair{secret_file, fleet::agent_secret_line(secret_hex)}, std::pair{exp_file, config_yaml}})
      if (auto w = write_owner_only(file, text); !w) {
        fmt::print(stderr, "tracrctl agents start: {}\n", user_text(w.error()));
        return 1;
      }
    a.insert(a.end(), {"--experiment", exp_file});
    d.log = dir + "/" + server.name + ".log";
    std::vector<std::string> argv = netns_exec_argv(server.netns);
    argv.push_back(agent_path);
    argv.insert(argv.end(), a.begin(), a.end());
    argv.insert(argv.end(), {"--secret-file", secret_file});
    auto pid = spawn_detached(argv, d.log, {"OMP_WAIT_POLICY=PASSIVE"});
    if (!pid) {
      fmt::print(stderr, "tracrctl agents start: {}\n", user_text(pid.error()));
      return 1;
    }
    d.pid = *pid;
    d.start_ticks = process_start_ticks(d.pid);
    ready = wait_ready_in_log([&]() -> Result<std::string> { return read_local(d.log); }, secret, 600000);
  } else {
    auto s = SshSession::connect(device_ssh_target(server, devices->source, trust));
    if (!s) {
      fmt::print(stderr, "tracrctl agents start: device {}: {}\n", server.name, user_text(s.error()));
      return 1;
    }
    auto dep = deploy_agent(**s, agent_path, server.work_dir);
    if (!dep) {
      fmt::print(stderr, "tracrctl agents start: device {}: deploy: {}\n", server.name, user_text(dep.error()));
      return 1;
    }
    auto missing = remote_missing_libraries(**s, dep->remote_path);
    if (missing && !missing->empty()) {
      fmt::print(stderr, "tracrctl agents start: {}\n",
                 missing_libraries_message("device " + server.name, dep->remote_path, *missing));
      return 1;
    }
    // The files a SERVER reads (model, weights): at the device's paths.
    const ExperimentConfig abs_cfg = agent_experiment(no_profile);
    auto staged = stage_files(**s, server, agent_files(abs_cfg, "SERVER"));
    if (!staged) {
      fmt::print(stderr, "tracrctl agents start: {}\n", user_text(staged.error()));
      return 1;
    }
    for (const auto& f : *staged) fmt::print("{}: {}\n", server.name, f.describe());
    config_yaml = to_yaml(with_device_paths(abs_cfg, *staged));
    const std::string dir = dep->remote_path.substr(0, dep->remote_path.rfind('/') + 1);
    const std::string secret_file = dir + server.name + ".secret";
    d.log = dir + server.name + "-detached.log";
    auto w = (*s)->run("umask 077 && cat > " + shell_quote(secret_file), fleet::agent_secret_line(secret_hex));
    if (!w || w->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot write the secret file\n", server.name);
      return 1;
    }
    const std::string exp_file = dir + server.name + ".experiment.yaml";
    auto we = (*s)->run("umask 077 && cat > " + shell_quote(exp_file), config_yaml);
    if (!we || we->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot write the experiment file\n", server.name);
      return 1;
    }
    a.insert(a.end(), {"--experiment", exp_file});
    std::string cmd = "setsid nohup " + shell_quote(dep->remote_path);
    for (const auto& x : a) cmd += " " + shell_quote(x);
    cmd += " --secret-file " + shell_quote(secret_file) + " > " + shell_quote(d.log) + " 2>&1 < /dev/null & p=$!; echo $p; " +
           start_ticks_shell("$p");
    auto r = (*s)->run(cmd);
    if (!r || r->exit_status != 0) {
      fmt::print(stderr, "tracrctl agents start: device {}: cannot start the agent: {}\n", server.name,
                 r ? r->err : user_text(r.error()));
      return 1;
    }
    d.pid = std::atol(r->out.c_str());
    if (const auto nl = r->out.find('\n'); nl != std::string::npos) d.start_ticks = std::atoll(r->out.c_str() + nl + 1);
    ready = wait_ready_in_log([&]() { return (*s)->read_file_tail(d.log, 1u << 20); }, secret, 600000);
  }
  if (!ready) {
    fmt::print(stderr, "tracrctl agents start: {}: {}\n", server.name, user_text(ready.error()));
    return 1;
  }
  d.endpoint = ready->get_or("endpoint", "");
  if (server.transport != Transport::local) d.endpoint = reachable_endpoint(d.endpoint, server.connection().host);
  d.ready = ready->fields;
  d.secret_hex = secret_hex;
  if (!devices->embedded) d.devices_file = std::filesystem::absolute(devices->source).lexically_normal().string();
  if (auto st = write_detached(state, d); !st) {
    fmt::print(stderr, "tracrctl agents start: {}\n", user_text(st.error()));
    return 1;
  }
  // `agents stop` finds it wherever the experiment's output is (#24).
  if (auto st = remember_detached_dir(std::filesystem::path(state).parent_path().string()); !st)
    fmt::print(stderr,
               "tracrctl agents start: warning: {}; `tracrctl agents stop --state-dir {}` will still stop it\n",
               user_text(st.error()), std::filesystem::path(state).parent_path().string());
  fmt::print("SERVER agent on {} running detached: pid {}, {}, serving {}; runs of this model reuse it until "
             "`tracrctl agents stop`\n",
             server.name, d.pid, d.endpoint, cfg->model);
  return 0;
}

}  // namespace tracr::controller
