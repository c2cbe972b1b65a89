// Importing weights by torchvision state_dict key.
//
// Accepted files:
//  * a torchvision state_dict .pth in PyTorch's zip format (torch >= 1.6
//    saves that way), read directly: the pickle is interpreted by a small
//    reader that understands what torch.save emits for a state dict
//    (OrderedDict of tensors, _metadata ignored);
//  * the output of scripts/export_torchvision.py (any .pth torch.load can
//    read, including legacy pre-1.6 files and whole pickled models, saved as
//    a plain dict of tensors).
#pragma once

#include <string>
#include <vector>

#include "experiments/model.hpp"

namespace tracr::experiments {

// Reads every tensor of a state dict file, in file order. Errors: io (cannot
// read `path`), invalid_argument (not a state dict; the message says which
// construct was found and suggests scripts/export_torchvision.py).
Result<std::vector<NamedTensor>> read_state_dict(const std::string& path);

// read_state_dict + model.load_state_dict; the error names `path` and the
// missing, extra or mis-shaped parameters.
Status load_weights(SplitModel& model, const std::string& path);

}  // namespace tracr::experiments
