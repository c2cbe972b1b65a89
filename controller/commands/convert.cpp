#include "controller/commands/convert.hpp"
#include "core/log.hpp"
#include "core/user_error.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "protocol/codec.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
namespace fs = std::filesystem;
namespace {

struct ZooModel {
  const char* id;
  const char* description;
};

const std::vector<ZooModel>& zoo() {
  static const std::vector<ZooModel> models = {
#define TRACR_MODEL(id, factory, description) {id, description},
#include "experiments/zoo/models.def"
#undef TRACR_MODEL
  };
  return models;
}

// "MobileNet_V2" and "mobilenetv2" both read "mobilenetv2".
std::string fold(const std::string& s) {
  std::string o;
  for (unsigned char c : s)
    if (c != '_' && c != '-') o += static_cast<char>(std::tolower(c));
  return o;
}

// Flow YAML of a node, as the user wrote it, for reports.
std::string flow(const YAML::Node& n) {
  if (!n || n.IsNull()) return "null";
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << n;
  std::string s = e.c_str();
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// One line of the experiment file: `key: value  # comment` at a depth.
struct Line {
  int depth = 0;
  std::string key, value, comment;
};

class Converter {
 public:
  Converter(std::string source, fs::path root, fs::path out_dir)
      : source_(std::move(source)), root_(std::move(root)), out_dir_(std::move(out_dir)) {}

  Result<Conversion> run(const std::string& text) {
    YAML::Node doc;
    try {
      doc = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      return make_error(Errc::config, fmt::format("{}:{}:{}: not valid YAML: {}", source_, e.mark.line + 1,
                                                  e.mark.column + 1, e.msg));
    }
    if (!doc.IsMap())
      return make_error(Errc::config, source_ + ": expected a Python tracr model config (a map with model, "
                                                "dataset, dataloader, ...), got " +
                                          (doc.IsNull() ? std::string("an empty file") : "'" + flow(doc) + "'"));
    const YAML::Node& top = doc;  // const: a lookup never adds the key
    if (!top["model"] || !top["model"].IsMap())
      return make_error(Errc::config, source_ + ": model: missing; expected a map with model_name and split_layer");
    for (const auto& kv : doc) {
      const std::string key = kv.first.Scalar();
      const YAML::Node& v = kv.second;
      Status st;
      if (key == "model") st = model(v);
      else if (key == "dataset") st = dataset(v);
      else if (key == "dataloader") st = dataloader(v);
      else if (key == "compression") st = compression(v);
      else if (key == "default") st = defaults(v);
      else if (key == "logging")
        drop(key, v, "tracr logs to stderr and stores structured events (run started, split switched, agent "
                     "lost) in the results database's events table");
      else
        drop(key, v, "not a key of the Python tracr model configs this converter knows");
      if (!st) return st.error();
    }
    return finish();
  }

 private:
  // ---------------------------------------------------------------- helpers

  Error bad(const YAML::Node& n, const std::string& key, const std::string& expected) const {
    const auto m = n.Mark();
    return make_error(Errc::config, fmt::format("{}:{}:{}: {}: expected {}, got '{}'", source_, m.line + 1,
                                                m.column + 1, key, expected, flow(n)));
  }

  Result<int64_t> integer(const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) const {
    const std::string expected = fmt::format("an integer {}..{}", lo, hi);
    if (!n.IsScalar()) return bad(n, key, expected);
    const std::string& s = n.Scalar();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) return bad(n, key, expected);
    return static_cast<int64_t>(v);
  }

  Result<bool> boolean(const YAML::Node& n, const std::string& key) const {
    bool b = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, b)) return bad(n, key, "true or false");
    return b;
  }

  Result<std::string> text(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar() || n.Scalar().empty()) return bad(n, key, "a non-empty string");
    return n.Scalar();
  }

  Status need_map(const YAML::Node& n, const std::string& key) const {
    if (!n.IsMap()) return bad(n, key, "a map");
    return {};
  }

  // Calls f(name, dotted key, value) for each entry of the map `n` (the
  // section `section`), stopping at the first error.
  template <class F>
  Status each(const YAML::Node& n, const std::string& section, F f) {
    if (auto st = need_map(n, section); !st) return st;
    for (const auto& kv : n)
      if (Status st = f(kv.first.Scalar(), section + "." + kv.first.Scalar(), kv.second); !st) return st;
    return {};
  }

  // A key left behind; a null value loses nothing and is not reported.
  void drop(const std::string& key, const YAML::Node& v, const std::string& reason) {
    if (v.IsNull()) return;
    dropped_.push_back({key, flow(v), reason});
  }

  void put(int depth, const std::string& key, const std::string& value, const std::string& comment) {
    lines_.push_back({depth, key, value, comment});
  }

  // A Python tracr path (relative to its project root) as the experiment
  // writes it (relative to the experiment's directory, else absolute).
  std::string path(const std::string& p) const {
    if (p.rfind("~/", 0) == 0) return p;
    fs::path abs = fs::path(p).is_absolute() ? fs::path(p) : root_ / p;
    abs = abs.lexically_normal();
    if (out_dir_.empty()) return abs.string();
    const fs::path rel = abs.lexically_relative(out_dir_);
    return rel.empty() ? abs.string() : rel.string();
  }

  // ------------------------------------------------------------- sections

  // Python tracr model keys tracr has no counterpart for, and why.
  static const std::map<std::string, std::string>& dropped_model_keys() {
    static const std::map<std::string, std::string> keys = {
        {"save_layers", "tracr keeps no layer outputs; it records every layer's time, output bytes and energy "
                        "(record.layers) instead"},
        {"depth", "tracr's layer list is fixed per model (`tracrctl profile MODEL` shows it); the split points "
                  "index it"},
        {"flush_buffer_size", "tracr's recorder writes frames to SQLite in batches and at least once a second"},
        {"log_file", "tracr logs to stderr; measurements and events go to the results database (output)"},
        {"version", "tracr's zoo has one version per model id"}};
    return keys;
  }

  Status model(const YAML::Node& m) {
    for (const auto& kv : m) {
      const std::string k = kv.first.Scalar(), key = "model." + k;
      const YAML::Node& v = kv.second;
      if (k == "model_name" || k == "name") {
        auto name = text(v, key);
        if (!name) return name.error();
        model_name(key, *name, v);
      } else if (k == "split_layer") {
        auto s = integer(v, key, 0, 100000);
        if (!s) return s.error();
        split_ = {std::to_string(*s),
                  fmt::format("{}: layers [0, {}) on the PARTICIPANT; the Python tracr counted its "
                              "wrapper's layers at `depth`, check the index with `tracrctl profile MODEL`",
                              key, *s)};
      } else if (k == "input_size") {
        if (!v.IsSequence() || v.size() != 3) return bad(v, key, "[C, H, W]");
        std::vector<int64_t> dims;
        for (const auto& d : v) {
          auto x = integer(d, key, 1, 65536);
          if (!x) return x.error();
          dims.push_back(*x);
        }
        put(0, "input_size", fmt::format("[{}, {}, {}]", dims[0], dims[1], dims[2]), key);
      } else if (k == "weight_path") {
        if (v.IsNull()) continue;
        auto p = text(v, key);
        if (!p) return p.error();
        put(0, "weights", settings::yaml_str(path(*p)), key + ": " + *p);
        has_weights_ = true;
      } else if (k == "pretrained") {
        auto b = boolean(v, key);
        if (!b) return b.error();
        pretrained_ = *b;
        pretrained_node_ = v;
      } else if (k == "warmup_iterations") {
        auto w = integer(v, key, 0, 1000000);
        if (!w) return w.error();
        put(0, "warmup", std::to_string(*w), key);
      } else if (k == "batch_size") {
        auto b = integer(v, key, 1, 65536);
        if (!b) return b.error();
        batch_ = {std::to_string(*b), key};
      } else if (k == "num_classes") {
        auto n = integer(v, key, 1, 1000000);
        if (!n) return n.error();
        num_classes_ = *n;
        num_classes_node_ = v;
      } else if (auto it = dropped_model_keys().find(k); it != dropped_model_keys().end()) {
        drop(key, v, it->second);
      } else if (k == "mode") {
        // eval is what tracr does: nothing is lost.
        if (!(v.IsScalar() && v.Scalar() == "eval"))
          drop(key, v, "tracr runs inference in eval mode; training is `tracrctl train` with train.* keys");
      } else {
        drop(key, v, "not a model key this converter knows");
      }
    }
    if (model_.empty()) return make_error(Errc::config, source_ + ": model.model_name: missing; expected the "
                                                                   "model's name, e.g. alexnet");
    if (pretrained_ && !has_weights_)
      drop("model.pretrained", pretrained_node_,
           "tracr downloads nothing: without `weights:` a run uses deterministic initial weights; set "
           "`weights:` to torchvision's .pth file (e.g. ~/.cache/torch/hub/checkpoints/alexnet-owt-7be5be79.pth), "
           "which tracr reads directly");
    // Carried silently when the zoo model has that head already.
    if (num_classes_ > 0 && model_description_.find(fmt::format("{} classes", num_classes_)) == std::string::npos)
      drop("model.num_classes", num_classes_node_,
           "the zoo models' heads are fixed (" + model_ + ": " +
               (model_description_.empty() ? std::string("not in the zoo") : model_description_) +
               "); a model with another head runs as torchscript:<file>");
    return {};
  }

  void model_name(const std::string& key, const std::string& name, const YAML::Node& v) {
    std::vector<std::string> ids;
    for (const auto& z : zoo()) {
      ids.push_back(z.id);
      if (fold(z.id) == fold(name)) {
        model_ = z.id;
        model_description_ = z.description;
        model_comment_ = key + ": " + name + (name == z.id ? "" : " (tracr's id)");
        return;
      }
    }
    // Kept as written so that the run refuses it by name.
    model_ = name;
    model_comment_ = key + ": NOT IN TRACR'S ZOO, replace it (see the report at the end)";
    const std::string hint = settings::did_you_mean(name, ids);
    std::string list;
    for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
    drop(key, v,
         "no such model in tracr's zoo (" + list + ")" + (hint.empty() ? "" : "; closest: " + hint) +
             "; a model of your own runs as torchscript:<file> (torch.jit.script of an nn.Sequential), "
             "tracrctl run refuses the file until `model` is one of these");
  }

  Status dataset(const YAML::Node& d) {
    if (auto st = need_map(d, "dataset"); !st) return st;
    std::string module, cls;
    YAML::Node args;
    for (const auto& kv : d) {
      const std::string k = kv.first.Scalar(), key = "dataset." + k;
      if (k == "module" || k == "class") {
        auto s = text(kv.second, key);
        if (!s) return s.error();
        (k == "module" ? module : cls) = *s;
      } else if (k == "args") {
        if (auto st = need_map(kv.second, key); !st) return st;
        args = kv.second;
      } else {
        drop(key, kv.second, "not a dataset key this converter knows");
      }
    }
    const std::string f = fold(module + cls);
    std::string from = "dataset.module: " + (module.empty() ? std::string("(none)") : module);
    if (!cls.empty()) from += ", class " + cls;
    bool folder = false;
    if (f.find("fashionmnist") != std::string::npos) {
      dataset_.push_back({1, "type", "fashion_mnist", from});
    } else if (args && (std::as_const(args)["img_directory"] || std::as_const(args)["root"]) &&
               f.find("mnist") == std::string::npos &&
               f.find("cifar") == std::string::npos) {
      // ImageNetDataset, OnionDataset, ...: a directory of images.
      dataset_.push_back({1, "type", "imagefolder", from + " (a directory of JPEG/PNG images)"});
      folder = true;
    } else {
      dataset_.push_back({1, "type", "synthetic", from + ": NOT CARRIED, generated inputs instead"});
      drop("dataset.module", d["module"] ? d["module"] : d,
           "tracr reads image folders (ImageNetDataset and the like), Fashion-MNIST and generated inputs; "
           "set dataset.type and dataset.path by hand");
    }
    if (!args) return {};
    const bool has_img_dir = static_cast<bool>(std::as_const(args)["img_directory"]);
    for (const auto& kv : args) {
      const std::string k = kv.first.Scalar(), key = "dataset.args." + k;
      const YAML::Node& v = kv.second;
      if ((k == "img_directory" || (k == "root" && !has_img_dir)) && folder) {
        auto p = text(v, key);
        if (!p) return p.error();
        dataset_.push_back({1, "path", settings::yaml_str(path(*p)), key + ": " + *p});
      } else if (k == "root") {
        drop(key, v, has_img_dir ? "the images are read from img_directory" : "tracr reads this dataset from "
                                                                               "its own place");
      } else if (k == "class_names") {
        if (v.IsNull()) continue;
        auto p = text(v, key);
        if (!p) return p.error();
        dataset_.push_back({1, "class_names", settings::yaml_str(path(*p)), key + ": " + *p});
      } else if (k == "max_samples") {
        auto n = integer(v, key, -1, 1000000000);
        if (!n) return n.error();
        dataset_.push_back({1, "max_samples", std::to_string(*n < 0 ? 0 : *n),
                            key + ": " + v.Scalar() + (*n <= 0 ? " (0: all)" : "")});
      } else if (k == "transform") {
        if (!v.IsNull())
          drop(key, v, "tracr applies torchvision's ImageClassification preset (resize 256, center crop "
                       "input_size, ImageNet mean/std unless dataset.mean and dataset.std say otherwise) to image "
                       "folders; other transforms are not available");
      } else if (k == "train") {
        auto b = boolean(v, key);
        if (!b) return b.error();
        dataset_.push_back({1, "split", *b ? "train" : "test", key + ": " + v.Scalar()});
      } else {
        drop(key, v, "not a dataset argument this converter knows");
      }
    }
    return {};
  }

  Status dataloader(const YAML::Node& d) {
    return each(d, "dataloader", [&](const std::string& k, const std::string& key, const YAML::Node& v) -> Status {
      if (k == "batch_size") {
        auto b = integer(v, key, 1, 65536);
        if (!b) return b.error();
        batch_ = {std::to_string(*b), key};
      } else if (k == "shuffle") {
        auto b = boolean(v, key);
        if (!b) return b.error();
        if (*b) drop(key, v, "tracr reads samples in order (every run sees the same frames)");
      } else if (k == "num_workers") {
        drop(key, v, "the PARTICIPANT agent loads and preprocesses samples itself; its LibTorch threads are "
                     "the devices file's `threads`");
      } else if (k == "collate_fn") {
        drop(key, v, "tracr batches samples of one shape itself (batch_size)");
      } else if (k == "pin_memory") {
        drop(key, v, "no DataLoader in tracr");
      } else {
        drop(key, v, "not a dataloader key this converter knows");
      }
      return {};
    });
  }

  // {clevel, filter, codec} of the Python tracr's blosc2 call -> codec text.
  Status compression(const YAML::Node& c) {
    int64_t level = 3;
    std::string cname = "zstd", shuffle = "byte";
    std::string written;
    auto st = each(c, "compression", [&](const std::string& k, const std::string& key, const YAML::Node& v) -> Status {
      written += (written.empty() ? "" : ", ") + k + ": " + flow(v);
      if (k == "clevel") {
        auto l = integer(v, key, 0, 9);
        if (!l) return l.error();
        level = *l;
      } else if (k == "codec") {
        auto s = text(v, key);
        if (!s) return s.error();
        const std::string f = fold(*s);
        if (f == "zstd" || f == "lz4" || f == "blosclz" || f == "zlib") cname = f;
        else if (f == "lz4hc") {
          cname = "lz4";
          drop(key, v, "blosc's lz4hc codec is not offered; lz4 is used (same format, faster, larger)");
        } else {
          return bad(v, key, "one of ZSTD, LZ4, LZ4HC, BLOSCLZ, ZLIB");
        }
      } else if (k == "filter") {
        auto s = text(v, key);
        if (!s) return s.error();
        const std::string f = fold(*s);
        if (f == "shuffle") shuffle = "byte";
        else if (f == "bitshuffle") shuffle = "bit";
        else if (f == "noshuffle" || f == "nofilter") shuffle = "none";
        else return bad(v, key, "one of SHUFFLE, BITSHUFFLE, NOSHUFFLE");
      } else {
        drop(key, v, "not a compression key this converter knows");
      }
      return {};
    });
    if (!st) return st;
    std::string codec = "none";
    if (level > 0) codec = fmt::format("blosc-{}:level={},shuffle={}", cname, level, shuffle);
    auto spec = protocol::CodecSpec::parse(codec);
    if (!spec) return make_error(Errc::config, source_ + ": compression: " + spec.error().message);
    compression_ = {spec->name(), "compression: {" + written + "}" +
                                      (level == 0 ? " (clevel 0: not compressed)" : "")};
    return {};
  }

  Status defaults(const YAML::Node& d) {
    return each(d, "default", [&](const std::string& k, const std::string& key, const YAML::Node& v) -> Status {
      if (k == "device") {
        drop(key, v, "tracr sets the device per machine in the devices file (`device: cuda` on a device "
                     "entry); its default, auto, uses CUDA where that agent's LibTorch has it");
      } else if (k == "collect_metrics") {
        auto b = boolean(v, key);
        if (!b) return b.error();
        record_layers_ = {*b ? "true" : "false", key + ": " + v.Scalar()};
      } else if (k == "save_layer_images" || k == "font_path") {
        drop(key, v, "tracr draws no images; predictions and detections are stored per frame");
      } else {
        drop(key, v, "not a default key this converter knows");
      }
      return {};
    });
  }

  // --------------------------------------------------------------- output

  Result<Conversion> finish() {
    std::vector<Line> out;
    out.push_back({0, "name", settings::yaml_str(fs::path(source_).stem().string()), "the old file's name"});
    out.push_back({0, "model", settings::yaml_str(model_), model_comment_});
    for (const auto& l : lines_) out.push_back(l);
    if (!split_.first.empty()) {
      out.push_back({0, "split", split_.first, split_.second});
    } else {
      out.push_back({0, "split", "all", "no model.split_layer: every split point 0..N"});
    }
    if (!batch_.first.empty()) out.push_back({0, "batch_size", batch_.first, batch_.second});
    if (!compression_.first.empty())
      out.push_back({0, "compression", settings::yaml_str(compression_.first), compression_.second});
    out.push_back({0, "encryption", "true", "tracr's default: AES-256-GCM (the Python tracr sent plain frames)"});
    if (!dataset_.empty()) {
      out.push_back({0, "dataset", "", ""});
      for (const auto& l : dataset_) out.push_back(l);
    }
    if (!record_layers_.first.empty()) {
      out.push_back({0, "record", "", ""});
      out.push_back({1, "layers", record_layers_.first, record_layers_.second});
    }

    std::ostringstream y;
    y << "# Converted by `tracrctl convert` from " << source_ << " (a Python tracr model config).\n"
      << "# Each value's comment names the key it came from. Every setting: config/README.md;\n"
      << "# effective values: tracrctl run THIS_FILE --show-config\n";
    for (const auto& l : out) {
      std::string head = std::string(2 * l.depth, ' ') + l.key + ":" + (l.value.empty() ? "" : " " + l.value);
      if (!l.comment.empty()) {
        if (head.size() < 34) head.resize(34, ' ');
        head += "  # " + l.comment;
      }
      y << head << "\n";
    }
    if (!dropped_.empty()) {
      y << "#\n# Not carried over from " << source_ << ":\n";
      for (const auto& d : dropped_) y << "#   " << d.key << ": " << d.value << " -- " << d.reason << "\n";
    }
    Conversion c;
    c.yaml = y.str();
    c.not_carried = dropped_;
    return c;
  }

  std::string source_;
  fs::path root_, out_dir_;
  std::vector<Line> lines_, dataset_;
  std::vector<NotCarried> dropped_;
  std::string model_, model_comment_, model_description_;
  // Value and comment of settings written in a fixed place.
  std::pair<std::string, std::string> split_, batch_, compression_, record_layers_;
  bool pretrained_ = false, has_weights_ = false;
  YAML::Node pretrained_node_, num_classes_node_;
  int64_t num_classes_ = 0;
};

