// Split training roles of tracr-agent (LibTorch).
//
// TRAIN_WORKER holds middle segments of a model and serves TRAIN_FORWARD /
// TRAIN_BACKWARD frames (PROTOCOL.md section 3.5) over the same SERVER loop,
// sessions, cipher and codecs as inference. TRAIN_OWNER is a data owner: it
// keeps the data, the labels, segment 0 (and the last segment when the
// experiment says so) and the loss; it drives each step through the chain
// (its own segments in process, the workers' over their sessions) and
// reports STEP, EPOCH, CHECKPOINT and EXPORT control lines.
#pragma once

#include <utility>
#include <vector>

#include "agent/roles.hpp"

namespace tracr::agent {

// Layer ranges of the segments cut at `cuts`: [0, c1), ..., [ck, N). Error
// config naming train.cuts when a cut is not within 1..N-1.
Result<std::vector<std::pair<int, int>>> segment_ranges(const std::vector<int64_t>& cuts, int num_layers);

#if TRACR_WITH_TORCH
int run_train_worker(const AgentOptions& opt, ControlOut& ctl);
int run_train_owner(const AgentOptions& opt, ControlOut& ctl);
#endif

}  // namespace tracr::agent
