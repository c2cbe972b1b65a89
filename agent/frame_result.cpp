#include "agent/frame_result.hpp"

#include <torch/torch.h>

#include <algorithm>

#include <fmt/format.h>

#include "experiments/imagenet_classes.hpp"
#include "experiments/postprocess.hpp"
#include "experiments/tensor_bridge.hpp"
#include "protocol/meta_keys.hpp"

namespace tracr::agent {

using namespace tracr::protocol;
using namespace tracr::wire;
namespace ex = tracr::experiments;

namespace {

// A chain's reply (PROTOCOL.md 3.4): a request that named its segment's end
// is answered for that end, and one that asked to forward was forwarded.
Status check_chain_reply(const PendingFrame& p, const Frame& f) {
  if (p.last < 0) return {};
  // A SERVER older than meta.last ran to N instead.
  auto it = f.header.meta.find(meta_key::kLast);
  const int64_t* l = it == f.header.meta.end() ? nullptr : std::get_if<int64_t>(&it->second);
  if (!l || *l != p.last)
    return make_error(Errc::remote, fmt::format("the chain's first device answered without echoing meta.last {} (a "
                                                "tracr-agent older than chains?): its outputs are not the placement's",
                                                p.last));
  // One that ran its segment but did not forward (no --downstream support)
  // answers with the activations at `last`, not the model's outputs.
  if (p.forwarded && !f.header.meta.count(meta_key::kFwdRttNs))
    return make_error(Errc::remote, fmt::format("the chain's first device answered without forwarding (no "
                                                "meta.fwd_rtt_ns): its tensors are the activations at {}, not the "
                                                "model's outputs",
                                                p.last));
  return {};
}

}  // namespace

Status classify(PendingFrame& p, const at::Tensor& raw, const std::vector<std::string>& dataset_names, int topk,
                bool record_outputs) {
  std::string result;
  const at::Tensor logits = raw.to(torch::kCPU, torch::kFloat).contiguous();
  const int64_t width = logits.dim() == 2 ? logits.size(1) : -1;
  // Labels index the dataset's classes: they mean the model's classes only
  // when the dataset has exactly as many.
  const bool labels_fit = static_cast<int64_t>(dataset_names.size()) == width && p.labels.defined();
  const auto& names = ex::class_names_for(width, dataset_names);
  auto preds = ex::top_k(logits, std::max(topk, 5), names);
  if (!preds) return std::move(preds.error());
  int64_t correct = 0, correct5 = 0;
  for (size_t i = 0; i < preds->size(); ++i) {
    const auto& best = (*preds)[i].front();
    if (!result.empty()) result += ";";
    result += fmt::format("{}:{:.4f}", best.label, best.confidence);
    const int64_t label = labels_fit ? p.labels[static_cast<int64_t>(i)].item<int64_t>() : -1;
    for (size_t r = 0; r < (*preds)[i].size(); ++r) {
      const auto& pr = (*preds)[i][r];
      if (r < 5 && pr.class_id == label) {
        ++correct5;
        if (r == 0) ++correct;
      }
      if (static_cast<int>(r) < topk)
        p.rec.topk.push_back({static_cast<int64_t>(i), static_cast<int64_t>(r + 1), pr.class_id,
                              names.empty() ? std::string() : pr.label, pr.confidence});
    }
  }
  p.rec.correct = labels_fit ? correct : -1;
  p.rec.top5_correct = labels_fit ? correct5 : -1;
  if (record_outputs && !p.rec.warmup && width > 0) {
    p.rec.outputs.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
    p.rec.outputs_shape = {logits.size(0), width};
  }
  p.rec.result = std::move(result);
  return {};
}

Status finish_frame(PendingFrame& p, const Frame& f, const ex::SplitModel& model,
                    const std::vector<std::string>& dataset_names, int topk, bool record_outputs) {
  if (f.header.type == MsgType::error)
    return make_error(Errc::remote, "server: " + (f.header.error ? f.header.error->str() : std::string("error")));
  TRACR_TRY(check_chain_reply(p, f));
  auto outs = ex::from_protocol(f.tensors);
  if (!outs) return std::move(outs.error());
  std::string result;
  if (model.task() == ex::ModelTask::classification && !outs->empty()) {
    TRACR_TRY(classify(p, (*outs)[0].tensor, dataset_names, topk, record_outputs));
    if (!p.rec.outputs.empty()) p.rec.output_parts = {{(*outs)[0].name, {p.rec.outputs_shape[1]}}};
    result = p.rec.result;
  } else if (model.task() == ex::ModelTask::detection && model.detection_head()) {
    auto dets = ex::decode_detections(*outs, *model.detection_head(), p.transforms, dataset_names);
    if (!dets) return std::move(dets.error());
    for (const auto& d : *dets) {
      if (!result.empty()) result += ";";
      result += fmt::format("{} detections", d.size());
    }
  }
  // Raw outputs of any other model (a detector's levels, a graph model's
  // tuple or dict): each sample's outputs flattened and concatenated, as
  // float32, with each output's name and shape per sample to store it as it is.
  if (record_outputs && !p.rec.warmup && model.task() != ex::ModelTask::classification && !outs->empty()) {
    const int64_t batch = (*outs)[0].tensor.dim() > 0 ? (*outs)[0].tensor.size(0) : 0;
    std::vector<at::Tensor> flat;
    for (const auto& o : *outs) {
      if (o.tensor.dim() == 0 || o.tensor.size(0) != batch)
        return make_error(Errc::invalid_argument,
                          fmt::format("record.outputs: output '{}' has shape [{}], not [batch {}, ...]; it cannot be "
                                      "stored per sample (set record.outputs: false)",
                                      o.name, fmt::join(o.tensor.sizes(), ", "), batch));
      flat.push_back(o.tensor.to(torch::kCPU, torch::kFloat).reshape({batch, -1}));
      p.rec.output_parts.push_back({o.name, std::vector<int64_t>(o.tensor.sizes().begin() + 1, o.tensor.sizes().end())});
    }
    const at::Tensor all = torch::cat(flat, 1).contiguous();
    p.rec.outputs.assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
    p.rec.outputs_shape = {batch, all.size(1)};
  }
  p.rec.result = std::move(result);
  return {};
}

std::string join_ids(const std::vector<std::string>& ids) {
  std::string s;
  for (const auto& id : ids) s += (s.empty() ? "" : ";") + id;
  return s;
}

std::string join_labels(const at::Tensor& labels) {
  if (!labels.defined()) return "";
  std::string s;
  auto l = labels.to(torch::kLong).contiguous();
  for (int64_t i = 0; i < l.numel(); ++i) s += (i ? ";" : "") + std::to_string(l.data_ptr<int64_t>()[i]);
  return s;
}

}  // namespace tracr::agent
