// What only the model can tell about an experiment, checked by the
// controller before any agent is deployed or any run row is written.
#pragma once

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

// Builds the experiment's model on this machine (CPU, random weights: the
// weights file is not read) and checks that
//   * `model` is a registry id (a wrong case or a typo names the closest
//     one) or a torchscript: file that loads,
//   * `input_size` runs through every layer,
//   * every `split` point is within 0..N and every `train.cuts` entry within
//     1..N-1 (N = the model's layers).
//   * every exit's `after` is a layer an exit can hang on, in backbone order,
//     and (exit_heads) its head's file exists and answers the model's classes
//     from that layer's output (`tracrctl train` passes false: it writes them).
// Returns the model's N. Error config naming the key with its file:line:col
// and what was expected. In a build without LibTorch nothing is checked and
// the result is -1 (the agents report these mistakes themselves).
// Cuts given by layer name in `split` / `participant_splits` become numbers
// (settings::resolve_split_names), the model built only when one is named.
// Error config naming the entry, with the nearest layer name.
Status resolve_layer_names(settings::ExperimentConfig& cfg);

Result<int> check_experiment_model(const settings::ExperimentConfig& cfg, bool exit_heads = true,
                                   std::vector<std::string>* layer_names = nullptr);

}  // namespace tracr::controller
