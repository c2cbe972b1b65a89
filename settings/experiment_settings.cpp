// The experiment file's settings table: every setting with its type, default,
// description and environment variable, how it is read (apply) and shown (show).
#include "settings/experiment_settings.hpp"

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

namespace {

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
                       const std::function<std::string&(ExperimentConfig&)>& ref, bool nullable,
                       PathKind path = PathKind::plain) {
  Setting s;
  s.info = {name, type, def, desc, ""};
  s.nullable = nullable;
  s.path = path;
  s.text = ref;
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

// One of a few words ("a|b|c"), its type written "a | b | c".
Setting choice_setting(const std::string& name, const std::string& choices, const std::string& desc,
                       const std::function<std::string&(ExperimentConfig&)>& ref) {
  std::vector<std::string> words;
  std::istringstream in(choices);
  for (std::string w; std::getline(in, w, '|');) words.push_back(w);
  Setting s;
  s.info = {name, fmt::format("{}", fmt::join(words, " | ")), "", desc, ""};
  s.apply = [words, ref](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    auto v = get_choice(c, n, key, words);
    if (!v) return v.error();
    ref(cfg) = *v;
    return {};
  };
  s.show = [ref](const ExperimentConfig& c) { return ref(const_cast<ExperimentConfig&>(c)); };
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

Setting name_setting() {
  return string_setting(
      "name", "string", "<file name>", "Run name stored in the results database.", "a run name",
      [](ExperimentConfig& c) -> std::string& { return c.name; }, false);
}

Setting model_setting() {
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
      if (n.size() == 0)
        return err_at(pos_of(c, n), key, std::string("an empty list; expected ") + what + ", or a list of them");
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
  return s;
}

const char* const kInputSizeWhat =
    "a positive int n up to 65536 (for [3, n, n]) or a list of 1 to 8 positive ints up to 65536 such as "
    "[C, H, W], [4] or [T, D] (or 1,28,28)";

// One sample must fit a frame: PROTOCOL.md's 1 GiB of tensor bytes, as
// float32 (#24: [3, 100000, 100000] was refused without the limit).
Status input_size_fits(const Ctx& c, const YAML::Node& n, const std::string& key, const std::vector<int64_t>& dims) {
  constexpr int64_t kMaxValues = (int64_t{1} << 30) / 4;
  double values = 1;  // at most 8 dims of at most 65536: exact enough in a double
  for (int64_t d : dims) values *= static_cast<double>(d);
  if (values <= static_cast<double>(kMaxValues)) return {};
  return err_at(pos_of(c, n), key,
                fmt::format("{} is {:.0f} values per sample; expected at most 268435456 (one frame carries at "
                            "most 1 GiB of tensor bytes, PROTOCOL.md limits, and a value is a 4-byte float32)",
                            flow_ints(dims), values));
}

// One input size: an int n ([3, n, n]), a list of ints, or (a scalar with a
// comma) the `--set input_size=1,28,28` form that profile --input-shape takes.
Result<std::vector<int64_t>> input_size_of(const Ctx& c, const YAML::Node& n, const std::string& key) {
  std::vector<int64_t> dims;
  if (n.IsScalar() && n.Scalar().find(',') != std::string::npos) {
    std::istringstream parts(n.Scalar());
    for (std::string part; std::getline(parts, part, ',');) {
      while (!part.empty() && part.back() == ' ') part.pop_back();
      const size_t first = part.find_first_not_of(' ');
      int64_t v = 0;
      if (first == std::string::npos || !parse_int_text(part.substr(first), &v) || v < 1 || v > 65536)
        return expected(c, n, key, kInputSizeWhat);
      dims.push_back(v);
    }
    if (dims.size() > 8 || n.Scalar().back() == ',') return expected(c, n, key, kInputSizeWhat);
  } else if (n.IsScalar()) {
    auto v = get_int(c, n, key, 1, 65536, kInputSizeWhat);
    if (!v) return v.error();
    dims = {3, *v, *v};
  } else {
    if (!n.IsSequence() || n.size() == 0 || n.size() > 8) return expected(c, n, key, kInputSizeWhat);
    for (size_t i = 0; i < n.size(); ++i) {
      auto v = get_int(c, n[i], fmt::format("{}[{}]", key, i), 1, 65536, "a positive int up to 65536");
      if (!v) return v.error();
      dims.push_back(*v);
    }
  }
  TRACR_TRY(input_size_fits(c, n, key, dims));
  return dims;
}

// `input_size`: one size, or a list whose elements include a list: a list
// of input sizes, the experiment once per size, each a run of its own
// ([[3, 224, 224], [3, 160, 160]] or [[3, 224, 224], 160]; [224, 160]
// stays one [T, D] shape).
Status apply_input_size(const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) {
  cfg.input_size_list.clear();
  bool of_sizes = false;
  for (size_t i = 0; n.IsSequence() && i < n.size(); ++i) of_sizes = of_sizes || n[i].IsSequence();
  if (!of_sizes) {
    auto dims = input_size_of(c, n, key);
    if (!dims) return dims.error();
    cfg.input_size = *dims;
    return {};
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", key, i);
    auto dims = input_size_of(c, n[i], where);
    if (!dims) return dims.error();
    if (std::find(cfg.input_size_list.begin(), cfg.input_size_list.end(), *dims) != cfg.input_size_list.end())
      return err_at(pos_of(c, n[i]), where, "input size " + flow_ints(*dims) + " is listed twice");
    cfg.input_size_list.push_back(*dims);
  }
  cfg.input_size = cfg.input_size_list.front();
  if (cfg.input_size_list.size() == 1) cfg.input_size_list.clear();
  return {};
}

Setting input_size_setting() {
  Setting s;
  s.info = {"input_size", "int | [int, ...] | [[int, ...], ...]", "~ (model default)",
            "Input shape per sample, without the batch: an int n means [3, n, n]; a list of any rank, e.g. "
            "[C, H, W], [4] (4 features) or [T, D] (a token sequence; synthetic data); `--set` also takes "
            "1,28,28. A list of sizes, [[3, 224, 224], [3, 160, 160]] or [[3, 224, 224], 160], runs the experiment "
            "once per size, each a run of its own, as a list of models does ([224, 160] stays one [T, D] shape).",
            ""};
  s.nullable = true;
  s.env_yaml = true;
  s.apply = apply_input_size;
  s.show = [](const ExperimentConfig& c) {
    if (!c.input_size_list.empty()) {
      std::vector<std::string> v;
      for (const auto& d : c.input_size_list) v.push_back(flow_ints(d));
      return fmt::format("[{}]", fmt::join(v, ", "));
    }
    return c.input_size.empty() ? std::string("~") : flow_ints(c.input_size);
  };
  return s;
}

Setting dataset_type_setting() {
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
  return s;
}

Setting dataset_class_names_setting() {
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
  s.path = PathKind::controller_path;  // when it names a file
  s.text = [](ExperimentConfig& c) -> std::string& { return c.dataset.class_names_file; };
  return s;
}

// dataset.mean (false) or dataset.std (true).
Setting normalization_setting(bool is_std) {
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
    const std::string what =
        is_std ? "a number > 0 or a list of them (one per channel)" : "a number or a list of numbers (one per channel)";
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
  return s;
}

// A split entry as written: 7, or [3, 13] on a chain.
std::string show_entry(const wire::Placement& p, const std::vector<std::string>& names = {}) {
  auto one = [&](size_t j) {
    return j < names.size() && !names[j].empty() ? yaml_str(names[j]) : std::to_string(p.cuts[j]);
  };
  if (p.hops() == 1) return one(0);
  std::string o = "[";
  for (size_t j = 0; j < p.cuts.size(); ++j) o += (j ? ", " : "") + one(j);
  return o + "]";
}

// A cut: a number, or a layer's name (resolved against the model later:
// resolve_split_names), read as -1 with its name added to `names` ("" for a number).
Result<int> read_cut(const Ctx& c, const YAML::Node& v, const std::string& k, const std::string& what,
                     std::vector<std::string>& names) {
  if (v.IsScalar() && !v.Scalar().empty()) {
    const std::string& s = v.Scalar();
    if (std::isdigit(static_cast<unsigned char>(s[0])) == 0 && s[0] != '-' && s[0] != '+') {
      names.push_back(s);
      return -1;
    }
  }
  auto i = get_int(c, v, k, 0, 100000, what);
  if (!i) return i.error();
  names.emplace_back();
  return static_cast<int>(*i);
}

bool any_named(const std::vector<std::vector<std::string>>& names) {
  for (const auto& e : names)
    for (const auto& s : e)
      if (!s.empty()) return true;
  return false;
}

// A split value: one point, a list of distinct entries (each a point or a
// list of cut points, one per chain device), or all. The entries' count of
// cuts is checked against the chain after every setting is read (cross_check).
Result<SplitSpec> read_split(const Ctx& c, const YAML::Node& n, const std::string& key) {
  const std::string what =
      "a split point (int >= 0, or the name of the layer it cuts after), a list of split points, or all; on a chain "
      "of m devices, a list of placements of m cut points each, e.g. [[3, 13], [5, 13]], or plan";
  SplitSpec sp;
  std::vector<std::string> entry_names;  // this entry's cuts by name ("" = a number)
  auto cut = [&](const YAML::Node& v, const std::string& k, const std::string& cut_what) {
    return read_cut(c, v, k, cut_what, entry_names);
  };
  // Each entry's names, kept only when some cut was named.
  std::vector<std::vector<std::string>> all_names;
  auto keep_names = [&] {
    all_names.push_back(std::move(entry_names));
    entry_names.clear();
  };
  auto finish = [&] {
    if (any_named(all_names)) sp.names = all_names;
  };
  if (n.IsScalar()) {
    if (n.Scalar() == "all") return sp;
    if (n.Scalar() == "plan") {
      sp.all = false;
      sp.plan = true;
      return sp;
    }
    auto v = cut(n, key, what);
    if (!v) return v.error();
    sp.all = false;
    sp.entries = {wire::Placement{{*v}, {}}};
    keep_names();
    finish();
    return sp;
  }
  if (!n.IsSequence() || n.size() == 0) return expected(c, n, key, what);
  sp.all = false;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string k = fmt::format("{}[{}]", key, i);
    wire::Placement p;
    if (n[i].IsSequence()) {
      const std::string cut_what = "a cut point (int >= 0, or a layer name), non-decreasing along the chain";
      if (n[i].size() == 0) return expected(c, n[i], k, "a placement: a list of cut points, one per chain device");
      for (size_t j = 0; j < n[i].size(); ++j) {
        auto v = cut(n[i][j], fmt::format("{}[{}]", k, j), cut_what);
        if (!v) return v.error();
        if (*v >= 0 && !p.cuts.empty() && p.cuts.back() >= 0 && *v < p.cuts.back())
          return err_at(pos_of(c, n[i][j]), fmt::format("{}[{}]", k, j),
                        fmt::format("cut {} comes after {}; expected non-decreasing cut points", *v, p.cuts.back()));
        p.cuts.push_back(*v);
      }
    } else {
      auto v = cut(n[i], k, "a split point (int >= 0, or the name of the layer it cuts after)");
      if (!v) return v.error();
      p.cuts = {*v};
    }
    keep_names();
    // Named cuts are compared once resolved (resolve_split_names).
    const bool named = std::find(p.cuts.begin(), p.cuts.end(), -1) != p.cuts.end();
    if (!named && std::find(sp.entries.begin(), sp.entries.end(), p) != sp.entries.end())
      return err_at(pos_of(c, n[i]), k,
                    p.hops() == 1
                        ? fmt::format("split point {} is listed twice; expected distinct points", p.cuts[0])
                        : fmt::format("placement {} is listed twice; expected distinct placements", show_entry(p)));
    sp.entries.push_back(std::move(p));
  }
  finish();
  return sp;
}

std::string show_split(const SplitSpec& sp) {
  if (sp.all) return "all";
  if (sp.plan) return "plan";
  auto names = [&](size_t i) { return i < sp.names.size() ? sp.names[i] : std::vector<std::string>{}; };
  if (sp.entries.size() == 1 && sp.entries[0].hops() == 1) return show_entry(sp.entries[0], names(0));
  std::string o = "[";
  for (size_t i = 0; i < sp.entries.size(); ++i) o += (i ? ", " : "") + show_entry(sp.entries[i], names(i));
  return o + "]";
}

Setting chain_setting() {
  Setting s;
  s.info = {"chain", "[name | {device, link, compression}]", "~ (the SERVER alone)",
            "The devices a frame passes after its PARTICIPANT, in order, by their devices-file names (either "
            "device_type); an entry may set the hop into its device: {device: edge, link: wifi, compression: int8} "
            "(the top-level link and compression apply where a hop sets none). [<the SERVER>] is today's two-tier "
            "run.",
            ""};
  s.nullable = true;
  s.env_yaml = true;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    const std::string what = "a list of device names or {device, link, compression} maps, e.g. [edge, server]";
    if (!n.IsSequence() || n.size() == 0) return expected(c, n, key, what);
    std::vector<ChainHop> out;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string k = fmt::format("{}[{}]", key, i);
      ChainHop h;
      // Never assigned: a yaml-cpp node assigned to another rewrites the node it refers to.
      const YAML::Node dev = n[i].IsMap() ? n[i]["device"] : n[i];
      if (n[i].IsMap()) {
        TRACR_TRY(check_keys(c, n[i], k, {"device", "link", "compression"}));
        if (!dev) return err_at(pos_of(c, n[i]), k + ".device", "missing; expected the device's name in the devices file");
        if (const YAML::Node l = n[i]["link"]) {
          auto v = get_nonempty(c, l, k + ".link", "a link profile name");
          if (!v) return v.error();
          h.link = *v;
        }
        if (const YAML::Node z = n[i]["compression"]) {
          auto v = get_nonempty(c, z, k + ".compression", "a codec text such as none, fp16, int8 (`tracrctl codecs`)");
          if (!v) return v.error();
          auto spec = protocol::CodecSpec::parse(*v);
          if (!spec)
            return err_at(pos_of(c, z), k + ".compression",
                          fmt::format("invalid codec '{}': {}; expected e.g. none, fp16, int8+blosc-zstd:level=5 "
                                      "(see `tracrctl codecs`)",
                                      *v, spec.error().message));
          h.compression = spec->name();
        }
      } else if (!n[i].IsScalar()) {
        return expected(c, n[i], k, "a device name or {device, link, compression}");
      }
      const std::string dk = n[i].IsMap() ? k + ".device" : k;
      auto name = get_nonempty(c, dev, dk, "a device name");
      if (!name) return name.error();
      if (!valid_name(*name)) return err_at(pos_of(c, dev), dk, "a device name of letters, digits, '_', '-', '.'");
      for (const auto& o : out)
        if (o.device == *name)
          return err_at(pos_of(c, dev), dk,
                        fmt::format("device '{}' is listed twice; expected each device once along the chain", *name));
      h.device = *name;
      out.push_back(std::move(h));
    }
    cfg.chain = std::move(out);
    return {};
  };
  s.show = [](const ExperimentConfig& c) {
    if (c.chain.empty()) return std::string("~");
    std::string o = "[";
    for (size_t i = 0; i < c.chain.size(); ++i) {
      const ChainHop& h = c.chain[i];
      o += i ? ", " : "";
      if (h.link.empty() && h.compression.empty()) {
        o += yaml_str(h.device);
        continue;
      }
      o += "{device: " + yaml_str(h.device);
      if (!h.link.empty()) o += ", link: " + yaml_str(h.link);
      if (!h.compression.empty()) o += ", compression: " + yaml_str(h.compression);
      o += "}";
    }
    return o + "]";
  };
  return s;
}

