#include "experiments/datasets.hpp"

#include "experiments/resample.hpp"

#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace tracr::experiments {
namespace fs = std::filesystem;
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o;
  for (auto d : s) o += (o.empty() ? "" : ", ") + std::to_string(d);
  return "[" + o + "]";
}

bool all_positive(const std::vector<int64_t>& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](int64_t d) { return d > 0; });
}

// Images need C, H, W, a known filter and a normalization per channel.
Status check_image_config(const DatasetConfig& cfg) {
  const auto& shape = cfg.input_shape;
  if (shape.size() != 3 || !all_positive(shape))
    return make_error(Errc::invalid_argument,
                      cfg.kind + ": images are [C, H, W] but the input shape is " + shape_text(shape) +
                          "; expected 3 sizes > 0 (a non-image input such as a feature vector or a token "
                          "sequence needs dataset type synthetic)");
  TRACR_TRY(parse_interpolation(cfg.interpolation));
  const size_t c = static_cast<size_t>(shape[0]);
  if (cfg.mean.size() != 1 && cfg.mean.size() != c)
    return make_error(Errc::invalid_argument,
                      "dataset mean has " + std::to_string(cfg.mean.size()) + " values for " + std::to_string(c) +
                          " channels; expected 1 or " + std::to_string(c) + " (dataset.mean, dataset.std)");
  if (cfg.std.size() != cfg.mean.size())
    return make_error(Errc::invalid_argument, "dataset std needs as many values as mean");
  for (float s : cfg.std)
    if (!(s > 0)) return make_error(Errc::invalid_argument, "dataset std values must be > 0");
  return {};
}

// Synthetic inputs take any rank (no normalization is applied to them).
Status check_shape(const DatasetConfig& cfg) {
  if (cfg.kind != "synthetic") return check_image_config(cfg);
  if (!all_positive(cfg.input_shape))
    return make_error(Errc::invalid_argument,
                      "synthetic: input shape " + shape_text(cfg.input_shape) + ", expected one or more sizes > 0");
  return {};
}

// uint8 pixels (height x width x channels) as a float [channels, height,
// width] tensor of values 0..255 (a copy).
at::Tensor to_chw_float(const std::vector<uint8_t>& px, int64_t height, int64_t width, int64_t channels) {
  return torch::from_blob(const_cast<uint8_t*>(px.data()), {height, width, channels}, torch::kUInt8)
      .permute({2, 0, 1})
      .to(torch::kFloat);
}

// Python's round() (half to even), as torchvision's center_crop uses.
int64_t round_half_even(double v) {
  const int old = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double r = std::nearbyint(v);
  std::fesetround(old);
  return static_cast<int64_t>(r);
}

at::Tensor normalize(at::Tensor x01, const DatasetConfig& cfg) {
  const int64_t c = x01.size(0);
  auto mean = torch::tensor(cfg.mean).to(torch::kFloat);
  auto std = torch::tensor(cfg.std).to(torch::kFloat);
  if (mean.numel() == 1) mean = mean.expand({c}), std = std.expand({c});
  return (x01 - mean.view({c, 1, 1})) / std.view({c, 1, 1});
}

// --------------------------------------------------------------- synthetic

// Class names given in the configuration (a list, else a file) replace the
// dataset's own.
Status override_class_names(const DatasetConfig& cfg, std::vector<std::string>& names) {
  if (!cfg.class_names.empty()) {
    names = cfg.class_names;
  } else if (!cfg.class_names_file.empty()) {
    auto read = read_class_names(cfg.class_names_file);
    if (!read) return read.error();
    names = std::move(*read);
  }
  return {};
}

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(DatasetConfig cfg) : cfg_(std::move(cfg)) {
    for (int64_t i = 0; i < cfg_.num_classes; ++i) names_.push_back("class_" + std::to_string(i));
    if (!cfg_.class_names.empty()) names_ = cfg_.class_names;
  }
  std::string name() const override { return "synthetic"; }
  int64_t size() const override { return cfg_.num_samples; }
  Result<Sample> get(int64_t i) const override {
    if (i < 0 || i >= size())
      return make_error(Errc::invalid_argument, "synthetic: index " + std::to_string(i) + " out of range");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg_.seed * 1000003ULL + static_cast<uint64_t>(i));
    Sample s;
    s.image = at::randn(cfg_.input_shape, gen, torch::TensorOptions().dtype(torch::kFloat));
    s.label = cfg_.num_classes > 0 ? i % cfg_.num_classes : -1;
    s.id = "synthetic/" + std::to_string(i);
    if (cfg_.input_shape.size() == 3) {
      s.transform.orig_width = static_cast<int>(cfg_.input_shape[2]);
      s.transform.orig_height = static_cast<int>(cfg_.input_shape[1]);
    }
    return s;
  }
  const std::vector<std::string>& class_names() const override { return names_; }
  bool labels_are_truth() const override { return false; }

 private:
  DatasetConfig cfg_;
  std::vector<std::string> names_;
};

