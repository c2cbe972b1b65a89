#include "fleet/device_setup.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"

#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fleet/deploy.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "settings/config.hpp"

namespace tracr::fleet {

using namespace tracr::core;  // the floors below, by their short names

using namespace tracr::settings;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    v.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return v;
}

std::string tail_of(const std::string& s, size_t n) { return s.size() > n ? "..." + s.substr(s.size() - n) : s; }

}  // namespace

Result<RuntimePackages> agent_runtime_packages(const std::string& agent_path) {
  if (::access(agent_path.c_str(), R_OK) != 0)
    return make_error(Errc::not_found, fmt::format("agent {} does not exist or is not readable", agent_path));
  RuntimePackages rp;
  // The libraries it links directly: "0x... (NEEDED)  Shared library: [libx.so.1]".
  const auto rd = run_local_command("readelf -d " + shell_quote(agent_path));
  if (rd.status != 0) return make_error(Errc::io, fmt::format("readelf -d {} failed: {}", agent_path, tail_of(rd.text, 400)));
  for (const auto& l : lines_of(rd.text)) {
    if (l.find("(NEEDED)") == std::string::npos) continue;
    const auto a = l.find('['), b = l.rfind(']');
    if (a != std::string::npos && b != std::string::npos && b > a) rp.libraries.push_back(l.substr(a + 1, b - a - 1));
  }
  // Where they resolve here: "\tlibx.so.1 => /lib/.../libx.so.1 (0x...)".
  const auto ld = run_local_command("ldd " + shell_quote(agent_path));
  if (ld.status != 0) return make_error(Errc::io, fmt::format("ldd {} failed: {}", agent_path, tail_of(ld.text, 400)));
  std::map<std::string, std::string> where;
  for (const auto& l : lines_of(ld.text)) {
    const auto arrow = l.find(" => ");
    if (arrow == std::string::npos) continue;
    std::string name = l.substr(0, arrow);
    name.erase(0, name.find_first_not_of(" \t"));
    std::string rest = l.substr(arrow + 4);
    if (rest.rfind("not found", 0) == 0)
      return make_error(Errc::config, fmt::format("the agent {} needs {}, which is not found on this machine either "
                                                  "(ldd); install it here first",
                                                  agent_path, name));
    where[name] = rest.substr(0, rest.find(" ("));
  }
  // Candidate paths per library: as ldd printed it, its real path, and the
  // other side of the /usr merge (dpkg knows only the path it installed).
  std::map<std::string, std::vector<std::string>> cands;
  std::string args;
  for (const auto& lib : rp.libraries) {
    auto it = where.find(lib);
    if (it == where.end()) continue;  // the loader itself, vdso
    std::set<std::string> c{it->second};
    std::error_code ec;
    const auto real = fs::canonical(it->second, ec);
    if (!ec) c.insert(real.string());
    for (std::string p : std::set<std::string>(c)) {
      if (p.rfind("/usr/", 0) == 0) c.insert(p.substr(4));
      else c.insert("/usr" + p);
    }
    for (const auto& p : c) args += " " + shell_quote(p);
    cands[lib] = std::vector<std::string>(c.begin(), c.end());
  }
  // "pkg:arch[, pkg2:arch]: /path"; paths no package holds go to stderr.
  std::map<std::string, std::string> owner;
  if (!args.empty()) {
    const auto ds = run_local_command("dpkg -S" + args + " 2>/dev/null");
    for (const auto& l : lines_of(ds.text)) {
      const auto sep = l.find(": /");
      if (sep == std::string::npos) continue;
      std::string pkg = l.substr(0, l.find_first_of(",", 0) < sep ? l.find(',') : sep);
      pkg = pkg.substr(0, pkg.find(':'));
      owner[l.substr(sep + 2)] = pkg;
    }
  }
  std::set<std::string> pkgs;
  for (const auto& [lib, c] : cands) {
    std::string pkg;
    for (const auto& p : c)
      if (auto it = owner.find(p); it != owner.end()) pkg = it->second;
    if (pkg.empty()) rp.unowned.push_back(fmt::format("{} ({})", lib, where[lib]));
    else pkgs.insert(pkg);
  }
  rp.packages.assign(pkgs.begin(), pkgs.end());
  return rp;
}

