// The devices file (devices_config.yaml): the Python tracr schema plus tracr's extensions.
#include "settings/yaml_reader.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

namespace tracr::settings {

namespace fs = std::filesystem;

std::string_view device_role_name(DeviceRole r) { return r == DeviceRole::server ? "SERVER" : "PARTICIPANT"; }

std::string_view transport_name(Transport t) { return t == Transport::local ? "local" : "ssh"; }

const ConnectionParams& DeviceConfig::connection() const {
  if (connections.empty()) throw Fatal(make_error(Errc::internal, "device " + name + " has no connection"));
  if (connections.size() == 1) return connections.front();
  for (const auto& c : connections)
    if (c.is_default) return c;
  throw Fatal(make_error(Errc::internal, "device " + name + " has no default connection"));
}

const DeviceConfig& DevicesConfig::server() const {
  for (const auto& d : devices)
    if (d.role == DeviceRole::server) return d;
  throw Fatal(make_error(Errc::internal, source + ": no SERVER device"));
}

std::vector<const DeviceConfig*> DevicesConfig::participants() const {
  std::vector<const DeviceConfig*> out;
  for (const auto& d : devices)
    if (d.role == DeviceRole::participant && std::find(chain.begin(), chain.end(), d.name) == chain.end())
      out.push_back(&d);
  return out;
}

const DeviceConfig* DevicesConfig::find(std::string_view name) const {
  for (const auto& d : devices)
    if (d.name == name) return &d;
  return nullptr;
}

std::string DevicesConfig::to_json() const {
  std::string o = "{\"source\":" + json_quote(source) + ",\"embedded\":" + (embedded ? "true" : "false") +
                  ",\"devices\":[";
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    const auto& c = d.connection();
    if (i) o += ",";
    o += fmt::format(
        "{{\"name\":{},\"device_type\":{},\"transport\":{},\"host\":{},\"user\":{},\"pkey_fp\":{},"
        "\"port\":{},\"ssh_port\":{},\"work_dir\":{}",
        json_quote(d.name), json_quote(device_role_name(d.role)), json_quote(transport_name(d.transport)),
        json_quote(c.host), json_quote(c.user), json_quote(c.pkey_fp), c.port, c.ssh_port,
        json_quote(d.work_dir));
    if (!d.netns.empty()) o += ",\"netns\":" + json_quote(d.netns);
    if (d.cpu_quota) o += fmt::format(",\"cpu_quota\":{}", *d.cpu_quota);
    if (d.cpu_cores) o += fmt::format(",\"cpu_cores\":{}", *d.cpu_cores);
    if (d.memory_mb) o += fmt::format(",\"memory_mb\":{}", *d.memory_mb);
    if (!d.cpus.empty()) o += fmt::format(",\"cpus\":[{}]", fmt::join(d.cpus, ","));
    if (d.power_model)
      o += fmt::format(",\"power_model\":{{\"idle_w\":{},\"busy_w\":{}}}", d.power_model->idle_w,
                       d.power_model->busy_w);
    if (d.link_profile)
      o += fmt::format(",\"link_profile\":{{\"rate_mbit\":{},\"delay_ms\":{}}}", d.link_profile->rate_mbit,
                       d.link_profile->delay_ms);
    if (!d.paths.empty()) {
      o += ",\"paths\":{";
      bool first = true;
      for (const auto& [from, to] : d.paths) {
        o += (first ? "" : ",") + json_quote(from) + ":" + json_quote(to);
        first = false;
      }
      o += "}";
    }
    o += "}";
  }
  return o + "]}";
}

std::string_view embedded_devices_yaml() {
  return "# Embedded default devices: both agents run as local processes on loopback.\n"
         "devices:\n"
         "  - device_type: SERVER\n"
         "    name: server\n"
         "    transport: local\n"
         "    connection_params:\n"
         "      - host: 127.0.0.1\n"
         "        port: 0            # ephemeral; the agent reports the bound port\n"
         "        default: true\n"
         "  - device_type: PARTICIPANT\n"
         "    name: participant\n"
         "    transport: local\n"
         "    connection_params:\n"
         "      - host: 127.0.0.1\n"
         "        default: true\n";
}

