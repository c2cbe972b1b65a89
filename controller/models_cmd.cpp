// `tracrctl models`: the model registry (LibTorch builds only).
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#if TRACR_WITH_TORCH
#include "experiments/registry.hpp"
#endif

namespace tracr::controller {

int cmd_models(const std::vector<std::string>&) {
#if TRACR_WITH_TORCH
  for (const auto& name : experiments::list_models())
    fmt::print("{:<24} {}\n", name, experiments::model_description(name));
  return 0;
#else
  std::fputs("tracrctl models: this build has no LibTorch (TRACR_WITH_TORCH=OFF)\n", stderr);
  return 2;
#endif
}

}  // namespace tracr::controller