// ------------------------------------------------------------ image folder

bool is_image_file(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

class ImageFolderDataset : public Dataset {
 public:
  static Result<std::unique_ptr<Dataset>> open(const DatasetConfig& cfg) {
    std::error_code ec;
    if (!fs::is_directory(cfg.path, ec))
      return make_error(Errc::not_found, "imagefolder: '" + cfg.path + "' is not a directory");
    std::unique_ptr<ImageFolderDataset> ds(new ImageFolderDataset(cfg));
    std::vector<fs::path> subdirs;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(cfg.path, ec)) {
      if (e.is_directory()) subdirs.push_back(e.path());
      else if (e.is_regular_file() && is_image_file(e.path())) files.push_back(e.path());
    }
    if (ec) return make_error(Errc::io, "imagefolder: cannot list '" + cfg.path + "': " + ec.message());
    std::sort(subdirs.begin(), subdirs.end());
    std::sort(files.begin(), files.end());
    if (!subdirs.empty()) {
      // torchvision ImageFolder layout: root/<class>/<image>, classes sorted.
      for (size_t c = 0; c < subdirs.size(); ++c) {
        ds->names_.push_back(subdirs[c].filename().string());
        std::vector<fs::path> in_class;
        for (const auto& e : fs::recursive_directory_iterator(subdirs[c], ec))
          if (e.is_regular_file() && is_image_file(e.path())) in_class.push_back(e.path());
        std::sort(in_class.begin(), in_class.end());
        for (auto& p : in_class) ds->items_.push_back({p.string(), static_cast<int64_t>(c)});
      }
    }
    for (auto& p : files) ds->items_.push_back({p.string(), -1});
    if (ds->items_.empty())
      return make_error(Errc::not_found, "imagefolder: no .jpg/.jpeg/.png files under '" + cfg.path + "'");
    TRACR_TRY(override_class_names(cfg, ds->names_));
    return std::unique_ptr<Dataset>(std::move(ds));
  }

  std::string name() const override { return "imagefolder"; }
  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  Result<Sample> get(int64_t i) const override {
    if (i < 0 || i >= size())
      return make_error(Errc::invalid_argument, "imagefolder: index " + std::to_string(i) + " out of range");
    const auto& [path, label] = items_[i];
    auto img = decode_image(path);
    if (!img) return img.error();
    Sample s;
    auto t = preprocess_image(*img, cfg_, &s.transform);
    if (!t) return make_error(t.error().code, path + ": " + t.error().message);
    s.image = *t;
    s.label = label;
    s.id = path;
    return s;
  }
  std::string id_of(int64_t i) const override {
    return i >= 0 && i < size() ? items_[static_cast<size_t>(i)].first : Dataset::id_of(i);
  }
  const std::vector<std::string>& class_names() const override { return names_; }

 private:
  explicit ImageFolderDataset(DatasetConfig cfg) : cfg_(std::move(cfg)) {}
  DatasetConfig cfg_;
  std::vector<std::pair<std::string, int64_t>> items_;
  std::vector<std::string> names_;
};

// ----------------------------------------------------------- Fashion-MNIST

Result<std::vector<uint8_t>> gunzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return make_error(Errc::io, path + ": cannot open");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  while (true) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int errnum = 0;
      std::string m = gzerror(f, &errnum);
      gzclose(f);
      return make_error(Errc::io, path + ": gzip read failed: " + m);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

