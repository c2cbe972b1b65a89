#include "settings/config.hpp"

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

std::string SourcePos::str() const {
  if (file.empty()) return "default";
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

std::string_view device_role_name(DeviceRole r) { return r == DeviceRole::server ? "SERVER" : "PARTICIPANT"; }

std::string_view transport_name(Transport t) { return t == Transport::local ? "local" : "ssh"; }

std::string_view dataset_kind_name(DatasetKind k) {
  switch (k) {
    case DatasetKind::synthetic: return "synthetic";
    case DatasetKind::imagefolder: return "imagefolder";
    case DatasetKind::fashion_mnist: return "fashion_mnist";
  }
  return "synthetic";
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  // Optimal string alignment distance (Levenshtein plus adjacent transposition).
  auto lower = [](std::string_view s) {
    std::string o(s);
    for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return o;
  };
  const std::string a = lower(word);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& cand : candidates) {
    const std::string b = lower(cand);
    const size_t n = a.size(), m = b.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (size_t i = 1; i <= n; ++i) {
      for (size_t j = 1; j <= m; ++j) {
        const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    size_t dist = d[n][m];
    // A word that contains the candidate or is contained in it (pkey vs pkey_fp)
    // counts as close.
    if (!a.empty() && !b.empty() && (a.find(b) != std::string::npos || b.find(a) != std::string::npos))
      dist = std::min(dist, size_t{1} + (std::max(n, m) - std::min(n, m)) / 4);
    if (dist < best_d) {
      best_d = dist;
      best = cand;
    }
  }
  const size_t limit = std::max<size_t>(2, a.size() / 3);
  return best_d <= limit ? best : std::string();
}

namespace {

// ---------------------------------------------------------------------------
// Reading and reporting

Result<std::string> read_text(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return make_error(Errc::io, fmt::format("{}: {} file does not exist", path, what));
  if (fs::is_directory(path, ec))
    return make_error(Errc::io, fmt::format("{}: expected a {} file, found a directory", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(Errc::io, fmt::format("{}: cannot open {} file: {}", path, what, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(Errc::io, fmt::format("{}: error reading {} file", path, what));
  return ss.str();
}

struct Ctx {
  std::string file;  // name used in messages
  bool env = false;  // values come from an environment variable (no positions)
};

SourcePos pos_of(const Ctx& c, const YAML::Node& n) {
  SourcePos p;
  p.file = c.file;
  if (c.env) return p;
  const YAML::Mark m = n.Mark();
  if (!m.is_null()) {
    p.line = m.line + 1;
    p.column = m.column + 1;
  }
  return p;
}

SourcePos pos_of_mark(const Ctx& c, const YAML::Mark& m) {
  SourcePos p;
  p.file = c.file;
  if (!c.env && !m.is_null()) {
    p.line = m.line + 1;
    p.column = m.column + 1;
  }
  return p;
}

// Short description of what a node holds, for "got ..." in messages.
std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing (null)";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  std::string s = n.Scalar();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return "'" + s + "'";
}

Error err_at(const SourcePos& p, const std::string& key, const std::string& msg) {
  if (key.empty()) return make_error(Errc::config, fmt::format("{}: {}", p.str(), msg));
  return make_error(Errc::config, fmt::format("{}: {}: {}", p.str(), key, msg));
}

Error expected(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& what) {
  return err_at(pos_of(c, n), key, fmt::format("expected {}, got {}", what, describe(n)));
}

// The one YAML document of a file. A further document (after a `---` line)
// is an error at that line: a second experiment or devices list is never
// silently dropped. Empty trailing documents (a lone `---`) hold nothing and
// are allowed. Error config for a syntax error or a second document.
Result<YAML::Node> load_one_document(const Ctx& c, const std::string& text, const char* what) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    return err_at(pos_of_mark(c, e.mark), "", "YAML syntax error: " + e.msg);
  }
  if (docs.empty()) return YAML::Node();
  for (size_t i = 1; i < docs.size(); ++i) {
    if (docs[i].IsNull()) continue;
    // The `---` that opens this document: the last one at or before its content.
    const YAML::Mark m = docs[i].Mark();
    int line = m.is_null() ? 0 : m.line + 1;
    {
      std::istringstream in(text);
      std::string l;
      int n = 0;
      for (int k = 0; std::getline(in, l); ++k) {
        if (!m.is_null() && k > m.line) break;
        if (l.rfind("---", 0) == 0 && (l.size() == 3 || std::isspace(static_cast<unsigned char>(l[3])))) n = k + 1;
      }
      if (n > 0) line = n;
    }
    return err_at(SourcePos{c.file, line, line > 0 ? 1 : 0}, "",
                  fmt::format("a second YAML document begins here ('---'); expected one {} per file (put each in a "
                              "file of its own)",
                              what));
  }
  return docs[0];
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string o;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += sep;
    o += v[i];
  }
  return o;
}

// The map's keys must be scalars, unique and among `allowed`.
Status check_keys(const Ctx& c, const YAML::Node& map, const std::string& where,
                  const std::vector<std::string>& allowed) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node k = it->first;
    const std::string path_prefix = where.empty() ? "" : where + ".";
    if (!k.IsScalar())
      return err_at(pos_of(c, k), where.empty() ? "key" : where, "expected a key name, got " + describe(k));
    const std::string name = k.Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::string hint = did_you_mean(name, allowed);
      // A Python tracr config's top-level keys (default:, dataloader:, logging:) are not tracr's: say how to convert it.
      const bool python = where.empty() && (name == "default" || name == "dataloader" || name == "logging");
      return err_at(pos_of(c, k), path_prefix + name,
                    fmt::format("unknown key{}; expected one of: {}{}",
                                hint.empty() ? "" : " (did you mean '" + hint + "'?)", join(allowed),
                                python ? fmt::format(". This looks like a Python tracr config: `tracrctl convert {} "
                                                     "-o NEW.yaml` writes it as a tracr experiment",
                                                     c.file.empty() ? "OLD.yaml" : c.file)
                                       : ""));
    }
    if (!seen.insert(name).second)
      return err_at(pos_of(c, k), path_prefix + name, "duplicate key; each key may appear once");
  }
  return {};
}

// ---------------------------------------------------------------------------
// Typed scalar readers. Each returns an error naming the key and what was
// expected.

Result<std::string> get_string(const Ctx& c, const YAML::Node& n, const std::string& key,
                               const std::string& what = "a string") {
  if (!n.IsScalar()) return expected(c, n, key, what);
  return n.Scalar();
}

Result<std::string> get_nonempty(const Ctx& c, const YAML::Node& n, const std::string& key,
                                 const std::string& what) {
  auto s = get_string(c, n, key, what);
  if (!s) return s;
  if (s->empty()) return expected(c, n, key, what);
  return s;
}

bool parse_int_text(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  const char* b = s.c_str();
  char* e = nullptr;
  errno = 0;
  long long v = std::strtoll(b, &e, 10);
  if (errno == ERANGE || e == b || *e != '\0') return false;
  if (std::isspace(static_cast<unsigned char>(s.front()))) return false;
  *out = v;
  return true;
}

Result<int64_t> get_int(const Ctx& c, const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi,
                        const std::string& what) {
  int64_t v = 0;
  if (!n.IsScalar() || !parse_int_text(n.Scalar(), &v)) return expected(c, n, key, what);
  if (v < lo || v > hi) return expected(c, n, key, what);
  return v;
}

Result<double> get_double(const Ctx& c, const YAML::Node& n, const std::string& key, double lo,
                          const std::string& what) {
  if (!n.IsScalar() || n.Scalar().empty()) return expected(c, n, key, what);
  const std::string& s = n.Scalar();
  char* e = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &e);
  if (errno == ERANGE || *e != '\0' || !std::isfinite(v) || v < lo) return expected(c, n, key, what);
  return v;
}

