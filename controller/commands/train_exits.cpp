// `tracrctl train EXPERIMENT.yaml` on an experiment with `exits:` and no
// train.cuts (#44): the linear exit heads trained on the frozen backbone, on
// this machine, from the experiment's data set (Fashion-MNIST: its training
// split, checked on its test split; an image folder: the folder itself).
// Includes LibTorch, like session/model_check.cpp.
#include "controller/commands/train_exits.hpp"

#include <fmt/format.h>

#include "agent/segment.hpp"
#include "core/text.hpp"
#include "core/user_error.hpp"
#include "experiments/exits.hpp"
#include "controller/session/model_check.hpp"

namespace tracr::controller {

namespace ex = tracr::experiments;

Status train_exit_heads(const settings::ExperimentConfig& cfg) {
  if (auto n = check_experiment_model(cfg, false); !n) return core::bad_input(n.error());
  if (auto st = settings::check_experiment_files(cfg); !st) return core::bad_input(st.error());
  auto loaded = agent::load_model(agent::model_spec(cfg, "cpu"));
  if (!loaded) return core::command_failed(core::user_text(loaded.error()));
  std::unique_ptr<ex::SplitModel> model = std::move(*loaded);
  const std::string fp_before = agent::model_fingerprint(*model);
  std::vector<size_t> which;
  std::vector<int> layers;
  for (size_t i = 0; i < cfg.exits.size(); ++i) {
    if (cfg.exits[i].head != "linear") continue;  // the user's own head is trained by the user
    auto l = ex::exit_layer(*model, cfg.exits[i].after);
    if (!l) return core::bad_input(fmt::format("exits[{}].after: {}", i, l.error().message));
    which.push_back(i);
    layers.push_back(*l);
  }
  if (which.empty())
    return core::bad_input("exits: no exit has head: linear; the torchscript: heads are yours to train");
  ex::DatasetConfig dc = agent::dataset_config(cfg, model->input_shape());
  std::optional<ex::DatasetConfig> test_dc;
  if (dc.kind == "fashion-mnist") {
    test_dc = dc;
    dc.split = "train";
    test_dc->split = "test";
  }
  auto train = ex::open_dataset(dc);
  if (!train) return core::command_failed(core::user_text(train.error()));
  std::unique_ptr<ex::Dataset> test;
  if (test_dc) {
    auto t = ex::open_dataset(*test_dc);
    if (!t) return core::command_failed(core::user_text(t.error()));
    test = std::move(*t);
  }
  ex::ExitTrainOptions o;
  // Defaults of their own where the experiment leaves train.* unset: a
  // linear head on pooled features wants more passes and a larger step
  // than a whole network.
  o.epochs = cfg.origin.count("train.epochs") ? cfg.train.epochs : 20;
  o.lr = cfg.origin.count("train.lr") ? cfg.train.lr : 1e-2;
  o.batch_size = cfg.train.batch_size;
  o.weight_decay = cfg.train.weight_decay;
  o.train_samples = cfg.train.train_samples;
  o.test_samples = cfg.train.test_samples;
  o.seed = cfg.seed;
  fmt::print("training {} linear exit head(s) of {} on its frozen backbone ({} epochs, Adam lr {}, batch {}) on {}{}\n",
             which.size(), model->name(), o.epochs, o.lr, o.batch_size, dc.kind == "fashion-mnist" ? "Fashion-MNIST train" : dc.path.empty() ? dc.kind + " data" : dc.path,
             test ? ", checked on Fashion-MNIST test" : "");
  std::fflush(stdout);
  auto res = ex::train_linear_exits(*model, layers, **train, test.get(), o);
  if (!res) return core::command_failed(core::user_text(res.error()));
  if (agent::model_fingerprint(*model) != fp_before)
    return core::command_failed("the backbone's weights changed while its exits trained (fingerprint differs): "
                                "nothing written");
  std::vector<std::vector<std::string>> t = {
      {"exit", "after", "layer", "features", "loss first/last", "train acc", "test acc", "file"}};
  for (size_t k = 0; k < res->size(); ++k) {
    const auto& r = (*res)[k];
    const std::string file = settings::exit_head_file(cfg, which[k]);
    if (auto st = ex::save_linear_head(file, r.weight, r.bias); !st) return core::command_failed(core::user_text(st.error()));
    t.push_back({std::to_string(which[k]), cfg.exits[which[k]].after, std::to_string(r.layer),
                 std::to_string(r.features),
                 r.loss.empty() ? "-" : fmt::format("{:.4f}/{:.4f}", r.loss.front(), r.loss.back()),
                 fmt::format("{:.4f} ({})", r.train_accuracy, r.train_count),
                 r.test_accuracy < 0 ? "-" : fmt::format("{:.4f} ({})", r.test_accuracy, r.test_count), file});
  }
  std::fputs(core::align(t, {1, 7}).c_str(), stdout);
  fmt::print("backbone unchanged (fingerprint {}); the heads are TorchScript files (torch.jit.load reads them); "
             "`tracrctl run` reads them from these paths\n",
             fp_before.substr(0, 16));
  return {};
}

}  // namespace tracr::controller
