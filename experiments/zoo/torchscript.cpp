// "torchscript:<path>": a user's scripted or traced nn.Sequential as a
// generic splittable model. Nested Sequentials are flattened; every other
// child is one layer named by its module path ("3", "4.1", ...) and typed by
// its class name ("Conv2d"). State dict keys are the TorchScript parameter
// paths ("4.1.weight").
#include <torch/script.h>

#include "experiments/graph.hpp"
#include "experiments/registry.hpp"
#include "experiments/weights.hpp"

namespace tracr::experiments {
namespace {

bool is_sequential(const torch::jit::Module& m) {
  auto t = m.type();
  return t && t->name() && t->name()->name() == "Sequential";
}

std::string type_name(const torch::jit::Module& m) {
  auto t = m.type();
  return t && t->name() ? t->name()->name() : std::string("Module");
}

Status flatten_into(GraphBuilder& g, const torch::jit::Module& seq, const std::string& prefix,
                    std::string& x, const std::string& path) {
  for (const auto& child : seq.named_children()) {
    const std::string name = prefix.empty() ? child.name : prefix + "." + child.name;
    if (is_sequential(child.value)) {
      TRACR_TRY(flatten_into(g, child.value, name, x, path));
      continue;
    }
    if (!child.value.find_method("forward"))
      return make_error(Errc::invalid_argument, path + ": module '" + name + "' (" +
                                                    type_name(child.value) +
                                                    ") has no forward method");
    std::vector<NamedTensor> params;
    for (const auto& p : child.value.named_parameters(true)) params.push_back({p.name, p.value});
    torch::jit::Module mod = child.value;
    x = g.add_with_params(
        name, type_name(child.value), {x},
        [mod](const std::vector<at::Tensor>& in) mutable {
          auto out = mod.forward({in[0]});
          if (!out.isTensor())
            throw std::runtime_error("forward returned " + out.tagKind() + ", expected a Tensor");
          return out.toTensor();
        },
        std::move(params));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SplitModel>> load_torchscript_model(const std::string& path,
                                                           const ModelConfig& cfg) {
  torch::jit::Module root;
  try {
    root = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const std::exception& ex) {
    std::string what = torch_error_text(ex);
    what = what.substr(0, what.find('\n'));
    return make_error(Errc::io, path + ": cannot load TorchScript module: " + what);
  }
  if (!is_sequential(root))
    return make_error(Errc::invalid_argument,
                      path + ": top-level module is " + type_name(root) +
                          ", expected a scripted or traced torch.nn.Sequential");
  root.eval();
  ModelConfig c = cfg;
  c.weights.clear();  // the file carries its own weights
  GraphBuilder g("torchscript:" + path, ModelTask::generic, c, {3, 224, 224});
  std::string x = "input";
  TRACR_TRY(flatten_into(g, root, "", x, path));
  if (x == "input")
    return make_error(Errc::invalid_argument, path + ": the Sequential has no layers");
  g.set_state_functions(
      [root]() {
        std::vector<NamedTensor> out;
        for (const auto& p : root.named_parameters(true)) out.push_back({p.name, p.value});
        for (const auto& b : root.named_buffers(true)) out.push_back({b.name, b.value});
        return out;
      },
      [root](c10::Device d) mutable { root.to(d); });
  auto model = g.build({x});
  if (!model) return model.error();
  if (!cfg.weights.empty()) TRACR_TRY(load_weights(**model, cfg.weights));
  return model;
}

}  // namespace tracr::experiments