Setting split_setting() {
  Setting s;
  s.info = {"split", "int | [int | [int]] | all | plan", "all",
            "Split points: k runs layers [0, k) on the PARTICIPANT and [k, N) on the SERVER; all = 0..N. On a chain "
            "of m devices (`chain`) each entry is a placement of m non-decreasing cut points ([3, 13]: layers [0, 3) "
            "on the PARTICIPANT, [3, 13) on the first device, [13, N) on the second); all = every placement, at "
            "most 1000; plan = the planner's best `plan_k` placements, chosen when the run starts from every "
            "device's layer profiles and each hop's link probe (a chain only; needs record.layers and probe).",
            ""};
  s.env_yaml = true;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    auto sp = read_split(c, n, key);
    if (!sp) return sp.error();
    cfg.split = *sp;
    return {};
  };
  s.show = [](const ExperimentConfig& c) { return show_split(c.split); };
  return s;
}

// exits: [{after: layer2, head: linear}, {after: 7, head: torchscript:exit.pt}]
Setting exits_setting() {
  Setting s;
  s.info = {"exits", "[{after, head, file}]", "~ (none)",
            "Early exits (#44): side classifiers on backbone layers' outputs, in backbone order. `after`: the "
            "layer (its name as in layer_profiles.name, or its index); the exit hangs at the cut right after "
            "it. `head`: linear (global average pooling + a linear map to the model's classes, trained by "
            "`tracrctl train`, read from `file`, default <output's directory>/exits/<model>.<after>.pt) or "
            "torchscript:<path> (your own module from that layer's output to the classes' logits). An exit at or "
            "before the split runs on the PARTICIPANT: a frame whose confidence there reaches exit_policy.threshold "
            "ends (no send).",
            ""};
  s.nullable = true;
  s.env_yaml = true;
  s.path = PathKind::plain;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    if (!n.IsSequence() || n.size() == 0)
      return expected(c, n, key, "a list of {after: <layer>, head: linear | torchscript:<path>} maps");
    std::vector<ExitSpec> out;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string k = fmt::format("{}[{}]", key, i);
      if (!n[i].IsMap()) return expected(c, n[i], k, "a map {after: <layer name or index>, head: linear}");
      TRACR_TRY(check_keys(c, n[i], k, {"after", "head", "file"}));
      ExitSpec e;
      const YAML::Node after = n[i]["after"];
      if (!after) return err_at(pos_of(c, n[i]), k + ".after", "missing; expected a layer name or index of the model");
      auto a = get_nonempty(c, after, k + ".after", "a layer name or index of the model");
      if (!a) return a.error();
      TRACR_TRY(no_control_chars(c, after, k + ".after", *a, "a layer name"));
      e.after = *a;
      for (const auto& o : out)
        if (o.after == e.after)
          return err_at(pos_of(c, after), k + ".after", fmt::format("layer '{}' has an exit already; expected one "
                                                                    "exit per layer", e.after));
      if (const YAML::Node h = n[i]["head"]) {
        auto v = get_nonempty(c, h, k + ".head", "linear or torchscript:<path>");
        if (!v) return v.error();
        TRACR_TRY(no_control_chars(c, h, k + ".head", *v, "linear or torchscript:<path>"));
        static const std::string ts = "torchscript:";
        if (v->rfind(ts, 0) == 0 && v->size() > ts.size()) {
          e.file = v->substr(ts.size());
        } else if (*v != "linear") {
          return err_at(pos_of(c, h), k + ".head",
                        fmt::format("'{}'; expected linear (trained by `tracrctl train`) or torchscript:<path> (a "
                                    "traced module from the layer's output to the classes' logits)",
                                    *v));
        }
        e.head = *v;
      }
      if (const YAML::Node f = n[i]["file"]) {
        if (e.head != "linear")
          return err_at(pos_of(c, f), k + ".file", "is for head: linear only; a torchscript: head names its file");
        auto v = get_nonempty(c, f, k + ".file", "a path to the trained head's TorchScript file");
        if (!v) return v.error();
        TRACR_TRY(no_control_chars(c, f, k + ".file", *v, "a path"));
        e.file = *v;
      }
      out.push_back(std::move(e));
    }
    cfg.exits = std::move(out);
    return {};
  };
  s.show = [](const ExperimentConfig& c) {
    if (c.exits.empty()) return std::string("~");
    std::string o = "[";
    for (size_t i = 0; i < c.exits.size(); ++i) {
      const ExitSpec& e = c.exits[i];
      o += (i ? ", " : "") + std::string("{after: ") + yaml_str(e.after) + ", head: " + yaml_str(e.head);
      if (e.head == "linear" && !e.file.empty()) o += ", file: " + yaml_str(e.file);
      o += "}";
    }
    return o + "]";
  };
  return s;
}