DeviceShell ssh_shell(SshSession& s) {
  return [&s](const std::string& cmd, int timeout_ms) { return s.run(cmd, "", timeout_ms); };
}

DeviceShell local_shell() {
  return [](const std::string& cmd, int) -> Result<ExecResult> {
    ExecResult r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return make_error(Errc::io, "cannot run `" + cmd + "` here");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
  };
}

std::string apt_install_command(const std::vector<std::string>& packages, bool root) {
  std::string cmd = root ? "" : "sudo -n env ";
  cmd += "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends";
  for (const auto& p : packages) cmd += " " + shell_quote(p);
  return cmd;
}

Result<SetupPlan> plan_setup(const DeviceShell& shell, const std::vector<std::string>& packages) {
  SetupPlan plan;
  // "0" for root, then one "<package> <status>" line per installed package.
  std::string cmd = "id -u; command -v dpkg-query >/dev/null 2>&1 || exit 90; dpkg-query -W -f='${Package} ${Status}\\n'";
  for (const auto& p : packages) cmd += " " + shell_quote(p);
  cmd += " 2>/dev/null; true";
  auto r = shell(cmd, 0);
  if (!r) return std::move(r.error());
  if (r->exit_status == 90)
    return make_error(Errc::config, "no dpkg-query there: `devices setup` installs Debian packages; install the "
                                    "agent's libraries with the system's own package manager");
  const auto ls = lines_of(r->out);
  plan.root = !ls.empty() && ls[0] == "0";
  std::set<std::string> have;
  for (size_t i = 1; i < ls.size(); ++i) {
    const auto sp = ls[i].find(' ');
    if (sp == std::string::npos) continue;
    std::string name = ls[i].substr(0, sp);
    name = name.substr(0, name.find(':'));
    if (ls[i].find(" installed", sp) != std::string::npos) have.insert(name);
  }
  for (const auto& p : packages)
    if (!have.count(p)) plan.missing.push_back(p);
  std::sort(plan.missing.begin(), plan.missing.end());
  if (!plan.missing.empty()) plan.command = apt_install_command(plan.missing, plan.root);
  return plan;
}

Status apply_setup(const DeviceShell& shell, const SetupPlan& plan) {
  if (plan.command.empty()) return {};
  auto r = shell(plan.command + " 2>&1", 30 * 60 * 1000);
  if (!r) return std::move(r.error());
  if (r->exit_status == 0) return {};
  std::string hint;
  if (!plan.root && r->out.find("sudo") != std::string::npos)
    hint = "; the login needs passwordless sudo for apt-get (or run the printed command there yourself)";
  else
    hint = "; if packages were not found, run `apt-get update` there first";
  return make_error(Errc::remote, fmt::format("`{}` exited with status {}: {}{}", plan.command, r->exit_status,
                                              tail_of(r->out, 1500), hint));
}

namespace {

// One device of `devices setup`: its line's head, what it lacks, and the
// SSH session the install runs over.
struct SetupRow {
  std::string head, error;
  SetupPlan plan;
  std::unique_ptr<SshSession> session;
};

// Each device's plan; whether any device needs packages (`bad` counts the
// devices that could not be inspected).
bool print_setup_plans(const std::vector<SetupRow>& rows, int& bad) {
  bool any = false;
  for (const auto& r : rows) {
    if (!r.error.empty()) {
      ++bad;
      fmt::print("{} FAIL  {}\n", r.head, r.error);
    } else if (r.plan.missing.empty()) {
      fmt::print("{} ok    nothing to install\n", r.head);
    } else {
      any = true;
      fmt::print("{} needs {} package(s): {}\n    {}\n", r.head, r.plan.missing.size(), fmt::join(r.plan.missing, " "),
                 r.plan.command);
    }
  }
  return any;
}

// The user's consent (--yes, or y on a terminal): ok to install.
Status confirm_install(const SetupOptions& o) {
  if (o.yes) return {};
  if (!::isatty(0)) {
    return core::bad_input(std::string(
        "not installing: stdin is not a terminal to confirm on; pass --yes to install the packages above, or "
        "--dry-run to only list them"));
  }
  fmt::print("install these packages on the devices above? [y/N] ");
  std::fflush(stdout);
  std::string answer;
  std::getline(std::cin, answer);
  if (answer == "y" || answer == "Y" || answer == "yes") return {};
  return core::command_failed("nothing installed (not confirmed)");
}

}  // namespace

