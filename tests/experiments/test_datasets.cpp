// Datasets on real files: Debian's Fashion-MNIST IDX files, JPEG/PNG images
// written with libjpeg/libpng, and torchvision's preset as the reference.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "experiments/datasets.hpp"
#include "experiments/image_io.hpp"
#include "experiments/resample.hpp"
#include "test_util.hpp"

namespace tracr::experiments {
namespace {

using test::TempDir;

Image gradient(int w, int h, int seed) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(size_t(y) * w + x) * 3];
      p[0] = uint8_t((x * 255) / std::max(1, w - 1));
      p[1] = uint8_t((y * 255) / std::max(1, h - 1));
      p[2] = uint8_t((x * 13 + y * 7 + seed * 31) % 256);
    }
  return img;
}

// Debian's Fashion-MNIST test set as stored: 1x28x28, values 0..1.
DatasetConfig raw_fashion_mnist() {
  DatasetConfig cfg;
  cfg.kind = "fashion-mnist";
  cfg.path = TRACR_FASHION_MNIST_DIR;
  cfg.input_shape = {1, 28, 28};
  cfg.resize_mode = "none";
  cfg.mean = {0.0f};
  cfg.std = {1.0f};
  return cfg;
}

TEST(FashionMnist, ReadsTheDebianTestSetWithLabelsAndClassNames) {
  auto ds = open_dataset(raw_fashion_mnist());
  ASSERT_TRUE(ds.ok()) << ds.error().str();
  EXPECT_EQ((*ds)->size(), 10000);
  ASSERT_EQ((*ds)->class_names().size(), 10u);
  EXPECT_EQ((*ds)->class_names()[9], "Ankle boot");
  auto s = (*ds)->get(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->label, 9);  // the first test image is an ankle boot
  EXPECT_EQ(s->image.sizes(), (c10::IntArrayRef{1, 28, 28}));
  EXPECT_GE(s->image.min().item<float>(), 0.0f);
  EXPECT_LE(s->image.max().item<float>(), 1.0f);
  EXPECT_GT(s->image.max().item<float>(), 0.5f);
  // Label histogram of the test set: 1000 per class.
  std::vector<int> hist(10);
  BatchLoader all(**ds, 1000);
  int64_t seen = 0;
  while (true) {
    auto b = all.next();
    ASSERT_TRUE(b.ok());
    if (!*b) break;
    seen += (*b)->labels.size(0);
    for (int64_t i = 0; i < (*b)->labels.size(0); ++i) ++hist[(*b)->labels[i].item<int64_t>()];
  }
  EXPECT_EQ(seen, 10000);
  for (int h : hist) EXPECT_EQ(h, 1000);
}