// exit_policy.threshold: a number in [0, 1], or a list of them (one run each).
Setting exit_threshold_setting() {
  Setting s;
  s.info = {"exit_policy.threshold", "number 0..1 | [numbers]", "0.9",
            "A frame ends at the first exit whose confidence (exit_policy.measure) is at least this. A list repeats "
            "the experiment under each threshold, one run per threshold (after links and codecs); "
            "`tracrctl results exits` sweeps thresholds from one run's stored confidences.",
            ""};
  s.env_yaml = true;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    auto one = [&](const YAML::Node& v, const std::string& where) -> Result<double> {
      auto d = get_double(c, v, where, 0, "a number in 0..1");
      if (!d) return d.error();
      if (*d > 1) return expected(c, v, where, "a number in 0..1 (a probability, or 1 - normalised entropy)");
      return *d;
    };
    cfg.exit_policy.threshold_list.clear();
    if (n.IsSequence()) {
      if (n.size() == 0) return err_at(pos_of(c, n), key, "an empty list; expected a number in 0..1 or a list of them");
      for (size_t i = 0; i < n.size(); ++i) {
        const std::string where = fmt::format("{}[{}]", key, i);
        auto v = one(n[i], where);
        if (!v) return v.error();
        for (double t : cfg.exit_policy.threshold_list)
          if (t == *v) return err_at(pos_of(c, n[i]), where, fmt::format("threshold {} is listed twice", *v));
        cfg.exit_policy.threshold_list.push_back(*v);
      }
      cfg.exit_policy.threshold = cfg.exit_policy.threshold_list.front();
      if (cfg.exit_policy.threshold_list.size() == 1) cfg.exit_policy.threshold_list.clear();
      return {};
    }
    auto v = one(n, key);
    if (!v) return v.error();
    cfg.exit_policy.threshold = *v;
    return {};
  };
  s.show = [](const ExperimentConfig& c) {
    if (c.exit_policy.threshold_list.empty()) return fmt::format("{}", c.exit_policy.threshold);
    std::string o = "[";
    for (size_t i = 0; i < c.exit_policy.threshold_list.size(); ++i)
      o += (i ? ", " : "") + fmt::format("{}", c.exit_policy.threshold_list[i]);
    return o + "]";
  };
  return s;
}

