#include "experiments/resample.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace tracr::experiments {
namespace {

// Pillow keeps 8 bits of result, 2 of headroom and the rest as fraction.
constexpr int kPrecisionBits = 32 - 8 - 2;

double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's bicubic_filter: Keys' cubic convolution with a = -0.5, the same
// expressions in the same order.
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// A convolution filter as Pillow's struct filter: the function and its
// support at scale 1.
struct Kernel {
  double (*fn)(double);
  double support;
};

// The fixed-point filter of one axis: output index i reads `count[i]` source
// pixels from `first[i]` with weights weight[i * ksize ...].
struct AxisFilter {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weight;
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc: the same double
// arithmetic in the same order, so the rounded weights are the same integers.
AxisFilter axis_filter(const Kernel& kernel, int in_size, float in0, float in1, int out_size) {
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kernel.support * filterscale;
  AxisFilter f;
  f.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.first.resize(out_size);
  f.count.resize(out_size);
  f.weight.assign(static_cast<size_t>(out_size) * f.ksize, 0);
  std::vector<double> w(f.ksize);
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Truncation, as Pillow's (int) casts (clamped right after).
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0.0;
    for (int x = 0; x < n; ++x) {
      w[x] = kernel.fn((x + lo - center + 0.5) * ss);
      sum += w[x];
    }
    int32_t* k = &f.weight[static_cast<size_t>(i) * f.ksize];
    for (int x = 0; x < n; ++x) {
      const double v = sum != 0.0 ? w[x] / sum : w[x];
      k[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    f.first[i] = lo;
    f.count[i] = n;
  }
  return f;
}

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift: floor
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Rows [row0, row0 + rows) of `in` (width in_w) resampled horizontally into
// `rows` rows of out_w. The channel count is a template parameter so that
// the per-pixel loops unroll (3x faster on RGB than a runtime count).
template <int C>
void horizontal_rows(const uint8_t* in, int in_w, int row0, int rows, const AxisFilter& f, int out_w,
                     uint8_t* out) {
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = in + static_cast<size_t>(row0 + y) * in_w * C;
    uint8_t* dst = out + static_cast<size_t>(y) * out_w * C;
    for (int x = 0; x < out_w; ++x) {
      const int32_t* k = &f.weight[static_cast<size_t>(x) * f.ksize];
      const uint8_t* p = src + static_cast<size_t>(f.first[x]) * C;
      int32_t acc[C];
      for (int c = 0; c < C; ++c) acc[c] = 1 << (kPrecisionBits - 1);
      for (int t = 0; t < f.count[x]; ++t, p += C)
        for (int c = 0; c < C; ++c) acc[c] += p[c] * k[t];
      for (int c = 0; c < C; ++c) dst[x * C + c] = clip8(acc[c]);
    }
  }
}

std::vector<uint8_t> horizontal_pass(const uint8_t* in, int in_w, int channels, int row0, int rows,
                                     const AxisFilter& f, int out_w) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * out_w * channels);
  switch (channels) {
    case 1: horizontal_rows<1>(in, in_w, row0, rows, f, out_w, out.data()); break;
    case 2: horizontal_rows<2>(in, in_w, row0, rows, f, out_w, out.data()); break;
    case 3: horizontal_rows<3>(in, in_w, row0, rows, f, out_w, out.data()); break;
    default: horizontal_rows<4>(in, in_w, row0, rows, f, out_w, out.data()); break;
  }
  return out;
}

// `in` (width w, its rows starting at source row `row0`) resampled
// vertically into out_h rows.
std::vector<uint8_t> vertical_pass(const uint8_t* in, int w, int channels, int row0, const AxisFilter& f,
                                   int out_h) {
  const size_t stride = static_cast<size_t>(w) * channels;
  std::vector<uint8_t> out(static_cast<size_t>(out_h) * stride);
  std::vector<int32_t> acc(stride);
  for (int y = 0; y < out_h; ++y) {
    const int32_t* k = &f.weight[static_cast<size_t>(y) * f.ksize];
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int t = 0; t < f.count[y]; ++t) {
      const uint8_t* src = in + static_cast<size_t>(f.first[y] - row0 + t) * stride;
      const int32_t kt = k[t];
      for (size_t i = 0; i < stride; ++i) acc[i] += src[i] * kt;
    }
    uint8_t* dst = &out[static_cast<size_t>(y) * stride];
    for (size_t i = 0; i < stride; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

// Pillow's ImagingScaleAffine for a box inside the image: per axis the
// source index of output i is (int)(box0 + scale / 2 + i * scale), the sum
// accumulated step by step in double; indices outside the image leave the
// pixel 0, as Pillow's fill does.
std::vector<int> nearest_index(float in0, float in1, int out_size, int in_size) {
  const double a = static_cast<double>(in1 - in0) / out_size;
  double o = static_cast<double>(in0) + a * 0.5;
  std::vector<int> idx(out_size);
  for (int i = 0; i < out_size; ++i, o += a) {
    const int v = o < 0.0 ? -1 : static_cast<int>(o);
    idx[i] = v < in_size ? v : -1;
  }
  return idx;
}

std::vector<uint8_t> nearest_resize(const uint8_t* in, int width, int height, int channels, int out_w, int out_h,
                                    const ResampleBox& box) {
  const std::vector<int> xs = nearest_index(box.x0, box.x1, out_w, width);
  const std::vector<int> ys = nearest_index(box.y0, box.y1, out_h, height);
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * channels, 0);
  for (int y = 0; y < out_h; ++y) {
    if (ys[y] < 0) continue;
    const uint8_t* src = in + static_cast<size_t>(ys[y]) * width * channels;
    uint8_t* dst = &out[static_cast<size_t>(y) * out_w * channels];
    for (int x = 0; x < out_w; ++x)
      if (xs[x] >= 0) std::copy_n(src + static_cast<size_t>(xs[x]) * channels, channels, dst + x * channels);
  }
  return out;
}

}  // namespace

