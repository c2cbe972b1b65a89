// Datasets feeding the models: an image folder (JPEG/PNG), Fashion-MNIST in
// IDX format (gzip, as Debian's dataset-fashion-mnist ships it) and a
// synthetic generator for shape-only runs; batched with max_samples.
//
// Image preprocessing follows torchvision's ImageClassification preset on
// PIL images (resize the shorter side with PIL's bilinear, bicubic or nearest
// filter, center crop, scale to [0, 1], normalize). The resize is PIL's own
// fixed-point algorithm on uint8 (experiments/resample.hpp), so the model
// sees the same pixels as under torchvision (tests:
// ImageFolder.MatchesTorchvisionPreset and
// ImageFolder.MatchesTorchvisionPresetsOfEachInterpolation, exact, upscaled
// and downscaled JPEGs and a PNG).
//
// The synthetic dataset takes an input shape of any rank (a 4-feature
// vector, a [T, D] token sequence, [C, H, W]); image datasets need [C, H, W].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experiments/image_io.hpp"
#include "protocol/error.hpp"

namespace tracr::experiments {

// Maps original-image pixel coordinates to model-input coordinates:
// input = orig * scale + offset. Detections are mapped back with it.
struct ImageTransform {
  int orig_width = 0;
  int orig_height = 0;
  double scale_x = 1, scale_y = 1;
  double offset_x = 0, offset_y = 0;
};

struct Sample {
  at::Tensor image;   // float32 [C, H, W], normalized (synthetic: input_shape, any rank)
  int64_t label = -1; // -1 when unknown
  std::string id;     // file path or "<dataset>/<split>/<index>"
  ImageTransform transform;
};

// A sample the dataset could not give (an unreadable, truncated or CMYK
// image): it fails alone, recorded with its reason, and the run goes on.
struct SampleFailure {
  int64_t index = 0;   // the sample's index in the dataset
  std::string id;      // Dataset::id_of(index): the file, for an image folder
  std::string error;   // why
};

struct Batch {
  at::Tensor images;  // float32 [B, C, H, W]; undefined when every sample failed
  at::Tensor labels;  // int64 [B]
  std::vector<std::string> ids;
  std::vector<ImageTransform> transforms;
  std::vector<int64_t> indices;         // each image's index in the dataset
  std::vector<SampleFailure> failures;  // samples of this batch's range left out, in order
  int64_t size() const { return images.defined() ? images.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  // Error io / invalid_argument naming the file for unreadable images;
  // invalid_argument for an index out of range.
  virtual Result<Sample> get(int64_t index) const = 0;
  // The id get(index) gives its sample (the file, for an image folder),
  // known without reading it.
  virtual std::string id_of(int64_t index) const { return name() + "/" + std::to_string(index); }
  virtual const std::vector<std::string>& class_names() const = 0;
  // Whether a sample's label is its ground truth (an image folder's class,
  // Fashion-MNIST's): a synthetic sample's label is only its index modulo the
  // classes (for training loss), so inference does not judge accuracy by it.
  virtual bool labels_are_truth() const { return true; }
};

struct DatasetConfig {
  std::string kind = "synthetic";   // "imagefolder", "fashion-mnist" or "synthetic"
  std::string path;                 // image folder / directory of the IDX .gz files
  std::string split = "test";       // fashion-mnist: "train" or "test"
  std::string class_names_file;     // optional, one name per line (overrides built-ins)
  std::vector<std::string> class_names;  // optional, the names themselves (override the file and built-ins)
  // C, H, W produced; synthetic: any shape of rank >= 1 (no batch dimension).
  std::vector<int64_t> input_shape = {3, 224, 224};
  // "shorter": resize shorter side to resize_size, center crop H x W
  // (ImageClassification preset). "stretch": resize to exactly H x W
  // (detectors). "none": no resize (fashion-mnist at 28x28).
  std::string resize_mode = "shorter";
  int64_t resize_size = 0;          // 0 -> round(crop * 256 / 224), torchvision's ratio
  std::string interpolation = "bilinear";  // PIL's filter: bilinear, bicubic or nearest
  std::vector<float> mean = {0.485f, 0.456f, 0.406f};  // 1 value or one per channel
  std::vector<float> std = {0.229f, 0.224f, 0.225f};
  int64_t num_samples = 16;         // synthetic
  int64_t num_classes = 10;         // synthetic
  uint64_t seed = 0;                // synthetic
};

// Builds the dataset. Errors name the path and what was expected
// (missing folder, no images, malformed IDX header, count mismatch, ...).
Result<std::unique_ptr<Dataset>> open_dataset(const DatasetConfig& cfg);

// The ten Fashion-MNIST class names ("T-shirt/top", ..., "Ankle boot").
const std::vector<std::string>& fashion_mnist_classes();

// One name per line, blank lines kept as "" so indices match; error io.
Result<std::vector<std::string>> read_class_names(const std::string& path);

// Resize/crop/normalize one decoded RGB image as cfg says; fills *transform.
Result<at::Tensor> preprocess_image(const Image& img, const DatasetConfig& cfg,
                                    ImageTransform* transform);

// Iterates a dataset in order in batches of `batch_size` (the last may be
// smaller), stopping after `max_samples` samples (0 = all).
class BatchLoader {
 public:
  BatchLoader(const Dataset& ds, int64_t batch_size, int64_t max_samples = 0);
  int64_t num_samples() const { return total_; }
  int64_t num_batches() const { return (total_ + batch_ - 1) / batch_; }
  // Next batch of up to batch_size consecutive samples; nullopt after the
  // last one. A sample get() refuses is left out of the images and listed
  // in Batch::failures (a batch may hold failures only).
  Result<std::optional<Batch>> next();
  void reset() { pos_ = 0; }

 private:
  const Dataset& ds_;
  int64_t batch_;
  int64_t total_;
  int64_t pos_ = 0;
};

}  // namespace tracr::experiments
