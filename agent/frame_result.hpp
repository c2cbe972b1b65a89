// A frame in flight on a PARTICIPANT and what it becomes when its reply
// comes back: the answer post-processed (classes, detections, raw outputs)
// into its FrameRecord. LibTorch side.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/energy.hpp"
#include "agent/timing.hpp"
#include "experiments/datasets.hpp"
#include "experiments/model.hpp"
#include "protocol/frame.hpp"
#include "wire/record.hpp"

namespace tracr::agent {

// A frame sent and not yet answered.
struct PendingFrame {
  wire::FrameRecord rec;
  uint64_t req_seq = 0;  // the request frame's seq: its reply names it (meta req_seq)
  int last = -1;         // the request's meta.last (a chain's first segment end); -1: none sent
  bool forwarded = false;  // the request asked the device to forward (meta.then)
  Clock::time_point t0, t_head, t_sent;
  std::optional<EnergyMeter::Mark> e0, e_head;
  at::Tensor labels;
  std::vector<experiments::ImageTransform> transforms;
};

// Post-processes the reply; fills result, correct, top5_correct, the top-k
// rows and (record_outputs, timed frames) the output tensor.
Status finish_frame(PendingFrame& p, const protocol::Frame& f, const experiments::SplitModel& model,
                    const std::vector<std::string>& dataset_names, int topk, bool record_outputs);

// A classifier's logits [B, C] as the frame's answer: result, correct,
// top5_correct, the top-k rows and (record_outputs, timed frames) the logits.
Status classify(PendingFrame& p, const at::Tensor& logits, const std::vector<std::string>& dataset_names, int topk,
                bool record_outputs);

// "a;b;c" of a frame's sample ids, and of its labels ("" when undefined).
std::string join_ids(const std::vector<std::string>& ids);
std::string join_labels(const at::Tensor& labels);

}  // namespace tracr::agent