TEST(FashionMnist, ResizesToModelInputAndBatchesWithMaxSamples) {
  DatasetConfig cfg;
  cfg.kind = "fashion-mnist";
  cfg.path = TRACR_FASHION_MNIST_DIR;
  cfg.split = "train";
  cfg.input_shape = {3, 32, 32};
  cfg.mean = {0.2860f};
  cfg.std = {0.3530f};
  auto ds = open_dataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.error().str();
  EXPECT_EQ((*ds)->size(), 60000);
  BatchLoader loader(**ds, 4, 10);
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<int64_t> sizes;
  while (true) {
    auto b = loader.next();
    ASSERT_TRUE(b.ok());
    if (!*b) break;
    EXPECT_EQ((*b)->images.size(1), 3);
    EXPECT_EQ((*b)->images.size(2), 32);
    EXPECT_TRUE(torch::equal((*b)->images[0][0], (*b)->images[0][2]));  // gray replicated
    sizes.push_back((*b)->images.size(0));
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
}

TEST(FashionMnist, MissingOrCorruptFilesAreErrorsNamingTheFile) {
  TempDir dir;
  DatasetConfig cfg;
  cfg.kind = "fashion-mnist";
  cfg.path = dir.path();
  auto r = open_dataset(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("t10k-images-idx3-ubyte.gz"), std::string::npos);
  // Labels file swapped in for images: wrong magic.
  std::filesystem::copy_file(std::string(TRACR_FASHION_MNIST_DIR) + "/t10k-labels-idx1-ubyte.gz",
                             dir.file("t10k-images-idx3-ubyte.gz"));
  std::filesystem::copy_file(std::string(TRACR_FASHION_MNIST_DIR) + "/t10k-labels-idx1-ubyte.gz",
                             dir.file("t10k-labels-idx1-ubyte.gz"));
  r = open_dataset(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("magic"), std::string::npos) << r.error().message;
}

TEST(ImageIO, PngRoundTripIsExactAndJpegIsClose) {
  TempDir dir;
  const Image img = gradient(37, 23, 1);
  ASSERT_TRUE(write_png(dir.file("a.png"), img).ok());
  auto png = decode_image(dir.file("a.png"));
  ASSERT_TRUE(png.ok()) << png.error().str();
  EXPECT_EQ(png->width, 37);
  EXPECT_EQ(png->height, 23);
  EXPECT_EQ(png->rgb, img.rgb);
  ASSERT_TRUE(write_jpeg(dir.file("a.jpg"), img, 98).ok());
  auto jpg = decode_image(dir.file("a.jpg"));
  ASSERT_TRUE(jpg.ok()) << jpg.error().str();
  ASSERT_EQ(jpg->rgb.size(), img.rgb.size());
  // Red and green are smooth ramps (JPEG keeps them within a few steps); blue
  // is a high-frequency pattern that chroma subsampling blurs.
  double smooth = 0, all = 0;
  for (size_t i = 0; i < img.rgb.size(); ++i) {
    const int d = std::abs(int(jpg->rgb[i]) - int(img.rgb[i]));
    all += d;
    if (i % 3 != 2) smooth += d;
  }
  EXPECT_LT(smooth / (img.rgb.size() * 2 / 3), 3.0);
  EXPECT_LT(all / img.rgb.size(), 8.0);
}

TEST(ImageIO, CorruptAndUnknownFilesAreErrorsNamingTheFile) {
  TempDir dir;
  {
    std::ofstream f(dir.file("x.jpg"), std::ios::binary);
    f << "\xFF\xD8\xFF\xE0garbage";
  }
  auto r = decode_image(dir.file("x.jpg"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("x.jpg"), std::string::npos);
  {
    std::ofstream f(dir.file("t.png"));
    f << "hello";
  }
  r = decode_image(dir.file("t.png"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not a JPEG or PNG"), std::string::npos);
  EXPECT_EQ(decode_image(dir.file("none.png")).error().code, Errc::io);
}

TEST(ImageFolder, ClassSubfoldersGiveSortedLabelsAndPresetShapes) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("cat"));
  std::filesystem::create_directories(dir.file("dog"));
  ASSERT_TRUE(write_jpeg(dir.file("dog/1.jpg"), gradient(120, 90, 1)).ok());
  ASSERT_TRUE(write_png(dir.file("cat/2.png"), gradient(64, 100, 2)).ok());
  ASSERT_TRUE(write_jpeg(dir.file("cat/1.JPEG"), gradient(80, 80, 3)).ok());
  {
    std::ofstream f(dir.file("dog/readme.txt"));
    f << "ignored";
  }
  DatasetConfig cfg;
  cfg.kind = "imagefolder";
  cfg.path = dir.path();
  cfg.input_shape = {3, 56, 56};
  auto ds = open_dataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.error().str();
  ASSERT_EQ((*ds)->size(), 3);
  EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"cat", "dog"}));
  BatchLoader loader(**ds, 8);
  auto b = loader.next();
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ((*b)->images.sizes(), (c10::IntArrayRef{3, 3, 56, 56}));
  EXPECT_EQ(test::to_vec((*b)->labels), (std::vector<int64_t>{0, 0, 1}));
  // dog/1.jpg 120x90: shorter side 90 -> 64 (56 * 256 / 224), crop 56.
  const auto& tf = (*b)->transforms[2];
  EXPECT_EQ(tf.orig_width, 120);
  EXPECT_NEAR(tf.scale_y, 64.0 / 90, 1e-9);
  EXPECT_EQ(tf.offset_y, -4.0);
  EXPECT_EQ(tf.offset_x, -14.0);  // (85 - 56) / 2 = 14.5 rounds half to even
}