Setting participant_splits_setting() {
  Setting s;
  s.info = {"participant_splits", "{name: int | [int | [int]] | all}", "{}",
            "Split points of single PARTICIPANTs (devices-file names), in place of `split`: participants of one run "
            "at different splits, e.g. the assignment `tracrctl plan --joint` chose ({p1: 22, p2: 0}).",
            ""};
  s.env_yaml = true;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    if (!n.IsMap()) return expected(c, n, key, "a map of PARTICIPANT names to split points");
    std::map<std::string, SplitSpec> out;
    for (const auto& kv : n) {
      const std::string name = kv.first.Scalar();
      if (!valid_name(name))
        return err_at(pos_of(c, kv.first), key + "." + name, "a device name of letters, digits, '_', '-', '.'");
      auto sp = read_split(c, kv.second, key + "." + name);
      if (!sp) return sp.error();
      out[name] = *sp;
    }
    cfg.participant_splits = std::move(out);
    return {};
  };
  s.show = [](const ExperimentConfig& c) {
    std::string o = "{";
    for (const auto& [name, sp] : c.participant_splits)
      o += fmt::format("{}{}: {}", o.size() > 1 ? ", " : "", yaml_str(name), show_split(sp));
    return o + "}";
  };
  return s;
}

Setting compression_setting() {
  Setting s;
  s.info = {"compression", "codec text | [codec text]", "none",
            "Codec for the tensors crossing the split (`tracrctl codecs`), e.g. int8+blosc-zstd:level=5; auto: the "
            "participant picks a lossless codec per split from the activations and the link's rate. A list repeats "
            "the experiment under each codec, one run per codec (and per link profile when `link` is a list too).",
            ""};
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    // One codec text: its canonical name and parsed spec (auto: chosen per split by the participant).
    auto one = [&](const YAML::Node& v_node,
                   const std::string& where) -> Result<std::pair<std::string, protocol::CodecSpec>> {
      auto v =
          get_nonempty(c, v_node, where, "a codec text such as none, fp16, blosc-lz4 (see `tracrctl codecs`), or auto");
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
  return s;
}

Setting chunk_bytes_setting() {
  Setting s;
  s.info = {"chunk_bytes", "int bytes | \"<n>KiB\" | \"<n>MiB\"", "262144 (256KiB)",
            "Transformed bytes per payload part; chunk n+1 is encoded while chunk n is sent.", ""};
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    // The protocol's bound on a payload part (PROTOCOL.md 8).
    auto v =
        parse_bytes(c, n, key, 4096, int64_t{64} << 20, "a byte count 4096..67108864 (an int, or <n>KiB / <n>MiB)");
    if (!v) return v.error();
    cfg.chunk_bytes = *v;
    return {};
  };
  s.show = [](const ExperimentConfig& c) { return std::to_string(c.chunk_bytes); };
  return s;
}

