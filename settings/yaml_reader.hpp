// Internal to settings/: reading YAML with positions, and the typed scalar
// readers every settings file shares. Each reader returns Errc::config
// naming the file position, the key path and what was expected.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "settings/config.hpp"

namespace tracr::settings {

// Where values come from, for messages.
struct Ctx {
  std::string file;  // name used in messages
  bool env = false;  // values come from an environment variable (no positions)
};

// A file's text; Errc::io naming it (`what`: "devices", "experiment") when it cannot be read.
Result<std::string> read_text(const std::string& path, const char* what);
SourcePos pos_of(const Ctx& c, const YAML::Node& n);
SourcePos pos_of_mark(const Ctx& c, const YAML::Mark& m);
// What a node is, for "got ...": a quoted scalar, "a list", "a map" or "nothing".
std::string describe(const YAML::Node& n);
Error err_at(const SourcePos& p, const std::string& key, const std::string& msg);
// "expected <what>, got <describe(n)>" at n's position.
Error expected(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& what);
// The text's only YAML document; a second one is an error at its `---`.
Result<YAML::Node> load_one_document(const Ctx& c, const std::string& text, const char* what);
std::string join(const std::vector<std::string>& v, const char* sep = ", ");
// The map's keys must be scalars, unique and among `allowed`.
Status check_keys(const Ctx& c, const YAML::Node& map, const std::string& where,
                  const std::vector<std::string>& allowed);

// Typed scalar readers.
Result<std::string> get_string(const Ctx& c, const YAML::Node& n, const std::string& key,
                               const std::string& what = "a string");
Result<std::string> get_nonempty(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& what);
bool parse_int_text(const std::string& s, int64_t* out);
Result<int64_t> get_int(const Ctx& c, const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi,
                        const std::string& what);
Result<double> get_double(const Ctx& c, const YAML::Node& n, const std::string& key, double lo,
                          const std::string& what);
Result<bool> get_bool(const Ctx& c, const YAML::Node& n, const std::string& key);
Result<std::string> get_choice(const Ctx& c, const YAML::Node& n, const std::string& key,
                               const std::vector<std::string>& choices);

// "<host>"-style placeholders left in a template.
bool is_placeholder(const std::string& s);
// "~" and "~/..." against $HOME; anything else as it is.
std::string expand_home(const std::string& p);
// The value with control and non-ASCII bytes written as \xNN (never sent raw to a terminal).
std::string printable(const std::string& v);
// Error naming the first control byte (C0 or DEL) of `v`, if any.
Status no_control_chars(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& v,
                        const std::string& what);
// A device, namespace or link profile name: 1-64 of [A-Za-z0-9_.-].
bool valid_name(const std::string& s);

}  // namespace tracr::settings
