// Declarations of the built-in factories listed in models.def.
#pragma once

#include <memory>

#include "experiments/model.hpp"

namespace tracr::experiments::zoo {

#define TRACR_MODEL(id, fn, desc) \
  Result<std::unique_ptr<SplitModel>> fn(const ModelConfig& cfg);
#include "experiments/zoo/models.def"
#undef TRACR_MODEL

}  // namespace tracr::experiments::zoo
