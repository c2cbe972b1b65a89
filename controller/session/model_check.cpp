// check_experiment_model: the model, input shape, split points and training
// cuts an experiment names, checked against the model registry before deploy.
// The only controller file besides models_cmd.cpp that includes LibTorch.
#include "controller/session/model_check.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#if TRACR_WITH_TORCH
#include <ATen/ATen.h>

#include "experiments/exits.hpp"
#include "experiments/registry.hpp"
#include "experiments/weights.hpp"
#endif

namespace tracr::controller {

namespace {

Error config_error(const settings::ExperimentConfig& cfg, const std::string& key, const std::string& msg) {
  settings::SourcePos p = cfg.pos_of(key);
  if (!p.known()) p.file = cfg.source.empty() ? "<experiment>" : cfg.source;
  return make_error(Errc::config, fmt::format("{}: {}: {}", p.str(), key, msg));
}

// The first line of a message: LibTorch errors carry a backtrace after it.
std::string first_line(const std::string& s) {
  std::string l = s.substr(0, s.find('\n'));
  while (!l.empty() && std::isspace(static_cast<unsigned char>(l.back()))) l.pop_back();
  return l;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

#if TRACR_WITH_TORCH
namespace ex = tracr::experiments;
constexpr const char* kScript = "torchscript:";

// `model` names a registry id (a wrong case or a typo names the closest) or a file.
Status check_model_id(const settings::ExperimentConfig& cfg) {
  const auto& registry = ex::ModelRegistry::global();
  if (cfg.model.rfind(kScript, 0) == 0 || registry.find(cfg.model)) return {};
  const auto names = registry.names();
  std::string suggestion;
  for (const auto& n : names)
    if (lower(n) == lower(cfg.model)) suggestion = n;  // ids are lower case: ResNet18 -> resnet18
  if (suggestion.empty()) suggestion = settings::did_you_mean(cfg.model, names);
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  return config_error(cfg, "model",
                      fmt::format("unknown model '{}'{}; expected a registry id ({}) or torchscript:<path> "
                                  "(`tracrctl models` lists them)",
                                  cfg.model, suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)", known));
}

// The model built on this machine (CPU, random weights), or why it cannot be.
Result<std::unique_ptr<ex::SplitModel>> build_for_check(const settings::ExperimentConfig& cfg) {
  ex::ModelConfig mc;
  mc.input_shape = cfg.input_size;
  mc.device = "cpu";  // the controller only needs the layer table
  mc.seed = cfg.seed;
  mc.num_classes = cfg.num_classes;
  mc.granularity = cfg.granularity;
  mc.optimize = cfg.optimize;
  auto model = ex::create_model(cfg.model, mc);
  if (model) return model;
  const std::string why = first_line(model.error().message);
  if (cfg.model.rfind(kScript, 0) == 0) return config_error(cfg, "model", "cannot be loaded: " + why);
  if (cfg.input_size.empty())
    return config_error(cfg, "model", fmt::format("model '{}' cannot be built: {}", cfg.model, why));
  return config_error(cfg, "input_size",
                      fmt::format("model '{}' cannot take input [{}]: {}; expected a shape it accepts ({})", cfg.model,
                                  fmt::join(cfg.input_size, ", "), why, ex::model_description(cfg.model)));
}

// num_classes against what the built model really outputs (a TorchScript
// model, or a zoo model whose classifier does not take it, keeps its own);
// the input's rank against the dataset's.
Status check_model_io(const settings::ExperimentConfig& cfg, const ex::SplitModel& model) {
  const int n = model.num_layers();
  if (cfg.num_classes > 0 && model.task() != ex::ModelTask::detection && n > 0) {
    const auto& out = model.layers().back().output_shape;
    const int64_t width = out.size() == 2 ? out.back() : 0;  // [batch, classes]; anything else is no classifier
    if (width != cfg.num_classes)
      return config_error(cfg, "num_classes",
                          fmt::format("{} but model '{}' outputs {} classes (last layer '{}', shape [{}]); expected "
                                      "num_classes: {} or a model built for {}",
                                      cfg.num_classes, cfg.model, width, model.layers().back().name,
                                      fmt::join(out, ", "), width, cfg.num_classes));
  }
  // Image datasets give [C, H, W]; a feature vector or a token sequence
  // comes from synthetic data (or a dataset of its own, not built yet).
  const auto& in = model.input_shape();
  if (cfg.dataset.kind != settings::DatasetKind::synthetic && !in.empty() && in.size() != 3)
    return config_error(cfg, cfg.input_size.empty() ? "model" : "input_size",
                        fmt::format("model '{}' takes input [{}] (rank {}) but dataset.type {} gives images [C, H, "
                                    "W]; expected input_size [C, H, W] or dataset.type: synthetic for non-image "
                                    "inputs",
                                    cfg.model, fmt::join(in, ", "), in.size(),
                                    settings::dataset_kind_name(cfg.dataset.kind)));
  if (!in.empty())
    if (auto norm = settings::dataset_normalization(cfg, in[0]); !norm) return norm.error();
  return {};
}

// Every split within 0..N; a graph model's cut that cannot run: named when
// asked for, skipped by a sweep. `split`, then each participant_splits entry
// (its errors under participant_splits, naming the participant).
Status check_split_points(const settings::ExperimentConfig& cfg, const ex::SplitModel& model,
                          const settings::SplitSpec& sp, const std::string& key, const std::string& who) {
  const int n = model.num_layers();
  if (settings::chain_hops(cfg) > 1) {
    // A chain's placements: their count (all), range and order; each cut one the model can make.
    auto ps = settings::resolve_placements(cfg, sp, n, key);
    if (!ps) return ps.error();
    for (const auto& p : *ps)
      for (int k : p.cuts)
        if (const std::string why = model.split_refusal(k); !why.empty() && !sp.all)
          return config_error(cfg, key,
                              fmt::format("{}placement [{}]: cut {} (after layer '{}') cannot be used: {}", who,
                                          fmt::join(p.cuts, ", "), k, model.layers()[k - 1].name, why));
    return {};
  }
  std::vector<int> ks;
  if (sp.all)
    for (int k = 0; k <= n; ++k) ks.push_back(k);
  for (int k : sp.points()) {
    if (k > n)
      return config_error(
          cfg, key,
          fmt::format("{}split point {} is beyond model '{}' with {} layers; expected 0..{}", who, k, cfg.model, n, n));
    ks.push_back(k);
  }
  for (int k : ks) {
    const std::string why = model.split_refusal(k);
    if (why.empty()) continue;
    if (!sp.all)
      return config_error(
          cfg, key,
          fmt::format("{}split {} (after layer '{}') cannot be used: {}", who, k, model.layers()[k - 1].name, why));
    TRACR_LOG(info, "note: the sweep skips split {} (after layer '{}'): {}", k, model.layers()[k - 1].name, why);
  }
  return {};
}

Status check_splits(const settings::ExperimentConfig& cfg, const ex::SplitModel& model) {
  TRACR_TRY(check_split_points(cfg, model, cfg.split, "split", ""));
  for (const auto& [name, sp] : cfg.participant_splits)
    TRACR_TRY(check_split_points(cfg, model, sp, "participant_splits", name + ": "));
  return {};
}

// The weights a run will import, imported here into the built model: a file
// that is no state dict, or whose keys or shapes do not fit, is refused before
// anything starts (#24) instead of failing both agents after launch. A path
// that is not a file here is declared on the devices (checked there).
Status check_weights(const settings::ExperimentConfig& cfg, ex::SplitModel& model) {
  std::error_code ec;
  if (cfg.weights.empty() || !std::filesystem::is_regular_file(cfg.weights, ec)) return {};
  auto st = ex::load_weights(model, cfg.weights);
  if (st) return {};
  return config_error(cfg, "weights", "cannot be loaded: " + first_line(st.error().message));
}

// Every train.cuts entry within 1..N-1, and every segment trainable (#24).
Status check_cuts(const settings::ExperimentConfig& cfg, const ex::SplitModel& model) {
  const int n = model.num_layers();
  for (size_t i = 0; i < cfg.train.cuts.size(); ++i) {
    const int64_t c = cfg.train.cuts[i];
    if (c >= 1 && c <= n - 1) continue;
    Error e = config_error(cfg, "train.cuts",
                           fmt::format("cut {} is outside model '{}' with {} layers; expected cuts in 1..{} (a cut "
                                       "at 0 or {} would leave a segment empty)",
                                       c, cfg.model, n, n - 1, n));
    // Name the entry: "train.cuts[2]: cut 12 is outside ...".
    const auto at = e.message.find("train.cuts: ");
    if (at != std::string::npos) e.message.replace(at, 12, fmt::format("train.cuts[{}]: ", i));
    return e;
  }
  if (cfg.train.cuts.empty()) return {};
  auto bad = model.untrainable_layers(0, n);
  if (bad.empty()) return {};
  return config_error(cfg, "model",
                      fmt::format("'{}' cannot be trained: its layer '{}' {}; expected a model from the "
                                  "registry (tracrctl models) or a TorchScript nn.Sequential of torch.nn "
                                  "modules for split training",
                                  cfg.model, bad.front(),
                                  model.execution() == "layers"
                                      ? "keeps its parameters outside torch::nn (a TorchScript import)"
                                      : "is part of a TorchScript graph, which runs for inference only"));
}

// exits (#44): each `after` a layer the model can hang an exit on, in
// backbone order; with `heads`, each head's file there and taking that
// layer's output to the model's classes.
Status check_exits(const settings::ExperimentConfig& cfg, const ex::SplitModel& model, bool heads) {
  if (cfg.exits.empty()) return {};
  auto refuse = [&](size_t i, const std::string& sub, const std::string& msg) {
    settings::SourcePos p = cfg.pos_of("exits");
    if (!p.known()) p.file = cfg.source.empty() ? "<experiment>" : cfg.source;
    return make_error(Errc::config, fmt::format("{}: exits[{}]{}: {}", p.str(), i, sub, msg));
  };
  const auto& out = model.layers().back().output_shape;
  if (model.task() == ex::ModelTask::detection || out.size() != 2)
    return refuse(0, "", fmt::format("model '{}' is no classifier (its output is [{}]); expected a model whose output "
                                     "is [batch, classes], which an exit can answer for",
                                     cfg.model, fmt::join(out, ", ")));
  std::vector<int> layers;  // each exit's layer, checked in order before any head is read
  for (size_t i = 0; i < cfg.exits.size(); ++i) {
    const auto& e = cfg.exits[i];
    auto layer = ex::exit_layer(model, e.after);
    if (!layer) return refuse(i, ".after", layer.error().message);
    if (!layers.empty() && *layer <= layers.back())
      return refuse(i, ".after", fmt::format("'{}' (layer {}) is not after the exit before it (layer {}); expected "
                                             "the exits in backbone order",
                                             e.after, *layer, layers.back()));
    layers.push_back(*layer);
  }
  for (size_t i = 0; heads && i < cfg.exits.size(); ++i) {
    const auto& e = cfg.exits[i];
    const int* layer = &layers[i];
    const std::string file = settings::exit_head_file(cfg, i);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
      return refuse(i, e.head == "linear" ? ".file" : ".head",
                    e.head == "linear" ? fmt::format("no trained head at {}; expected `tracrctl train {}` to train the "
                                                     "linear exits first (or file: naming one)",
                                                     file, cfg.source.empty() ? "<experiment>" : cfg.source)
                                       : fmt::format("{} does not exist; expected a TorchScript file", file));
    auto h = ex::ExitHead::load(file, c10::Device(c10::kCPU));
    if (!h) return refuse(i, ".head", h.error().message);
    std::vector<int64_t> shape = model.layers()[*layer].output_shape;
    if (!shape.empty()) shape[0] = 2;  // two samples: a head that folds the batch away is found
    auto l = (*h)->logits(at::zeros(shape));
    if (!l)
      return refuse(i, ".head", fmt::format("does not take the output of '{}' (shape [{}]): {}", e.after,
                                            fmt::join(model.layers()[*layer].output_shape, ", "), l.error().message));
    if (l->size(1) != out.back())
      return refuse(i, ".head", fmt::format("{} answers {} classes; expected the model's {} (its output [{}])", file,
                                            l->size(1), out.back(), fmt::join(out, ", ")));
  }
  return {};
}
#endif

}  // namespace

Status resolve_layer_names(settings::ExperimentConfig& cfg) {
  bool named = cfg.split.has_names();
  for (const auto& [name, sp] : cfg.participant_splits) named = named || sp.has_names();
  if (!named) return {};
#if TRACR_WITH_TORCH
  TRACR_TRY(check_model_id(cfg));
  auto model = build_for_check(cfg);
  if (!model) return model.error();
  std::vector<std::string> names;
  for (const auto& l : (*model)->layers()) names.push_back(l.name);
  return settings::resolve_split_names(cfg, names);
#else
  return config_error(cfg, "split", "a cut given by layer name needs the model, and this tracrctl was built without "
                                    "LibTorch; expected split points as numbers");
#endif
}

Result<int> check_experiment_model(const settings::ExperimentConfig& cfg, bool exit_heads,
                                   std::vector<std::string>* layer_names) {
#if TRACR_WITH_TORCH
  TRACR_TRY(check_model_id(cfg));
  auto model = build_for_check(cfg);
  if (!model) return model.error();
  TRACR_TRY(check_model_io(cfg, **model));
  TRACR_TRY(check_weights(cfg, **model));
  TRACR_TRY(check_splits(cfg, **model));
  TRACR_TRY(check_cuts(cfg, **model));
  TRACR_TRY(check_exits(cfg, **model, exit_heads));
  if (layer_names) {
    layer_names->clear();
    for (const auto& l : (*model)->layers()) layer_names->push_back(l.name);
  }
  return (*model)->num_layers();
#else
  (void)cfg;
  (void)exit_heads;
  (void)layer_names;
  return -1;
#endif
}

}  // namespace tracr::controller