Result<bool> get_bool(const Ctx& c, const YAML::Node& n, const std::string& key) {
  if (n.IsScalar()) {
    std::string s = n.Scalar();
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  return expected(c, n, key, "true or false");
}

Result<std::string> get_choice(const Ctx& c, const YAML::Node& n, const std::string& key,
                               const std::vector<std::string>& choices) {
  const std::string what = "one of " + join(choices, " | ");
  if (!n.IsScalar()) return expected(c, n, key, what);
  const std::string s = n.Scalar();
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  std::string hint = did_you_mean(s, choices);
  return err_at(
      pos_of(c, n), key,
      fmt::format("expected {}, got '{}'{}", what, s, hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
}


}  // namespace

std::string yaml_str(const std::string& s) {
  static const char* special = ":#{}[],&*!|>'\"%@`";
  bool plain = !s.empty() && s.find_first_of(special) == std::string::npos &&
               !std::isspace(static_cast<unsigned char>(s.front())) &&
               !std::isspace(static_cast<unsigned char>(s.back())) && s.front() != '-' && s.front() != '?' &&
               s.find('\n') == std::string::npos;
  if (plain) {
    std::string l = s;
    for (auto& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    static const std::set<std::string> reserved = {"true", "false", "yes", "no", "on",
                                                   "off",  "null",  "~",   "y",  "n"};
    int64_t dummy;
    if (reserved.count(l) || parse_int_text(s, &dummy)) plain = false;
    char* e = nullptr;
    std::strtod(s.c_str(), &e);
    if (e && *e == '\0') plain = false;
  }
  return plain ? s : json_quote(s);
}

namespace {

bool is_placeholder(const std::string& s) { return s.size() >= 2 && s.front() == '<' && s.back() == '>'; }

std::string expand_home(const std::string& p) {
  if (p == "~" || p.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (home) return std::string(home) + p.substr(1);
  }
  return p;
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (ch < 0x20)
          o += fmt::format("\\u{:04x}", ch);
        else
          o += static_cast<char>(ch);
    }
  }
  return o + "\"";
}

// ---------------------------------------------------------------------------
// Devices

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
    if (d.role == DeviceRole::participant) out.push_back(&d);
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

const std::vector<std::string> kDeviceKeys = {"device_type", "connection_params", "name",      "transport",
                                              "work_dir",    "power_model",       "link_profile", "netns",
                                              "cpu_quota",   "cpu_cores",         "device",       "threads",
                                              "agent",       "paths"};
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
// The value with control and non-ASCII bytes written as \xNN (never sent raw to a terminal).
std::string printable(const std::string& v) {
  std::string out;
  for (const unsigned char ch : v) out += ch >= 0x20 && ch < 0x7f ? std::string(1, static_cast<char>(ch)) : fmt::format("\\x{:02X}", ch);
  return out;
}

// Error naming the first control byte (C0 or DEL) of `v`, if any.
Status no_control_chars(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& v,
                        const std::string& what) {
  for (const unsigned char ch : v)
    if (ch < 0x20 || ch == 0x7f)
      return err_at(pos_of(c, n), key,
                    fmt::format("'{}' holds control character 0x{:02X}; expected {}", printable(v), ch, what));
  return {};
}

const std::vector<std::string> kConnKeys = {"host", "user", "pkey_fp", "port", "ssh_port", "default"};

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char ch : s)
    if (!std::isalnum(ch) && ch != '_' && ch != '-' && ch != '.') return false;
  return true;
}

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
  if (n["host"]) {
    auto h = get_nonempty(c, n["host"], key + ".host", "an IP address or host name");
    if (!h) return h.error();
    if (is_placeholder(*h))
      return err_at(
          pos_of(c, n["host"]), key + ".host",
          fmt::format("placeholder '{}' was not replaced: expected the device's IP address or host name",
                      *h));
    if (auto bad = bad_name_char(*h, kHostChars); !bad.empty())
      return err_at(pos_of(c, n["host"]), key + ".host",
                    fmt::format("'{}' is not a host name or IP address ({}); expected letters, digits, '.', '-', "
                                "':' (IPv6) and '_', not starting with '-'",
                                printable(*h), bad));
    cp.host = *h;
  } else if (ssh) {
    TRACR_TRY(need("host"));
  } else {
    cp.host = "127.0.0.1";
  }
  if (n["user"]) {
    auto u = get_nonempty(c, n["user"], key + ".user", "an SSH user name");
    if (!u) return u.error();
    if (is_placeholder(*u))
      return err_at(pos_of(c, n["user"]), key + ".user",
                    fmt::format("placeholder '{}' was not replaced: expected the SSH user name", *u));
    if (auto bad = bad_name_char(*u, kUserChars); !bad.empty())
      return err_at(pos_of(c, n["user"]), key + ".user",
                    fmt::format("'{}' is not an SSH user name ({}); expected letters, digits, '.', '-' and '_', "
                                "not starting with '-'",
                                printable(*u), bad));
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

// Where and how the agent computes: CPU quota and cores, LibTorch device and threads, its own binary.
Status parse_device_compute(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& devices_file, DeviceConfig& d) {
  if (n["cpu_quota"]) {
    auto v = get_double(c, n["cpu_quota"], key + ".cpu_quota", 0.01, "a CPU quota in cores >= 0.01 (e.g. 0.5)");
    if (!v) return v.error();
    if (*v > 4096) return expected(c, n["cpu_quota"], key + ".cpu_quota", "a CPU quota in cores, 0.01..4096");
    d.cpu_quota = *v;
  }
  if (n["cpu_cores"]) {
    auto v = get_int(c, n["cpu_cores"], key + ".cpu_cores", 1, 4096, "a number of CPUs 1..4096");
    if (!v) return v.error();
    d.cpu_cores = static_cast<int>(*v);
  }
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

// ---------------------------------------------------------------------------
// Experiment

namespace {

using Apply = std::function<Status(const Ctx&, const YAML::Node&, const std::string&, ExperimentConfig&)>;
using Show = std::function<std::string(const ExperimentConfig&)>;

struct Setting {
  SettingInfo info;
  Apply apply;
  Show show;
  bool nullable = false;  // null resets to the default
  bool env_yaml = false;  // the env value is parsed as YAML (lists); else taken as one string
};

std::string flow_ints(const std::vector<int64_t>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + std::to_string(v[i]);
  return o + "]";
}

std::string flow_strs(const std::vector<std::string>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + yaml_str(v[i]);
  return o + "]";
}

Result<int64_t> parse_bytes(const Ctx& c, const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi,
                            const std::string& what) {
  if (!n.IsScalar()) return expected(c, n, key, what);
  std::string s = n.Scalar();
  int64_t mult = 1;
  for (auto [suf, m] : {std::pair<const char*, int64_t>{"KiB", 1024}, {"MiB", 1024 * 1024}}) {
    const std::string sf = suf;
    if (s.size() > sf.size() && s.compare(s.size() - sf.size(), sf.size(), sf) == 0) {
      s = s.substr(0, s.size() - sf.size());
      while (!s.empty() && s.back() == ' ') s.pop_back();
      mult = m;
      break;
    }
  }
  int64_t v = 0;
  if (!parse_int_text(s, &v) || v < 0 || v > hi / mult) return expected(c, n, key, what);
  v *= mult;
  if (v < lo || v > hi) return expected(c, n, key, what);
  return v;
}

Setting int_setting(const std::string& name, const std::string& type, const std::string& def,
                    const std::string& desc, int64_t lo, int64_t hi,
                    const std::function<void(ExperimentConfig&, int64_t)>& set,
                    const std::function<int64_t(const ExperimentConfig&)>& get) {
  Setting s;
  s.info = {name, type, def, desc, ""};
  const std::string what = "an integer " + (type.rfind("int ", 0) == 0 ? type.substr(4) : type);
  s.apply = [lo, hi, what, set](const Ctx& c, const YAML::Node& n, const std::string& key,
                                ExperimentConfig& cfg) -> Status {
    auto v = get_int(c, n, key, lo, hi, what);
    if (!v) return v.error();
    set(cfg, *v);
    return {};
  };
  s.show = [get](const ExperimentConfig& cfg) { return std::to_string(get(cfg)); };
  return s;
}

Setting bool_setting(const std::string& name, const std::string& def, const std::string& desc,
                     const std::function<bool&(ExperimentConfig&)>& ref) {
  Setting s;
  s.info = {name, "bool", def, desc, ""};
  s.apply = [ref](const Ctx& c, const YAML::Node& n, const std::string& key,
                  ExperimentConfig& cfg) -> Status {
    auto v = get_bool(c, n, key);
    if (!v) return v.error();
    ref(cfg) = *v;
    return {};
  };
  s.show = [ref](const ExperimentConfig& cfg) {
    return std::string(ref(const_cast<ExperimentConfig&>(cfg)) ? "true" : "false");
  };
  return s;
}

Setting string_setting(const std::string& name, const std::string& type, const std::string& def,
                       const std::string& desc, const std::string& what,
                       const std::function<std::string&(ExperimentConfig&)>& ref, bool nullable) {
  Setting s;
  s.info = {name, type, def, desc, ""};
  s.nullable = nullable;
  s.apply = [ref, what](const Ctx& c, const YAML::Node& n, const std::string& key,
                        ExperimentConfig& cfg) -> Status {
    auto v = get_nonempty(c, n, key, what);
    if (!v) return v.error();
    // Names and paths end up in terminals, tables and shell lines: a
    // control character (an ANSI escape, a newline) is refused (#24).
    TRACR_TRY(no_control_chars(c, n, key, *v, what));
    ref(cfg) = *v;
    return {};
  };
  s.show = [ref](const ExperimentConfig& cfg) {
    const std::string& v = ref(const_cast<ExperimentConfig&>(cfg));
    return v.empty() ? std::string("~") : yaml_str(v);
  };
  return s;
}

// One entry of `commands`: {at_frame: N} and exactly one action.
Result<ScheduledCommand> parse_command(const Ctx& c, const YAML::Node& e, const std::string& k) {
  ScheduledCommand sc;
  bool have_at = false;
  for (const auto& kv : e) {
    const std::string name = kv.first.Scalar();
    const std::string kk = k + "." + name;
    if (name == "at_frame") {
      auto v = get_int(c, kv.second, kk, 0, std::numeric_limits<int32_t>::max(), "a frame count >= 0");
      if (!v) return v.error();
      sc.at_frame = *v;
      have_at = true;
      continue;
    }
    if (!sc.op.empty())
      return err_at(pos_of(c, kv.first), kk,
                    fmt::format("a command has one action; this one already has {}", sc.op));
    if (name == "set_split") {
      auto v = get_int(c, kv.second, kk, 0, 100000, "a split point (int >= 0)");
      if (!v) return v.error();
      sc.op = "set_split";
      sc.split = static_cast<int>(*v);
    } else if (name == "set_codec") {
      auto v = get_string(c, kv.second, kk, "a codec text such as fp16 or blosc-lz4");
      if (!v) return v.error();
      auto spec = protocol::CodecSpec::parse(*v);
      if (!spec)
        return err_at(pos_of(c, kv.second), kk, fmt::format("invalid codec '{}': {}", *v, spec.error().message));
      sc.op = "set_codec";
      sc.codec = spec->name();
    } else if (name == "pause_ms") {
      auto v = get_int(c, kv.second, kk, 0, 86400000, "a pause in ms");
      if (!v) return v.error();
      sc.op = "pause";
      sc.pause_ms = *v;
    } else if (name == "stop") {
      if (!kv.second.IsScalar() || kv.second.Scalar() != "true") return expected(c, kv.second, kk, "true");
      sc.op = "stop";
    } else {
      std::string dym = did_you_mean(name, {"at_frame", "set_split", "set_codec", "pause_ms", "stop"});
      return err_at(pos_of(c, kv.first), kk,
                    "unknown command key '" + name + "'; expected at_frame, set_split, set_codec, pause_ms or stop" +
                        (dym.empty() ? "" : " (did you mean '" + dym + "'?)"));
    }
  }
  if (!have_at) return expected(c, e, k, "at_frame: N (timed frames delivered before the command is sent)");
  if (sc.op.empty()) return expected(c, e, k, "one of set_split, set_codec, pause_ms, stop");
  return sc;
}

// A number setting: >= lo, or > lo when exclusive.
Setting double_setting(const std::string& name, const std::string& type, const std::string& def,
                       const std::string& desc, double lo, bool exclusive,
                       std::function<double&(ExperimentConfig&)> ref) {
  Setting s;
  s.info = {name, type, def, desc, ""};
  const std::string what = "a number " + std::string(exclusive ? "> " : ">= ") + fmt::format("{}", lo);
  s.apply = [lo, exclusive, what, ref](const Ctx& c, const YAML::Node& n, const std::string& key,
                                      ExperimentConfig& cfg) -> Status {
    auto v = get_double(c, n, key, lo, what);
    if (!v) return v.error();
    if (exclusive && !(*v > lo)) return expected(c, n, key, what);
    ref(cfg) = *v;
    return {};
  };
  s.show = [ref](const ExperimentConfig& c) { return fmt::format("{}", ref(const_cast<ExperimentConfig&>(c))); };
  return s;
}

// A list of device names.
Setting name_list_setting(const std::string& name, const std::string& def, const std::string& desc,
                          std::function<std::vector<std::string>&(ExperimentConfig&)> ref) {
  Setting s;
  s.info = {name, "[device name]", def, desc, ""};
  s.nullable = true;
  s.env_yaml = true;
  s.apply = [ref](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    if (!n.IsSequence() || n.size() == 0) return expected(c, n, key, "a list of device names");
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i) {
      auto v = get_nonempty(c, n[i], fmt::format("{}[{}]", key, i), "a device name");
      if (!v) return v.error();
      out.push_back(*v);
    }
    ref(cfg) = out;
    return {};
  };
  s.show = [ref](const ExperimentConfig& c) {
    const auto& v = ref(const_cast<ExperimentConfig&>(c));
    return v.empty() ? std::string("~") : flow_strs(v);
  };
  return s;
}

// The settings name .. optimize, in the order they are documented.
void add_model_settings(std::vector<Setting>& t) {
  t.push_back(string_setting(
      "name", "string", "<file name>", "Run name stored in the results database.", "a run name",
      [](ExperimentConfig& c) -> std::string& { return c.name; }, false));
  {
    // One model, or a list: the experiment once per model.
    Setting s;
    s.info = {"model", "string | [string, ...]", "(required)",
              "Model registry id (`tracrctl models`), e.g. alexnet, or torchscript:<path>; a list runs the "
              "experiment once per model.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      static const char* what = "a model id such as alexnet (see `tracrctl models`), or torchscript:<path>";
      auto one = [&](const YAML::Node& v_node, const std::string& where) -> Result<std::string> {
        auto v = get_nonempty(c, v_node, where, what);
        if (!v) return v.error();
        // Names and paths end up in terminals, tables and shell lines (#24).
        TRACR_TRY(no_control_chars(c, v_node, where, *v, what));
        return *v;
      };
      cfg.model_list.clear();
      if (n.IsSequence()) {
        if (n.size() == 0) return err_at(pos_of(c, n), key, std::string("an empty list; expected ") + what + ", or a list of them");
        for (size_t i = 0; i < n.size(); ++i) {
          const std::string where = fmt::format("{}[{}]", key, i);
          auto v = one(n[i], where);
          if (!v) return v.error();
          if (std::find(cfg.model_list.begin(), cfg.model_list.end(), *v) != cfg.model_list.end())
            return err_at(pos_of(c, n[i]), where, "model '" + *v + "' is listed twice");
          cfg.model_list.push_back(*v);
        }
        cfg.model = cfg.model_list.front();
        if (cfg.model_list.size() == 1) cfg.model_list.clear();
        return {};
      }
      auto v = one(n, key);
      if (!v) return v.error();
      cfg.model = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      return !c.model_list.empty() ? flow_strs(c.model_list) : c.model.empty() ? std::string("~") : yaml_str(c.model);
    };
    s.env_yaml = true;  // TRACR_MODEL='[alexnet, resnet18]'
    t.push_back(s);
  }
  t.push_back(string_setting(
      "weights", "path", "~ (none)",
      "Weights file for the model (see the models issue); none = deterministic init.",
      "a path to a weights file", [](ExperimentConfig& c) -> std::string& { return c.weights; }, true));
  {
    Setting s;
    s.info = {"granularity", "module | node", "module",
              "torchscript: models only: cut at every boundary between leaf-module calls (named by module "
              "path, e.g. layer2.1.relu), or between every two graph nodes.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"module", "node"});
      if (!v) return v.error();
      cfg.granularity = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.granularity; };
    t.push_back(s);
  }
  t.push_back(bool_setting("optimize", "true",
                           "torchscript: models only: freeze and optimize each head and tail segment for "
                           "inference (BatchNorm folded, conv-add-relu fused, as torch.jit.optimize_for_inference); "
                           "false runs the traced ops as they are. Recorded with the run and in the model "
                           "fingerprint.",
                           [](ExperimentConfig& c) -> bool& { return c.optimize; }));
}

// The settings num_classes .. input_size, in the order they are documented.
void add_input_settings(std::vector<Setting>& t) {
  t.push_back(int_setting(
      "num_classes", "int >= 0", "0 (the model's own)",
      "Classes the model's last layer outputs (models that take it build their classifier with it); checked "
      "against the built model's output width before anything starts. 0 = the model's default (1000 for "
      "ImageNet models, 10 for fmnist_cnn).",
      0, 1000000, [](ExperimentConfig& c, int64_t v) { c.num_classes = v; },
      [](const ExperimentConfig& c) { return c.num_classes; }));
  {
    Setting s;
    s.info = {"input_size", "int | [int, ...]", "~ (model default)",
              "Input shape per sample, without the batch: an int n means [3, n, n]; a list of any rank, e.g. "
              "[C, H, W], [4] (4 features) or [T, D] (a token sequence; synthetic data); `--set` also takes "
              "1,28,28.",
              ""};
    s.nullable = true;
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      const std::string what =
          "a positive int n up to 65536 (for [3, n, n]) or a list of 1 to 8 positive ints up to 65536 such as "
          "[C, H, W], [4] or [T, D] (or 1,28,28)";
      // One sample must fit a frame: PROTOCOL.md's 1 GiB of tensor bytes, as
      // float32 (#24: [3, 100000, 100000] was refused without the limit).
      constexpr int64_t kMaxValues = (int64_t{1} << 30) / 4;
      auto fits = [&](const std::vector<int64_t>& dims) -> Status {
        double values = 1;  // at most 8 dims of at most 65536: exact enough in a double
        for (int64_t d : dims) values *= static_cast<double>(d);
        if (values <= static_cast<double>(kMaxValues)) return {};
        return err_at(pos_of(c, n), key,
                      fmt::format("{} is {:.0f} values per sample; expected at most 268435456 (one frame carries at "
                                  "most 1 GiB of tensor bytes, PROTOCOL.md limits, and a value is a 4-byte float32)",
                                  flow_ints(dims), values));
      };
      if (n.IsScalar() && n.Scalar().find(',') != std::string::npos) {
        // The comma form of `--set input_size=1,28,28` (as profile --input-shape takes it).
        std::vector<int64_t> dims;
        std::istringstream parts(n.Scalar());
        for (std::string part; std::getline(parts, part, ',');) {
          while (!part.empty() && part.back() == ' ') part.pop_back();
          const size_t first = part.find_first_not_of(' ');
          int64_t v = 0;
          if (first == std::string::npos || !parse_int_text(part.substr(first), &v) || v < 1 || v > 65536)
            return expected(c, n, key, what);
          dims.push_back(v);
        }
        if (dims.size() > 8 || n.Scalar().back() == ',') return expected(c, n, key, what);
        TRACR_TRY(fits(dims));
        cfg.input_size = dims;
        return {};
      }
      if (n.IsScalar()) {
        auto v = get_int(c, n, key, 1, 65536, what);
        if (!v) return v.error();
        TRACR_TRY(fits({3, *v, *v}));
        cfg.input_size = {3, *v, *v};
        return {};
      }
      if (!n.IsSequence() || n.size() == 0 || n.size() > 8) return expected(c, n, key, what);
      std::vector<int64_t> dims;
      for (size_t i = 0; i < n.size(); ++i) {
        auto v = get_int(c, n[i], fmt::format("{}[{}]", key, i), 1, 65536, "a positive int up to 65536");
        if (!v) return v.error();
        dims.push_back(*v);
      }
      TRACR_TRY(fits(dims));
      cfg.input_size = dims;
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      return c.input_size.empty() ? std::string("~") : flow_ints(c.input_size);
    };
    t.push_back(s);
  }
}

// The settings dataset.type .. dataset.class_names, in the order they are documented.
void add_dataset_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"dataset.type", "synthetic | imagefolder | fashion_mnist", "synthetic",
              "Where samples come from: generated tensors, a folder of JPEG/PNG images, or Fashion-MNIST IDX "
              "files.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      if (n.IsScalar() && n.Scalar() == "fashion-mnist") {
        cfg.dataset.kind = DatasetKind::fashion_mnist;
        return {};
      }
      auto v = get_choice(c, n, key, {"synthetic", "imagefolder", "fashion_mnist"});
      if (!v) return v.error();
      cfg.dataset.kind = *v == "synthetic"     ? DatasetKind::synthetic
                         : *v == "imagefolder" ? DatasetKind::imagefolder
                                               : DatasetKind::fashion_mnist;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return std::string(dataset_kind_name(c.dataset.kind)); };
    t.push_back(s);
  }
  t.push_back(string_setting(
      "dataset.path", "path", "~ (fashion_mnist: /usr/share/datasets/fashion-mnist)",
      "imagefolder: the image directory (required); fashion_mnist: the directory of the IDX .gz files.",
      "a directory path", [](ExperimentConfig& c) -> std::string& { return c.dataset.path; }, true));
  {
    Setting s;
    s.info = {"dataset.class_names", "path | [string]", "~ (built-in names)",
              "Class names: a file with one name per line, or a list.", ""};
    s.nullable = true;
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      if (n.IsSequence()) {
        std::vector<std::string> names;
        for (size_t i = 0; i < n.size(); ++i) {
          auto v = get_string(c, n[i], fmt::format("{}[{}]", key, i), "a class name");
          if (!v) return v.error();
          names.push_back(*v);
        }
        if (names.empty()) return expected(c, n, key, "a file path or a non-empty list of class names");
        cfg.dataset.class_names = std::move(names);
        cfg.dataset.class_names_file.clear();
        return {};
      }
      auto v = get_nonempty(c, n, key, "a file path or a list of class names");
      if (!v) return v.error();
      cfg.dataset.class_names_file = *v;
      cfg.dataset.class_names.clear();
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      if (!c.dataset.class_names.empty()) return flow_strs(c.dataset.class_names);
      return c.dataset.class_names_file.empty() ? std::string("~") : yaml_str(c.dataset.class_names_file);
    };
    t.push_back(s);
  }
}

