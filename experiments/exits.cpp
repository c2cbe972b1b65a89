#include "experiments/exits.hpp"

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tracr::experiments {

namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The pooled features a linear head reads: [B, C] as it is, else the mean
// over every dimension after the channels.
at::Tensor pooled(const at::Tensor& x) {
  if (x.dim() <= 2) return x.to(torch::kFloat);
  return torch::flatten(x, 2).mean(2).to(torch::kFloat);
}

}  // namespace

std::vector<ExitAnswer> exit_answers(const at::Tensor& logits) {
  const at::Tensor l = logits.detach().to(torch::kCPU, torch::kFloat).contiguous();
  const at::Tensor p = torch::softmax(l, 1);
  const auto [best, idx] = p.max(1);
  // H = -sum p ln p over the classes, with 0 ln 0 = 0.
  const at::Tensor h = -(p * torch::where(p > 0, p.log(), torch::zeros_like(p))).sum(1);
  const int64_t c = l.size(1);
  const double ln_c = c > 1 ? std::log(static_cast<double>(c)) : 1.0;
  std::vector<ExitAnswer> out(static_cast<size_t>(l.size(0)));
  for (int64_t i = 0; i < l.size(0); ++i) {
    ExitAnswer& a = out[static_cast<size_t>(i)];
    a.top1 = idx[i].item<int64_t>();
    a.max_softmax = best[i].item<float>();
    a.entropy_conf = c > 1 ? static_cast<float>(1.0 - static_cast<double>(h[i].item<float>()) / ln_c) : 1.0f;
  }
  return out;
}

float exit_confidence(const ExitAnswer& a, const std::string& measure) {
  return measure == "entropy" ? a.entropy_conf : a.max_softmax;
}

ExitHead::~ExitHead() = default;

Result<std::unique_ptr<ExitHead>> ExitHead::load(const std::string& path, c10::Device device) {
  std::unique_ptr<ExitHead> h(new ExitHead());
  h->path_ = path;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return make_error(Errc::io, fmt::format("exit head {}: no such file", path));
  try {
    h->m_ = std::make_unique<torch::jit::Module>(torch::jit::load(path, device));
    h->m_->eval();
  } catch (const std::exception& e) {
    return make_error(Errc::io, fmt::format("exit head {}: not a TorchScript module: {}", path, first_line(e.what())));
  }
  return h;
}

Result<at::Tensor> ExitHead::logits(const at::Tensor& x) const {
  at::Tensor y;
  try {
    y = m_->forward({x}).toTensor();
  } catch (const std::exception& e) {
    return make_error(Errc::invalid_argument, fmt::format("exit head {} fails on an input of shape [{}]: {}", path_,
                                                          fmt::join(x.sizes(), ", "), first_line(e.what())));
  }
  if (y.dim() != 2 || y.size(0) != x.size(0))
    return make_error(Errc::invalid_argument,
                      fmt::format("exit head {} returns shape [{}] for an input of {} samples; expected [{}, classes]",
                                  path_, fmt::join(y.sizes(), ", "), x.size(0), x.size(0)));
  return y.to(torch::kFloat);
}

Result<int> exit_layer(const SplitModel& model, const std::string& after) {
  const int n = model.num_layers();
  int i = -1;
  for (const auto& l : model.layers())
    if (l.name == after) i = l.index;
  if (i < 0 && !after.empty() && std::all_of(after.begin(), after.end(), [](char ch) { return std::isdigit(ch); }))
    i = after.size() < 9 ? std::stoi(after) : n;
  if (i < 0 || i >= n) {
    std::string names;  // the first few, as layer_profiles.name stores them
    for (int k = 0; k < std::min(n - 1, 8); ++k) names += (k ? ", " : "") + model.layers()[static_cast<size_t>(k)].name;
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}' is not a layer of {}; expected a layer name ({}{}; layer_profiles.name lists "
                                  "them all) or an index 0..{}",
                                  after, model.name(), names, n - 1 > 8 ? ", ..." : "", n - 2));
  }
  if (i == n - 1)
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}' is {}'s last layer: its output is the model's own answer; expected a layer "
                                  "before it (0..{})",
                                  after, model.name(), n - 2));
  if (const std::string why = model.split_refusal(i + 1); !why.empty())
    return make_error(Errc::invalid_argument,
                      fmt::format("the cut after '{}' cannot be used: {}; expected a layer whose output can cross a "
                                  "cut",
                                  model.layers()[i].name, why));
  const std::string& name = model.layers()[i].name;
  bool crosses = false;
  for (const auto& t : model.crossing(i + 1)) crosses |= t.name == name;
  if (!crosses)
    return make_error(Errc::invalid_argument,
                      fmt::format("the output of '{}' is not among what crosses the cut after it; expected a layer "
                                  "whose output a later layer reads",
                                  name));
  return i;
}

Result<at::Tensor> exit_input(const SplitModel& model, int layer, const Bundle& crossing) {
  const std::string& name = model.layers().at(static_cast<size_t>(layer)).name;
  for (const auto& t : crossing)
    if (t.name == name) return t.tensor;
  return make_error(Errc::internal, fmt::format("the output of '{}' is not in the bundle at cut {}", name, layer + 1));
}