// The Python tracr's project root for a config at `source`.
fs::path python_root(const std::string& source) {
  fs::path dir = fs::absolute(source).lexically_normal().parent_path();
  return dir.filename() == "config" ? dir.parent_path() : dir;
}

}  // namespace

Result<Conversion> convert_python_config(const std::string& text, const std::string& source_path,
                                         const std::string& output_path) {
  fs::path out_dir;
  if (!output_path.empty()) out_dir = fs::absolute(output_path).lexically_normal().parent_path();
  return Converter(source_path, python_root(source_path), out_dir).run(text);
}

Status cmd_convert(const ConvertOptions& o) {
  const std::string& in = o.input;
  const std::string& out = o.output;
  const bool force = o.force;
  std::ifstream f(in, std::ios::binary);
  if (!f) {
    return core::bad_input(fmt::format("{}: cannot read the file", in));
  }
  std::ostringstream text;
  text << f.rdbuf();
  if (!out.empty() && !force && fs::exists(out)) {
    return core::bad_input(fmt::format("{} exists; add --force to replace it", out));
  }
  auto c = convert_python_config(text.str(), in, out);
  if (!c) {
    return core::bad_input(c.error().message);
  }
  if (out.empty()) {
    std::fputs(c->yaml.c_str(), stdout);
  } else {
    auto st = write_file(out, c->yaml);
    if (!st) {
      return core::command_failed(st.error().message);
    }
    TRACR_LOG(info, "wrote {}; run it with: tracrctl run {}", out, out);
  }
  if (!c->not_carried.empty()) {
    TRACR_LOG(info, "not carried over from {} ({}):", in, c->not_carried.size());
    for (const auto& d : c->not_carried) TRACR_LOG(info, "  {}: {} -- {}", d.key, d.value, d.reason);
  }
  return {};
}

}  // namespace tracr::controller