class FashionMnistDataset : public Dataset {
 public:
  static Result<std::unique_ptr<Dataset>> open(const DatasetConfig& cfg) {
    if (cfg.split != "train" && cfg.split != "test")
      return make_error(Errc::invalid_argument, "fashion-mnist: split '" + cfg.split + "', expected train or test");
    const std::string prefix = (fs::path(cfg.path) / (cfg.split == "train" ? "train" : "t10k")).string();
    const std::string img_path = prefix + "-images-idx3-ubyte.gz";
    const std::string lbl_path = prefix + "-labels-idx1-ubyte.gz";
    auto images = gunzip_file(img_path);
    if (!images) return images.error();
    auto labels = gunzip_file(lbl_path);
    if (!labels) return labels.error();
    if (images->size() < 16 || be32(images->data()) != 0x803)
      return make_error(Errc::invalid_argument, img_path + ": not an IDX3 ubyte file (magic 0x00000803 expected)");
    if (labels->size() < 8 || be32(labels->data()) != 0x801)
      return make_error(Errc::invalid_argument, lbl_path + ": not an IDX1 ubyte file (magic 0x00000801 expected)");
    const uint32_t n = be32(images->data() + 4), rows = be32(images->data() + 8),
                   cols = be32(images->data() + 12);
    const uint32_t nl = be32(labels->data() + 4);
    if (images->size() != 16 + size_t(n) * rows * cols)
      return make_error(Errc::invalid_argument, img_path + ": holds " + std::to_string(images->size() - 16) +
                                                    " pixel bytes, header says " + std::to_string(n) + "x" +
                                                    std::to_string(rows) + "x" + std::to_string(cols));
    if (labels->size() != 8 + size_t(nl) || nl != n)
      return make_error(Errc::invalid_argument, lbl_path + ": " + std::to_string(nl) + " labels for " +
                                                    std::to_string(n) + " images");
    std::unique_ptr<FashionMnistDataset> ds(new FashionMnistDataset(cfg));
    ds->n_ = n, ds->rows_ = rows, ds->cols_ = cols;
    ds->pixels_ = std::move(*images);
    ds->labels_ = std::move(*labels);
    ds->names_ = fashion_mnist_classes();
    for (size_t i = 8; i < ds->labels_.size(); ++i)
      if (ds->labels_[i] >= ds->names_.size())
        return make_error(Errc::invalid_argument, lbl_path + ": label " + std::to_string(ds->labels_[i]) +
                                                      " at index " + std::to_string(i - 8) + " is not in 0..9");
    TRACR_TRY(override_class_names(cfg, ds->names_));
    return std::unique_ptr<Dataset>(std::move(ds));
  }

  std::string name() const override { return "fashion-mnist"; }
  int64_t size() const override { return n_; }
  Result<Sample> get(int64_t i) const override {
    if (i < 0 || i >= size())
      return make_error(Errc::invalid_argument, "fashion-mnist: index " + std::to_string(i) + " out of range");
    const int64_t c = cfg_.input_shape[0], h = cfg_.input_shape[1], w = cfg_.input_shape[2];
    const auto* first = pixels_.data() + 16 + size_t(i) * rows_ * cols_;
    std::vector<uint8_t> px(first, first + size_t(rows_) * cols_);
    Sample s;
    s.transform.orig_width = static_cast<int>(cols_);
    s.transform.orig_height = static_cast<int>(rows_);
    if (cfg_.resize_mode != "none") {
      auto resized = resize_image(px, int(cols_), int(rows_), 1, int(w), int(h), *parse_interpolation(cfg_.interpolation));
      if (!resized) return resized.error();
      px = std::move(*resized);
      s.transform.scale_x = double(w) / cols_;
      s.transform.scale_y = double(h) / rows_;
    } else if (h != rows_ || w != cols_) {
      return make_error(Errc::invalid_argument, "fashion-mnist: images are 28x28 but input_shape asks " +
                                                    std::to_string(h) + "x" + std::to_string(w) +
                                                    " with resize_mode none");
    }
    s.image = normalize((to_chw_float(px, h, w, 1) / 255.0).expand({c, h, w}), cfg_).contiguous();
    s.label = labels_[8 + i];
    s.id = "fashion-mnist/" + cfg_.split + "/" + std::to_string(i);
    return s;
  }
  const std::vector<std::string>& class_names() const override { return names_; }

 private:
  explicit FashionMnistDataset(DatasetConfig cfg) : cfg_(std::move(cfg)) {}
  DatasetConfig cfg_;
  int64_t n_ = 0, rows_ = 0, cols_ = 0;
  std::vector<uint8_t> pixels_, labels_;
  std::vector<std::string> names_;
};

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

Result<std::vector<std::string>> read_class_names(const std::string& path) {
  std::ifstream f(path);
  if (!f) return make_error(Errc::io, path + ": cannot open class names file");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  if (out.empty()) return make_error(Errc::invalid_argument, path + ": class names file is empty");
  return out;
}