// The settings dataset.mean .. dataset.resize_size, in the order they are documented.
void add_normalization_settings(std::vector<Setting>& t) {
  for (const bool is_std : {false, true}) {
    Setting s;
    s.info = {is_std ? "dataset.std" : "dataset.mean", "number | [number, ...]",
              is_std ? "~ (with the mean's default)" : "~ (fashion_mnist: 0.2860; others: ImageNet's 3 values)",
              is_std ? "Normalization divisor: 1 value or one per input channel, each > 0; give it with "
                       "dataset.mean (default: fashion_mnist 0.3530, others ImageNet's 0.229, 0.224, 0.225)."
                     : "Normalization (x - mean) / std of [0, 1] pixels: 1 value or one per input channel; give it "
                       "with dataset.std (default: fashion_mnist 0.2860, 3-channel images and synthetic inputs "
                       "ImageNet's 0.485, 0.456, 0.406; 1-channel image folders have no default).",
              ""};
    s.nullable = true;
    s.env_yaml = true;
    s.apply = [is_std](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      const double lo = is_std ? std::numeric_limits<double>::min() : -std::numeric_limits<double>::max();
      const std::string what = is_std ? "a number > 0 or a list of them (one per channel)"
                                      : "a number or a list of numbers (one per channel)";
      std::vector<double> v;
      if (n.IsSequence()) {
        if (n.size() == 0) return expected(c, n, key, what);
        for (size_t i = 0; i < n.size(); ++i) {
          auto x = get_double(c, n[i], fmt::format("{}[{}]", key, i), lo, is_std ? "a number > 0" : "a number");
          if (!x) return x.error();
          v.push_back(*x);
        }
      } else {
        auto x = get_double(c, n, key, lo, what);
        if (!x) return x.error();
        v.push_back(*x);
      }
      (is_std ? cfg.dataset.std : cfg.dataset.mean) = std::move(v);
      return {};
    };
    s.show = [is_std](const ExperimentConfig& c) {
      const auto& v = is_std ? c.dataset.std : c.dataset.mean;
      if (v.empty()) return std::string("~");
      std::string o = "[";
      for (size_t i = 0; i < v.size(); ++i) o += fmt::format("{}{}", i ? ", " : "", v[i]);
      return o + "]";
    };
    t.push_back(s);
  }
  t.push_back(int_setting(
      "dataset.max_samples", "int >= 0", "0 (all; synthetic: 16)",
      "Number of samples taken from the dataset, in order.", 0, std::numeric_limits<int32_t>::max(),
      [](ExperimentConfig& c, int64_t v) { c.dataset.max_samples = v; },
      [](const ExperimentConfig& c) { return c.dataset.max_samples; }));
  {
    Setting s;
    s.info = {"dataset.split", "train | test", "test", "Fashion-MNIST part to read (fashion_mnist only).",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"train", "test"});
      if (!v) return v.error();
      cfg.dataset.split = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.dataset.split; };
    t.push_back(s);
  }
  // torchvision's preset per model (scripts/export_model.py writes the one
  // a torchvision model's weights expect).
  t.push_back(int_setting(
      "dataset.resize_size", "int >= 0", "0 (round(crop x 256 / 224))",
      "imagefolder: the shorter side is resized to this before the center crop to input_size (torchvision's "
      "resize_size; e.g. 232 for resnet50's IMAGENET1K_V2 weights). 0 = crop x 256 / 224 rounded (256 for 224).",
      0, 65536, [](ExperimentConfig& c, int64_t v) { c.dataset.resize_size = v; },
      [](const ExperimentConfig& c) { return c.dataset.resize_size; }));
}