std::string resolve_pkey(const std::string& pkey_fp, const std::string& devices_file) {
  if (pkey_fp.empty()) return {};
  const std::string p = expand_home(pkey_fp);
  if (fs::path(p).is_absolute()) return p;
  std::vector<fs::path> candidates;
  if (const char* env_dir = std::getenv("TRACR_PKEYS_DIR"); env_dir && *env_dir) {
    candidates.push_back(fs::path(env_dir) / p);
  } else {
    fs::path dir = fs::path(devices_file).parent_path();
    if (dir.empty()) dir = ".";
    fs::path root = dir.parent_path();
    if (root.empty()) root = dir / "..";
    candidates.push_back(root / "pkeys" / p);
    candidates.push_back(dir / "pkeys" / p);
  }
  std::error_code ec;
  // A link counts where it is, even a dangling or looping one: the key check
  // then says what is wrong with it rather than "does not exist" elsewhere.
  for (const auto& cand : candidates)
    if (fs::exists(fs::symlink_status(cand, ec))) return cand.lexically_normal().string();
  return candidates.front().lexically_normal().string();
}

namespace {

const std::vector<std::string> kDeviceKeys = {"device_type", "connection_params", "name",  "transport", "work_dir",
                                              "power_model", "link_profile",      "netns", "cpu_quota", "cpu_cores",
                                              "device",      "threads",           "agent", "paths",     "cpus",
                                              "memory_mb"};
// Host and user names reach libssh and remote shells: only the characters
// they can hold (#24: spaces, ';', '$(' and non-ASCII passed through and
// failed after the run row with "unknown libssh error").
constexpr std::string_view kHostChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:_";
constexpr std::string_view kUserChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_";
// "" when every character is allowed and the first is not '-'; else what is wrong.
std::string bad_name_char(const std::string& v, std::string_view allowed) {
  if (!v.empty() && v[0] == '-') return "it starts with '-', which ssh would read as an option";
  for (const unsigned char ch : v)
    if (allowed.find(static_cast<char>(ch)) == std::string_view::npos)
      return ch >= 0x20 && ch < 0x7f ? fmt::format("'{}' is not allowed", static_cast<char>(ch))
                                      : fmt::format("byte 0x{:02X} is not allowed", ch);
  return {};
}
const std::vector<std::string> kConnKeys = {"host", "user", "pkey_fp", "port", "ssh_port", "default"};

Result<ConnectionParams> parse_connection(const Ctx& c, const YAML::Node& n, const std::string& key,
                                          Transport transport, const std::string& devices_file) {
  if (!n.IsMap()) return expected(c, n, key, "a map with host, user, pkey_fp, port, ssh_port, default");
  TRACR_TRY(check_keys(c, n, key, kConnKeys));
  ConnectionParams cp;
  cp.pos = pos_of(c, n);
  const bool ssh = transport == Transport::ssh;
  auto need = [&](const char* k) -> Status {
    if (!n[k])
      return err_at(
          cp.pos, key + "." + k,
          std::string("missing; required for transport: ") + std::string(transport_name(transport)));
    return {};
  };
  // host and user: no placeholder left, no character a shell or ssh would read as more.
  auto name_field = [&](const char* k, const std::string& what, const std::string& placeholder_hint,
                        std::string_view chars, const std::string& allowed) -> Result<std::string> {
    auto v = get_nonempty(c, n[k], key + "." + k, what);
    if (!v) return v.error();
    if (is_placeholder(*v))
      return err_at(pos_of(c, n[k]), key + "." + k,
                    fmt::format("placeholder '{}' was not replaced: expected {}", *v, placeholder_hint));
    if (auto bad = bad_name_char(*v, chars); !bad.empty())
      return err_at(
          pos_of(c, n[k]), key + "." + k,
          fmt::format("'{}' is not {} ({}); expected {}, not starting with '-'", printable(*v), what, bad, allowed));
    return v;
  };
  if (n["host"]) {
    auto h = name_field("host", "a host name or IP address", "the device's IP address or host name", kHostChars,
                        "letters, digits, '.', '-', ':' (IPv6) and '_'");
    if (!h) return h.error();
    cp.host = *h;
  } else if (ssh) {
    TRACR_TRY(need("host"));
  } else {
    cp.host = "127.0.0.1";
  }
  if (n["user"]) {
    auto u =
        name_field("user", "an SSH user name", "the SSH user name", kUserChars, "letters, digits, '.', '-' and '_'");
    if (!u) return u.error();
    cp.user = *u;
  } else if (ssh) {
    TRACR_TRY(need("user"));
  }
  if (n["pkey_fp"]) {
    auto k = get_nonempty(c, n["pkey_fp"], key + ".pkey_fp", "a private key file name under pkeys/");
    if (!k) return k.error();
    if (is_placeholder(*k))
      return err_at(
          pos_of(c, n["pkey_fp"]), key + ".pkey_fp",
          fmt::format("placeholder '{}' was not replaced: expected a private key file name under pkeys/",
                      *k));
    cp.pkey_fp = *k;
    cp.pkey_path = resolve_pkey(cp.pkey_fp, devices_file);
  } else if (ssh) {
    TRACR_TRY(need("pkey_fp"));
  }
  if (n["port"]) {
    auto p = get_int(c, n["port"], key + ".port", 0, 65535, "a TCP port 0-65535 (0 = ephemeral)");
    if (!p) return p.error();
    cp.port = static_cast<int>(*p);
  }
  if (n["ssh_port"]) {
    auto p = get_int(c, n["ssh_port"], key + ".ssh_port", 1, 65535, "a TCP port 1-65535");
    if (!p) return p.error();
    cp.ssh_port = static_cast<int>(*p);
  }
  if (n["default"]) {
    auto b = get_bool(c, n["default"], key + ".default");
    if (!b) return b.error();
    cp.is_default = *b;
  }
  return cp;
}

// device_type, transport, name, work_dir and netns.
Status parse_device_identity(const Ctx& c, const YAML::Node& n, const std::string& key, DeviceConfig& d) {
  {
    auto t = get_choice(c, n["device_type"], key + ".device_type", {"SERVER", "PARTICIPANT"});
    if (!t) return t.error();
    d.role = *t == "SERVER" ? DeviceRole::server : DeviceRole::participant;
  }
  if (n["transport"]) {
    auto t = get_choice(c, n["transport"], key + ".transport", {"local", "ssh"});
    if (!t) return t.error();
    d.transport = *t == "local" ? Transport::local : Transport::ssh;
  }
  if (n["name"]) {
    auto s = get_string(c, n["name"], key + ".name", "a device name of letters, digits, '_', '-', '.'");
    if (!s) return s.error();
    if (!valid_name(*s))
      return expected(c, n["name"], key + ".name", "a device name of 1-64 letters, digits, '_', '-', '.'");
    d.name = *s;
  }
  if (n["work_dir"]) {
    auto s = get_nonempty(c, n["work_dir"], key + ".work_dir", "a directory path on the device");
    if (!s) return s.error();
    // It reaches remote shell lines (quoted) and file names: a control
    // character there is a mistake, never a directory (#24: a newline).
    TRACR_TRY(no_control_chars(c, n["work_dir"], key + ".work_dir", *s, "a directory path on the device"));
    d.work_dir = *s;
  }
  if (n["netns"]) {
    auto s = get_string(c, n["netns"], key + ".netns", "a network namespace name");
    if (!s) return s.error();
    if (!valid_name(*s)) return expected(c, n["netns"], key + ".netns", "a network namespace name of letters, digits, '_', '-', '.'");
    if (d.transport != Transport::local)
      return expected(c, n["netns"], key + ".netns", "netns only with transport: local (the agent runs in that namespace)");
    d.netns = *s;
  }
  return {};
}

// cpus: [1] pins the agent to those CPUs (by number), its count the device's cpu_cores.
Status parse_cpus(const Ctx& c, const YAML::Node& n, const std::string& key, DeviceConfig& d) {
  const std::string what = "a list of distinct CPU numbers 0..4095 (e.g. [1] or [0, 1])";
  const YAML::Node& l = n["cpus"];
  if (!l.IsSequence() || l.size() == 0) return expected(c, l, key + ".cpus", what);
  for (size_t i = 0; i < l.size(); ++i) {
    const std::string k = fmt::format("{}.cpus[{}]", key, i);
    auto v = get_int(c, l[i], k, 0, 4095, what);
    if (!v) return v.error();
    if (std::find(d.cpus.begin(), d.cpus.end(), *v) != d.cpus.end())
      return expected(c, l[i], k, fmt::format("{}, not CPU {} twice", what, *v));
    d.cpus.push_back(static_cast<int>(*v));
  }
  if (d.cpu_cores)
    return expected(c, n["cpu_cores"], key + ".cpu_cores", "cpu_cores or cpus, not both (cpus names the CPUs)");
  d.cpu_cores = static_cast<int>(d.cpus.size());
  return {};
}

// Where and how the agent computes: CPU quota and cores, LibTorch device and threads, its own binary.
Status parse_device_compute(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& devices_file, DeviceConfig& d) {
  if (n["cpu_quota"]) {
    auto v = get_double(c, n["cpu_quota"], key + ".cpu_quota", 0.01, "a CPU quota in cores >= 0.01 (e.g. 0.5)");
    if (!v) return v.error();
    if (*v > 4096) return expected(c, n["cpu_quota"], key + ".cpu_quota", "a CPU quota in cores, 0.01..4096");
    d.cpu_quota = *v;
  }
  if (n["memory_mb"]) {
    auto v = get_double(c, n["memory_mb"], key + ".memory_mb", 0.001, "a memory limit in MB > 0 (e.g. 512)");
    if (!v) return v.error();
    if (*v > 1e9) return expected(c, n["memory_mb"], key + ".memory_mb", "a memory limit in MB, up to 1e9");
    d.memory_mb = *v;
  }
  if (n["cpu_cores"]) {
    auto v = get_int(c, n["cpu_cores"], key + ".cpu_cores", 1, 4096, "a number of CPUs 1..4096");
    if (!v) return v.error();
    d.cpu_cores = static_cast<int>(*v);
  }
  if (n["cpus"])
    if (auto st = parse_cpus(c, n, key, d); !st) return st;
  if (n["device"]) {
    const std::string what = "cpu, cuda, cuda:N or auto";
    auto v = get_nonempty(c, n["device"], key + ".device", what);
    if (!v) return v.error();
    const bool cuda_n = v->size() > 5 && v->rfind("cuda:", 0) == 0 &&
                        v->find_first_not_of("0123456789", 5) == std::string::npos;
    if (*v != "cpu" && *v != "cuda" && *v != "auto" && !cuda_n) return expected(c, n["device"], key + ".device", what);
    d.torch_device = *v == "auto" ? "" : *v;
  }
  if (n["agent"]) {
    auto v = get_nonempty(c, n["agent"], key + ".agent", "a path to a tracr-agent binary");
    if (!v) return v.error();
    fs::path p(*v);
    if (p.is_relative() && !devices_file.empty() && devices_file.front() != '<')
      p = fs::path(devices_file).parent_path() / p;
    d.agent_path = p.lexically_normal().string();
  }
  if (n["threads"]) {
    auto v = get_int(c, n["threads"], key + ".threads", 1, 1024, "a LibTorch thread count 1..1024");
    if (!v) return v.error();
    d.torch_threads = static_cast<int>(*v);
  }
  return {};
}

// paths: controller paths the device holds at its own paths (relative ones from the devices file).
Status parse_device_paths(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& devices_file, DeviceConfig& d) {
  if (n["paths"]) {
    const YAML::Node pm = n["paths"];
    const std::string k = key + ".paths";
    const std::string what = "a map from a controller path to the path of the same data on the device";
    if (!pm.IsMap()) return expected(c, pm, k, what);
    for (const auto& e : pm) {
      auto from = get_nonempty(c, e.first, k, "a controller path (the key)");
      if (!from) return from.error();
      auto to = get_nonempty(c, e.second, k + "." + *from, "a path on the device");
      if (!to) return to.error();
      fs::path p(*from);
      if (p.is_relative() && !devices_file.empty() && devices_file.front() != '<')
        p = fs::path(devices_file).parent_path() / p;
      p = p.lexically_normal();
      std::string norm = p.string();
      while (norm.size() > 1 && norm.back() == '/') norm.pop_back();
      d.paths[norm] = *to;
    }
  }
  return {};
}

// power_model and link_profile.
Status parse_device_models(const Ctx& c, const YAML::Node& n, const std::string& key, DeviceConfig& d) {
  if (n["power_model"]) {
    const YAML::Node pm = n["power_model"];
    const std::string k = key + ".power_model";
    if (!pm.IsMap()) return expected(c, pm, k, "a map with idle_w and busy_w (watts)");
    TRACR_TRY(check_keys(c, pm, k, {"idle_w", "busy_w"}));
    PowerModel m;
    for (const char* f : {"idle_w", "busy_w"}) {
      if (!pm[f]) return err_at(pos_of(c, pm), k + "." + f, "missing; expected a power in watts >= 0");
      auto v = get_double(c, pm[f], k + "." + f, 0.0, "a power in watts >= 0");
      if (!v) return v.error();
      (std::string(f) == "idle_w" ? m.idle_w : m.busy_w) = *v;
    }
    d.power_model = m;
  }
  if (n["link_profile"]) {
    const YAML::Node lp = n["link_profile"];
    const std::string k = key + ".link_profile";
    if (!lp.IsMap()) return expected(c, lp, k, "a map with rate_mbit and delay_ms");
    if (d.role == DeviceRole::server)
      return err_at(pos_of(c, lp), k,
                    "applies to PARTICIPANT devices (the link between each participant and the SERVER); expected no "
                    "link_profile on the SERVER");
    TRACR_TRY(check_keys(c, lp, k, {"rate_mbit", "delay_ms"}));
    LinkProfile l;
    if (lp["rate_mbit"]) {
      auto v = get_double(c, lp["rate_mbit"], k + ".rate_mbit", 0.0, "a rate in Mbit/s >= 0 (0 = unlimited)");
      if (!v) return v.error();
      l.rate_mbit = *v;
    }
    if (lp["delay_ms"]) {
      auto v = get_double(c, lp["delay_ms"], k + ".delay_ms", 0.0, "a one-way delay in ms >= 0");
      if (!v) return v.error();
      l.delay_ms = *v;
    }
    d.link_profile = l;
  }
  return {};
}

// connection_params: a list with exactly one default (an implicit 127.0.0.1 for a local device).
Status parse_device_connections(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& devices_file, DeviceConfig& d) {
  const YAML::Node cps = n["connection_params"];
  const std::string ck = key + ".connection_params";
  if (!cps) {
    if (d.transport == Transport::ssh)
      return err_at(d.pos, ck,
                    "missing; expected a list of {host, user, pkey_fp, ...} (required for transport: ssh)");
    ConnectionParams cp;
    cp.host = "127.0.0.1";
    cp.is_default = true;
    cp.pos = d.pos;
    d.connections.push_back(cp);
  } else {
    if (!cps.IsSequence() || cps.size() == 0)
      return expected(c, cps, ck, "a non-empty list of {host, user, pkey_fp, port, ssh_port, default}");
    int defaults = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      auto cp = parse_connection(c, cps[i], fmt::format("{}[{}]", ck, i), d.transport, devices_file);
      if (!cp) return cp.error();
      if (cp->is_default && ++defaults > 1)
        return err_at(pos_of(c, cps[i]["default"]), fmt::format("{}[{}].default", ck, i),
                      "a second connection marked default: true; expected exactly one default per device");
      d.connections.push_back(std::move(*cp));
    }
    if (d.connections.size() > 1 && defaults == 0)
      return err_at(pos_of(c, cps), ck,
                    fmt::format("{} connections and none has default: true; expected exactly one marked "
                                "default: true (the one to use)",
                                d.connections.size()));
  }
  return {};
}

