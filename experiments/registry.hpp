// Model registry: string id -> factory. The built-in zoo is an explicit
// table (experiments/zoo/models.def, one line per model) filled on first use;
// duplicates are rejected. "torchscript:<path>" names a user TorchScript
// nn.Sequential loaded as a generic splittable model.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experiments/model.hpp"

namespace tracr::experiments {

using ModelFactory = std::function<Result<std::unique_ptr<SplitModel>>(const ModelConfig&)>;

struct ModelEntry {
  std::string name;
  std::string description;
  ModelFactory factory;
};

class ModelRegistry {
 public:
  // The process-wide registry holding the built-in zoo.
  static ModelRegistry& global();

  // Error invalid_argument when the name is empty, contains ':' or is taken.
  Status add(ModelEntry entry);
  // Registered names, sorted.
  std::vector<std::string> names() const;
  // nullptr when absent (TryGet).
  const ModelEntry* find(const std::string& name) const;
  // Builds `name` (a registered id or "torchscript:<path>"). Error not_found
  // listing the registered names; factory errors are passed through.
  Result<std::unique_ptr<SplitModel>> create(const std::string& name,
                                             const ModelConfig& cfg) const;

 private:
  std::vector<ModelEntry> entries_;
};

// Registered names of the global registry, sorted (for `tracrctl models`),
// followed by "torchscript:<path>".
std::vector<std::string> list_models();
// One-line description of a registered model ("" when unknown).
std::string model_description(const std::string& name);
// ModelRegistry::global().create(name, cfg).
Result<std::unique_ptr<SplitModel>> create_model(const std::string& name, const ModelConfig& cfg);

// TorchScript importer behind "torchscript:<path>": loads a scripted or traced
// nn.Sequential, flattens nested Sequentials into layers named by their
// module path ("0", "1.0", ...). cfg.input_shape is required (C, H, W) unless
// the default 3x224x224 fits. Errors name the file and the unsupported module.
Result<std::unique_ptr<SplitModel>> load_torchscript_model(const std::string& path,
                                                           const ModelConfig& cfg);

}  // namespace tracr::experiments