// Bytes of an 8-bit image as a uint8 [H, W, C] tensor, for comparison with
// the reference script's arrays.
at::Tensor hwc(const std::vector<uint8_t>& px, int w, int h, int c) {
  return torch::from_blob(const_cast<uint8_t*>(px.data()), {h, w, c}, torch::kUInt8).clone();
}

// Every value equal, else the first difference.
void expect_same_pixels(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto diff = (got.to(torch::kInt) - want.to(torch::kInt)).abs();
  const int64_t differing = diff.ne(0).sum().item<int64_t>();
  EXPECT_EQ(differing, 0) << what << ": " << differing << " of " << diff.numel()
                          << " values differ, by up to " << diff.max().item<int>() << " uint8 steps";
}

TEST(Resample, MatchesPillowBitForBitOnJpegsUpAndDownscaledWithEachFilter) {
  TempDir dir;
  const std::string ref = test::script("tracr_reference.py");
  // JPEGs written by PIL (gradients plus noise) and a real photograph: the
  // first Fashion-MNIST test image written as a JPEG by libjpeg.
  ASSERT_EQ(test::run_python(ref + " image " + dir.file("small.jpg") + " 97 61 3"), 0);
  ASSERT_EQ(test::run_python(ref + " image " + dir.file("large.jpg") + " 640 480 4"), 0);
  ASSERT_EQ(test::run_python(ref + " image " + dir.file("odd.png") + " 181 257 5"), 0);
  {
    auto ds = open_dataset(raw_fashion_mnist());
    ASSERT_TRUE(ds.ok()) << ds.error().str();
    auto s = (*ds)->get(0);
    ASSERT_TRUE(s.ok());
    auto gray = (s->image[0] * 255).round().to(torch::kUInt8).contiguous();
    Image boot;
    boot.width = boot.height = 28;
    for (int64_t i = 0; i < gray.numel(); ++i) boot.rgb.insert(boot.rgb.end(), 3, gray.data_ptr<uint8_t>()[i]);
    ASSERT_TRUE(write_jpeg(dir.file("boot.jpg"), boot, 90).ok());
  }
  struct Spec {
    int w, h;
    std::optional<ResampleBox> box;
    std::string text;
  };
  // Upscaling, downscaling (the filter widens), each axis its own way, the
  // torchvision preset's sizes, and boxes with fractional edges.
  const std::vector<Spec> specs = {
      {256, 256, {}, "256x256"},
      {293, 256, {}, "293x256"},
      {45, 33, {}, "45x33"},
      {17, 300, {}, "17x300"},
      {224, 224, {}, "224x224"},
      {20, 15, ResampleBox{1.5f, 2.25f, 20.75f, 17.5f}, "20x15@1.5,2.25,20.75,17.5"},
      {90, 70, ResampleBox{0.f, 3.f, 27.f, 20.f}, "90x70@0,3,27,20"},
  };
  std::string args;
  for (const auto& sp : specs) args += " " + sp.text;
  for (const Interpolation filter : {Interpolation::bilinear, Interpolation::bicubic, Interpolation::nearest}) {
    const std::string fname = interpolation_name(filter);
    for (const char* f : {"small.jpg", "large.jpg", "odd.png", "boot.jpg"}) {
      const std::string out = dir.file(std::string(f) + "." + fname + ".ref");
      ASSERT_EQ(test::run_python(ref + " resize " + dir.file(f) + " " + out + args + " --filter " + fname), 0) << f;
      auto want = test::read_ref(out);
      auto img = decode_image(dir.file(f));
      ASSERT_TRUE(img.ok()) << img.error().str();
      // Same decoder (libjpeg-turbo) as PIL: the input itself is identical.
      expect_same_pixels(hwc(img->rgb, img->width, img->height, 3), want.at("decoded"), std::string(f) + " decoded");
      for (size_t i = 0; i < specs.size(); ++i) {
        auto r = resize_image(*img, specs[i].w, specs[i].h, filter, specs[i].box);
        ASSERT_TRUE(r.ok()) << r.error().str();
        expect_same_pixels(hwc(r->rgb, r->width, r->height, 3), want.at("out." + std::to_string(i)),
                           std::string(f) + " to " + specs[i].text + " " + fname);
      }
    }
  }
}