// probe.chunk_bytes: a byte count, or auto (0 in the config): the probe sizes
// its messages each way from a short pass of small ones (wire/record.hpp).
Setting probe_chunk_setting() {
  Setting s;
  s.info = {"probe.chunk_bytes", "`auto` | int 1024..67108864 | `<n>KiB` | `<n>MiB`", "auto",
            "Payload per bulk probe message. auto: each way, a short pass of 16 KiB messages measures a rough "
            "rate and the messages are sized so that about 32 of them fill probe.duration_ms (16 KiB to 4 MiB).",
            ""};
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    if (n.IsScalar() && n.Scalar() == "auto") {
      cfg.probe.chunk_bytes = 0;
      return {};
    }
    auto v = parse_bytes(c, n, key, 1024, int64_t{64} << 20,
                         "auto, or a byte count 1024..67108864 (an int, or <n>KiB / <n>MiB)");
    if (!v) return v.error();
    cfg.probe.chunk_bytes = *v;
    return {};
  };
  s.show = [](const ExperimentConfig& c) {
    return c.probe.chunk_bytes == 0 ? std::string("auto") : std::to_string(c.probe.chunk_bytes);
  };
  return s;
}

// server.batch: {max: B, max_wait_ms: W} (#46), one setting: the two
// numbers mean something only together.
Setting server_batch_setting() {
  Setting s;
  s.info = {"server.batch", "{max: int 1..1024, max_wait_ms: int 0..60000}", "{max: 1, max_wait_ms: 0} (no batching)",
            "SERVER batching: requests at the same split (and end layer) that arrive within max_wait_ms of the first "
            "run as one tail of up to max frames, their tensors stacked on the batch dimension and the outputs split "
            "back per frame; each frame records its batch (frames.server_batch, frames.batch_wait_ns). Frames whose "
            "tensors cannot be stacked (shapes other than the batch dimension differ) run alone. A chain's middle "
            "device batches its segment the same way.",
            ""};
  s.env_yaml = true;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    const std::string what = "a map {max: B (1..1024), max_wait_ms: W (0..60000)}";
    if (!n.IsMap()) return expected(c, n, key, what);
    TRACR_TRY(check_keys(c, n, key, {"max", "max_wait_ms"}));
    ExperimentConfig::ServerBatchSpec b;
    if (n["max"]) {
      auto v = get_int(c, n["max"], key + ".max", 1, 1024, "an integer 1..1024 (frames per batch)");
      if (!v) return v.error();
      b.max = static_cast<int>(*v);
    }
    if (n["max_wait_ms"]) {
      auto v = get_int(c, n["max_wait_ms"], key + ".max_wait_ms", 0, 60000,
                       "an integer 0..60000 (ms a batch waits for more frames after its first)");
      if (!v) return v.error();
      b.max_wait_ms = static_cast<int>(*v);
    }
    cfg.server_batch = b;
    return {};
  };
  s.show = [](const ExperimentConfig& c) {
    return fmt::format("{{max: {}, max_wait_ms: {}}}", c.server_batch.max, c.server_batch.max_wait_ms);
  };
  return s;
}