// The settings dataset.interpolation .. batch_size, in the order they are documented.
void add_preprocessing_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"dataset.interpolation", "bilinear | bicubic | nearest", "bilinear",
              "Image resize filter, PIL's own (bit-exact with torchvision on PIL images; e.g. bicubic for "
              "EfficientNet's weights); imagefolder and a resized fashion_mnist.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"bilinear", "bicubic", "nearest"});
      if (!v) return v.error();
      cfg.dataset.interpolation = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.dataset.interpolation; };
    t.push_back(s);
  }
  {
    Setting s;
    s.info = {"split", "int | [int] | all", "all",
              "Split points: k runs layers [0, k) on the PARTICIPANT and [k, N) on the SERVER; all = 0..N.",
              ""};
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      const std::string what = "a split point (int >= 0), a list of split points, or all";
      if (n.IsScalar()) {
        if (n.Scalar() == "all") {
          cfg.split = SplitSpec{};
          return {};
        }
        auto v = get_int(c, n, key, 0, 100000, what);
        if (!v) return v.error();
        cfg.split.all = false;
        cfg.split.points = {static_cast<int>(*v)};
        return {};
      }
      if (!n.IsSequence() || n.size() == 0) return expected(c, n, key, what);
      SplitSpec sp;
      sp.all = false;
      for (size_t i = 0; i < n.size(); ++i) {
        const std::string k = fmt::format("{}[{}]", key, i);
        auto v = get_int(c, n[i], k, 0, 100000, "a split point (int >= 0)");
        if (!v) return v.error();
        if (std::find(sp.points.begin(), sp.points.end(), *v) != sp.points.end())
          return err_at(pos_of(c, n[i]), k,
                        fmt::format("split point {} is listed twice; expected distinct points", *v));
        sp.points.push_back(static_cast<int>(*v));
      }
      cfg.split = sp;
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      if (c.split.all) return std::string("all");
      if (c.split.points.size() == 1) return std::to_string(c.split.points[0]);
      return flow_ints(std::vector<int64_t>(c.split.points.begin(), c.split.points.end()));
    };
    t.push_back(s);
  }
  t.push_back(int_setting(
      "warmup", "int >= 0", "2", "Untimed inferences per split point before measuring.", 0, 1000000,
      [](ExperimentConfig& c, int64_t v) { c.warmup = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.warmup}; }));
  t.push_back(int_setting(
      "repetitions", "int >= 1", "5", "Timed passes over the samples per split point.", 1, 1000000,
      [](ExperimentConfig& c, int64_t v) { c.repetitions = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.repetitions}; }));
  t.push_back(int_setting(
      "batch_size", "int >= 1", "1", "Samples per frame.", 1, 65536,
      [](ExperimentConfig& c, int64_t v) { c.batch_size = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.batch_size}; }));
}

// The settings compression .. key_exchange, in the order they are documented.
void add_codec_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"compression", "codec text | [codec text]", "none",
              "Codec for the tensors crossing the split (`tracrctl codecs`), e.g. int8+blosc-zstd:level=5; auto: the "
              "participant picks a lossless codec per split from the activations and the link's rate. A list repeats "
              "the experiment under each codec, one run per codec (and per link profile when `link` is a list too).",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      // One codec text: its canonical name and parsed spec (auto: chosen per split by the participant).
      auto one = [&](const YAML::Node& v_node, const std::string& where) -> Result<std::pair<std::string, protocol::CodecSpec>> {
        auto v = get_nonempty(c, v_node, where, "a codec text such as none, fp16, blosc-lz4 (see `tracrctl codecs`), or auto");
        if (!v) return v.error();
        if (*v == "auto") return std::pair{std::string("auto"), protocol::CodecSpec{}};
        auto spec = protocol::CodecSpec::parse(*v);
        if (!spec)
          return err_at(pos_of(c, v_node), where,
                        fmt::format("invalid codec '{}': {}; expected e.g. none, fp16, int8+blosc-zstd:level=5 "
                                    "(see `tracrctl codecs`)",
                                    *v, spec.error().message));
        return std::pair{spec->name(), *spec};
      };
      cfg.compression_list.clear();
      if (n.IsSequence()) {
        if (n.size() == 0) return err_at(pos_of(c, n), key, "an empty list; expected a codec text or a list of them");
        for (size_t i = 0; i < n.size(); ++i) {
          const std::string where = fmt::format("{}[{}]", key, i);
          auto v = one(n[i], where);
          if (!v) return v.error();
          if (std::find(cfg.compression_list.begin(), cfg.compression_list.end(), v->first) != cfg.compression_list.end())
            return err_at(pos_of(c, n[i]), where, "codec '" + v->first + "' is listed twice");
          cfg.compression_list.push_back(v->first);
          if (i == 0) std::tie(cfg.compression, cfg.codec) = *v;
        }
        if (cfg.compression_list.size() == 1) cfg.compression_list.clear();
        return {};
      }
      auto v = one(n, key);
      if (!v) return v.error();
      std::tie(cfg.compression, cfg.codec) = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      return c.compression_list.empty() ? yaml_str(c.compression) : flow_strs(c.compression_list);
    };
    s.env_yaml = true;  // TRACR_COMPRESSION='[none, int8]'
    t.push_back(s);
  }
  t.push_back(bool_setting("encryption", "true",
                           "AES-256-GCM on every frame (false: plain frames, named 'none').",
                           [](ExperimentConfig& c) -> bool& { return c.encryption; }));
  {
    Setting s;
    s.info = {"key_exchange", "x25519 | none", "x25519",
              "Ephemeral X25519 on top of the session secret (forward secrecy); ignored without encryption.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"x25519", "none"});
      if (!v) return v.error();
      cfg.key_exchange = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.key_exchange; };
    t.push_back(s);
  }
}

