#include "experiments/postprocess.hpp"

#include <torch/torch.h>

#include <algorithm>

namespace tracr::experiments {
namespace {

std::string label_of(int64_t id, const std::vector<std::string>& names) {
  return id >= 0 && id < static_cast<int64_t>(names.size()) ? names[id] : std::to_string(id);
}

}  // namespace

Result<std::vector<std::vector<Prediction>>> top_k(const at::Tensor& logits, int64_t k,
                                                   const std::vector<std::string>& class_names) {
  if (!logits.defined() || logits.dim() != 2)
    return make_error(Errc::invalid_argument, "top_k: logits must be [batch, classes]");
  if (k < 1) return make_error(Errc::invalid_argument, "top_k: k must be >= 1");
  k = std::min<int64_t>(k, logits.size(1));
  auto probs = torch::softmax(logits.detach().to(torch::kCPU, torch::kFloat), 1);
  auto [vals, idx] = probs.topk(k, 1, true, true);
  auto va = vals.accessor<float, 2>();
  auto ia = idx.accessor<int64_t, 2>();
  std::vector<std::vector<Prediction>> out(logits.size(0));
  for (int64_t b = 0; b < logits.size(0); ++b)
    for (int64_t j = 0; j < k; ++j)
      out[b].push_back({ia[b][j], label_of(ia[b][j], class_names), va[b][j]});
  return out;
}

at::Tensor nms(const at::Tensor& boxes_in, const at::Tensor& scores_in, double iou_threshold) {
  if (boxes_in.size(0) == 0) return torch::empty({0}, torch::kLong);
  auto boxes = boxes_in.to(torch::kCPU, torch::kFloat);
  auto order = std::get<1>(scores_in.to(torch::kCPU, torch::kFloat).sort(0, /*descending=*/true));
  auto b = boxes.index_select(0, order);
  auto x1 = b.select(1, 0), y1 = b.select(1, 1), x2 = b.select(1, 2), y2 = b.select(1, 3);
  auto area = (x2 - x1).clamp_min(0) * (y2 - y1).clamp_min(0);
  // Pairwise IoU [N, N].
  auto ix1 = torch::max(x1.unsqueeze(1), x1.unsqueeze(0));
  auto iy1 = torch::max(y1.unsqueeze(1), y1.unsqueeze(0));
  auto ix2 = torch::min(x2.unsqueeze(1), x2.unsqueeze(0));
  auto iy2 = torch::min(y2.unsqueeze(1), y2.unsqueeze(0));
  auto inter = (ix2 - ix1).clamp_min(0) * (iy2 - iy1).clamp_min(0);
  auto uni = area.unsqueeze(1) + area.unsqueeze(0) - inter;
  auto iou = torch::where(uni > 0, inter / uni, torch::zeros_like(inter));
  auto over = (iou > iou_threshold).contiguous();
  auto oa = over.accessor<bool, 2>();
  const int64_t n = b.size(0);
  std::vector<char> removed(n, 0);
  std::vector<int64_t> keep;
  auto order_a = order.accessor<int64_t, 1>();
  for (int64_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    keep.push_back(order_a[i]);
    for (int64_t j = i + 1; j < n; ++j)
      if (oa[i][j]) removed[j] = 1;
  }
  return torch::tensor(keep, torch::kLong);
}

at::Tensor batched_nms(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& classes,
                       double iou_threshold) {
  if (boxes.size(0) == 0) return torch::empty({0}, torch::kLong);
  // Offsetting each class by more than the coordinate range keeps classes apart.
  auto b = boxes.to(torch::kCPU, torch::kFloat);
  auto span = b.max().item<float>() - b.min().item<float>() + 1.0f;
  auto shifted = b + (classes.to(torch::kCPU, torch::kFloat) * span).unsqueeze(1);
  return nms(shifted, scores, iou_threshold);
}

Result<std::vector<std::vector<Detection>>> decode_detections(
    const Bundle& outputs, const DetectionHeadInfo& head,
    const std::vector<ImageTransform>& transforms, const std::vector<std::string>& class_names,
    const DetectionOptions& opts) {
  torch::NoGradGuard no_grad;
  if (head.outputs.size() != head.strides.size())
    return make_error(Errc::invalid_argument, "decode_detections: one stride per output expected");
  std::vector<at::Tensor> boxes_l, scores_l, cls_l;
  int64_t batch = -1;
  for (size_t l = 0; l < head.outputs.size(); ++l) {
    const NamedTensor* nt = nullptr;
    for (const auto& o : outputs)
      if (o.name == head.outputs[l]) nt = &o;
    if (!nt)
      return make_error(Errc::invalid_argument,
                        "decode_detections: output '" + head.outputs[l] + "' missing from the bundle");
    auto t = nt->tensor.to(torch::kCPU, torch::kFloat);
    if (t.dim() != 4 || t.size(1) != 5 + head.num_classes)
      return make_error(Errc::invalid_argument,
                        "decode_detections: output '" + nt->name + "' must be [B, " +
                            std::to_string(5 + head.num_classes) + ", H, W]");
    if (batch >= 0 && t.size(0) != batch)
      return make_error(Errc::invalid_argument, "decode_detections: outputs disagree on batch size");
    batch = t.size(0);
    const int64_t h = t.size(2), w = t.size(3);
    const double s = static_cast<double>(head.strides[l]);
    auto p = t.permute({0, 2, 3, 1}).reshape({batch, h * w, 5 + head.num_classes});
    auto gy = torch::arange(h, torch::kFloat).view({h, 1}).expand({h, w}).reshape({1, h * w});
    auto gx = torch::arange(w, torch::kFloat).view({1, w}).expand({h, w}).reshape({1, h * w});
    auto cx = (gx + torch::sigmoid(p.select(2, 0))) * s;
    auto cy = (gy + torch::sigmoid(p.select(2, 1))) * s;
    auto bw = torch::exp(p.select(2, 2).clamp(-10, 10)) * s;
    auto bh = torch::exp(p.select(2, 3).clamp(-10, 10)) * s;
    boxes_l.push_back(torch::stack({cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2}, 2));
    auto obj = torch::sigmoid(p.select(2, 4));
    auto [cls_score, cls_id] = torch::sigmoid(p.slice(2, 5)).max(2);
    scores_l.push_back(obj * cls_score);
    cls_l.push_back(cls_id);
  }
  if (batch < 0) return std::vector<std::vector<Detection>>();
  if (static_cast<int64_t>(transforms.size()) != batch)
    return make_error(Errc::invalid_argument, "decode_detections: " + std::to_string(transforms.size()) +
                                                  " transforms for a batch of " + std::to_string(batch));
  auto boxes = torch::cat(boxes_l, 1), scores = torch::cat(scores_l, 1), classes = torch::cat(cls_l, 1);
  std::vector<std::vector<Detection>> out(batch);
  for (int64_t b = 0; b < batch; ++b) {
    auto sc = scores[b];
    auto idx = (sc > opts.score_threshold).nonzero().squeeze(1);
    if (idx.numel() > opts.pre_nms_top_k) {
      auto top = std::get<1>(sc.index_select(0, idx).topk(opts.pre_nms_top_k));
      idx = idx.index_select(0, top);
    }
    auto bx = boxes[b].index_select(0, idx), s = sc.index_select(0, idx),
         c = classes[b].index_select(0, idx);
    auto keep = batched_nms(bx, s, c, opts.iou_threshold);
    if (keep.numel() > opts.max_detections) keep = keep.slice(0, 0, opts.max_detections);
    const auto& tf = transforms[b];
    auto ka = keep.accessor<int64_t, 1>();
    auto ba = bx.accessor<float, 2>();
    auto sa = s.accessor<float, 1>();
    auto ca = c.accessor<int64_t, 1>();
    for (int64_t i = 0; i < keep.numel(); ++i) {
      const int64_t j = ka[i];
      auto clip = [](double v, double hi) { return std::min(std::max(v, 0.0), hi); };
      Detection d;
      d.class_id = ca[j];
      d.label = label_of(d.class_id, class_names);
      d.score = sa[j];
      d.x1 = clip((ba[j][0] - tf.offset_x) / tf.scale_x, tf.orig_width);
      d.y1 = clip((ba[j][1] - tf.offset_y) / tf.scale_y, tf.orig_height);
      d.x2 = clip((ba[j][2] - tf.offset_x) / tf.scale_x, tf.orig_width);
      d.y2 = clip((ba[j][3] - tf.offset_y) / tf.scale_y, tf.orig_height);
      out[b].push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace tracr::experiments