Result<DeviceConfig> parse_device(const Ctx& c, const YAML::Node& n, const std::string& key,
                                  const std::string& map_name, const std::string& devices_file) {
  if (!n.IsMap()) return expected(c, n, key, "a map with device_type and connection_params");
  TRACR_TRY(check_keys(c, n, key, kDeviceKeys));
  DeviceConfig d;
  d.pos = pos_of(c, n);
  d.name = map_name;
  if (!n["device_type"])
    return err_at(d.pos, key + ".device_type", "missing; expected SERVER or PARTICIPANT");
  TRACR_TRY(parse_device_identity(c, n, key, d));
  TRACR_TRY(parse_device_compute(c, n, key, devices_file, d));
  TRACR_TRY(parse_device_paths(c, n, key, devices_file, d));
  TRACR_TRY(parse_device_models(c, n, key, d));
  TRACR_TRY(parse_device_connections(c, n, key, devices_file, d));
  return d;
}

// The Python tracr devices file's split_inference_network: its server and
// participants must name the devices' roles.
Status check_split_inference_network(const Ctx& c, const YAML::Node& sin, const DevicesConfig& cfg) {
  const std::string k = "split_inference_network";
  if (!sin.IsMap()) return expected(c, sin, k, "a map with server and participants");
  TRACR_TRY(check_keys(c, sin, k, {"server", "participants"}));
  if (sin["server"]) {
    auto s = get_string(c, sin["server"], k + ".server", "SERVER or the server's name");
    if (!s) return s.error();
    if (*s != "SERVER" && *s != cfg.server().name)
      return expected(c, sin["server"], k + ".server",
                      "SERVER or the server device's name '" + cfg.server().name + "'");
  }
  if (const YAML::Node ps = sin["participants"]) {
    if (!ps.IsSequence())
      return expected(c, ps, k + ".participants", "a list of PARTICIPANT or participant names");
    for (size_t i = 0; i < ps.size(); ++i) {
      const std::string pk = fmt::format("{}.participants[{}]", k, i);
      auto s = get_string(c, ps[i], pk, "PARTICIPANT or a participant's name");
      if (!s) return s.error();
      const DeviceConfig* d = cfg.find(*s);
      if (*s != "PARTICIPANT" && !(d && d->role == DeviceRole::participant))
        return expected(c, ps[i], pk, "PARTICIPANT or the name of a PARTICIPANT device");
    }
  }
  return {};
}

}  // namespace