// The settings chunk_bytes .. max_consecutive_failures, in the order they are documented.
void add_frame_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"chunk_bytes", "int bytes | \"<n>KiB\" | \"<n>MiB\"", "262144 (256KiB)",
              "Transformed bytes per payload part; chunk n+1 is encoded while chunk n is sent.", ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      // The protocol's bound on a payload part (PROTOCOL.md 8).
      auto v = parse_bytes(c, n, key, 4096, int64_t{64} << 20,
                           "a byte count 4096..67108864 (an int, or <n>KiB / <n>MiB)");
      if (!v) return v.error();
      cfg.chunk_bytes = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return std::to_string(c.chunk_bytes); };
    t.push_back(s);
  }
  t.push_back(int_setting(
      "inflight", "int 1..64", "1",
      "Frames in flight per participant (1 = one at a time; more pipelines the stages).", 1, 64,
      [](ExperimentConfig& c, int64_t v) { c.inflight = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.inflight}; }));
  t.push_back(int_setting(
      "codec_threads", "int 0..256", "1",
      "Threads coding one frame's parts (codec and cipher) at each end, participant and server alike; the wire "
      "bytes do not change (PROTOCOL.md 4.5). 0 = one per core.",
      0, 256, [](ExperimentConfig& c, int64_t v) { c.codec_threads = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.codec_threads}; }));
  {
    Setting s;
    s.info = {"commands", "[{at_frame, set_split | set_codec | pause_ms | stop}]", "[]",
              "Commands sent to each PARTICIPANT mid-run once it has delivered at_frame timed frames: set_split: K, "
              "set_codec: TEXT, pause_ms: M (pause, resume after M ms), stop: true. Each is applied between frames "
              "and recorded as an event with the frame it took effect at.",
              ""};
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      const std::string what = "a list of {at_frame: N, set_split: K | set_codec: TEXT | pause_ms: M | stop: true}";
      if (!n.IsSequence()) return expected(c, n, key, what);
      std::vector<ScheduledCommand> out;
      for (size_t i = 0; i < n.size(); ++i) {
        const std::string k = fmt::format("{}[{}]", key, i);
        const YAML::Node& e = n[i];
        if (!e.IsMap()) return expected(c, e, k, "a map {at_frame: N, set_split: K | set_codec: TEXT | pause_ms: M | stop: true}");
        auto sc = parse_command(c, e, k);
        if (!sc) return sc.error();
        out.push_back(*sc);
      }
      std::stable_sort(out.begin(), out.end(),
                       [](const ScheduledCommand& a, const ScheduledCommand& b) { return a.at_frame < b.at_frame; });
      cfg.commands = std::move(out);
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      std::string o = "[";
      for (size_t i = 0; i < c.commands.size(); ++i) {
        const auto& x = c.commands[i];
        o += i ? ", " : "";
        o += fmt::format("{{at_frame: {}, ", x.at_frame);
        if (x.op == "set_split") o += fmt::format("set_split: {}}}", x.split);
        else if (x.op == "set_codec") o += "set_codec: " + yaml_str(x.codec) + "}";
        else if (x.op == "pause") o += fmt::format("pause_ms: {}}}", x.pause_ms);
        else o += "stop: true}";
      }
      return o + "]";
    };
    t.push_back(s);
  }
  t.push_back(int_setting(
      "max_consecutive_failures", "int 0..1000000", "3",
      "A frame the server rejects or whose reply cannot be post-processed is stored with ok = 0 and its error; the "
      "run fails only when more than this many fail in a row.",
      0, 1000000, [](ExperimentConfig& c, int64_t v) { c.max_consecutive_failures = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.max_consecutive_failures}; }));
}

// The settings heartbeat_timeout_ms .. probe.chunk_bytes, in the order they are documented.
void add_agent_settings(std::vector<Setting>& t) {
  t.push_back(int_setting(
      "heartbeat_timeout_ms", "int 2000..3600000", "5000",
      "Both ends of each agent's control channel send a HEARTBEAT line every second. The controller declares an "
      "agent lost after this long without a line from it (counted from its first line: before it, the agent is still "
      "starting, and the larger of this and 120 s applies); an agent that hears nothing from the controller for this "
      "long stops as if its stdin had closed (a network partition leaves a remote agent's stdin open) and exits, at "
      "once if still running this long after.",
      2000, 3600000, [](ExperimentConfig& c, int64_t v) { c.heartbeat_timeout_ms = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.heartbeat_timeout_ms}; }));
  {
    Setting s;
    s.info = {"on_participant_loss", "fail | continue", "fail",
              "What one PARTICIPANT's death or silence (past heartbeat_timeout_ms) does to a run with several: fail "
              "ends the run for all (its frames so far are kept), continue records it (event participant_lost, a "
              "warning at the end) and the others finish their frames. The last participant's loss always ends the "
              "run.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"fail", "continue"});
      if (!v) return v.error();
      cfg.on_participant_loss = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.on_participant_loss; };
    t.push_back(s);
  }
  t.push_back(bool_setting("probe.enabled", "true",
                           "Measure RTT and throughput both ways over each participant's session before the first frame "
                           "(probes table).",
                           [](ExperimentConfig& c) -> bool& { return c.probe.enabled; }));
  t.push_back(int_setting(
      "probe.rtt_count", "int 20..100000", "20", "Echo round trips the probe times (median, p95).", 20, 100000,
      [](ExperimentConfig& c, int64_t v) { c.probe.rtt_count = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.probe.rtt_count}; }));
  t.push_back(int_setting(
      "probe.duration_ms", "int 100..600000", "1000", "How long the probe keeps bulk messages going, each way.", 100,
      600000, [](ExperimentConfig& c, int64_t v) { c.probe.duration_ms = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.probe.duration_ms}; }));
  t.push_back(int_setting(
      "probe.chunk_bytes", "int 1024..67108864", "262144", "Payload per bulk probe message.", 1024, int64_t{64} << 20,
      [](ExperimentConfig& c, int64_t v) { c.probe.chunk_bytes = v; },
      [](const ExperimentConfig& c) { return c.probe.chunk_bytes; }));
}

// The settings link .. energy.layer_window_ms, in the order they are documented.
void add_link_profile_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"link", "profile name | [profile name]", "~ (the link as it is)",
              "Link profile(s) to emulate with tc between the agents: built-in 3g, lte, wifi, gigabit, unlimited, or a "
              "name from `links`. A list repeats the experiment under each, one run per profile.",
              ""};
    s.nullable = true;
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      std::vector<std::string> names;
      if (n.IsScalar()) {
        auto v = get_nonempty(c, n, key, "a link profile name");
        if (!v) return v.error();
        names.push_back(*v);
      } else if (n.IsSequence() && n.size() > 0) {
        for (size_t i = 0; i < n.size(); ++i) {
          auto v = get_nonempty(c, n[i], fmt::format("{}[{}]", key, i), "a link profile name");
          if (!v) return v.error();
          if (std::find(names.begin(), names.end(), *v) != names.end())
            return err_at(pos_of(c, n[i]), fmt::format("{}[{}]", key, i), "profile '" + *v + "' is listed twice");
          names.push_back(*v);
        }
      } else {
        return expected(c, n, key, "a link profile name or a list of them");
      }
      cfg.link = names;
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      if (c.link.empty()) return std::string("~");
      if (c.link.size() == 1) return yaml_str(c.link[0]);
      return flow_strs(c.link);
    };
    t.push_back(s);
  }
  t.push_back(bool_setting("adapt.enabled", "false",
                           "Adaptive split: every adapt.interval_frames timed frames the controller re-plans from the "
                           "participant's running link estimate (tracrctl plan's model, this run's layer profiles) and "
                           "sends set_split when the predicted gain beats adapt.hysteresis_pct; each switch is an "
                           "adapt_switch event. Needs record.layers.",
                           [](ExperimentConfig& c) -> bool& { return c.adapt.enabled; }));
  t.push_back(int_setting(
      "adapt.hysteresis_pct", "int 0..100", "10", "Switch only when the predicted latency falls by more than this.", 0,
      100, [](ExperimentConfig& c, int64_t v) { c.adapt.hysteresis_pct = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.adapt.hysteresis_pct}; }));
  t.push_back(int_setting(
      "adapt.interval_frames", "int 1..1000000", "8", "Re-plan at most once per this many timed frames.", 1, 1000000,
      [](ExperimentConfig& c, int64_t v) { c.adapt.interval_frames = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.adapt.interval_frames}; }));
  t.push_back(int_setting(
      "energy.idle_ms", "int 0..600000", "1000",
      "Idle power measured over this long at agent start, for every meter (subtracted for net energy; 0 = not "
      "measured, net energy left empty). Not used by the power model (its idle_w is the idle power).",
      0, 600000, [](ExperimentConfig& c, int64_t v) { c.energy.idle_ms = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.energy.idle_ms}; }));
  t.push_back(int_setting(
      "energy.layer_window_ms", "int 1..60000", "50",
      "Per-layer energy: each profiled layer is repeated until the meter window is at least this long (and at "
      "least 10 meter updates).",
      1, 60000, [](ExperimentConfig& c, int64_t v) { c.energy.layer_window_ms = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.energy.layer_window_ms}; }));
}

// The settings energy.radio .. link_delay, in the order they are documented.
void add_energy_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"energy.radio", "auto | none | 3g | lte | wifi", "auto",
              "Radio model for the participant's transmission energy (Huang et al., MobiSys 2012): auto uses the "
              "link profile's when it is 3g, lte or wifi, and none otherwise.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"auto", "none", "3g", "lte", "wifi"});
      if (!v) return v.error();
      cfg.energy.radio = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.energy.radio; };
    t.push_back(s);
  }
  {
    Setting s;
    s.info = {"link_delay", "tc | agent", "tc",
              "Who applies a link profile's delay and jitter: tc netem (refused where the kernel has no netem), or "
              "the participant agent's delay relay, which holds every byte each way for the delay (stored as "
              "'agent' in shaping). Rates are always applied with tc; loss needs netem.",
              ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"tc", "agent"});
      if (!v) return v.error();
      cfg.link_delay = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.link_delay; };
    t.push_back(s);
  }
}

