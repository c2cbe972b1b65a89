// settings/: where a setting's value came from, and the text helpers the
// settings files and their users share (did-you-mean, YAML and JSON quoting).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tracr::settings {

// Where a value came from: a file position (1-based line and column), an
// environment variable (file "env TRACR_X", line 0) or nothing (default).
struct SourcePos {
  std::string file;
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based; 0 when unknown
  bool known() const { return !file.empty(); }
  // "config/x.yaml:3:7", "env TRACR_SPLIT", "config/x.yaml" or "default".
  std::string str() const;
};

// `s` as a JSON string literal, quotes included, with escapes.
std::string json_quote(std::string_view s);

// YAML flow text of a string: plain when unambiguous (not a number, bool or
// null look-alike, no indicator characters), double-quoted otherwise (JSON
// escapes are valid YAML double-quoted escapes).
std::string yaml_str(const std::string& s);

// Closest candidate by edit distance when it is close enough to be a likely
// typo; empty otherwise. Exposed for the CLI's option parsing.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace tracr::settings
