#include "experiments/image_io.hpp"

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

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
};

// Warnings (e.g. "Premature end of JPEG file") are not printed; libjpeg
// still decodes what it can, as PIL does.
void jpeg_silent(j_common_ptr) {}

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
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}

Result<Image> decode_png(const std::string& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str()))
    return make_error(Errc::invalid_argument, path + ": PNG decode failed: " + image.message);
  image.format = PNG_FORMAT_RGB;
  Image img;
  img.width = static_cast<int>(image.width);
  img.height = static_cast<int>(image.height);
  img.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, img.rgb.data(), 0, nullptr)) {
    std::string m = image.message;
    png_image_free(&image);
    return make_error(Errc::invalid_argument, path + ": PNG decode failed: " + m);
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
    f.reset();
    return decode_png(path);
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