// The settings links .. output, in the order they are documented.
void add_link_table_settings(std::vector<Setting>& t) {
  {
    Setting s;
    s.info = {"links", "{name: {up_mbit, down_mbit, delay_ms, jitter_ms, loss_pct}}", "{}",
              "User-defined link profiles: rates in Mbit/s each way (0 = not limited), one-way delay and jitter in ms, "
              "loss in percent (delay, jitter and loss need the kernel's netem).",
              ""};
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      if (!n.IsMap()) return expected(c, n, key, "a map of profile names to {up_mbit, down_mbit, delay_ms, jitter_ms, loss_pct}");
      std::map<std::string, LinkSpec> out;
      for (const auto& kv : n) {
        const std::string name = kv.first.Scalar();
        const std::string k = key + "." + name;
        if (!valid_name(name)) return err_at(pos_of(c, kv.first), k, "a profile name of letters, digits, '_', '-', '.'");
        if (!kv.second.IsMap()) return expected(c, kv.second, k, "a map {up_mbit, down_mbit, delay_ms, jitter_ms, loss_pct}");
        TRACR_TRY(check_keys(c, kv.second, k, {"up_mbit", "down_mbit", "delay_ms", "jitter_ms", "loss_pct"}));
        LinkSpec l;
        l.name = name;
        l.source = "user-defined in the experiment";
        const std::pair<const char*, double*> fields[] = {{"up_mbit", &l.up_mbit},   {"down_mbit", &l.down_mbit},
                                                          {"delay_ms", &l.delay_ms}, {"jitter_ms", &l.jitter_ms},
                                                          {"loss_pct", &l.loss_pct}};
        for (const auto& [f, dst] : fields) {
          if (!kv.second[f]) continue;
          auto v = get_double(c, kv.second[f], k + "." + f, 0.0, "a number >= 0");
          if (!v) return v.error();
          if (std::string(f) == "loss_pct" && *v > 100) return expected(c, kv.second[f], k + "." + f, "a loss 0..100 %");
          *dst = *v;
        }
        out[name] = l;
      }
      cfg.links = std::move(out);
      return {};
    };
    s.show = [](const ExperimentConfig& c) {
      std::string o = "{";
      for (const auto& [name, l] : c.links)
        o += fmt::format("{}{}: {{up_mbit: {}, down_mbit: {}, delay_ms: {}, jitter_ms: {}, loss_pct: {}}}",
                         o.size() > 1 ? ", " : "", yaml_str(name), l.up_mbit, l.down_mbit, l.delay_ms, l.jitter_ms,
                         l.loss_pct);
      return o + "}";
    };
    t.push_back(s);
  }
  t.push_back(bool_setting("record.frames", "true", "Store one row per frame (frames table).",
                           [](ExperimentConfig& c) -> bool& { return c.record.frames; }));
  t.push_back(bool_setting("record.outputs", "false",
                           "Store every timed frame's output tensor (the logits, float32): one .npy per participant, "
                           "split and codec under outputs/run<ID>/ beside the database, listed in the outputs table.",
                           [](ExperimentConfig& c) -> bool& { return c.record.outputs; }));
  t.push_back(bool_setting("record.layers", "true",
                           "Profile every layer on each device (layer_profiles table).",
                           [](ExperimentConfig& c) -> bool& { return c.record.layers; }));
  t.push_back(string_setting(
      "output", "path", "results/tracr.db",
      "SQLite results database (created if missing); a relative path written in the experiment file is relative "
      "to that file's directory.",
      "a database file path", [](ExperimentConfig& c) -> std::string& { return c.output; }, false));
}

// The settings train.cuts .. train.segments, in the order they are documented.
void add_train_layout_settings(std::vector<Setting>& t) {
  // ---- split training (tracrctl train)
  {
    Setting s;
    s.info = {"train.cuts", "[int]", "~ (not a training experiment)",
              "Split training: the layer indices where the model is cut into segments [0, c1), [c1, c2), ..., "
              "[ck, N) (strictly increasing, within 1..N-1; at least one cut).",
              ""};
    s.nullable = true;
    s.env_yaml = true;
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      const std::string what = "a list of strictly increasing layer indices >= 1, e.g. [3, 7]";
      if (!n.IsSequence() || n.size() == 0) return expected(c, n, key, what);
      std::vector<int64_t> out;
      for (size_t i = 0; i < n.size(); ++i) {
        auto v = get_int(c, n[i], fmt::format("{}[{}]", key, i), 1, 1000000, what);
        if (!v) return v.error();
        if (!out.empty() && *v <= out.back()) return expected(c, n[i], fmt::format("{}[{}]", key, i), what);
        out.push_back(*v);
      }
      cfg.train.cuts = out;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.train.cuts.empty() ? std::string("~") : flow_ints(c.train.cuts); };
    t.push_back(s);
  }
  t.push_back(name_list_setting(
      "train.segments", "~ ([owner, server, ..., owner])",
      "The device of each segment (one per segment), by devices-file name; `owner` is the data owner (with one "
      "owner, its device name means the same). Segment 0 must be on the owner (the raw data never leaves it). "
      "Default: the first and last segments on the owner, the others on the SERVER device.",
      [](ExperimentConfig& c) -> std::vector<std::string>& { return c.train.segments; }));
}

// The settings train.owners .. train.export, in the order they are documented.
void add_train_run_settings(std::vector<Setting>& t) {
  t.push_back(name_list_setting(
      "train.owners", "~ ([first PARTICIPANT])",
      "Data owners, each with its own data (dataset on its device) and its own first and last segments, training "
      "the shared middle segments in turn (round-robin, train.turn_steps each).",
      [](ExperimentConfig& c) -> std::vector<std::string>& { return c.train.owners; }));
  {
    Setting s;
    s.info = {"train.optimizer", "sgd | adam", "adam", "Optimizer of every segment (each device steps its own).", ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      auto v = get_choice(c, n, key, {"sgd", "adam"});
      if (!v) return v.error();
      cfg.train.optimizer = *v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return c.train.optimizer; };
    t.push_back(s);
  }
  t.push_back(double_setting("train.lr", "float > 0", "0.001", "Learning rate.", 0.0, true,
                             [](ExperimentConfig& c) -> double& { return c.train.lr; }));
  t.push_back(double_setting("train.momentum", "float >= 0", "0.9", "SGD momentum.", 0.0, false,
                             [](ExperimentConfig& c) -> double& { return c.train.momentum; }));
  t.push_back(double_setting("train.weight_decay", "float >= 0", "0", "L2 weight decay of the optimizer.", 0.0,
                             false, [](ExperimentConfig& c) -> double& { return c.train.weight_decay; }));
  t.push_back(int_setting(
      "train.epochs", "int 1..100000", "1", "Passes over the training data.", 1, 100000,
      [](ExperimentConfig& c, int64_t v) { c.train.epochs = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.train.epochs}; }));
  t.push_back(int_setting(
      "train.batch_size", "int 1..65536", "64", "Samples per training step (the last batch of an epoch may be smaller).",
      1, 65536, [](ExperimentConfig& c, int64_t v) { c.train.batch_size = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.train.batch_size}; }));
  t.push_back(int_setting(
      "train.train_samples", "int >= 0", "0", "Training samples used (the first n of the training split; 0 = all).", 0,
      int64_t{1} << 40, [](ExperimentConfig& c, int64_t v) { c.train.train_samples = v; },
      [](const ExperimentConfig& c) { return c.train.train_samples; }));
  t.push_back(int_setting(
      "train.test_samples", "int >= 0", "0",
      "Test samples evaluated after each epoch (the first n of the test split; 0 = all).", 0, int64_t{1} << 40,
      [](ExperimentConfig& c, int64_t v) { c.train.test_samples = v; },
      [](const ExperimentConfig& c) { return c.train.test_samples; }));
  t.push_back(int_setting(
      "train.max_steps", "int >= 0", "0",
      "Stop after this many steps of each data owner (then evaluate and checkpoint as at an epoch end; 0 = train.epochs decide).",
      0, int64_t{1} << 40, [](ExperimentConfig& c, int64_t v) { c.train.max_steps = v; },
      [](const ExperimentConfig& c) { return c.train.max_steps; }));
  t.push_back(int_setting(
      "train.turn_steps", "int 1..1000000", "1",
      "Several owners: steps one owner takes before the next owner's turn.", 1, 1000000,
      [](ExperimentConfig& c, int64_t v) { c.train.turn_steps = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.train.turn_steps}; }));
  t.push_back(string_setting(
      "train.checkpoint_dir", "path", "results/checkpoints",
      "Where each device keeps its segments' checkpoints (on that device; relative paths against the agent's "
      "working directory), per run: <dir>/<run stamp>/.",
      "a directory path", [](ExperimentConfig& c) -> std::string& { return c.train.checkpoint_dir; }, false));
  t.push_back(int_setting(
      "train.checkpoint_steps", "int >= 0", "0", "Also checkpoint every this many steps (0 = at epoch ends only).", 0,
      int64_t{1} << 40, [](ExperimentConfig& c, int64_t v) { c.train.checkpoint_steps = v; },
      [](const ExperimentConfig& c) { return c.train.checkpoint_steps; }));
  t.push_back(int_setting(
      "train.threads", "int 0..1024", "0", "LibTorch intra-op threads on each device (0 = LibTorch's default).", 0,
      1024, [](ExperimentConfig& c, int64_t v) { c.train.threads = static_cast<int>(v); },
      [](const ExperimentConfig& c) { return int64_t{c.train.threads}; }));
  t.push_back(string_setting(
      "train.export", "path", "~ (<checkpoint dir>/<model>-owner<k>.pt)",
      "Where the first data owner writes the trained model at the end (state dict by layer name, torch.save format, "
      "on its device); further owners add -owner<k> to the name. Usable as `weights:` of tracrctl run.",
      "a file path", [](ExperimentConfig& c) -> std::string& { return c.train.export_path; }, true));
}

// The settings train.trace_frames .. seed, in the order they are documented.
void add_train_output_settings(std::vector<Setting>& t) {
  t.push_back(bool_setting(
      "train.trace_frames", "false",
      "Every worker writes a line per frame it receives (type, tensor names, dtypes, shapes, a hash of the bytes) "
      "to its log: evidence of what leaves the data owner.",
      [](ExperimentConfig& c) -> bool& { return c.train.trace_frames; }));
  {
    Setting s = string_setting(
        "devices", "path", "config/devices_config.yaml",
        "Devices file (a relative path in the experiment file: relative to that file's directory); when not set and "
        "config/devices_config.yaml is missing from the current directory, both agents run locally.",
        "a devices file path", [](ExperimentConfig& c) -> std::string& { return c.devices; }, false);
    auto inner = s.apply;
    s.apply = [inner](const Ctx& c, const YAML::Node& n, const std::string& key,
                      ExperimentConfig& cfg) -> Status {
      TRACR_TRY(inner(c, n, key, cfg));
      cfg.devices_explicit = true;
      return {};
    };
    t.push_back(s);
  }
  {
    Setting s;
    s.info = {"seed", "int >= 0", "0", "Seed for synthetic data and any sampling.", ""};
    s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
      const std::string what = "an integer 0..18446744073709551615";
      if (!n.IsScalar() || n.Scalar().empty() || !std::isdigit(static_cast<unsigned char>(n.Scalar()[0])))
        return expected(c, n, key, what);
      char* e = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(n.Scalar().c_str(), &e, 10);
      if (errno == ERANGE || *e != '\0') return expected(c, n, key, what);
      cfg.seed = v;
      return {};
    };
    s.show = [](const ExperimentConfig& c) { return std::to_string(c.seed); };
    t.push_back(s);
  }
}

