#include "experiments/image_io.hpp"

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace tracr::experiments {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated = false;
};

// Warnings are not printed. A file that ends before its image does
// ("Premature end of JPEG file") is an error, as PIL raises "image file is
// truncated" (#24: it was decoded with gray filling the rest); other
// warnings (extraneous bytes, say) are decoded through, as PIL does.
void jpeg_silent(j_common_ptr) {}
void jpeg_warn(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    err->truncated = true;
  }
  if (level < 0) ++cinfo->err->num_warnings;
}

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

Result<Image> decode_jpeg(const std::string& path, FILE* f) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.output_message = jpeg_silent;
  err.mgr.emit_message = jpeg_warn;
  err.message[0] = 0;
  Image img;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return make_error(Errc::invalid_argument, path + ": JPEG decode failed: " + err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, f);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return make_error(Errc::invalid_argument, path + ": CMYK JPEG is not supported (expected RGB or grayscale)");
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  img.width = static_cast<int>(cinfo.output_width);
  img.height = static_cast<int>(cinfo.output_height);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.rgb.data() + static_cast<size_t>(cinfo.output_scanline) * img.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  const bool truncated = err.truncated;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (truncated || err.truncated)
    return make_error(Errc::invalid_argument, path + ": JPEG file is truncated (it ends before its image data does)");
  return img;
}

struct PngError {
  std::jmp_buf jump;
  std::string message;
};

void png_fail(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngError*>(png_get_error_ptr(png));
  e->message = msg ? msg : "unknown libpng error";
  std::longjmp(e->jump, 1);
}
void png_quiet(png_structp, png_const_charp) {}  // warnings: PIL decodes on too

// As PIL's Image.open(path).convert('RGB') (what torchvision's ImageFolder
// loader does), checked against Pillow 9.4 (#24: the simplified libpng API
// composited alpha onto black in linear light and sRGB-encoded 16-bit data):
//   * alpha (RGBA, LA, a palette's tRNS) is dropped, never composited;
//   * 16-bit RGB(A) and LA keep the high byte; 16-bit gray opens as mode I,
//     whose conversion clips at 255;
//   * gray of 1, 2 and 4 bits is scaled to 0..255 and replicated;
//   * gAMA, cHRM, sRGB and iCCP are ignored, as PIL ignores them.
Result<Image> decode_png(const std::string& path, FILE* f) {
  PngError err;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_fail, png_quiet);
  if (!png) return make_error(Errc::internal, path + ": cannot create a PNG reader");
  png_infop info = png_create_info_struct(png);
  std::vector<uint8_t> raw;
  std::vector<png_bytep> rows;
  if (setjmp(err.jump)) {
    png_destroy_read_struct(&png, &info, nullptr);
    // libpng's reader says only "Read Error" when the file ends early.
    if (std::feof(f))
      return make_error(Errc::invalid_argument, path + ": PNG file is truncated (it ends before its image data does)");
    return make_error(Errc::invalid_argument, path + ": PNG decode failed: " + err.message);
  }
  if (!info) png_fail(png, "cannot create PNG info");
  png_init_io(png, f);
  png_read_info(png, info);
  const int depth = png_get_bit_depth(png, info);
  const int color = png_get_color_type(png, info);
  const bool gray16 = depth == 16 && color == PNG_COLOR_TYPE_GRAY;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !gray16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (!gray16 && (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  const size_t channels = png_get_channels(png, info), rowbytes = png_get_rowbytes(png, info);
  if (width == 0 || height == 0 || width > 65535 || height > 65535 ||
      rowbytes != width * channels * (gray16 ? 2 : 1) || channels != (gray16 ? 1u : 3u))
    png_fail(png, "unexpected layout after conversion to RGB");
  raw.resize(rowbytes * height);
  rows.resize(height);
  for (size_t y = 0; y < height; ++y) rows[y] = raw.data() + y * rowbytes;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  Image img;
  img.width = static_cast<int>(width);
  img.height = static_cast<int>(height);
  if (!gray16) {
    img.rgb = std::move(raw);
    return img;
  }
  img.rgb.resize(width * height * 3);
  for (size_t i = 0; i < width * height; ++i) {
    const unsigned v = (unsigned{raw[2 * i]} << 8) | raw[2 * i + 1];  // big-endian samples
    const uint8_t c = static_cast<uint8_t>(std::min(v, 255u));
    img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = c;
  }
  return img;
}

}  // namespace

Result<Image> decode_image(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return make_error(Errc::io, path + ": cannot open image: " + std::strerror(errno));
  unsigned char magic[8] = {};
  const size_t n = std::fread(magic, 1, sizeof magic, f.get());
  if (n >= 3 && magic[0] == 0xFF && magic[1] == 0xD8 && magic[2] == 0xFF) {
    std::rewind(f.get());
    return decode_jpeg(path, f.get());
  }
  if (n == 8 && png_sig_cmp(magic, 0, 8) == 0) {
    std::rewind(f.get());
    return decode_png(path, f.get());
  }
  return make_error(Errc::invalid_argument, path + ": not a JPEG or PNG file");
}

Status write_png(const std::string& path, const Image& img) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    return make_error(Errc::invalid_argument, path + ": image buffer does not match its size");
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(img.width);
  image.height = static_cast<png_uint_32>(img.height);
  image.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, img.rgb.data(), 0, nullptr))
    return make_error(Errc::io, path + ": PNG write failed: " + image.message);
  return {};
}

Status write_jpeg(const std::string& path, const Image& img, int quality) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    return make_error(Errc::invalid_argument, path + ": image buffer does not match its size");
  FilePtr f(std::fopen(path.c_str(), "wb"));
  if (!f) return make_error(Errc::io, path + ": cannot create: " + std::strerror(errno));
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return make_error(Errc::io, path + ": JPEG encode failed: " + err.message);
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f.get());
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(img.rgb.data()) +
                   static_cast<size_t>(cinfo.next_scanline) * img.width * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return {};
}

}  // namespace tracr::experiments
