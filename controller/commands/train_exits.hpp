// `tracrctl train` for early exits (#44): see train_exits.cpp.
#pragma once

#include "protocol/error.hpp"
#include "settings/config.hpp"

namespace tracr::controller {

// Trains every head: linear exit of cfg on its frozen backbone and writes
// each to settings::exit_head_file; prints a table per exit (loss, train and
// test accuracy, file). Usage errors exit 2, failures 1.
Status train_exit_heads(const settings::ExperimentConfig& cfg);

}  // namespace tracr::controller