Status save_linear_head(const std::string& path, const at::Tensor& weight, const at::Tensor& bias) {
  try {
    torch::jit::Module m("tracr_linear_exit");
    m.register_parameter("weight", weight.detach().to(torch::kCPU, torch::kFloat).contiguous().clone(), false);
    m.register_parameter("bias", bias.detach().to(torch::kCPU, torch::kFloat).contiguous().clone(), false);
    m.define(R"JIT(
def forward(self, x):
    if x.dim() > 2:
        x = torch.flatten(x, 2).mean(2)
    return torch.matmul(x.float(), self.weight.t()) + self.bias
)JIT");
    std::error_code ec;
    if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path(), ec);
    const std::string tmp = path + ".tmp";
    m.save(tmp);
    fs::rename(tmp, path, ec);
    if (ec) return make_error(Errc::io, fmt::format("exit head {}: cannot be written: {}", path, ec.message()));
  } catch (const std::exception& e) {
    return make_error(Errc::io, fmt::format("exit head {}: cannot be written: {}", path, first_line(e.what())));
  }
  return {};
}

namespace {

// Pooled features at each exit layer and the labels, over a data set.
struct Features {
  std::vector<at::Tensor> at;  // per exit: [S, C_in]
  at::Tensor labels;           // [S]
};

Result<Features> features(const SplitModel& model, const std::vector<int>& layers, const Dataset& ds, int64_t max,
                          int64_t batch) {
  torch::NoGradGuard ng;
  std::vector<std::vector<at::Tensor>> parts(layers.size());
  std::vector<at::Tensor> labels;
  BatchLoader loader(ds, batch, max);
  while (true) {
    auto b = loader.next();
    if (!b) return b.error();
    if (!*b) break;
    if ((*b)->size() == 0) continue;
    Bundle x = SplitModel::input_bundle((*b)->images.to(model.device()));
    int at = 0;
    for (size_t e = 0; e < layers.size(); ++e) {
      auto y = model.run(at, layers[e] + 1, std::move(x));
      if (!y) return y.error();
      x = std::move(*y);
      at = layers[e] + 1;
      auto in = exit_input(model, layers[e], x);
      if (!in) return in.error();
      parts[e].push_back(pooled(*in).cpu());
    }
    labels.push_back((*b)->labels.to(torch::kLong));
  }
  if (labels.empty()) return make_error(Errc::invalid_argument, "the data set gave no sample to train the exits on");
  Features f;
  for (auto& p : parts) f.at.push_back(torch::cat(p, 0));
  f.labels = torch::cat(labels, 0);
  return f;
}

double accuracy(const at::Tensor& w, const at::Tensor& b, const at::Tensor& x, const at::Tensor& y) {
  torch::NoGradGuard ng;
  const at::Tensor pred = (torch::matmul(x, w.t()) + b).argmax(1);
  return pred.eq(y).to(torch::kDouble).mean().item<double>();
}

}  // namespace

Result<std::vector<ExitTrainResult>> train_linear_exits(const SplitModel& model, const std::vector<int>& layers,
                                                        const Dataset& train, const Dataset* test,
                                                        const ExitTrainOptions& o) {
  const int n = model.num_layers();
  const auto& out = n > 0 ? model.layers().back().output_shape : std::vector<int64_t>{};
  if (model.task() == ModelTask::detection || out.size() != 2)
    return make_error(Errc::invalid_argument,
                      fmt::format("{} is no classifier (its output is [{}], not [batch, classes]): its exits have no "
                                  "classes to learn",
                                  model.name(), fmt::join(out, ", ")));
  const int64_t classes = out.back();
  auto& m = const_cast<SplitModel&>(model);
  m.set_training(0, n, false);  // the backbone is frozen: BatchNorm's running statistics, no dropout
  auto tr = features(model, layers, train, o.train_samples, o.batch_size);
  if (!tr) return tr.error();
  std::optional<Features> te;
  if (test) {
    auto t = features(model, layers, *test, o.test_samples, o.batch_size);
    if (!t) return t.error();
    te = std::move(*t);
  }
  if (tr->labels.min().item<int64_t>() < 0 || tr->labels.max().item<int64_t>() >= classes)
    return make_error(Errc::invalid_argument,
                      fmt::format("the training labels run {}..{} but {} has {} classes; expected the data set the "
                                  "model was trained on",
                                  tr->labels.min().item<int64_t>(), tr->labels.max().item<int64_t>(), model.name(),
                                  classes));
  std::vector<ExitTrainResult> res;
  for (size_t e = 0; e < layers.size(); ++e) {
    const at::Tensor& x = tr->at[e];
    ExitTrainResult r;
    r.layer = layers[e];
    r.features = x.size(1);
    r.train_count = x.size(0);
    torch::manual_seed(o.seed + e);
    torch::nn::Linear lin(x.size(1), classes);
    torch::optim::Adam opt(lin->parameters(), torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
    for (int ep = 0; ep < o.epochs; ++ep) {
      const at::Tensor order = torch::randperm(x.size(0), torch::kLong);
      double sum = 0;
      int64_t steps = 0;
      for (int64_t s = 0; s < x.size(0); s += o.batch_size) {
        const at::Tensor idx = order.slice(0, s, std::min(s + o.batch_size, x.size(0)));
        opt.zero_grad();
        const at::Tensor loss = torch::cross_entropy_loss(lin->forward(x.index_select(0, idx)),
                                                          tr->labels.index_select(0, idx));
        loss.backward();
        opt.step();
        sum += loss.item<double>();
        ++steps;
      }
      r.loss.push_back(steps ? sum / static_cast<double>(steps) : 0);
    }
    r.weight = lin->weight.detach().clone();
    r.bias = lin->bias.detach().clone();
    r.train_accuracy = accuracy(r.weight, r.bias, x, tr->labels);
    if (te) {
      r.test_count = te->at[e].size(0);
      r.test_accuracy = accuracy(r.weight, r.bias, te->at[e], te->labels);
    }
    res.push_back(std::move(r));
  }
  return res;
}

}  // namespace tracr::experiments
