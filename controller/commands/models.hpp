// `tracrctl models` and `tracrctl profile`: the model registry and local
// per-layer profiling (LibTorch builds only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include "protocol/error.hpp"

namespace tracr::controller {

struct ProfileOptions {
  std::string model;
  std::vector<int64_t> input_shape;  // C,H,W (empty = the model's default)
  int64_t batch = 1;
  int reps = 10;
  std::string weights, device, csv, json;
  std::string segments;  // all | none | K1,K2,... ("" = the model's default)
};

// Lists the registry. Returns 0 (2 in a build without LibTorch).
Status cmd_models();
// Profiles every layer on this machine, and a graph model's heads and tails
// whole at some splits (--segments). Returns 0, 1 when profiling or
// writing failed, 2 for an unknown model or an input it cannot take (the
// message names the model, the layer and the expected shape where known).
Status cmd_profile(const ProfileOptions& opt);

}  // namespace tracr::controller