Result<Interpolation> parse_interpolation(const std::string& name) {
  for (Interpolation f : {Interpolation::nearest, Interpolation::bilinear, Interpolation::bicubic})
    if (name == interpolation_name(f)) return f;
  return make_error(Errc::invalid_argument,
                    "interpolation '" + name + "', expected bilinear, bicubic or nearest (PIL's filters)");
}

const char* interpolation_name(Interpolation f) {
  switch (f) {
    case Interpolation::nearest: return "nearest";
    case Interpolation::bicubic: return "bicubic";
    default: return "bilinear";
  }
}

Result<std::vector<uint8_t>> resize_image(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                                          int out_width, int out_height, Interpolation filter,
                                          const std::optional<ResampleBox>& box_in) {
  if (width <= 0 || height <= 0)
    return make_error(Errc::invalid_argument, "resize: source size " + std::to_string(width) + "x" +
                                                  std::to_string(height) + ", expected both > 0");
  if (out_width <= 0 || out_height <= 0)
    return make_error(Errc::invalid_argument, "resize: output size " + std::to_string(out_width) + "x" +
                                                  std::to_string(out_height) + ", expected both > 0");
  if (channels < 1 || channels > 4)
    return make_error(Errc::invalid_argument,
                      "resize: " + std::to_string(channels) + " channels, expected 1 to 4");
  if (pixels.size() != static_cast<size_t>(width) * height * channels)
    return make_error(Errc::invalid_argument, "resize: " + std::to_string(pixels.size()) + " bytes for a " +
                                                  std::to_string(width) + "x" + std::to_string(height) + "x" +
                                                  std::to_string(channels) + " image");
  ResampleBox box = box_in.value_or(ResampleBox{0, 0, float(width), float(height)});
  if (box.x0 < 0 || box.y0 < 0) return make_error(Errc::invalid_argument, "resize: box offset can't be negative");
  if (box.x1 > width || box.y1 > height)
    return make_error(Errc::invalid_argument, "resize: box can't exceed the source size " +
                                                  std::to_string(width) + "x" + std::to_string(height));
  if (box.x1 - box.x0 < 0 || box.y1 - box.y0 < 0)
    return make_error(Errc::invalid_argument, "resize: box can't be empty");
  // Pillow's Image.resize returns a copy for the same size and whole box.
  if (out_width == width && out_height == height && box.x0 == 0 && box.y0 == 0 && box.x1 == width &&
      box.y1 == height)
    return pixels;
  if (filter == Interpolation::nearest)
    return nearest_resize(pixels.data(), width, height, channels, out_width, out_height, box);

  const Kernel kernel = filter == Interpolation::bicubic ? Kernel{bicubic, 2.0} : Kernel{triangle, 1.0};
  // Pillow's tests, kept as written (box[2] against the output width).
  const bool need_horizontal = out_width != width || box.x0 != 0 || box.x1 != out_width;
  const bool need_vertical = out_height != height || box.y0 != 0 || box.y1 != out_height;
  const AxisFilter vert = axis_filter(kernel, height, box.y0, box.y1, out_height);
  // Source rows the vertical pass reads.
  const int row_first = vert.first.front();
  const int row_last = vert.first.back() + vert.count.back();

  std::vector<uint8_t> cur;
  const uint8_t* src = pixels.data();
  int cur_w = width, cur_row0 = 0;
  if (need_horizontal) {
    const AxisFilter horiz = axis_filter(kernel, width, box.x0, box.x1, out_width);
    cur = horizontal_pass(pixels.data(), width, channels, row_first, row_last - row_first, horiz, out_width);
    src = cur.data();
    cur_w = out_width;
    cur_row0 = row_first;
  }
  if (need_vertical) return vertical_pass(src, cur_w, channels, cur_row0, vert, out_height);
  if (need_horizontal) return cur;
  return pixels;
}

Result<Image> resize_image(const Image& img, int out_width, int out_height, Interpolation filter,
                           const std::optional<ResampleBox>& box) {
  auto px = resize_image(img.rgb, img.width, img.height, 3, out_width, out_height, filter, box);
  if (!px) return px.error();
  Image out;
  out.width = out_width;
  out.height = out_height;
  out.rgb = std::move(*px);
  return out;
}

}  // namespace tracr::experiments
