// Internal to settings/: the experiment file's settings table (one Setting
// per dotted name, in documentation order) and how values reach an
// ExperimentConfig from the file, the environment and `--set`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "settings/yaml_reader.hpp"

namespace tracr::settings {

using Apply = std::function<Status(const Ctx&, const YAML::Node&, const std::string&, ExperimentConfig&)>;
using Show = std::function<std::string(const ExperimentConfig&)>;

// What a text setting's value is, for the rules on relative paths.
enum class PathKind {
  plain,            // not a path
  controller_path,  // read by the controller: relative to the experiment file when written there
  device_path,      // used on the device (train.checkpoint_dir): left as written
};

struct Setting {
  SettingInfo info;
  Apply apply;
  Show show;
  PathKind path = PathKind::plain;
  std::function<std::string&(ExperimentConfig&)> text;  // a text setting's member, else empty
  bool nullable = false;  // null resets to the default
  bool env_yaml = false;  // the env value is parsed as YAML (lists); else taken as one string
};

// Every setting, in documentation order (TRACR_<NAME> env names filled in).
const std::vector<Setting>& settings();
// By dotted name; nullptr when there is none.
const Setting* find_setting(const std::string& name);
// Top-level keys in order, and the sub-keys of a section.
std::vector<std::string> top_keys();
std::vector<std::string> section_keys(const std::string& section);
bool is_section(const std::string& top);
// One value into cfg, its origin recorded; null resets a nullable setting to its default.
Status apply_setting(const Ctx& c, const Setting& s, const YAML::Node& n, ExperimentConfig& cfg,
                     const SourcePos& origin);
// TRACR_<NAME> variables, then `--set key=value` overrides, in order.
Status apply_env(ExperimentConfig& cfg);
Status apply_sets(ExperimentConfig& cfg, const std::vector<std::string>& sets);

}  // namespace tracr::settings
