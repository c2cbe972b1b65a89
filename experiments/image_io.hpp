// JPEG (libjpeg-turbo) and PNG (libpng) decoding to 8-bit RGB, and encoding
// (used by tests and tools to write real files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::experiments {

// 8-bit RGB, row-major, height * width * 3 bytes.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

// Decodes by content (JPEG FF D8, PNG 89 'PNG'), not by extension. Grayscale,
// palette and 16-bit PNGs become 8-bit RGB; PNG alpha is composited onto
// black by libpng (PIL's convert("RGB") drops alpha instead). Errors: io
// (cannot read), invalid_argument (unknown format, corrupt data, CMYK JPEG),
// each naming the file.
Result<Image> decode_image(const std::string& path);

Status write_png(const std::string& path, const Image& img);
Status write_jpeg(const std::string& path, const Image& img, int quality = 90);

}  // namespace tracr::experiments
