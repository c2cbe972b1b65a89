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

// Text helpers of the settings files: positions, did-you-mean, YAML and JSON quoting.

std::string SourcePos::str() const {
  if (file.empty()) return "default";
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
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

std::string join(const std::vector<std::string>& v, const char* sep) {
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
    const std::string& name = k.Scalar();
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
                               const std::string& what) {
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
  const std::string& s = n.Scalar();
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  std::string hint = did_you_mean(s, choices);
  return err_at(
      pos_of(c, n), key,
      fmt::format("expected {}, got '{}'{}", what, s, hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
}

bool is_placeholder(const std::string& s) { return s.size() >= 2 && s.front() == '<' && s.back() == '>'; }

std::string expand_home(const std::string& p) {
  if (p == "~" || p.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (home) return std::string(home) + p.substr(1);
  }
  return p;
}


std::string printable(const std::string& v) {
  std::string out;
  for (const unsigned char ch : v) out += ch >= 0x20 && ch < 0x7f ? std::string(1, static_cast<char>(ch)) : fmt::format("\\x{:02X}", ch);
  return out;
}

Status no_control_chars(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& v,
                        const std::string& what) {
  for (const unsigned char ch : v)
    if (ch < 0x20 || ch == 0x7f)
      return err_at(pos_of(c, n), key,
                    fmt::format("'{}' holds control character 0x{:02X}; expected {}", printable(v), ch, what));
  return {};
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char ch : s)
    if (!std::isalnum(ch) && ch != '_' && ch != '-' && ch != '.') return false;
  return true;
}

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

}  // namespace tracr::settings