Status devices_setup(const SetupOptions& o) {
  auto devs = load_devices_option(o.devices, o.devices_given);
  if (!devs) {
    return core::bad_input(user_text(devs.error()));
  }
  // Each device's own agent, when it has one, else the controller's: their
  // libraries name the packages (a foreign-architecture agent cannot be
  // inspected here, so its packages are taken from the controller's agent).
  std::map<std::string, Result<RuntimePackages>> by_agent;
  auto packages_for = [&](const DeviceConfig& d) -> const Result<RuntimePackages>& {
    std::string a = device_agent_path(d, o.agent);
    if (a != o.agent) {
      struct utsname u {};
      ::uname(&u);
      auto arch = elf_arch(a);
      if (!arch || !arch_compatible(*arch, u.machine)) a = o.agent;
    }
    auto it = by_agent.find(a);
    if (it == by_agent.end()) it = by_agent.emplace(a, agent_runtime_packages(a)).first;
    return it->second;
  };
  std::vector<SetupRow> rows(devs->devices.size());
  for (size_t i = 0; i < rows.size(); ++i) (void)packages_for(devs->devices[i]);  // before the threads
  for (const auto& [a, r] : by_agent) {
    if (!r) {
      return core::bad_input(fmt::format("agent {}: {}", a, user_text(r.error())));
    }
    fmt::print("agent {}: {} directly linked libraries from {} Debian packages: {}\n", a, r->libraries.size(),
               r->packages.size(), fmt::join(r->packages, " "));
    for (const auto& u : r->unowned) fmt::print("  not from a Debian package (carry it yourself): {}\n", u);
  }
  run_concurrently(rows.size(), [&](size_t i) {
    const DeviceConfig& d = devs->devices[i];
    SetupRow& row = rows[i];
    row.head = fmt::format("{:<14} {:<6}", d.name, transport_name(d.transport));
    DeviceShell shell = local_shell();
    if (d.transport == Transport::ssh) {
      auto s = SshSession::connect(device_ssh_target(d, devs->source, o.trust_new_hosts));
      if (!s) {
        row.error = user_text(s.error());
        return;
      }
      row.session = std::move(*s);
      row.head += " " + row.session->label();
      shell = ssh_shell(*row.session);
    }
    auto plan = plan_setup(shell, packages_for(d)->packages);
    if (!plan) row.error = user_text(plan.error());
    else row.plan = std::move(*plan);
  });
  int bad = 0;
  const bool any = print_setup_plans(rows, bad);
  const auto failed_devices = [&] {
    return core::command_failed(fmt::format("{} of {} devices failed (FAIL above)", bad, rows.size()),
                                Errc::unreachable);
  };
  if (!any || o.dry_run) return bad ? failed_devices() : Status{};
  TRACR_TRY(confirm_install(o));
  std::vector<std::string> results(rows.size());
  run_concurrently(rows.size(), [&](size_t i) {
    SetupRow& r = rows[i];
    if (!r.error.empty() || r.plan.missing.empty()) return;
    const DeviceShell shell = r.session ? ssh_shell(*r.session) : local_shell();
    auto st = apply_setup(shell, r.plan);
    results[i] = st ? "installed " + fmt::format("{}", fmt::join(r.plan.missing, " ")) : "FAIL  " + user_text(st.error());
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    if (results[i].empty()) continue;
    if (results[i].rfind("FAIL", 0) == 0) ++bad;
    fmt::print("{} {}\n", rows[i].head, results[i]);
  }
  return bad ? failed_devices() : Status{};
}

}  // namespace tracr::fleet
