#include "experiments/registry.hpp"

#include <algorithm>
#include <mutex>

#include "experiments/zoo/zoo.hpp"

namespace tracr::experiments {

ModelRegistry& ModelRegistry::global() {
  static ModelRegistry* reg = [] {
    auto* r = new ModelRegistry();
#define TRACR_MODEL(id, fn, desc) check_or_throw(r->add({id, desc, &zoo::fn}));
#include "experiments/zoo/models.def"
#undef TRACR_MODEL
    return r;
  }();
  return *reg;
}

Status ModelRegistry::add(ModelEntry entry) {
  if (entry.name.empty() || entry.name.find(':') != std::string::npos)
    return make_error(Errc::invalid_argument,
                      "model id '" + entry.name + "' must be non-empty and contain no ':'");
  if (!entry.factory)
    return make_error(Errc::invalid_argument, "model '" + entry.name + "' has no factory");
  if (find(entry.name))
    return make_error(Errc::invalid_argument, "model '" + entry.name + "' is already registered");
  entries_.push_back(std::move(entry));
  return {};
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

const ModelEntry* ModelRegistry::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Result<std::unique_ptr<SplitModel>> ModelRegistry::create(const std::string& name,
                                                           const ModelConfig& cfg) const {
  static const std::string ts = "torchscript:";
  if (name.rfind(ts, 0) == 0) return load_torchscript_model(name.substr(ts.size()), cfg);
  const ModelEntry* e = find(name);
  if (!e) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    return make_error(Errc::not_found, "unknown model '" + name + "' (registered: " + known +
                                           ", or torchscript:<path>)");
  }
  return e->factory(cfg);
}

std::vector<std::string> list_models() {
  auto v = ModelRegistry::global().names();
  v.push_back("torchscript:<path>");
  return v;
}

std::string model_description(const std::string& name) {
  const ModelEntry* e = ModelRegistry::global().find(name);
  return e ? e->description : std::string();
}

Result<std::unique_ptr<SplitModel>> create_model(const std::string& name,
                                                 const ModelConfig& cfg) {
  return ModelRegistry::global().create(name, cfg);
}

}  // namespace tracr::experiments
