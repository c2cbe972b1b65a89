// Resampling of 8-bit images, bit-exact with Pillow's
// Image.resize(size, resample, box) for NEAREST, BILINEAR and BICUBIC (and so
// with torchvision's Resize on PIL images, which calls it). No LibTorch.
//
// BILINEAR and BICUBIC follow Pillow's libImaging/Resample.c step by step:
// per output column (row) a filter (triangle, support 1; or Keys' cubic with
// a = -0.5, support 2) stretched by the scale when downscaling
// (antialiasing), its weights computed in double, normalised to sum 1 and
// rounded half away from zero to fixed point with 22 fraction bits; each
// output value is 2^21 + sum(pixel * weight), shifted right by 22 and clipped
// to 0..255. The horizontal pass runs first (only over the source rows the
// vertical pass will read) into an 8-bit intermediate, then the vertical
// pass; a pass whose size and box leave that axis unchanged is skipped, as
// Pillow skips it.
//
// NEAREST follows Pillow's affine scaling (libImaging/Geometry.c,
// ImagingScaleAffine): source coordinate box0 + (i + 0.5) * scale,
// accumulated by repeated addition in double as Pillow does, truncated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experiments/image_io.hpp"
#include "protocol/error.hpp"

namespace tracr::experiments {

// The source region to resample, in source pixels (Pillow's `box`: left,
// upper, right, lower; floats, as Pillow holds them). The default is the
// whole image.
struct ResampleBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The resampling filters torchvision's presets use (InterpolationMode).
enum class Interpolation { nearest, bilinear, bicubic };

// "nearest", "bilinear" or "bicubic". Error invalid_argument naming the text
// and the three expected names.
Result<Interpolation> parse_interpolation(const std::string& name);
const char* interpolation_name(Interpolation f);

// Resizes `height` rows of `width * channels` interleaved bytes to
// out_width x out_height with the same channel layout. Returns the
// out_height * out_width * channels bytes. Errors invalid_argument, naming
// the value: a size or channel count <= 0, a buffer of the wrong length, a
// box with a negative offset, beyond the image or empty (Pillow's checks).
Result<std::vector<uint8_t>> resize_image(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                                          int out_width, int out_height, Interpolation filter = Interpolation::bilinear,
                                          const std::optional<ResampleBox>& box = std::nullopt);

// The same for a decoded RGB image.
Result<Image> resize_image(const Image& img, int out_width, int out_height,
                           Interpolation filter = Interpolation::bilinear,
                           const std::optional<ResampleBox>& box = std::nullopt);

}  // namespace tracr::experiments
