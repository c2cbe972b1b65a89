#include "experiments/train.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <random>

namespace tracr::experiments {

struct Segment::Opt {
  std::unique_ptr<torch::optim::Optimizer> o;
};

Segment::~Segment() = default;

Result<std::unique_ptr<Segment>> Segment::create(std::shared_ptr<SplitModel> model, int a, int b,
                                                 const OptimizerSpec& spec) {
  const int n = model->num_layers();
  if (a < 0 || b > n || a >= b)
    return make_error(Errc::invalid_argument, model->name() + ": segment [" + std::to_string(a) + ", " +
                                                  std::to_string(b) + ") is not a non-empty range within [0, " +
                                                  std::to_string(n) + "]");
  if (auto bad = model->untrainable_layers(a, b); !bad.empty())
    return make_error(Errc::invalid_argument, model->name() + ": layer '" + bad[0] +
                                                  "' keeps its parameters outside torch::nn (TorchScript import) "
                                                  "and cannot be trained");
  if (!(spec.lr > 0)) return make_error(Errc::invalid_argument, "optimizer: lr must be > 0");
  std::unique_ptr<Segment> s(new Segment());
  s->model_ = std::move(model);
  s->a_ = a;
  s->b_ = b;
  s->spec_ = spec;
  s->opt_ = std::make_unique<Opt>();
  std::vector<at::Tensor> params;
  for (auto& p : s->model_->parameters(a, b)) params.push_back(p.tensor);
  if (!params.empty()) {
    if (spec.kind == "sgd")
      s->opt_->o = std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weight_decay));
    else if (spec.kind == "adam")
      s->opt_->o = std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(spec.lr).weight_decay(spec.weight_decay));
    else
      return make_error(Errc::invalid_argument, "optimizer: '" + spec.kind + "', expected sgd or adam");
  }
  s->model_->set_training(a, b, true);
  return s;
}

int64_t Segment::num_params() const {
  int64_t n = 0;
  for (const auto& p : model_->parameters(a_, b_)) n += p.tensor.numel();
  return n;
}

Result<Bundle> Segment::forward(Bundle in) {
  inputs_.clear();
  outputs_.clear();
  model_->set_training(a_, b_, true);
  Bundle leaves;
  for (auto& nt : in) {
    if (!nt.tensor.defined())
      return make_error(Errc::invalid_argument, "segment input '" + nt.name + "' is undefined");
    at::Tensor t = nt.tensor.detach();
    // Segment 0's raw input needs no gradient (and must never travel back).
    if (!(a_ == 0 && nt.name == "input") && t.is_floating_point()) {
      t.requires_grad_(true);
      inputs_.push_back({nt.name, t});
    }
    leaves.push_back({nt.name, t});
  }
  auto out = model_->run_with_grad(a_, b_, std::move(leaves));
  if (!out) {
    inputs_.clear();
    return out.error();
  }
  outputs_ = *out;
  Bundle detached;
  for (const auto& o : outputs_) detached.push_back({o.name, o.tensor.detach()});
  return detached;
}

Result<Bundle> Segment::infer(Bundle in) {
  model_->set_training(a_, b_, false);
  auto out = model_->run(a_, b_, std::move(in));
  model_->set_training(a_, b_, true);
  return out;
}

Result<Bundle> Segment::backward(const Bundle& grad_out) {
  if (outputs_.empty()) return make_error(Errc::invalid_argument, "backward without a pending forward");
  std::vector<at::Tensor> outs, grads;
  for (const auto& g : grad_out) {
    auto it = std::find_if(outputs_.begin(), outputs_.end(), [&](const NamedTensor& o) { return o.name == g.name; });
    if (it == outputs_.end())
      return make_error(Errc::invalid_argument, "gradient for '" + g.name + "', which segment [" +
                                                    std::to_string(a_) + ", " + std::to_string(b_) +
                                                    ") does not output");
    if (!g.tensor.defined() || g.tensor.sizes() != it->tensor.sizes())
      return make_error(Errc::invalid_argument,
                        "gradient for '" + g.name + "' has shape " +
                            (g.tensor.defined() ? c10::str(g.tensor.sizes()) : std::string("undefined")) +
                            ", expected " + c10::str(it->tensor.sizes()));
    if (!it->tensor.requires_grad()) continue;  // nothing in this segment depends on a parameter or input
    outs.push_back(it->tensor);
    grads.push_back(g.tensor.to(it->tensor.device(), it->tensor.scalar_type()));
  }
  if (opt_->o) opt_->o->zero_grad();
  for (auto& l : inputs_) l.tensor.mutable_grad() = at::Tensor();
  try {
    if (!outs.empty()) torch::autograd::backward(outs, grads);
  } catch (const std::exception& ex) {
    return make_error(Errc::internal, "backward through segment [" + std::to_string(a_) + ", " + std::to_string(b_) +
                                          "): " + torch_error_text(ex));
  }
  return finish_backward();
}

Result<Bundle> Segment::backward_loss(const at::Tensor& loss) {
  if (outputs_.empty()) return make_error(Errc::invalid_argument, "backward without a pending forward");
  if (opt_->o) opt_->o->zero_grad();
  for (auto& l : inputs_) l.tensor.mutable_grad() = at::Tensor();
  try {
    loss.backward();
  } catch (const std::exception& ex) {
    return make_error(Errc::internal, std::string("backward from the loss: ") + torch_error_text(ex));
  }
  return finish_backward();
}

