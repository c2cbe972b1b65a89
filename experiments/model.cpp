#include "experiments/model.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "experiments/graph.hpp"
#include "experiments/weights.hpp"

namespace tracr::experiments {

std::string torch_error_text(const std::exception& ex) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&ex)) return without_backtrace(c->what_without_backtrace());
  // Any other exception (torch::jit::JITException, std::runtime_error from
  // the interpreter or the unpickler) only has what(). Never call ourselves
  // here: it recursed until the stack ran out (#24).
  return without_backtrace(ex.what());
}

std::string shape_str(c10::IntArrayRef s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

int64_t count_macs(const std::string& type, const std::vector<at::Tensor>& weights,
                   const at::Tensor& out) {
  // Conv2d: every output element costs (Cin / groups) * kh * kw MACs.
  // Linear: every output element costs in_features MACs.
  if (weights.empty()) return 0;
  const at::Tensor& w = weights.front();
  if (type.find("Conv") != std::string::npos && w.dim() >= 3) {
    int64_t per = 1;
    for (int64_t d = 1; d < w.dim(); ++d) per *= w.size(d);
    return out.numel() * per;
  }
  if (type.find("Linear") != std::string::npos && w.dim() == 2) return out.numel() * w.size(1);
  return 0;
}

Result<protocol::DType> to_protocol_dtype(c10::ScalarType t) {
  using protocol::DType;
  switch (t) {
    case c10::kFloat: return DType::float32;
    case c10::kHalf: return DType::float16;
    case c10::kBFloat16: return DType::bfloat16;
    case c10::kChar: return DType::int8;
    case c10::kByte: return DType::uint8;
    case c10::kInt: return DType::int32;
    case c10::kLong: return DType::int64;
    case c10::kBool: return DType::bool_;
    case c10::kDouble: return DType::float64;
    case c10::kShort: return DType::int16;
    default:
      return make_error(Errc::unsupported_dtype,
                        std::string("torch dtype ") + c10::toString(t) +
                            " has no protocol dtype (expected float32, float16, bfloat16, "
                            "int8, uint8, int16, int32, int64, float64 or bool)");
  }
}

c10::ScalarType to_torch_dtype(protocol::DType d) {
  using protocol::DType;
  switch (d) {
    case DType::float32: return c10::kFloat;
    case DType::float16: return c10::kHalf;
    case DType::bfloat16: return c10::kBFloat16;
    case DType::int8: return c10::kChar;
    case DType::uint8: return c10::kByte;
    case DType::int32: return c10::kInt;
    case DType::int64: return c10::kLong;
    case DType::bool_: return c10::kBool;
    case DType::float64: return c10::kDouble;
    case DType::int16: return c10::kShort;
  }
  return c10::kFloat;
}

Result<c10::Device> resolve_device(const std::string& text) {
  if (text.empty() || text == "auto")
    return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      return make_error(Errc::invalid_argument,
                        "device '" + text + "' requested but CUDA is not available: this LibTorch (" TORCH_VERSION
                        ") was built without CUDA or sees no GPU; use device: cpu, or build tracr against a CUDA "
                        "LibTorch (cmake -DTorch_DIR=<libtorch>/share/cmake/Torch, see README)");
    int index = 0;
    if (text.size() > 4) {
      if (text[4] != ':' || text.size() == 5 ||
          text.find_first_not_of("0123456789", 5) != std::string::npos)
        return make_error(Errc::invalid_argument,
                          "device '" + text + "': expected cpu, cuda, cuda:N or auto");
      index = std::stoi(text.substr(5));
      if (index >= static_cast<int>(torch::cuda::device_count()))
        return make_error(Errc::invalid_argument, "device '" + text + "': only " +
                                                      std::to_string(torch::cuda::device_count()) +
                                                      " CUDA device(s)");
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return make_error(Errc::invalid_argument,
                    "device '" + text + "': expected cpu, cuda, cuda:N or auto");
}

// ---------------------------------------------------------------- SplitModel

SplitModel::~SplitModel() = default;

int64_t SplitModel::num_params() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l.params;
  return n;
}

std::vector<TensorSpec> SplitModel::crossing(int k) const {
  std::vector<TensorSpec> out;
  if (k < 0 || k > num_layers()) return out;
  for (int v : crossing_ids_[k]) out.push_back(value_specs_[v]);
  return out;
}

int64_t SplitModel::crossing_bytes(int k) const {
  int64_t b = 0;
  for (const auto& s : crossing(k)) b += s.bytes;
  return b;
}

Bundle SplitModel::input_bundle(const at::Tensor& input) { return {{"input", input}}; }

Result<Bundle> SplitModel::forward(const at::Tensor& input) const {
  return run(0, num_layers(), input_bundle(input));
}

Result<Bundle> SplitModel::run(int a, int b, Bundle in) const { return run_impl(a, b, std::move(in), false); }

std::string SplitModel::split_refusal(int k) const {
  if (k < 0 || k >= static_cast<int>(refusals_.size())) return "";
  return refusals_[k];
}

Result<Bundle> SplitModel::run_with_grad(int a, int b, Bundle in) const {
  return run_impl(a, b, std::move(in), true);
}

Result<Bundle> SplitModel::run_for_timing(int a, int b, Bundle in) const {
  return run_impl(a, b, std::move(in), false, true);
}

std::vector<NamedTensor> SplitModel::parameters(int a, int b) const {
  std::vector<NamedTensor> out;
  for (int i = std::max(a, 0); i < std::min(b, num_layers()); ++i)
    if (nodes_[i].module)
      for (const auto& kv : nodes_[i].module->named_parameters(true))
        out.push_back({nodes_[i].name + "." + kv.key(), kv.value()});
  return out;
}

std::vector<NamedTensor> SplitModel::state(int a, int b) const {
  std::vector<NamedTensor> out;
  for (int i = std::max(a, 0); i < std::min(b, num_layers()); ++i) {
    if (!nodes_[i].module) continue;
    for (const auto& kv : nodes_[i].module->named_parameters(true))
      out.push_back({nodes_[i].name + "." + kv.key(), kv.value()});
    for (const auto& kv : nodes_[i].module->named_buffers(true))
      out.push_back({nodes_[i].name + "." + kv.key(), kv.value()});
  }
  return out;
}

std::vector<std::string> SplitModel::untrainable_layers(int a, int b) const {
  std::vector<std::string> out;
  // A graph model (a TorchScript file cut as traced) runs for inference
  // only: every layer of it counts, and nodes_ may not describe them.
  for (int i = std::max(a, 0); i < std::min(b, num_layers()); ++i)
    if (engine_ || (i < static_cast<int>(nodes_.size()) && nodes_[i].external_params))
      out.push_back(layers_[i].name);
  return out;
}

void SplitModel::set_training(int a, int b, bool on) {
  for (int i = std::max(a, 0); i < std::min(b, num_layers()); ++i)
    if (nodes_[i].module) nodes_[i].module->train(on);
}

Result<Bundle> SplitModel::run_impl(int a, int b, Bundle in, bool grad, bool refused_ok) const {
  const int n = num_layers();
  if (a < 0 || b > n || a > b)
    return make_error(Errc::invalid_argument,
                      name_ + ": layer range [" + std::to_string(a) + ", " + std::to_string(b) +
                          ") is not within [0, " + std::to_string(n) + "]");
  if (engine_ && grad)
    return make_error(Errc::invalid_argument,
                      name_ + ": a TorchScript graph model runs for inference only (no training)");
  for (int k : {a, b})
    if (a != b && !refused_ok && !split_refusal(k).empty())
      return make_error(Errc::invalid_argument, name_ + ": split " + std::to_string(k) + " (after '" +
                                                    layers_[k - 1].name + "') cannot be used: " +
                                                    split_refusal(k));
  torch::AutoGradMode grad_mode(grad);
  std::vector<at::Tensor> values(value_specs_.size());
  const auto& expected = crossing_ids_[a];
  int64_t batch = -1;
  for (auto& nt : in) {
    auto id = value_ids_.find(nt.name);
    if (id == value_ids_.end() ||
        std::find(expected.begin(), expected.end(), id->second) == expected.end())
      return make_error(Errc::invalid_argument,
                        name_ + ": tensor '" + nt.name + "' does not cross split " +
                            std::to_string(a));
    const int v = id->second;
    if (values[v].defined())
      return make_error(Errc::invalid_argument, name_ + ": tensor '" + nt.name + "' given twice");
    if (!nt.tensor.defined())
      return make_error(Errc::invalid_argument, name_ + ": tensor '" + nt.name + "' is undefined");
    const auto& spec = value_specs_[v];
    const auto sizes = nt.tensor.sizes();
    // Graph models also carry 0-dim tensors (integers and scalars).
    const bool scalar_ok = engine_ && spec.shape.empty() && sizes.empty();
    bool shape_ok = static_cast<size_t>(sizes.size()) == spec.shape.size() && !spec.shape.empty();
    for (size_t d = 1; shape_ok && d < spec.shape.size(); ++d) shape_ok = sizes[d] == spec.shape[d];
    if (!shape_ok && !scalar_ok) {
      return make_error(Errc::invalid_argument,
                        name_ + ": tensor '" + nt.name + "' has shape " + shape_str(sizes) +
                            ", expected " + shape_str(spec.shape) +
                            (spec.shape.empty() ? "" : " (any batch size)"));
    }
    // A graph's crossing tensors need not all lead with the batch (a
    // position table, a 0-dim size): only layer models check it.
    if (!engine_) {
      if (batch >= 0 && sizes[0] != batch)
        return make_error(Errc::invalid_argument, name_ + ": tensor '" + nt.name + "' has batch " +
                                                      std::to_string(sizes[0]) + ", others " +
                                                      std::to_string(batch));
      batch = sizes[0];
    }
    if (nt.tensor.scalar_type() != to_torch_dtype(spec.dtype))
      return make_error(Errc::invalid_argument,
                        name_ + ": tensor '" + nt.name + "' has dtype " +
                            c10::toString(nt.tensor.scalar_type()) + ", expected " +
                            std::string(protocol::dtype_name(spec.dtype)));
    values[v] = nt.tensor.device() == device_ ? std::move(nt.tensor) : nt.tensor.to(device_);
  }
  for (int v : expected)
    if (!values[v].defined())
      return make_error(Errc::invalid_argument,
                        name_ + ": tensor '" + value_specs_[v].name + "' crosses split " +
                            std::to_string(a) + " but is missing from the bundle");
  in.clear();

  if (engine_) {
    std::vector<at::Tensor> ins;
    ins.reserve(expected.size());
    for (int v : expected) ins.push_back(std::move(values[v]));
    auto outs = engine_->run(a, b, std::move(ins));
    if (!outs) return std::move(outs.error());
    Bundle out;
    out.reserve(crossing_ids_[b].size());
    for (size_t i = 0; i < crossing_ids_[b].size() && i < outs->size(); ++i)
      out.push_back({value_specs_[crossing_ids_[b][i]].name, std::move((*outs)[i])});
    return out;
  }

  std::vector<at::Tensor> args;
  for (int i = a; i < b; ++i) {
    const Node& node = nodes_[i];
    args.clear();
    for (int v : node.inputs) args.push_back(values[v]);
    try {
      values[i + 1] = node.fn(args);
    } catch (const std::exception& ex) {
      return make_error(Errc::internal, name_ + ": layer " + std::to_string(i) + " '" +
                                            node.name + "' (" + node.type +
                                            ") failed: " + torch_error_text(ex));
    }
    // Drop values nobody after layer i needs.
    for (int v : node.inputs)
      if (last_use_[v] <= i) values[v] = at::Tensor();
  }
  Bundle out;
  out.reserve(crossing_ids_[b].size());
  for (int v : crossing_ids_[b]) out.push_back({value_specs_[v].name, std::move(values[v])});
  return out;
}

Status SplitModel::to(c10::Device device) {
  if (device.is_cuda() && !torch::cuda::is_available())
    return make_error(Errc::invalid_argument, name_ + ": CUDA is not available");
  try {
    move_fn_(device);
  } catch (const std::exception& ex) {
    return make_error(Errc::invalid_argument,
                      name_ + ": cannot move to " + device.str() + ": " + torch_error_text(ex));
  }
  device_ = device;
  return {};
}

std::vector<NamedTensor> SplitModel::state_dict() const { return state_fn_(); }

Status SplitModel::load_state_dict(const std::vector<NamedTensor>& state) {
  auto own = state_dict();
  std::map<std::string, const at::Tensor*> given;
  std::vector<std::string> duplicate, extra, missing, misshaped;
  for (const auto& nt : state)
    if (!given.emplace(nt.name, &nt.tensor).second) duplicate.push_back(nt.name);
  std::set<std::string> own_names;
  for (const auto& nt : own) {
    own_names.insert(nt.name);
    auto it = given.find(nt.name);
    if (it == given.end()) {
      // Like PyTorch's BatchNorm, accept files from before the
      // num_batches_tracked buffer existed (older torchvision weights).
      static const std::string nbt = ".num_batches_tracked";
      if (nt.name.size() > nbt.size() &&
          nt.name.compare(nt.name.size() - nbt.size(), nbt.size(), nbt) == 0)
        continue;
      missing.push_back(nt.name + " " + shape_str(nt.tensor.sizes()));
    } else if (!it->second->defined() || it->second->sizes() != nt.tensor.sizes()) {
      misshaped.push_back(nt.name + " is " +
                          (it->second->defined() ? shape_str(it->second->sizes()) : "undefined") +
                          ", expected " + shape_str(nt.tensor.sizes()));
    } else if (it->second->is_floating_point() != nt.tensor.is_floating_point()) {
      misshaped.push_back(nt.name + " has dtype " + c10::toString(it->second->scalar_type()) +
                          ", expected " + c10::toString(nt.tensor.scalar_type()));
    }
  }
  for (const auto& nt : state)
    if (!own_names.count(nt.name)) extra.push_back(nt.name);
  if (!duplicate.empty() || !missing.empty() || !extra.empty() || !misshaped.empty()) {
    std::string msg = name_ + ": state dict does not match the model:";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg += std::string(" ") + what + " (" + std::to_string(v.size()) + "): ";
      for (size_t i = 0; i < v.size() && i < 8; ++i) msg += (i ? "; " : "") + v[i];
      if (v.size() > 8) msg += "; ...";
      msg += ".";
    };
    list("missing", missing);
    list("unexpected", extra);
    list("mis-shaped", misshaped);
    list("duplicate", duplicate);
    return make_error(Errc::invalid_argument, msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& nt : own) {
    auto it = given.find(nt.name);
    if (it != given.end()) nt.tensor.copy_(*it->second);
  }
  return {};
}

// -------------------------------------------------------------- GraphBuilder

GraphBuilder::GraphBuilder(std::string model_name, ModelTask task, const ModelConfig& cfg,
                           std::vector<int64_t> default_input_shape)
    : model_name_(std::move(model_name)), task_(task), cfg_(cfg) {
  input_shape_ = cfg.input_shape.empty() ? std::move(default_input_shape) : cfg.input_shape;
  torch::manual_seed(cfg.seed);
}

int64_t GraphBuilder::num_classes(int64_t fallback) const {
  return cfg_.num_classes > 0 ? cfg_.num_classes : fallback;
}

std::string GraphBuilder::add(const std::string& name, const std::string& type,
                              std::vector<std::string> inputs, SplitModel::LayerFn fn,
                              std::shared_ptr<torch::nn::Module> module) {
  if (module) module->eval();
  nodes_.push_back({name, type, std::move(inputs), std::move(fn), std::move(module), {}});
  return name;
}

std::string GraphBuilder::add_with_params(const std::string& name, const std::string& type,
                                          std::vector<std::string> inputs,
                                          SplitModel::LayerFn fn, std::vector<NamedTensor> params) {
  nodes_.push_back({name, type, std::move(inputs), std::move(fn), nullptr, std::move(params)});
  return name;
}

std::string GraphBuilder::conv2d(const std::string& name, const std::string& in,
                                 torch::nn::Conv2dOptions opts) {
  torch::nn::Conv2d m(opts);
  return add(name, "Conv2d", {in}, [m](const std::vector<at::Tensor>& x) mutable { return m->forward(x[0]); },
             m.ptr());
}

std::string GraphBuilder::batchnorm2d(const std::string& name, const std::string& in,
                                      int64_t channels) {
  torch::nn::BatchNorm2d m(channels);
  return add(name, "BatchNorm2d", {in},
             [m](const std::vector<at::Tensor>& x) mutable { return m->forward(x[0]); }, m.ptr());
}

std::string GraphBuilder::linear(const std::string& name, const std::string& in, int64_t in_f,
                                 int64_t out_f, bool bias) {
  torch::nn::Linear m(torch::nn::LinearOptions(in_f, out_f).bias(bias));
  return add(name, "Linear", {in}, [m](const std::vector<at::Tensor>& x) mutable { return m->forward(x[0]); },
             m.ptr());
}

std::string GraphBuilder::relu(const std::string& name, const std::string& in) {
  return add(name, "ReLU", {in}, [](const std::vector<at::Tensor>& x) { return torch::relu(x[0]); });
}

std::string GraphBuilder::relu6(const std::string& name, const std::string& in) {
  return add(name, "ReLU6", {in},
             [](const std::vector<at::Tensor>& x) { return torch::hardtanh(x[0], 0.0, 6.0); });
}

std::string GraphBuilder::maxpool2d(const std::string& name, const std::string& in,
                                    torch::nn::MaxPool2dOptions opts) {
  torch::nn::MaxPool2d m(opts);
  return add(name, "MaxPool2d", {in},
             [m](const std::vector<at::Tensor>& x) mutable { return m->forward(x[0]); });
}

std::string GraphBuilder::adaptive_avgpool2d(const std::string& name, const std::string& in,
                                             int64_t h, int64_t w) {
  return add(name, "AdaptiveAvgPool2d", {in}, [h, w](const std::vector<at::Tensor>& x) {
    return torch::adaptive_avg_pool2d(x[0], {h, w});
  });
}

std::string GraphBuilder::dropout(const std::string& name, const std::string& in, double p) {
  // Inference only: dropout is the identity in eval mode.
  (void)p;
  return add(name, "Dropout", {in}, [](const std::vector<at::Tensor>& x) { return x[0]; });
}

std::string GraphBuilder::flatten(const std::string& name, const std::string& in) {
  return add(name, "Flatten", {in},
             [](const std::vector<at::Tensor>& x) { return torch::flatten(x[0], 1); });
}

std::string GraphBuilder::add_tensors(const std::string& name, const std::string& a,
                                      const std::string& b) {
  return add(name, "Add", {a, b}, [](const std::vector<at::Tensor>& x) { return x[0] + x[1]; });
}

std::string GraphBuilder::upsample_nearest2x(const std::string& name, const std::string& in) {
  return add(name, "Upsample", {in}, [](const std::vector<at::Tensor>& x) {
    return torch::upsample_nearest2d(x[0], {x[0].size(2) * 2, x[0].size(3) * 2});
  });
}

void GraphBuilder::set_state_functions(std::function<std::vector<NamedTensor>()> state_fn,
                                       std::function<void(c10::Device)> move_fn) {
  state_fn_ = std::move(state_fn);
  move_fn_ = std::move(move_fn);
}

Result<std::unique_ptr<SplitModel>> GraphBuilder::build(const std::vector<std::string>& outputs) {
  std::unique_ptr<SplitModel> m(new SplitModel());
  m->name_ = model_name_;
  m->task_ = task_;
  m->input_shape_ = input_shape_;
  m->detection_ = detection_;
  const int n = static_cast<int>(nodes_.size());

  std::map<std::string, int> ids{{"input", 0}};
  m->value_specs_.resize(n + 1);
  m->value_specs_[0].name = "input";
  for (int i = 0; i < n; ++i) {
    const auto& p = nodes_[i];
    if (!ids.emplace(p.name, i + 1).second)
      return make_error(Errc::internal, model_name_ + ": duplicate layer name '" + p.name + "'");
    m->value_specs_[i + 1].name = p.name;
  }
  m->last_use_.assign(n + 1, -1);
  for (int i = 0; i < n; ++i) {
    SplitModel::Node node{nodes_[i].name, nodes_[i].type, {}, nodes_[i].fn, nodes_[i].module,
                          !nodes_[i].params.empty()};
    for (const auto& in : nodes_[i].inputs) {
      auto it = ids.find(in);
      if (it == ids.end() || it->second > i)
        return make_error(Errc::internal, model_name_ + ": layer '" + node.name +
                                              "' reads '" + in +
                                              "', which is not the input or an earlier layer");
      node.inputs.push_back(it->second);
      m->last_use_[it->second] = std::max(m->last_use_[it->second], i);
    }
    m->nodes_.push_back(std::move(node));
  }
  for (const auto& o : outputs) {
    auto it = ids.find(o);
    if (it == ids.end())
      return make_error(Errc::internal, model_name_ + ": unknown output '" + o + "'");
    m->last_use_[it->second] = n;
    m->output_names_.push_back(o);
    m->output_ids_.push_back(it->second);
  }
  for (int v = 0; v <= n; ++v)
    if (m->last_use_[v] < 0)
      return make_error(Errc::internal, model_name_ + ": output of '" + m->value_specs_[v].name +
                                            "' is never used");
  // Value v is produced "at" v - 1 (input at -1) and crosses split k when it
  // is produced before k and still needed at or after k.
  m->crossing_ids_.assign(n + 1, {});
  for (int k = 0; k <= n; ++k)
    for (int v = 0; v <= n; ++v)
      if (v - 1 < k && m->last_use_[v] >= k) m->crossing_ids_[k].push_back(v);
  m->value_ids_ = ids;

  // Parameters, per layer and as a state dict keyed "<layer>.<param>".
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  for (const auto& p : nodes_) modules.push_back(p.module);
  std::vector<std::string> names;
  for (const auto& p : nodes_) names.push_back(p.name);
  if (!state_fn_) {
    state_fn_ = [modules, names]() {
      std::vector<NamedTensor> out;
      for (size_t i = 0; i < modules.size(); ++i) {
        if (!modules[i]) continue;
        for (const auto& kv : modules[i]->named_parameters(true))
          out.push_back({names[i] + "." + kv.key(), kv.value()});
        for (const auto& kv : modules[i]->named_buffers(true))
          out.push_back({names[i] + "." + kv.key(), kv.value()});
      }
      return out;
    };
    move_fn_ = [modules](c10::Device d) {
      for (const auto& mod : modules)
        if (mod) mod->to(d);
    };
  }
  m->state_fn_ = state_fn_;
  m->move_fn_ = move_fn_;

  // Shape trace on CPU at batch 1.
  std::vector<int64_t> in_shape{1};
  in_shape.insert(in_shape.end(), input_shape_.begin(), input_shape_.end());
  {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> values(n + 1);
    values[0] = torch::zeros(in_shape);
    auto fill_spec = [](TensorSpec& s, const at::Tensor& t) -> Status {
      auto dt = to_protocol_dtype(t.scalar_type());
      if (!dt) return dt.error();
      s.dtype = *dt;
      s.shape = t.sizes().vec();
      s.bytes = t.numel() * static_cast<int64_t>(t.element_size());
      return {};
    };
    TRACR_TRY(fill_spec(m->value_specs_[0], values[0]));
    std::vector<at::Tensor> args;
    for (int i = 0; i < n; ++i) {
      const auto& node = m->nodes_[i];
      args.clear();
      for (int v : node.inputs) args.push_back(values[v]);
      try {
        values[i + 1] = node.fn(args);
      } catch (const std::exception& ex) {
        std::string shapes;
        for (const auto& t : args) shapes += (shapes.empty() ? "" : ", ") + shape_str(t.sizes());
        return make_error(Errc::invalid_argument,
                          model_name_ + ": layer " + std::to_string(i) + " '" + node.name + "' (" +
                              node.type + ") cannot run at input " + shape_str(in_shape) +
                              " (its inputs: " + shapes + "): " + torch_error_text(ex));
      }
      TRACR_TRY(fill_spec(m->value_specs_[i + 1], values[i + 1]));
      LayerInfo li;
      li.index = i;
      li.name = node.name;
      li.type = node.type;
      for (int v : node.inputs) li.inputs.push_back(m->value_specs_[v].name);
      std::vector<at::Tensor> weights;
      std::vector<NamedTensor> params = nodes_[i].params;
      if (nodes_[i].module)
        for (const auto& kv : nodes_[i].module->named_parameters(true))
          params.push_back({kv.key(), kv.value()});
      for (const auto& p : params) {
        li.params += p.tensor.numel();
        if (p.name == "weight") weights.push_back(p.tensor);
      }
      li.macs = count_macs(node.type, weights, values[i + 1]);
      li.output_shape = m->value_specs_[i + 1].shape;
      li.output_bytes = m->value_specs_[i + 1].bytes;
      m->layers_.push_back(std::move(li));
      for (int v : node.inputs)
        if (m->last_use_[v] <= i) values[v] = at::Tensor();
    }
  }

  if (!cfg_.weights.empty()) TRACR_TRY(load_weights(*m, cfg_.weights));
  auto dev = resolve_device(cfg_.device);
  if (!dev) return dev.error();
  TRACR_TRY(m->to(*dev));
  return m;
}

}  // namespace tracr::experiments