// Every PNG mode decodes as PIL's Image.open(f).convert('RGB') does (what
// torchvision's ImageFolder loader gives), bit for bit, and files PIL
// refuses (a truncated JPEG or PNG) are refused (#24: alpha was composited
// in linear light, 16-bit data sRGB-encoded, truncated JPEGs accepted).
TEST(ImageIo, EveryPngModeDecodesAsPillowsConvertRgb) {
  TempDir dir;
  const std::string ref = test::script("tracr_reference.py");
  ASSERT_EQ(test::run_python(ref + " modes " + dir.file("") + " " + dir.file("modes.ref")), 0);
  const auto want = test::read_ref(dir.file("modes.ref"));
  int compared = 0, refused = 0;
  for (const auto& [name, t] : want) {
    if (name.rfind("refused.", 0) == 0) {
      const std::string file = name.substr(8);
      auto img = decode_image(dir.file(file));
      EXPECT_FALSE(img.ok()) << file << ": PIL refuses it, tracr decoded it";
      if (!img.ok()) {
        EXPECT_NE(img.error().message.find(dir.file(file)), std::string::npos) << img.error().message;
        if (file == "truncated.jpg") {
          EXPECT_NE(img.error().message.find("JPEG file is truncated"), std::string::npos) << img.error().message;
        }
      }
      ++refused;
      continue;
    }
    auto img = decode_image(dir.file(name));
    ASSERT_TRUE(img.ok()) << name << ": " << img.error().str();
    expect_same_pixels(hwc(img->rgb, img->width, img->height, 3), t, name);
    ++compared;
  }
  EXPECT_EQ(compared, 15);
  EXPECT_EQ(refused, 2);
}

// A CMYK JPEG (PIL converts it; tracr does not) is refused naming the file
// and why, so an image folder records it as that sample's error (#24).
TEST(ImageIo, ACmykJpegIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string py = dir.file("cmyk.py");
  std::ofstream(py) << "import sys\nfrom PIL import Image\n"
                       "Image.new('CMYK', (8, 8), (10, 20, 30, 40)).save(sys.argv[1])\n";
  ASSERT_EQ(test::run_python(py + " " + dir.file("c.jpg")), 0);
  auto img = decode_image(dir.file("c.jpg"));
  ASSERT_FALSE(img.ok());
  EXPECT_NE(img.error().message.find(dir.file("c.jpg") + ": CMYK JPEG is not supported (expected RGB or grayscale)"),
            std::string::npos)
      << img.error().message;
}

// One channel is PIL's convert('L') of the uint8 pixels: integers 0..255,
// L = (19595 R + 38470 G + 7471 B + 2^15) >> 16.
TEST(ImageIo, OneChannelIsPillowsConvertL) {
  Image img;
  img.width = 4;
  img.height = 1;
  img.rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 13, 200, 77};
  DatasetConfig dc;
  dc.kind = "imagefolder";
  dc.input_shape = {1, 1, 4};
  dc.resize_mode = "none";
  dc.mean = {0.0f};
  dc.std = {1.0f};
  auto t = preprocess_image(img, dc, nullptr);
  ASSERT_TRUE(t.ok()) << t.error().str();
  auto l = ((*t) * 255).round().to(torch::kLong).flatten();
  const std::vector<int64_t> want = {(255 * 19595 + 32768) >> 16, (255 * 38470 + 32768) >> 16,
                                     (255 * 7471 + 32768) >> 16, (13 * 19595 + 200 * 38470 + 77 * 7471 + 32768) >> 16};
  EXPECT_EQ(test::to_vec(l), want);
  // Exactly integers over 255: no fractional step.
  EXPECT_TRUE(torch::equal(*t * 255, (*t * 255).round()));
}