Result<Bundle> Segment::finish_backward() {
  if (opt_->o) opt_->o->step();
  ++steps_;
  Bundle grads;
  for (auto& l : inputs_) {
    at::Tensor g = l.tensor.grad();
    grads.push_back({l.name, g.defined() ? g.detach() : torch::zeros_like(l.tensor).detach()});
  }
  inputs_.clear();
  outputs_.clear();
  return grads;
}

Status Segment::save(const std::string& path) const {
  const std::string tmp = path + ".part";
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    torch::serialize::OutputArchive ar;
    for (const auto& nt : state()) ar.write(nt.name, nt.tensor, /*is_buffer=*/true);
    ar.write("__tracr.steps", torch::tensor(steps_, torch::kInt64), true);
    ar.write("__tracr.range", torch::tensor({int64_t{a_}, int64_t{b_}}, torch::kInt64), true);
    if (opt_->o) {
      torch::serialize::OutputArchive oa;
      opt_->o->save(oa);
      ar.write("__tracr.optimizer", oa);
    }
    ar.save_to(tmp);
  } catch (const std::exception& ex) {
    std::remove(tmp.c_str());
    return make_error(Errc::io, "checkpoint " + path + ": " + torch_error_text(ex));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io, "checkpoint " + path + ": " + ec.message());
  return {};
}

Status Segment::load(const std::string& path) {
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path);
    at::Tensor range;
    ar.read("__tracr.range", range, true);
    if (range.numel() != 2 || range[0].item<int64_t>() != a_ || range[1].item<int64_t>() != b_)
      return make_error(Errc::invalid_argument, "checkpoint " + path + " holds another segment than layers [" +
                                                    std::to_string(a_) + ", " + std::to_string(b_) + ")");
    torch::NoGradGuard ng;
    for (auto& nt : state()) {
      at::Tensor t;
      ar.read(nt.name, t, true);
      if (t.sizes() != nt.tensor.sizes())
        return make_error(Errc::invalid_argument, "checkpoint " + path + ": '" + nt.name + "' has shape " +
                                                      c10::str(t.sizes()) + ", expected " +
                                                      c10::str(nt.tensor.sizes()));
      nt.tensor.copy_(t);
    }
    at::Tensor steps;
    ar.read("__tracr.steps", steps, true);
    steps_ = steps.item<int64_t>();
    if (opt_->o) {
      torch::serialize::InputArchive oa;
      ar.read("__tracr.optimizer", oa);
      opt_->o->load(oa);
    }
  } catch (const std::exception& ex) {
    return make_error(Errc::io, "checkpoint " + path + ": " + torch_error_text(ex));
  }
  inputs_.clear();
  outputs_.clear();
  return {};
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(gen() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

Result<TensorDataset> load_tensor_dataset(const Dataset& ds, int64_t max_samples) {
  const int64_t n = max_samples > 0 ? std::min(max_samples, ds.size()) : ds.size();
  if (n <= 0) return make_error(Errc::invalid_argument, ds.name() + ": no samples");
  std::vector<at::Tensor> images;
  std::vector<int64_t> labels;
  images.reserve(n);
  labels.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    auto s = ds.get(i);
    if (!s) return s.error();
    if (s->label < 0)
      return make_error(Errc::invalid_argument, ds.name() + ": sample " + s->id + " has no label (training needs one)");
    images.push_back(s->image);
    labels.push_back(s->label);
  }
  TensorDataset d;
  d.images = torch::stack(images);
  d.labels = torch::tensor(labels, torch::kInt64);
  return d;
}

std::pair<at::Tensor, at::Tensor> gather_batch(const TensorDataset& d, const std::vector<int64_t>& order,
                                               int64_t first, int64_t batch) {
  const int64_t last = std::min<int64_t>(first + batch, static_cast<int64_t>(order.size()));
  std::vector<int64_t> idx(order.begin() + first, order.begin() + last);
  auto ix = torch::tensor(idx, torch::kInt64);
  return {d.images.index_select(0, ix), d.labels.index_select(0, ix)};
}

at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& labels) {
  return torch::nn::functional::cross_entropy(logits, labels.to(logits.device()));
}

Result<std::vector<ReferenceStep>> train_reference(std::shared_ptr<SplitModel> model, const OptimizerSpec& opt,
                                                   const TensorDataset& train, int64_t batch, int64_t steps,
                                                   uint64_t seed) {
  auto seg = Segment::create(model, 0, model->num_layers(), opt);
  if (!seg) return seg.error();
  std::vector<ReferenceStep> out;
  const int64_t n = train.size();
  for (int64_t epoch = 0; static_cast<int64_t>(out.size()) < steps; ++epoch) {
    auto order = epoch_order(n, seed, epoch);
    for (int64_t first = 0; first < n && static_cast<int64_t>(out.size()) < steps; first += batch) {
      auto [x, y] = gather_batch(train, order, first, batch);
      auto fw = (*seg)->forward({{"input", x}});
      if (!fw) return fw.error();
      at::Tensor loss = classification_loss((*seg)->attached_outputs().at(0).tensor, y);
      ReferenceStep r;
      r.epoch = epoch;
      r.step = static_cast<int64_t>(out.size());
      r.loss = loss.item<double>();
      auto bw = (*seg)->backward_loss(loss);
      if (!bw) return bw.error();
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace tracr::experiments