Result<DevicesConfig> parse_devices(const std::string& text, const std::string& source, RoleCheck roles) {
  Ctx c{source};
  auto loaded = load_one_document(c, text, "devices list");
  if (!loaded) return loaded.error();
  const YAML::Node root = *loaded;
  DevicesConfig cfg;
  cfg.source = source;
  SourcePos file_pos{source, 0, 0};
  if (!root.IsMap())
    return err_at(file_pos, "",
                  "expected a map with the key 'devices' (a list of devices), got " + describe(root));
  TRACR_TRY(check_keys(c, root, "", {"devices", "split_inference_network"}));
  const YAML::Node devs = root["devices"];
  if (!devs) return err_at(pos_of(c, root), "devices", "missing; expected a list of devices");
  if (devs.IsSequence()) {
    for (size_t i = 0; i < devs.size(); ++i) {
      auto d = parse_device(c, devs[i], fmt::format("devices[{}]", i), "", source);
      if (!d) return d.error();
      cfg.devices.push_back(std::move(*d));
    }
  } else if (devs.IsMap()) {
    // Older Python tracr form: devices: {<name>: {device_type: ..., ...}}.
    for (auto it = devs.begin(); it != devs.end(); ++it) {
      if (!it->first.IsScalar() || !valid_name(it->first.Scalar()))
        return expected(c, it->first, "devices", "a device name of letters, digits, '_', '-', '.'");
      const std::string nm = it->first.Scalar();
      auto d = parse_device(c, it->second, "devices." + nm, nm, source);
      if (!d) return d.error();
      cfg.devices.push_back(std::move(*d));
    }
  } else {
    return expected(c, devs, "devices", "a list of devices");
  }
  if (cfg.devices.empty()) return expected(c, devs, "devices", "at least one SERVER and one PARTICIPANT");

  // Default names, then uniqueness.
  int n_part = 0, n_server = 0;
  for (const auto& d : cfg.devices) (d.role == DeviceRole::server ? n_server : n_part)++;
  int pi = 0;
  for (auto& d : cfg.devices) {
    if (d.role == DeviceRole::participant) ++pi;  // 1-based index among participants
    if (!d.name.empty()) continue;
    if (d.role == DeviceRole::server)
      d.name = "server";
    else
      d.name = n_part == 1 ? "participant" : fmt::format("participant{}", pi);
  }
  std::set<std::string> names;
  for (size_t i = 0; i < cfg.devices.size(); ++i)
    if (!names.insert(cfg.devices[i].name).second)
      return err_at(cfg.devices[i].pos, fmt::format("devices[{}].name", i),
                    fmt::format("duplicate device name '{}'; expected unique names", cfg.devices[i].name));
  if (n_server != 1 && roles == RoleCheck::inference)
    return err_at(pos_of(c, devs), "devices",
                  fmt::format("expected exactly one device with device_type: SERVER, found {}", n_server));
  if (n_part < 1 && roles == RoleCheck::inference)
    return err_at(pos_of(c, devs), "devices",
                  "expected at least one device with device_type: PARTICIPANT, found none");

  // Python tracr compatibility: split_inference_network names the roles; it
  // is accepted and checked against the devices.
  if (const YAML::Node sin = root["split_inference_network"]) TRACR_TRY(check_split_inference_network(c, sin, cfg));
  return cfg;
}

Result<DevicesConfig> load_devices(const std::string& path, RoleCheck roles) {
  auto text = read_text(path, "devices");
  if (!text) return text.error();
  return parse_devices(*text, path, roles);
}

Result<DevicesConfig> load_devices_option(const std::string& path, bool given) {
  return given ? load_devices(path) : load_devices_or_default(path);
}

Result<DevicesConfig> load_devices_or_default(const std::string& path, RoleCheck roles) {
  std::error_code ec;
  if (!path.empty() && fs::exists(path, ec)) return load_devices(path, roles);
  auto cfg = parse_devices(std::string(embedded_devices_yaml()), "<embedded default>");
  if (cfg) cfg->embedded = true;
  return cfg;
}

}  // namespace tracr::settings
