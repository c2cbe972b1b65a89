// `tracrctl devices check` and `tracrctl agents deploy|status|logs|stop`:
// reachability, authentication, key permissions, architecture and agent
// version of every device in the devices file, and the agents on them.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "controller/commands/devices.hpp"
#include "controller/commands/run.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"
#include "fleet/deploy.hpp"
#include "fleet/device_setup.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "fleet/shaping.hpp"
#include "fleet/ssh.hpp"
#include "fleet/staging.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::fleet;

using namespace tracr::settings;  // DeviceConfig, ExperimentConfig, ... by their short names

namespace {

// The options with the agent path resolved (next to tracrctl when not given).
DevicesOptions resolved(DevicesOptions c) {
  if (c.agent.empty()) c.agent = self_dir() + "/tracr-agent";
  return c;
}

// Runs fn for every device concurrently; rows come back in device order.
template <class F>
std::vector<std::string> for_each_device(const DevicesConfig& devs, F fn) {
  std::vector<std::string> rows(devs.devices.size());
  run_concurrently(devs.devices.size(), [&](size_t i) { rows[i] = fn(devs.devices[i]); });
  return rows;
}

// A remote path as one shell word; a leading "~/" stays expandable.
std::string remote_word(const std::string& p) {
  return p.rfind("~/", 0) == 0 ? "~/" + shell_quote(p.substr(2)) : shell_quote(p);
}
// The same path as it appears in a remote command line (deploy resolves
// "~/x" to "x", relative to the login directory).
std::string as_in_cmdline(const std::string& p) { return p.rfind("~/", 0) == 0 ? p.substr(2) : p; }

// The agent's `--meters` lines, indented under the device's row.
std::string meter_lines(const std::string& out) {
  std::string o;
  size_t start = 0;
  while (start < out.size()) {
    auto nl = out.find('\n', start);
    std::string line = trim(out.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (line.rfind("meter ", 0) == 0) o += "\n    energy " + line;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return o.empty() ? "\n    energy meters: the agent did not list them (" + trim(out) + ")" : o;
}

}  // namespace

Status cmd_devices_setup(const DevicesOptions& opt) {
  const DevicesOptions c = resolved(opt);
  SetupOptions so;
  so.devices = c.devices;
  so.devices_given = c.devices_given;
  so.agent = c.agent;
  so.trust_new_hosts = c.trust;
  so.yes = c.yes;
  so.dry_run = c.dry_run;
  return devices_setup(so);
}

namespace {

// What `devices check` knows before it visits a device.
struct CheckContext {
  const DevicesOptions& c;
  const DevicesConfig& devs;
  const std::optional<ExperimentConfig>& exp;  // with --experiment: as agents get it
  std::string local_arch, local_hash;          // of the controller's agent
};

// One device's line, and whether it found something wrong.
struct DeviceLine {
  std::string text;
  bool bad = false;
};
DeviceLine failed(std::string text) { return {std::move(text), true}; }

// The devices file's declared paths, and the experiment's files this
// device's role reads: declared and present, already staged, or what would
// be uploaded (nothing is uploaded here).
std::string files_lines(SshSession& s, const DeviceConfig& d, const std::optional<ExperimentConfig>& exp) {
  std::string o;
  for (const auto& [from, to] : d.paths) {
    auto t = s.run("test -e " + remote_word(to));
    const bool ok = t && t->exit_status == 0;
    o += fmt::format("\n    path {} -> {}: {}", from, to, ok ? "present" : " FAIL does not exist there");
  }
  if (!exp) return o;
  auto staged = stage_files(s, d, agent_files(*exp, d.role == DeviceRole::server ? wire::AgentRole::server : wire::AgentRole::participant), true);
  if (!staged) return o + "\n    files: FAIL " + user_text(staged.error());
  uint64_t upload = 0;
  for (const auto& f : *staged) {
    o += "\n    file " + f.describe();
    if (f.how == StagedFile::How::would_upload) upload += f.hash.bytes;
  }
  if (upload) o += "\n    files: the next run uploads " + human_bytes(upload) + " to this device";
  return o;
}

// A local device (its network namespace, if any): the agent runs there, and its meters.
DeviceLine check_local_device(const CheckContext& x, const DeviceConfig& d, const std::string& head) {
  const std::string& agent = x.c.agent;
  const auto r = run_local_command(netns_exec_prefix(d.netns) + shell_quote(agent) + " --version");
  const std::string v = trim(r.text.substr(0, r.text.find('\n')));
  if (r.status != 0) {
    const auto missing = ldd_missing(run_local_command("ldd " + shell_quote(agent)).text);
    if (!missing.empty()) return failed(head + " FAIL  " + missing_libraries_message("this machine", agent, missing));
    return failed(head + " FAIL  cannot run the agent locally: " + v);
  }
  std::string meters_cmd = netns_exec_prefix(d.netns) + shell_quote(agent) + " --meters";
  for (const auto& a : device_limit_args(d)) meters_cmd += " " + shell_quote(a);
  return {head + " ok    " + v + (d.netns.empty() ? "" : " (netns " + d.netns + ")") + "; " +
          tc_capability(d, x.devs.source, x.c.trust) + meter_lines(run_local_command(meters_cmd).text)};
}

// The deployed agent on an SSH device: its libraries, version and meters.
DeviceLine check_deployed_agent(const CheckContext& x, SshSession& s, const DeviceConfig& d, const std::string& head,
                                const std::string& arch, const std::string& name, const std::string& extra) {
  const std::string remote = remote_word(d.work_dir + "/" + name);
  // Shared libraries first: an agent that cannot load says nothing else.
  auto missing = remote_missing_libraries(s, as_in_cmdline(d.work_dir) + "/" + name);
  if (missing && !missing->empty())
    return failed(head + " FAIL  " + missing_libraries_message(s.label(), name, *missing) + extra);
  auto ver = s.run(remote + " --version");
  const bool deployed = ver && ver->exit_status == 0;
  std::string agent = deployed ? trim(ver->out) + " deployed"
                               : "deployed but `--version` failed: " + (ver ? trim(ver->out + ver->err) : user_text(ver.error()));
  std::string meters = "\n    energy meters: unknown until the agent runs there";
  if (deployed) {
    std::string cmd = remote + " --meters";
    for (const auto& a : device_limit_args(d)) cmd += " " + shell_quote(a);
    auto m = s.run(cmd);
    meters = meter_lines(m ? m->out : user_text(m.error()));
  }
  return {head + fmt::format(" {}  {} {}, auth ok, agent {}; {}{}{}", deployed ? "ok  " : "FAIL", s.label(), arch, agent,
                             tc_capability(d, x.devs.source, x.c.trust), meters, extra),
          !deployed || extra.find(" FAIL ") != std::string::npos};
}

// An SSH device: login, architecture against the agent's, the agent
// deployed or not, the files a run would stage.
DeviceLine check_ssh_device(const CheckContext& x, const DeviceConfig& d, const std::string& head) {
  auto s = SshSession::connect(device_ssh_target(d, x.devs.source, x.c.trust));
  if (!s) return failed(head + " FAIL  " + user_text(s.error()));
  // The device's own agent (devices file `agent:`) when it has one.
  const std::string agent_for = device_agent_path(d, x.c.agent);
  std::string a_arch = x.local_arch, a_hash = x.local_hash;
  if (agent_for != x.c.agent) {
    auto ah = sha256_file(agent_for);
    if (!ah) return failed(head + " FAIL  agent " + agent_for + ": " + user_text(ah.error()));
    a_hash = *ah;
    if (auto aa = elf_arch(agent_for)) a_arch = *aa;
  }
  auto un = (*s)->run("uname -m");
  if (!un || un->exit_status != 0) return failed(head + " FAIL  " + (*s)->label() + ": uname -m failed");
  const std::string arch = trim(un->out);
  if (!arch_compatible(a_arch, arch))
    return failed(head + fmt::format(" FAIL  {}: device is {}, agent is built for {}", (*s)->label(), arch, a_arch));
  const std::string name = "tracr-agent-" + a_hash.substr(0, 16);
  auto there = (*s)->run("test -x " + remote_word(d.work_dir + "/" + name));
  const std::string extra = files_lines(**s, d, x.exp);
  if (!there || there->exit_status != 0)
    return {head + fmt::format(" ok    {} {}, auth ok, agent not deployed yet (tracrctl run deploys it itself); {}{}", (*s)->label(),
                               arch, tc_capability(d, x.devs.source, x.c.trust), extra),
            extra.find(" FAIL ") != std::string::npos};
  return check_deployed_agent(x, **s, d, head, arch, name, extra);
}

}  // namespace

Status cmd_devices_check(const DevicesOptions& opt) {
  DevicesOptions c = resolved(opt);
  // With an experiment: its devices file (unless --devices says otherwise) and its files.
  std::optional<ExperimentConfig> exp;
  if (!c.experiment.empty()) {
    auto e = load_experiment(c.experiment);
    if (!e) {
      return core::bad_input(user_text(e.error()));
    }
    if (auto st = check_experiment_files(*e); !st) {
      return core::bad_input(user_text(st.error()));
    }
    if (!c.devices_given) c.devices = e->devices;
    exp = agent_experiment(*e);
  }
  auto devs = load_devices_option(c.devices, c.devices_given);
  if (!devs) {
    return core::bad_input(user_text(devs.error()));
  }
  auto local_arch = elf_arch(c.agent);
  auto local_hash = sha256_file(c.agent);
  if (!local_arch || !local_hash) {
    return core::bad_input(
        fmt::format("agent {}: {}", c.agent, user_text(!local_arch ? local_arch.error() : local_hash.error())));
  }
  fmt::print("devices from {}; local agent {} ({}, sha256 {})\n", devs->source, c.agent, *local_arch,
             local_hash->substr(0, 16));
  const CheckContext x{c, *devs, exp, *local_arch, *local_hash};
  std::atomic<int> bad{0};
  auto rows = for_each_device(*devs, [&](const DeviceConfig& d) -> std::string {
    const std::string head = fmt::format("{:<14} {:<12} {:<6}", d.name, device_role_name(d.role), transport_name(d.transport));
    const DeviceLine line = d.transport == Transport::local ? check_local_device(x, d, head) : check_ssh_device(x, d, head);
    if (line.bad) ++bad;
    return line.text;
  });
  for (const auto& r : rows) fmt::print("{}\n", r);
  if (bad.load())
    return core::command_failed(fmt::format("{} of {} devices failed the check (FAIL above)", bad.load(), rows.size()),
                                Errc::unreachable);
  return {};
}

// `agents stop` / `agents status` for detached SERVER agents: those under
// --state-dir, else under results/agents and every directory `agents start`
// used (an experiment's output may be anywhere, #24). How many could not be
// stopped or are listed in a directory that is gone (each logged).
static int detached_agents(const std::string& verb, const DevicesOptions& c) {
  int bad = 0;
  std::vector<std::string> gone;
  const auto dirs = c.state_dir.empty() ? detached_dirs("results/agents", &gone) : std::vector<std::string>{c.state_dir};
  for (const auto& g : gone) {
    TRACR_LOG(error,
              "tracrctl agents {}: {} (listed in {}) no longer exists: detached agents started with their state "
              "there cannot be found; stop them by hand (`tracrctl agents status` on each device lists agents "
              "that run); the directory is dropped from the list",
              verb, g, detached_index_path());
    ++bad;
  }
  for (const auto& dir : dirs) {
    if (verb == "stop" && stop_detached_agents(dir, c.trust, c.devices) != 0) ++bad;
    if (verb != "status") continue;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".state")
        if (auto d = read_detached(e.path().string()))
          fmt::print("detached SERVER agent on {}: pid {}, {} (state in {})\n", d->device, d->pid, d->endpoint, dir);
  }
  return bad;
}

Status cmd_agents(const std::string& verb, const DevicesOptions& opt) {
  const DevicesOptions c = resolved(opt);
  auto devs = load_devices_option(c.devices, c.devices_given);
  if (!devs) {
    return core::bad_input(user_text(devs.error()));
  }
  std::atomic<int> bad{0};
  auto rows = for_each_device(*devs, [&](const DeviceConfig& d) -> std::string {
    const std::string head = fmt::format("{:<14} {:<12}", d.name, device_role_name(d.role));
    if (d.transport == Transport::local) {
      if (verb == "deploy") return head + " local: runs " + c.agent + " in place";
      if (verb == "logs") return head + " local: logs are in results/logs/run-<id>-" + d.name + ".log";
      // Local agents of a run belong to that tracrctl process and stop with it;
      // `stop` ends only detached agents (listed in the state directory).
      if (verb == "stop") return head + " local: run agents stop with their run";
      std::string pat = "'" + c.agent.substr(0, c.agent.size() - 1) + "[" + c.agent.back() + "] --role'";
      const std::string out = run_local_command("pgrep -af " + pat).text;
      return head + " local agents:\n" + (out.empty() ? "  none\n" : out + "\n");
    }
    auto s = SshSession::connect(device_ssh_target(d, devs->source, c.trust));
    if (!s) {
      ++bad;
      return head + " FAIL  " + user_text(s.error());
    }
    if (verb == "deploy") {
      auto info = deploy_agent(**s, device_agent_path(d, c.agent), d.work_dir);  // the device's own agent: when it has one
      if (!info) {
        ++bad;
        return head + " FAIL  " + user_text(info.error());
      }
      return head + fmt::format(" {} {} ({}){}", info->uploaded ? "uploaded" : "already there", info->remote_path,
                                info->remote_arch, info->note.empty() ? "" : "; " + info->note);
    }
    const std::string pat = shell_quote(as_in_cmdline(d.work_dir) + "/tracr-agen[t]");
    const std::string dir = remote_word(d.work_dir);
    if (verb == "status") {
      auto r = (*s)->run("ls -1 " + dir + "/tracr-agent-* 2>/dev/null; echo '--'; pgrep -af " + pat + " || true");
      if (!r) {
        ++bad;
        return head + " FAIL  " + user_text(r.error());
      }
      return head + " " + (*s)->label() + "\n" + r->out;
    }
    if (verb == "logs") {
      auto r = (*s)->run("for f in " + dir + "/*.log; do [ -f \"$f\" ] && echo \"== $f\" && tail -c " +
                         std::to_string(c.tail) + " \"$f\"; done; true");
      if (!r) {
        ++bad;
        return head + " FAIL  " + user_text(r.error());
      }
      return head + " " + (*s)->label() + "\n" + (r->out.empty() ? "  no logs\n" : r->out);
    }
    // Never a pattern kill over the work_dir: it would end every run of this
    // user. A run's agents stop with their run; detached SERVER agents are
    // stopped below, each by its recorded identity.
    return head + " " + (*s)->label() + ": run agents stop with their run; detached agents below";
  });
  for (const auto& r : rows) fmt::print("{}\n", r);
  const int detached_bad = verb == "stop" || verb == "status" ? detached_agents(verb, c) : 0;
  if (bad.load())
    return core::command_failed(fmt::format("{} of {} devices failed (FAIL above)", bad.load(), rows.size()),
                                Errc::unreachable);
  if (detached_bad) return core::command_failed(fmt::format("{} detached agent(s) failed (above)", detached_bad));
  return {};
}

}  // namespace tracr::controller
