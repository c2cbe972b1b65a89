// Post-processing of model outputs: classification top-k and detection
// decoding with NMS (written in LibTorch tensor ops; torchvision's C++ ops are
// not packaged). Results are plain structs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "experiments/datasets.hpp"
#include "experiments/model.hpp"

namespace tracr::experiments {

struct Prediction {
  int64_t class_id = 0;
  std::string label;       // class name, or the id as text when no names are given
  double confidence = 0;   // softmax probability
};

// logits [B, C] -> per sample the k most probable classes, best first.
// Error invalid_argument for a non-2-D tensor or k < 1 (k is capped at C).
Result<std::vector<std::vector<Prediction>>> top_k(const at::Tensor& logits, int64_t k,
                                                   const std::vector<std::string>& class_names);

struct Detection {
  int64_t class_id = 0;
  std::string label;
  double score = 0;
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // original-image pixels, clipped to the image
};

struct DetectionOptions {
  double score_threshold = 0.25;
  double iou_threshold = 0.45;
  int64_t pre_nms_top_k = 1000;  // candidates per image entering NMS
  int64_t max_detections = 100;  // per image
};

// Greedy NMS. boxes [N, 4] (x1, y1, x2, y2), scores [N]. Returns the kept
// indices (int64) in decreasing score order; a box is dropped when its IoU
// with a kept higher-scoring box is > iou_threshold.
at::Tensor nms(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold);
// NMS within each class only (boxes of different classes never suppress each other).
at::Tensor batched_nms(const at::Tensor& boxes, const at::Tensor& scores,
                       const at::Tensor& classes, double iou_threshold);

// Decodes the detector outputs (the bundle of split N, or run(0, N)):
// per level of stride s, location (gx, gy) with channels
// (tx, ty, tw, th, obj, cls_0..cls_{C-1}):
//   cx = (gx + sigmoid(tx)) * s, cy = (gy + sigmoid(ty)) * s,
//   w = exp(clamp(tw, -10, 10)) * s, h = exp(clamp(th, -10, 10)) * s,
//   score = sigmoid(obj) * sigmoid(cls_c) for the best class c.
// Then score threshold, top-k, per-class NMS, max_detections, and mapping
// to original-image coordinates with each sample's transform.
// Errors name the missing output or the mismatched shape.
Result<std::vector<std::vector<Detection>>> decode_detections(
    const Bundle& outputs, const DetectionHeadInfo& head,
    const std::vector<ImageTransform>& transforms, const std::vector<std::string>& class_names,
    const DetectionOptions& opts = {});

}  // namespace tracr::experiments