Result<at::Tensor> preprocess_image(const Image& img, const DatasetConfig& cfg,
                                    ImageTransform* transform) {
  TRACR_TRY(check_image_config(cfg));
  const int64_t c = cfg.input_shape[0], h = cfg.input_shape[1], w = cfg.input_shape[2];
  const Interpolation filter = *parse_interpolation(cfg.interpolation);  // checked above
  if (c != 3 && c != 1)
    return make_error(Errc::invalid_argument, "images give 1 or 3 channels, input_shape asks " + std::to_string(c));
  if (img.width <= 0 || img.height <= 0 || img.rgb.size() != size_t(img.width) * img.height * 3)
    return make_error(Errc::invalid_argument, "decoded image buffer does not match its size");
  ImageTransform tf;
  tf.orig_width = img.width;
  tf.orig_height = img.height;
  // Resized on uint8 exactly as PIL does (torchvision resizes PIL images
  // with Image.resize), cropped, then converted to float.
  at::Tensor x;
  if (cfg.resize_mode == "shorter") {
    const int64_t size = cfg.resize_size > 0 ? cfg.resize_size
                                             : static_cast<int64_t>(std::floor(std::min(h, w) * 256.0 / 224.0 + 0.5));
    if (size < h || size < w)
      return make_error(Errc::invalid_argument, "resize_size " + std::to_string(size) + " is smaller than the crop " +
                                                    std::to_string(h) + "x" + std::to_string(w));
    // torchvision: the shorter side becomes `size`, the longer int(size * long / short).
    int64_t nh, nw;
    if (img.width <= img.height) {
      nw = size;
      nh = static_cast<int64_t>(double(size) * img.height / img.width);
    } else {
      nh = size;
      nw = static_cast<int64_t>(double(size) * img.width / img.height);
    }
    auto resized = resize_image(img, int(nw), int(nh), filter);
    if (!resized) return resized.error();
    const int64_t top = round_half_even((nh - h) / 2.0), left = round_half_even((nw - w) / 2.0);
    x = to_chw_float(resized->rgb, nh, nw, 3).slice(1, top, top + h).slice(2, left, left + w);
    tf.scale_x = double(nw) / img.width;
    tf.scale_y = double(nh) / img.height;
    tf.offset_x = -double(left);
    tf.offset_y = -double(top);
  } else if (cfg.resize_mode == "stretch") {
    auto resized = resize_image(img, int(w), int(h), filter);
    if (!resized) return resized.error();
    x = to_chw_float(resized->rgb, h, w, 3);
    tf.scale_x = double(w) / img.width;
    tf.scale_y = double(h) / img.height;
  } else if (cfg.resize_mode == "none") {
    if (img.height != h || img.width != w)
      return make_error(Errc::invalid_argument, "image is " + std::to_string(img.width) + "x" +
                                                    std::to_string(img.height) + ", input_shape asks " +
                                                    std::to_string(w) + "x" + std::to_string(h));
    x = to_chw_float(img.rgb, h, w, 3);
  } else {
    return make_error(Errc::invalid_argument,
                      "resize_mode '" + cfg.resize_mode + "', expected shorter, stretch or none");
  }
  // One channel: PIL's convert('L') on the uint8 pixels (torchvision's
  // Grayscale), L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, a uint8
  // again (#24: the unrounded float sum was up to 0.9 of a step off).
  if (c == 1) {
    const at::Tensor q = x.to(torch::kInt64);
    x = (q[0] * 19595 + q[1] * 38470 + q[2] * 7471 + 32768).div(65536, "floor").to(torch::kFloat).unsqueeze(0);
  }
  x = x / 255.0;
  if (transform) *transform = tf;
  return normalize(x, cfg).contiguous();
}

Result<std::unique_ptr<Dataset>> open_dataset(const DatasetConfig& cfg) {
  TRACR_TRY(check_shape(cfg));
  if (cfg.kind == "synthetic") {
    if (cfg.num_samples < 0) return make_error(Errc::invalid_argument, "synthetic: num_samples < 0");
    return std::unique_ptr<Dataset>(new SyntheticDataset(cfg));
  }
  if (cfg.kind == "imagefolder") return ImageFolderDataset::open(cfg);
  if (cfg.kind == "fashion-mnist") return FashionMnistDataset::open(cfg);
  return make_error(Errc::invalid_argument,
                    "dataset kind '" + cfg.kind + "', expected imagefolder, fashion-mnist or synthetic");
}

BatchLoader::BatchLoader(const Dataset& ds, int64_t batch_size, int64_t max_samples)
    : ds_(ds), batch_(std::max<int64_t>(1, batch_size)) {
  total_ = ds.size();
  if (max_samples > 0) total_ = std::min(total_, max_samples);
}

Result<std::optional<Batch>> BatchLoader::next() {
  if (pos_ >= total_) return std::optional<Batch>();
  const int64_t end = std::min(total_, pos_ + batch_);
  std::vector<at::Tensor> images;
  std::vector<int64_t> labels;
  Batch b;
  for (int64_t i = pos_; i < end; ++i) {
    auto s = ds_.get(i);
    if (!s) {
      b.failures.push_back({i, ds_.id_of(i), s.error().str()});
      continue;
    }
    images.push_back(s->image);
    labels.push_back(s->label);
    b.ids.push_back(std::move(s->id));
    b.transforms.push_back(s->transform);
    b.indices.push_back(i);
  }
  pos_ = end;
  if (!images.empty()) {
    b.images = torch::stack(images);
    b.labels = torch::tensor(labels, torch::kLong);
  }
  return std::optional<Batch>(std::move(b));
}

}  // namespace tracr::experiments