std::vector<Setting> build_settings() {
  std::vector<Setting> t;
  add_model_settings(t);
  add_input_settings(t);
  add_dataset_settings(t);
  add_normalization_settings(t);
  add_preprocessing_settings(t);
  add_codec_settings(t);
  add_frame_settings(t);
  add_agent_settings(t);
  add_link_profile_settings(t);
  add_energy_settings(t);
  add_link_table_settings(t);
  add_train_layout_settings(t);
  add_train_run_settings(t);
  add_train_output_settings(t);
  for (auto& s : t) {
    std::string env = "TRACR_";
    for (char ch : s.info.name)
      env += ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    s.info.env = env;
  }
  return t;
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> t = build_settings();
  return t;
}

const Setting* find_setting(const std::string& name) {
  for (const auto& s : settings())
    if (s.info.name == name) return &s;
  return nullptr;
}

// Top-level keys in order, and the sub-keys of sections.
std::vector<std::string> top_keys() {
  std::vector<std::string> out;
  for (const auto& s : settings()) {
    std::string top = s.info.name.substr(0, s.info.name.find('.'));
    if (std::find(out.begin(), out.end(), top) == out.end()) out.push_back(top);
  }
  return out;
}

std::vector<std::string> section_keys(const std::string& section) {
  std::vector<std::string> out;
  const std::string pre = section + ".";
  for (const auto& s : settings())
    if (s.info.name.rfind(pre, 0) == 0) out.push_back(s.info.name.substr(pre.size()));
  return out;
}

bool is_section(const std::string& top) { return !section_keys(top).empty(); }

Status apply_setting(const Ctx& c, const Setting& s, const YAML::Node& n, ExperimentConfig& cfg,
                     const SourcePos& origin) {
  if (n.IsNull() && s.nullable) {
    // Back to the default.
    ExperimentConfig def;
    const std::string& nm = s.info.name;
    if (nm == "weights")
      cfg.weights = def.weights;
    else if (nm == "input_size")
      cfg.input_size.clear();
    else if (nm == "dataset.path")
      cfg.dataset.path.clear();
    else if (nm == "dataset.class_names") {
      cfg.dataset.class_names.clear();
      cfg.dataset.class_names_file.clear();
    }
    cfg.origin[nm] = origin;
    return {};
  }
  TRACR_TRY(s.apply(c, n, s.info.name, cfg));
  cfg.origin[s.info.name] = origin;
  return {};
}

// One setting's value given as text (an environment variable or `--set
// key=value`): parsed as YAML when the setting takes lists, else taken as
// one string, then checked like the file's value; `label` is its origin.
Status apply_text(const Setting& s, const std::string& v, const std::string& label, ExperimentConfig& cfg) {
  Ctx c{label, true};
  YAML::Node n;
  if (s.env_yaml) {
    try {
      n = YAML::Load(v);
    } catch (const YAML::Exception& e) {
      return err_at(SourcePos{c.file, 0, 0}, s.info.name, "YAML syntax error: " + e.msg);
    }
  } else {
    n = YAML::Node(v);
  }
  return apply_setting(c, s, n, cfg, SourcePos{c.file, 0, 0});
}

Status apply_env(ExperimentConfig& cfg) {
  for (const auto& s : settings()) {
    const char* v = std::getenv(s.info.env.c_str());
    if (!v) continue;
    TRACR_TRY(apply_text(s, v, "env " + s.info.env, cfg));
  }
  return {};
}

Status apply_sets(ExperimentConfig& cfg, const std::vector<std::string>& sets) {
  for (const auto& kv : sets) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(Errc::config, fmt::format("--set {}: expected key=value with a setting of the experiment file "
                                                  "(e.g. --set warmup=5, --set dataset.type=synthetic)",
                                                  kv));
    const std::string name = kv.substr(0, eq);
    const Setting* s = find_setting(name);
    if (!s) {
      std::vector<std::string> names;
      for (const auto& x : settings()) names.push_back(x.info.name);
      const std::string dym = did_you_mean(name, names);
      return make_error(Errc::config, fmt::format("--set {}: unknown setting '{}'{}; expected one of: {}", kv, name,
                                                  dym.empty() ? "" : " (did you mean '" + dym + "'?)", join(names)));
    }
    TRACR_TRY(apply_text(*s, kv.substr(eq + 1), "--set " + kv, cfg));
  }
  return {};
}

Status cross_check(ExperimentConfig& cfg) {
  for (const auto& l : cfg.link) {
    auto r = tracr::settings::resolve_link(cfg, l);
    if (!r) return r.error();
  }
  if (cfg.model.empty())
    return err_at(SourcePos{cfg.source.empty() ? "<experiment>" : cfg.source, 0, 0}, "model",
                  "missing; expected a model id such as alexnet (see `tracrctl models`)");
  if (!cfg.model_list.empty() && !cfg.weights.empty())
    return err_at(cfg.pos_of("weights"), "weights",
                  fmt::format("one weights file for a list of {} models; expected none (each model starts from its "
                              "own initial weights), or export each model with its weights "
                              "(scripts/export_model.py --weights) and list the torchscript: files",
                              cfg.model_list.size()));
  if (cfg.dataset.kind == DatasetKind::imagefolder && cfg.dataset.path.empty())
    return err_at(
        cfg.pos_of("dataset.type").known() ? cfg.pos_of("dataset.type") : SourcePos{cfg.source, 0, 0},
        "dataset.path", "missing; expected the image directory (required for type: imagefolder)");
  if (cfg.dataset.kind != DatasetKind::fashion_mnist && cfg.origin.count("dataset.split"))
    return err_at(cfg.pos_of("dataset.split"), "dataset.split",
                  fmt::format("applies to type: fashion_mnist only; expected no dataset.split for type: {}",
                              dataset_kind_name(cfg.dataset.kind)));
  if (cfg.dataset.kind != DatasetKind::imagefolder && cfg.origin.count("dataset.resize_size"))
    return err_at(cfg.pos_of("dataset.resize_size"), "dataset.resize_size",
                  fmt::format("applies to type: imagefolder only; expected no dataset.resize_size for type: {}",
                              dataset_kind_name(cfg.dataset.kind)));
  if (cfg.dataset.kind == DatasetKind::synthetic && cfg.origin.count("dataset.interpolation"))
    return err_at(cfg.pos_of("dataset.interpolation"), "dataset.interpolation",
                  "applies to image datasets; expected no dataset.interpolation for type: synthetic");
  if (cfg.adapt.enabled && !cfg.record.layers)
    return err_at(cfg.pos_of("adapt.enabled"), "adapt.enabled",
                  "needs record.layers: true (the adaptive policy plans from both devices' layer profiles)");
  if (!cfg.train.segments.empty()) {
    if (cfg.train.cuts.empty())
      return err_at(cfg.pos_of("train.segments"), "train.segments", "needs train.cuts (where the segments begin)");
    if (cfg.train.segments.size() != cfg.train.cuts.size() + 1)
      return err_at(cfg.pos_of("train.segments"), "train.segments",
                    fmt::format("lists {} devices; expected one per segment: {} (train.cuts has {} cuts)",
                                cfg.train.segments.size(), cfg.train.cuts.size() + 1, cfg.train.cuts.size()));
    // Segment 0 on a data owner (`owner`, or the device name of the only
    // owner) is checked against the devices file (plan_training).
  }
  if (cfg.dataset.kind == DatasetKind::fashion_mnist && cfg.dataset.path.empty())
    cfg.dataset.path = "/usr/share/datasets/fashion-mnist";
  if (cfg.name.empty()) {
    cfg.name = cfg.source.empty() ? "experiment" : fs::path(cfg.source).stem().string();
    if (cfg.name.empty()) cfg.name = "experiment";
  }
  return {};
}

}  // namespace

SourcePos ExperimentConfig::pos_of(const std::string& setting) const {
  auto it = origin.find(setting);
  if (it != origin.end()) return it->second;
  return SourcePos{};
}

const std::vector<LinkSpec>& builtin_links() {
  // Kang et al., "Neurosurgeon: Collaborative Intelligence Between the Cloud
  // and Mobile Edge", ASPLOS 2017, section 5: average uplink throughput
  // measured for 3G, LTE and Wi-Fi (1.1, 5.85, 18.88 Mbps); applied both ways.
  static const std::vector<LinkSpec> v = {
      {"3g", 1.1, 1.1, 0, 0, 0, "Neurosurgeon (ASPLOS 2017) 3G uplink, 1.1 Mbit/s, both ways"},
      {"lte", 5.85, 5.85, 0, 0, 0, "Neurosurgeon (ASPLOS 2017) LTE uplink, 5.85 Mbit/s, both ways"},
      {"wifi", 18.88, 18.88, 0, 0, 0, "Neurosurgeon (ASPLOS 2017) Wi-Fi uplink, 18.88 Mbit/s, both ways"},
      {"gigabit", 1000, 1000, 0, 0, 0, "nominal Gigabit Ethernet, 1000 Mbit/s both ways"},
      {"unlimited", 0, 0, 0, 0, 0, "no shaping: the link as it is"},
  };
  return v;
}

Result<LinkSpec> resolve_link(const ExperimentConfig& cfg, const std::string& name) {
  if (auto it = cfg.links.find(name); it != cfg.links.end()) return it->second;
  std::vector<std::string> names;
  for (const auto& l : builtin_links()) {
    if (l.name == name) return l;
    names.push_back(l.name);
  }
  for (const auto& [n, l] : cfg.links) names.push_back(n);
  const std::string dym = did_you_mean(name, names);
  return err_at(cfg.pos_of("link"), "link",
                fmt::format("unknown link profile '{}'{}; expected one of {} (or define it under links)", name,
                            dym.empty() ? "" : " (did you mean '" + dym + "'?)", join(names)));
}