Setting commands_setting() {
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
      if (!e.IsMap())
        return expected(c, e, k, "a map {at_frame: N, set_split: K | set_codec: TEXT | pause_ms: M | stop: true}");
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
      if (x.op == "set_split")
        o += fmt::format("set_split: {}}}", x.split);
      else if (x.op == "set_codec")
        o += "set_codec: " + yaml_str(x.codec) + "}";
      else if (x.op == "pause")
        o += fmt::format("pause_ms: {}}}", x.pause_ms);
      else
        o += "stop: true}";
    }
    return o + "]";
  };
  return s;
}

Setting link_setting() {
  Setting s;
  s.info = {"link", "profile name | [profile name]", "~ (the link as it is)",
            "Link profile(s) to emulate with tc between the agents: built-in 3g, lte, wifi, gigabit, wan, unlimited, or a "
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
  return s;
}

Setting links_setting() {
  Setting s;
  s.info = {"links", "{name: {up_mbit, down_mbit, delay_ms, jitter_ms, loss_pct}}", "{}",
            "User-defined link profiles: rates in Mbit/s each way (0 = not limited), one-way delay and jitter in ms, "
            "loss in percent (delay, jitter and loss need the kernel's netem).",
            ""};
  s.env_yaml = true;
  s.apply = [](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    if (!n.IsMap())
      return expected(c, n, key, "a map of profile names to {up_mbit, down_mbit, delay_ms, jitter_ms, loss_pct}");
    std::map<std::string, LinkSpec> out;
    for (const auto& kv : n) {
      const std::string name = kv.first.Scalar();
      const std::string k = key + "." + name;
      if (!valid_name(name)) return err_at(pos_of(c, kv.first), k, "a profile name of letters, digits, '_', '-', '.'");
      if (!kv.second.IsMap())
        return expected(c, kv.second, k, "a map {up_mbit, down_mbit, delay_ms, jitter_ms, loss_pct}");
      TRACR_TRY(check_keys(c, kv.second, k, {"up_mbit", "down_mbit", "delay_ms", "jitter_ms", "loss_pct"}));
      LinkSpec l;
      l.name = name;
      l.source = "user-defined in the experiment";
      const std::pair<const char*, double*> fields[] = {{"up_mbit", &l.up_mbit},
                                                        {"down_mbit", &l.down_mbit},
                                                        {"delay_ms", &l.delay_ms},
                                                        {"jitter_ms", &l.jitter_ms},
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
  return s;
}

Setting train_cuts_setting() {
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
  return s;
}

Setting devices_setting() {
  Setting s = string_setting(
      "devices", "path", "config/devices_config.yaml",
      "Devices file (a relative path in the experiment file: relative to that file's directory); when not set and "
      "config/devices_config.yaml is missing from the current directory, both agents run locally.",
      "a devices file path", [](ExperimentConfig& c) -> std::string& { return c.devices; }, false,
      PathKind::controller_path);
  auto inner = s.apply;
  s.apply = [inner](const Ctx& c, const YAML::Node& n, const std::string& key, ExperimentConfig& cfg) -> Status {
    if (n.IsNull()) return {};  // `devices: ~`, as a stored run without a devices file reads back: not set
    TRACR_TRY(inner(c, n, key, cfg));
    cfg.devices_explicit = true;
    return {};
  };
  return s;
}

Setting seed_setting() {
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
  return s;
}

// A table setting's printed default: the ExperimentConfig's own value, then
// the note the table gives (what the value means, or what replaces it).
Setting default_from_struct(Setting s, const std::string& note) {
  static const ExperimentConfig defaults;
  s.info.default_value = s.show(defaults) + (note.empty() ? "" : " " + note);
  return s;
}

// The table of settings/experiment_settings.def, each entry one Setting.
std::vector<Setting> build_settings() {
#define TRACR_INT(name, field, type, lo, hi, note, desc)                                                     \
  default_from_struct(                                                                                       \
      int_setting(                                                                                           \
          name, type, "", desc, lo, hi,                                                                      \
          [](ExperimentConfig& c, int64_t v) { c.field = static_cast<std::decay_t<decltype(c.field)>>(v); }, \
          [](const ExperimentConfig& c) { return static_cast<int64_t>(c.field); }),                          \
      note),
#define TRACR_BOOL(name, field, note, desc) \
  default_from_struct(bool_setting(name, "", desc, [](ExperimentConfig& c) -> bool& { return c.field; }), note),
#define TRACR_DOUBLE(name, field, type, lo, exclusive, note, desc)                                                 \
  default_from_struct(                                                                                             \
      double_setting(name, type, "", desc, lo, exclusive, [](ExperimentConfig& c) -> double& { return c.field; }), \
      note),
#define TRACR_TEXT(name, field, type, kind, nullable, what, note, desc)                                            \
  default_from_struct(string_setting(                                                                              \
                          name, type, "", desc, what, [](ExperimentConfig& c) -> std::string& { return c.field; }, \
                          nullable, PathKind::kind),                                                               \
                      note),
#define TRACR_NAMES(name, field, note, desc)                                                                       \
  default_from_struct(                                                                                             \
      name_list_setting(name, "", desc, [](ExperimentConfig& c) -> std::vector<std::string>& { return c.field; }), \
      note),
#define TRACR_CHOICE(name, field, choices, note, desc) \
  default_from_struct(                                 \
      choice_setting(name, choices, desc, [](ExperimentConfig& c) -> std::string& { return c.field; }), note),
#define TRACR_CUSTOM(make) make,
  std::vector<Setting> t = {
#include "settings/experiment_settings.def"
  };
#undef TRACR_INT
#undef TRACR_BOOL
#undef TRACR_DOUBLE
#undef TRACR_TEXT
#undef TRACR_NAMES
#undef TRACR_CHOICE
#undef TRACR_CUSTOM
  for (auto& s : t) {
    std::string env = "TRACR_";
    for (char ch : s.info.name)
      env += ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    s.info.env = env;
  }
  return t;
}

}  // namespace

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
    else if (nm == "input_size") {
      cfg.input_size.clear();
      cfg.input_size_list.clear();
    }
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
    // The embedded default (no devices file set, none at the default path) is stored as `~`, which reads
    // back the same; a file the run loaded, the default one included, by its path.
    std::error_code ec;
    const bool embedded = s.info.name == "devices" && !cfg.devices_explicit && !fs::exists(cfg.devices, ec);
    const std::string value = embedded ? "~" : s.show(cfg);
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

}  // namespace tracr::settings
