// The experiment file: parsed with the settings table, cross-checked, its
// paths resolved; the splits, files and devices it names.
#include "settings/experiment_settings.hpp"
#include "settings/source.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
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

std::string_view dataset_kind_name(DatasetKind k) {
  switch (k) {
    case DatasetKind::synthetic: return "synthetic";
    case DatasetKind::imagefolder: return "imagefolder";
    case DatasetKind::fashion_mnist: return "fashion_mnist";
  }
  return "synthetic";
}

namespace {

// The chain's hops name known link profiles, and every split entry has one
// cut per chain device. A chain of one device takes its hop's link and
// compression as the run's own (the two-tier run they describe).
// split: plan (#43): the run's placements chosen by the planner when the
// run starts, from what every device profiled and each hop's probe.
Status check_split_plan(const ExperimentConfig& cfg) {
  if (!cfg.split.plan) return {};
  auto refuse = [&](const std::string& why) { return err_at(cfg.pos_of("split"), "split", "plan: " + why); };
  if (chain_hops(cfg) < 2)
    return refuse("the planner chooses placements on a chain of two or more devices (`chain`); a two-tier run "
                  "sweeps every split with `split: all` (tracrctl plan then predicts each)");
  if (!cfg.record.layers)
    return refuse("needs record.layers: true (every device's layer profiles are the planner's compute terms)");
  if (!cfg.probe.enabled)
    return refuse("needs probe.enabled: true (each hop's link probe is the planner's transfer terms)");
  return {};
}

Status check_chain(ExperimentConfig& cfg) {
  for (size_t i = 0; i < cfg.chain.size(); ++i) {
    const ChainHop& h = cfg.chain[i];
    if (h.link.empty()) continue;
    if (auto r = resolve_link(cfg, h.link, "chain"); !r)
      return err_at(cfg.pos_of("chain"), fmt::format("chain[{}].link", i),
                    r.error().message.substr(std::string("chain: ").size()));
  }
  const size_t m = chain_hops(cfg);
  auto check_entries = [&](const SplitSpec& sp, const std::string& key, const std::string& at) -> Status {
    if (sp.all || sp.plan) return {};
    for (size_t i = 0; i < sp.entries.size(); ++i) {
      const wire::Placement& p = sp.entries[i];
      if (p.hops() == m) continue;
      std::string chain;
      for (const auto& h : cfg.chain) chain += (chain.empty() ? "" : ", ") + h.device;
      std::vector<std::string> cuts;  // as written: a named cut by its name
      for (size_t j = 0; j < p.cuts.size(); ++j)
        cuts.push_back(i < sp.names.size() && j < sp.names[i].size() && !sp.names[i][j].empty()
                           ? sp.names[i][j]
                           : std::to_string(p.cuts[j]));
      const std::string have = p.hops() == 1 ? fmt::format("{} is one cut point", cuts[0])
                                             : fmt::format("[{}] has {} cut points", fmt::join(cuts, ", "), p.hops());
      const std::string example = m == 1 ? std::string("3") : "[3, 13]";
      return err_at(cfg.pos_of(at), fmt::format("{}[{}]", key, i),
                    fmt::format("{}; the chain {} has {} device{} after the PARTICIPANT, so every entry needs {} cut "
                                "point{} (e.g. {})",
                                have, chain.empty() ? "(the SERVER alone)" : "[" + chain + "]", m, m == 1 ? "" : "s",
                                m, m == 1 ? "" : "s", example));
    }
    return {};
  };
  TRACR_TRY(check_entries(cfg.split, "split", "split"));
  for (const auto& [name, sp] : cfg.participant_splits) {
    TRACR_TRY(check_entries(sp, "participant_splits." + name, "participant_splits"));
    if (sp.plan)
      return err_at(cfg.pos_of("participant_splits"), "participant_splits." + name,
                    "plan: the planner chooses the run's placements for every participant; expected `split: plan` "
                    "(or placements listed for this participant)");
  }
  TRACR_TRY(check_split_plan(cfg));
  if (cfg.chain.size() == 1) {
    const ChainHop& h = cfg.chain[0];
    if (!h.link.empty()) cfg.link = {h.link};
    if (!h.compression.empty()) {
      auto spec = protocol::CodecSpec::parse(h.compression);
      if (!spec) return make_error(Errc::config, spec.error().message);  // parsed when read: cannot fail
      cfg.compression = h.compression;
      cfg.codec = *spec;
      cfg.compression_list.clear();
    }
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
  TRACR_TRY(check_chain(cfg));
  if (!cfg.exits.empty() && cfg.batch_size != 1)
    return err_at(cfg.pos_of("batch_size"), "batch_size",
                  fmt::format("{} with exits; expected batch_size: 1 (a frame ends at an exit as a whole: per-sample "
                              "exits of a batch are not built)",
                              cfg.batch_size));
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
// The settings table says which are such paths (PathKind::controller_path in
// experiment_settings.def); paths used on the agents' devices
// (train.checkpoint_dir, train.export: device_path) and `~/` paths are left as
// written.
void resolve_paths_against_file(ExperimentConfig& cfg) {
  const fs::path dir = fs::path(cfg.source).parent_path();
  if (dir.empty()) return;  // the file is in the current directory: nothing changes
  auto resolve = [&](const std::string& setting, std::string& p) {
    auto it = cfg.origin.find(setting);
    if (p.empty() || it == cfg.origin.end() || it->second.file != cfg.source) return;
    if (p == "~" || p.rfind("~/", 0) == 0 || fs::path(p).is_absolute()) return;
    p = (dir / p).lexically_normal().string();
  };
  for (const Setting& s : settings())  // devices, output, weights, dataset.path, dataset.class_names
    if (s.path == PathKind::controller_path) resolve(s.info.name, s.text(cfg));
  static const std::string ts = "torchscript:";
  auto resolve_model = [&](std::string& m) {
    if (m.rfind(ts, 0) != 0) return;
    std::string p = m.substr(ts.size());
    resolve("model", p);
    m = ts + p;
  };
  resolve_model(cfg.model);
  for (auto& m : cfg.model_list) resolve_model(m);
  for (auto& e : cfg.exits) {
    std::string f = e.file;
    resolve("exits", f);
    if (e.head != "linear") e.head = "torchscript:" + f;
    e.file = f;
  }
}

}  // namespace

Result<ExperimentConfig> load_experiment(const std::string& path, const std::vector<std::string>& sets) {
  auto text = read_text(path, "experiment");
  if (!text) return text.error();
  auto cfg = parse_experiment(*text, path, true, sets);
  if (cfg) resolve_paths_against_file(*cfg);
  return cfg;
}

Status resolve_split_names(ExperimentConfig& cfg, const std::vector<std::string>& layers) {
  auto resolve = [&](SplitSpec& sp, const std::string& key, const std::string& at) -> Status {
    if (!sp.has_names()) return {};
    for (size_t i = 0; i < sp.entries.size() && i < sp.names.size(); ++i) {
      auto& cuts = sp.entries[i].cuts;
      for (size_t j = 0; j < cuts.size() && j < sp.names[i].size(); ++j) {
        const std::string& name = sp.names[i][j];
        if (name.empty()) continue;
        const auto it = std::find(layers.begin(), layers.end(), name);
        const std::string where = cuts.size() > 1 ? fmt::format("{}[{}][{}]", key, i, j) : fmt::format("{}[{}]", key, i);
        if (it == layers.end()) {
          const std::string near = did_you_mean(name, layers);
          return err_at(cfg.pos_of(at), where,
                        fmt::format("model '{}' has no layer '{}'{}; expected a split point 0..{} or the name of a "
                                    "layer to cut after (tracrctl profile {} lists them)",
                                    cfg.model, name, near.empty() ? "" : " (did you mean '" + near + "'?)", layers.size(),
                                    cfg.model));
        }
        cuts[j] = static_cast<int>(it - layers.begin()) + 1;
      }
      for (size_t j = 1; j < cuts.size(); ++j)
        if (cuts[j] < cuts[j - 1])
          return err_at(cfg.pos_of(at), fmt::format("{}[{}]", key, i),
                        fmt::format("cut {} comes after {}; expected non-decreasing cut points (layers named: "
                                    "split k cuts after layer k-1)",
                                    cuts[j], cuts[j - 1]));
      for (size_t e = 0; e < i; ++e)
        if (sp.entries[e] == sp.entries[i])
          return err_at(cfg.pos_of(at), fmt::format("{}[{}]", key, i),
                        fmt::format("{} is {}[{}] again, by name; expected distinct entries",
                                    cuts.size() > 1 ? "this placement" : "split " + std::to_string(cuts[0]), key, e));
    }
    sp.names.clear();
    return {};
  };
  TRACR_TRY(resolve(cfg.split, "split", "split"));
  for (auto& [name, sp] : cfg.participant_splits)
    TRACR_TRY(resolve(sp, "participant_splits." + name, "participant_splits"));
  return {};
}

std::vector<int> SplitSpec::points() const {
  std::vector<int> out;
  out.reserve(entries.size());
  for (const auto& p : entries) out.push_back(p.cuts.empty() ? 0 : p.cuts.front());
  return out;
}

std::string exit_head_file(const ExperimentConfig& cfg, size_t i) {
  const ExitSpec& e = cfg.exits.at(i);
  if (!e.file.empty()) return e.file;
  static const std::string ts = "torchscript:";
  const std::string model =
      cfg.model.rfind(ts, 0) == 0 ? fs::path(cfg.model.substr(ts.size())).stem().string() : cfg.model;
  return (fs::path(cfg.output).parent_path() / "exits" / (model + "." + e.after + ".pt")).string();
}

size_t chain_hops(const ExperimentConfig& cfg) { return cfg.chain.empty() ? 1 : cfg.chain.size(); }

Result<std::vector<wire::Placement>> resolve_placements(const ExperimentConfig& cfg, const SplitSpec& sp,
                                                       int num_layers, const std::string& key) {
  const size_t m = chain_hops(cfg);
  if (sp.plan) return std::vector<wire::Placement>{};  // chosen when the run starts (check_split_plan)
  if (sp.all) {
    const uint64_t count = wire::placement_count(m, num_layers);
    if (m > 1 && count > kMaxAllPlacements)
      return err_at(cfg.pos_of(key), key,
                    fmt::format("all: model '{}' with {} layers has {} placements on a chain of {} devices; expected "
                                "at most {} for `all`: `split: plan` (the planner's best plan_k placements) or the placements to run "
                                "(e.g. [[3, 13], [5, 13]])",
                                cfg.model, num_layers, count == UINT64_MAX ? std::string("over 10^19") : std::to_string(count), m,
                                kMaxAllPlacements));
    return wire::all_placements(m, num_layers);
  }
  for (size_t i = 0; i < sp.entries.size(); ++i)
    if (auto st = wire::check_placement(sp.entries[i], num_layers); !st)
      return err_at(cfg.pos_of(key), fmt::format("{}[{}]", key, i),
                    fmt::format("{} in model '{}'; expected cut points in 0..{}, non-decreasing", st.error().message,
                                cfg.model, num_layers));
  return sp.entries;
}

Result<std::vector<int>> resolve_splits(const ExperimentConfig& cfg, int num_layers) {
  std::vector<int> out;
  if (cfg.split.all) {
    for (int k = 0; k <= num_layers; ++k) out.push_back(k);
    return out;
  }
  for (int k : cfg.split.points()) {
    if (k > num_layers)
      return err_at(cfg.pos_of("split"), "split",
                    fmt::format("split point {} is beyond model '{}' with {} layers; expected 0..{}", k,
                                cfg.model, num_layers, num_layers));
    out.push_back(k);
  }
  return out;
}

namespace {

// Whether a .jpg/.jpeg/.png file (any case) is anywhere under `dir`; stops at
// the first. A folder that cannot be read is left to the dataset's own error.
bool holds_an_image(const std::string& dir) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return true;
  for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) return true;
    std::string ext = it->path().extension().string();
    for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((ext == ".jpg" || ext == ".jpeg" || ext == ".png") && it->is_regular_file(ec)) return true;
  }
  return false;
}

}  // namespace

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
  for (const auto& e : cfg.exits)  // a linear head's file is `tracrctl train`'s to write (checked by the run)
    if (e.head != "linear") TRACR_TRY(need("exits", e.file, false));
  if (cfg.dataset.kind != DatasetKind::synthetic) TRACR_TRY(need("dataset.path", cfg.dataset.path, true));
  // An image folder without one image would fail on the PARTICIPANT after
  // the agents started (#24): said before anything starts.
  if (cfg.dataset.kind == DatasetKind::imagefolder && !cfg.dataset.path.empty() &&
      !holds_an_image(expand_home(cfg.dataset.path)))
    return make_error(Errc::io, fmt::format("{}: dataset.path: '{}' holds no .jpg, .jpeg or .png file; expected an "
                                            "image folder (one subfolder of images per class)",
                                            cfg.pos_of("dataset.path").str(), cfg.dataset.path));
  TRACR_TRY(need("dataset.class_names", cfg.dataset.class_names_file, false));
  return {};
}