Result<ExperimentConfig> parse_experiment(const std::string& text, const std::string& source, bool use_env,
                                          const std::vector<std::string>& sets) {
  const std::string file = source.empty() ? "<experiment>" : source;
  Ctx c{file};
  ExperimentConfig cfg;
  cfg.source = source;
  cfg.source_text = text;
  auto loaded = load_one_document(c, text, "experiment");
  if (!loaded) return loaded.error();
  const YAML::Node root = *loaded;
  if (!root.IsMap())
    return err_at(SourcePos{file, 0, 0}, "",
                  "expected a map of experiment settings (at least 'model'), got " + describe(root));
  const auto tops = top_keys();
  TRACR_TRY(check_keys(c, root, "", tops));
  for (const auto& top : tops) {
    const YAML::Node n = root[top];
    if (!n) continue;
    if (is_section(top)) {
      const auto subs = section_keys(top);
      if (n.IsNull()) continue;
      if (!n.IsMap()) return expected(c, n, top, "a map with keys " + join(subs));
      TRACR_TRY(check_keys(c, n, top, subs));
      for (const auto& sub : subs) {
        const YAML::Node sn = n[sub];
        if (!sn) continue;
        const Setting* s = find_setting(top + "." + sub);
        TRACR_TRY(apply_setting(c, *s, sn, cfg, pos_of(c, sn)));
      }
    } else {
      const Setting* s = find_setting(top);
      TRACR_TRY(apply_setting(c, *s, n, cfg, pos_of(c, n)));
    }
  }
  if (use_env) TRACR_TRY(apply_env(cfg));
  TRACR_TRY(apply_sets(cfg, sets));
  TRACR_TRY(cross_check(cfg));
  return cfg;
}

namespace {

// The rule for relative paths: a path written in the experiment file is
// relative to the directory of that file; one from a TRACR_* variable, a
// command-line option or a default is relative to the current directory.
// Paths used on the agents' devices (train.checkpoint_dir, train.export) are
// left as written. `~/` paths are left as written.
void resolve_paths_against_file(ExperimentConfig& cfg) {
  const fs::path dir = fs::path(cfg.source).parent_path();
  if (dir.empty()) return;  // the file is in the current directory: nothing changes
  auto resolve = [&](const std::string& setting, std::string& p) {
    auto it = cfg.origin.find(setting);
    if (p.empty() || it == cfg.origin.end() || it->second.file != cfg.source) return;
    if (p == "~" || p.rfind("~/", 0) == 0 || fs::path(p).is_absolute()) return;
    p = (dir / p).lexically_normal().string();
  };
  resolve("devices", cfg.devices);
  resolve("output", cfg.output);
  resolve("weights", cfg.weights);
  resolve("dataset.path", cfg.dataset.path);
  resolve("dataset.class_names", cfg.dataset.class_names_file);
  static const std::string ts = "torchscript:";
  auto resolve_model = [&](std::string& m) {
    if (m.rfind(ts, 0) != 0) return;
    std::string p = m.substr(ts.size());
    resolve("model", p);
    m = ts + p;
  };
  resolve_model(cfg.model);
  for (auto& m : cfg.model_list) resolve_model(m);
}

}  // namespace

Result<ExperimentConfig> load_experiment(const std::string& path, const std::vector<std::string>& sets) {
  auto text = read_text(path, "experiment");
  if (!text) return text.error();
  auto cfg = parse_experiment(*text, path, true, sets);
  if (cfg) resolve_paths_against_file(*cfg);
  return cfg;
}

Result<std::vector<int>> resolve_splits(const ExperimentConfig& cfg, int num_layers) {
  std::vector<int> out;
  if (cfg.split.all) {
    for (int k = 0; k <= num_layers; ++k) out.push_back(k);
    return out;
  }
  for (int k : cfg.split.points) {
    if (k > num_layers)
      return err_at(cfg.pos_of("split"), "split",
                    fmt::format("split point {} is beyond model '{}' with {} layers; expected 0..{}", k,
                                cfg.model, num_layers, num_layers));
    out.push_back(k);
  }
  return out;
}

Status check_experiment_files(const ExperimentConfig& cfg) {
  std::error_code ec;
  auto need = [&](const std::string& setting, const std::string& path, bool dir) -> Status {
    if (path.empty()) return {};
    const std::string p = expand_home(path);
    const bool there = fs::exists(p, ec);
    // A symlink loop or an unreadable parent is not "does not exist" (#24).
    if (ec && ec != std::errc::no_such_file_or_directory)
      return make_error(Errc::io, fmt::format("{}: {}: '{}' cannot be looked up: {}; expected an existing {}",
                                              cfg.pos_of(setting).str(), setting, path,
                                              ec == std::errc::too_many_symbolic_link_levels
                                                  ? "a loop of symbolic links"
                                                  : ec.message(),
                                              dir ? "directory" : "file"));
    if (!there)
      return make_error(Errc::io,
                        fmt::format("{}: {}: '{}' does not exist; expected an existing {}",
                                    cfg.pos_of(setting).str(), setting, path, dir ? "directory" : "file"));
    if (dir != fs::is_directory(p, ec))
      return make_error(
          Errc::io, fmt::format("{}: {}: '{}' is {}; expected a {}", cfg.pos_of(setting).str(), setting, path,
                                dir ? "a file" : "a directory", dir ? "directory" : "file"));
    // A device, FIFO or socket would be hashed and staged forever (#24:
    // weights: /dev/zero read 188 GB before anyone could stop it).
    if (!dir && !fs::is_regular_file(p, ec))
      return make_error(Errc::io, fmt::format("{}: {}: '{}' is not a regular file (a device, FIFO or socket); "
                                              "expected a file",
                                              cfg.pos_of(setting).str(), setting, path));
    return {};
  };
  if (cfg.model.rfind("torchscript:", 0) == 0) TRACR_TRY(need("model", cfg.model.substr(12), false));
  for (const auto& m : cfg.model_list)
    if (m.rfind("torchscript:", 0) == 0) TRACR_TRY(need("model", m.substr(12), false));
  TRACR_TRY(need("weights", cfg.weights, false));
  if (cfg.dataset.kind != DatasetKind::synthetic) TRACR_TRY(need("dataset.path", cfg.dataset.path, true));
  TRACR_TRY(need("dataset.class_names", cfg.dataset.class_names_file, false));
  return {};
}

Result<DevicesConfig> load_experiment_devices(const ExperimentConfig& cfg, RoleCheck roles) {
  if (cfg.devices_explicit) {
    auto d = load_devices(cfg.devices, roles);
    if (!d && d.error().code == Errc::io)
      d.error().message = fmt::format("{}: devices: {}", cfg.pos_of("devices").str(), d.error().message);
    return d;
  }
  return load_devices_or_default(cfg.devices, roles);
}

std::string to_yaml(const ExperimentConfig& cfg) {
  std::string o = "# effective tracr experiment configuration\n";
  std::string section;
  for (const auto& s : settings()) {
    // A setting that only applies to another dataset type is left out, as a
    // user would: the parser rejects it there.
    if (s.info.name == "dataset.split" && cfg.dataset.kind != DatasetKind::fashion_mnist) continue;
    if (s.info.name == "dataset.resize_size" && cfg.dataset.kind != DatasetKind::imagefolder) continue;
    if (s.info.name == "dataset.interpolation" && cfg.dataset.kind == DatasetKind::synthetic) continue;
    const auto dot = s.info.name.find('.');
    const std::string top = s.info.name.substr(0, dot);
    const std::string value = s.show(cfg);
    if (dot == std::string::npos) {
      section.clear();
      o += top + ": " + value + "\n";
    } else {
      if (section != top) {
        section = top;
        o += top + ":\n";
      }
      o += "  " + s.info.name.substr(dot + 1) + ": " + value + "\n";
    }
  }
  return o;
}

const std::vector<SettingInfo>& settings_table() {
  static const std::vector<SettingInfo> t = [] {
    std::vector<SettingInfo> v;
    for (const auto& s : settings()) v.push_back(s.info);
    return v;
  }();
  return t;
}

std::vector<SettingValue> describe_settings(const ExperimentConfig& cfg) {
  std::vector<SettingValue> out;
  for (const auto& s : settings()) {
    SettingValue v;
    v.info = s.info;
    v.value = s.show(cfg);
    auto it = cfg.origin.find(s.info.name);
    v.origin = it == cfg.origin.end() ? "default" : it->second.str();
    // Which devices file a run will use, not only which one was named: the
    // default file is optional and the embedded default takes its place.
    std::error_code ec;
    if (s.info.name == "devices" && !cfg.devices_explicit && !fs::exists(cfg.devices, ec)) {
      v.value = "<embedded default>";
      v.origin = fmt::format("default ({} not found from {}: both agents local)", cfg.devices,
                             fs::current_path(ec).string());
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string format_settings(const ExperimentConfig& cfg) {
  const auto rows = describe_settings(cfg);
  size_t w0 = 7, w1 = 5, w2 = 6;
  for (const auto& r : rows) {
    w0 = std::max(w0, r.info.name.size());
    w1 = std::max(w1, r.value.size());
    w2 = std::max(w2, r.origin.size());
  }
  std::string o =
      fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", "setting", w0, "value", w1, "origin", w2, "env");
  for (const auto& r : rows)
    o += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", r.info.name, w0, r.value, w1, r.origin, w2, r.info.env);
  return o;
}

Result<Normalization> dataset_normalization(const ExperimentConfig& cfg, int64_t channels) {
  const auto& d = cfg.dataset;
  auto error = [&](const std::string& msg) {
    SourcePos p = cfg.pos_of("dataset.mean");
    if (!p.known()) p = cfg.pos_of("dataset.std");
    if (!p.known()) p.file = cfg.source.empty() ? "<experiment>" : cfg.source;
    return make_error(Errc::config, fmt::format("{}: dataset.mean: {}", p.str(), msg));
  };
  if (d.mean.empty() != d.std.empty())
    return error(fmt::format("dataset.mean and dataset.std go together; give both ({} is missing)",
                             d.mean.empty() ? "dataset.mean" : "dataset.std"));
  Normalization n;
  if (!d.mean.empty()) {
    if (d.std.size() != d.mean.size())
      return error(fmt::format("{} values but dataset.std has {}; expected as many", d.mean.size(), d.std.size()));
    if (d.mean.size() != 1 && static_cast<int64_t>(d.mean.size()) != channels)
      return error(fmt::format("{} values for an input of {} channels; expected 1 or {}", d.mean.size(), channels,
                               channels));
    n.mean = d.mean;
    n.std = d.std;
    return n;
  }
  if (d.kind == DatasetKind::fashion_mnist) return Normalization{{0.2860}, {0.3530}};
  if (channels == 3) return Normalization{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
  if (d.kind == DatasetKind::synthetic) return Normalization{{0.0}, {1.0}};
  return error(fmt::format("no default for an image folder read as {} channel(s) (ImageNet's has 3); expected "
                           "dataset.mean and dataset.std, e.g. the statistics the model was trained with",
                           channels));
}

}  // namespace tracr::settings