TEST(Resample, RejectsBadSizesAndBoxesNamingThem) {
  const std::vector<uint8_t> px(4 * 3 * 3, 7);
  auto r = resize_image(px, 4, 3, 3, 0, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("output size 0x5"), std::string::npos) << r.error().message;
  r = resize_image(px, 4, 4, 3, 2, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("36 bytes for a 4x4x3 image"), std::string::npos) << r.error().message;
  r = resize_image(px, 4, 3, 3, 2, 2, Interpolation::bicubic, ResampleBox{0, 0, 5, 3});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("exceed"), std::string::npos) << r.error().message;
  r = resize_image(px, 4, 3, 3, 2, 2, Interpolation::nearest, ResampleBox{-1, 0, 4, 3});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("negative"), std::string::npos) << r.error().message;
  // A constant image stays constant, whatever the scale and filter (the
  // bicubic weights, negative at the edges, still sum to one).
  for (const Interpolation f : {Interpolation::bilinear, Interpolation::bicubic, Interpolation::nearest}) {
    r = resize_image(px, 4, 3, 3, 9, 2, f);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, std::vector<uint8_t>(9 * 2 * 3, 7)) << interpolation_name(f);
  }
  auto bad = parse_interpolation("lanczos");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'lanczos', expected bilinear, bicubic or nearest"), std::string::npos)
      << bad.error().message;
}

// torchvision's ImageClassification preset on images written by PIL: the
// default (256 -> 224 bilinear) and torchvision 0.14's presets as its weights
// give them: resnet50 V2 (resize 232, bilinear), EfficientNet (bicubic; B0's
// 256 -> 224, another size), and nearest. a.jpg is downscaled, b.png and
// c.jpg upscaled (c: 90 -> 256, 2.8x).
TEST(ImageFolder, MatchesTorchvisionPreset) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("imgs"));
  const std::string ref = test::script("tracr_reference.py");
  ASSERT_EQ(test::run_python(ref + " image " + dir.file("imgs/a.jpg") + " 300 200 1"), 0);
  ASSERT_EQ(test::run_python(ref + " image " + dir.file("imgs/b.png") + " 181 257 2"), 0);
  ASSERT_EQ(test::run_python(ref + " image " + dir.file("imgs/c.jpg") + " 120 90 3"), 0);
  struct Preset {
    int64_t resize, crop;
    const char* interpolation;
  };
  for (const Preset p : {Preset{0, 224, "bilinear"}, Preset{232, 224, "bilinear"}, Preset{256, 224, "bicubic"},
                         Preset{255, 240, "bicubic"}, Preset{160, 128, "nearest"}}) {
    // 0: tracr's default, round(224 * 256 / 224) = 256 as torchvision's preset.
    const int64_t resize = p.resize > 0 ? p.resize : 256;
    const std::string tag = std::to_string(p.resize) + "-" + std::to_string(p.crop) + "-" + p.interpolation;
    for (const char* f : {"a.jpg", "b.png", "c.jpg"})
      ASSERT_EQ(test::run_python(ref + " preset " + dir.file(std::string("imgs/") + f) + " " +
                                 dir.file(std::string(f) + "." + tag + ".ref") + " --crop " + std::to_string(p.crop) +
                                 " --resize " + std::to_string(resize) + " --interpolation " + p.interpolation),
                0);
    DatasetConfig cfg;
    cfg.kind = "imagefolder";
    cfg.path = dir.file("imgs");
    cfg.input_shape = {3, p.crop, p.crop};
    cfg.resize_size = p.resize;
    cfg.interpolation = p.interpolation;
    auto ds = open_dataset(cfg);
    ASSERT_TRUE(ds.ok()) << ds.error().str();
    for (int i = 0; i < 3; ++i) {
      auto s = (*ds)->get(i);
      ASSERT_TRUE(s.ok()) << s.error().str();
      const std::string name = std::filesystem::path(s->id).filename().string();
      auto ref_out = test::read_ref(dir.file(name + "." + tag + ".ref")).at("output");
      ASSERT_EQ(s->image.sizes(), ref_out.sizes()) << tag;
      const auto diff = (s->image - ref_out).abs();
      // The same uint8 pixels go through the same float operations: equal.
      EXPECT_EQ(diff.max().item<float>(), 0.0f) << name << " " << tag << ": " << diff.ne(0).sum().item<int64_t>()
                                                << " values differ, by up to " << diff.max().item<float>()
                                                << " (one uint8 step is 1 / 255 / std = 0.0174)";
    }
  }
  DatasetConfig cfg;
  cfg.kind = "imagefolder";
  cfg.path = dir.file("imgs");
  cfg.interpolation = "area";
  auto r = open_dataset(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("interpolation 'area'"), std::string::npos) << r.error().message;
}