namespace {

// The chain's devices take their roles from it (load_experiment_devices).
Status place_chain(const ExperimentConfig& cfg, DevicesConfig& d) {
  std::string names;
  for (const auto& dev : d.devices) names += (names.empty() ? "" : ", ") + dev.name;
  for (size_t i = 0; i < cfg.chain.size(); ++i)
    if (!d.find(cfg.chain[i].device))
      return err_at(cfg.pos_of("chain"), fmt::format("chain[{}]", i),
                    fmt::format("device '{}' is not in devices file {}; expected one of its devices ({})",
                                cfg.chain[i].device, d.source, names));
  std::vector<DeviceConfig> kept;
  for (auto& dev : d.devices) {
    const bool in_chain = std::any_of(cfg.chain.begin(), cfg.chain.end(),
                                      [&](const ChainHop& h) { return h.device == dev.name; });
    if (!in_chain && dev.role == DeviceRole::server) continue;  // takes no part in this run
    if (in_chain) dev.role = dev.name == cfg.chain.back().device ? DeviceRole::server : DeviceRole::participant;
    kept.push_back(std::move(dev));
  }
  d.devices = std::move(kept);
  for (const auto& h : cfg.chain) d.chain.push_back(h.device);
  if (d.participants().empty())
    return err_at(cfg.pos_of("chain"), "chain",
                  fmt::format("takes every PARTICIPANT of devices file {}; expected at least one PARTICIPANT device "
                              "outside the chain to send frames into it",
                              d.source));
  return {};
}

}  // namespace

Result<DevicesConfig> load_experiment_devices(const ExperimentConfig& cfg, RoleCheck roles) {
  const bool chain = !cfg.chain.empty() && roles == RoleCheck::inference;
  const RoleCheck load_roles = chain ? RoleCheck::none : roles;
  Result<DevicesConfig> d = make_error(Errc::internal, "unset");
  if (cfg.devices_explicit) {
    d = load_devices(cfg.devices, load_roles);
    if (!d && d.error().code == Errc::io)
      d.error().message = fmt::format("{}: devices: {}", cfg.pos_of("devices").str(), d.error().message);
  } else {
    d = load_devices_or_default(cfg.devices, load_roles);
  }
  if (d && chain) TRACR_TRY(place_chain(cfg, *d));
  return d;
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