TEST(ImageFolder, EmptyOrMissingFolderIsAnError) {
  TempDir dir;
  DatasetConfig cfg;
  cfg.kind = "imagefolder";
  cfg.path = dir.path();
  auto r = open_dataset(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_found);
  cfg.path = dir.file("absent");
  r = open_dataset(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("absent"), std::string::npos);
  cfg.kind = "mnist-but-wrong";
  EXPECT_FALSE(open_dataset(cfg).ok());
}

TEST(ImageFolder, ClassNamesFileOverridesFolderNames) {
  TempDir dir;
  ASSERT_TRUE(write_png(dir.file("x.png"), gradient(40, 40, 0)).ok());
  {
    std::ofstream f(dir.file("names.txt"));
    f << "tench\ngoldfish\r\n\n";
  }
  DatasetConfig cfg;
  cfg.kind = "imagefolder";
  cfg.path = dir.path();
  cfg.class_names_file = dir.file("names.txt");
  cfg.input_shape = {3, 32, 32};
  auto ds = open_dataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.error().str();
  EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"tench", "goldfish"}));
  auto s = (*ds)->get(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->label, -1);
}

TEST(Synthetic, DeterministicShapesAndLabels) {
  DatasetConfig cfg;
  cfg.kind = "synthetic";
  cfg.input_shape = {3, 16, 16};
  cfg.num_samples = 5;
  cfg.num_classes = 3;
  cfg.seed = 9;
  auto a = open_dataset(cfg);
  auto b = open_dataset(cfg);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->size(), 5);
  auto s1 = (*a)->get(4), s2 = (*b)->get(4);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_TRUE(torch::equal(s1->image, s2->image));
  EXPECT_EQ(s1->label, 1);
  EXPECT_FALSE(torch::equal((*a)->get(0)->image, s1->image));
  EXPECT_FALSE((*a)->get(5).ok());
  BatchLoader loader(**a, 2, 3);
  EXPECT_EQ(loader.num_samples(), 3);
}

// Non-image inputs: a 4-feature vector and a [T, D] token sequence.
TEST(Synthetic, AnyRankGivesSamplesAndBatchesOfThatShape) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4}, std::vector<int64_t>{12, 32}}) {
    DatasetConfig cfg;
    cfg.kind = "synthetic";
    cfg.input_shape = shape;
    cfg.num_samples = 5;
    auto ds = open_dataset(cfg);
    ASSERT_TRUE(ds.ok()) << ds.error().str();
    BatchLoader loader(**ds, 2);
    auto b = loader.next();
    ASSERT_TRUE(b.ok() && b->has_value());
    std::vector<int64_t> want = {2};
    want.insert(want.end(), shape.begin(), shape.end());
    EXPECT_EQ((*b)->images.sizes().vec(), want);
    EXPECT_GT((*b)->images.std().item<float>(), 0.5f);  // standard normal values, not zeros
  }
  DatasetConfig cfg;
  cfg.kind = "synthetic";
  cfg.input_shape = {4, 0};
  auto bad = open_dataset(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("[4, 0]"), std::string::npos) << bad.error().message;
}

TEST(ImageFolder, NonImageInputShapeIsAClearError) {
  TempDir dir;
  ASSERT_TRUE(write_png(dir.file("x.png"), gradient(40, 40, 0)).ok());
  DatasetConfig cfg;
  cfg.kind = "imagefolder";
  cfg.path = dir.path();
  cfg.input_shape = {4};
  auto r = open_dataset(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("images are [C, H, W] but the input shape is [4]"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("synthetic"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tracr::experiments
