// Datasets on real files: Debian's Fashion-MNIST IDX files, JPEG/PNG images
// written with libjpeg/libpng, and torchvision's preset as the reference.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "experiments/datasets.hpp"
#include "experiments/image_io.hpp"
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

TEST(FashionMnist, ReadsTheDebianTestSetWithLabelsAndClassNames) {
  DatasetConfig cfg;
  cfg.kind = "fashion-mnist";
  cfg.path = TRACR_FASHION_MNIST_DIR;
  cfg.input_shape = {1, 28, 28};
  cfg.resize_mode = "none";
  cfg.mean = {0.0f};
  cfg.std = {1.0f};
  auto ds = open_dataset(cfg);
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

TEST(ImageFolder, MatchesTorchvisionPreset) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("imgs"));
  // Images written by PIL; reference from torchvision's ImageClassification.
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " image " + dir.file("imgs/a.jpg") + " 300 200 1"), 0);
  ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " image " + dir.file("imgs/b.png") + " 181 257 2"), 0);
  for (const char* f : {"a.jpg", "b.png"})
    ASSERT_EQ(test::run_python(test::script("tracr_reference.py") + " preset " + dir.file(std::string("imgs/") + f) + " " +
                               dir.file(std::string(f) + ".ref") + " --crop 224 --resize 256"),
              0);
  DatasetConfig cfg;
  cfg.kind = "imagefolder";
  cfg.path = dir.file("imgs");
  cfg.resize_size = 256;
  auto ds = open_dataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.error().str();
  ASSERT_EQ((*ds)->size(), 2);
  for (int i = 0; i < 2; ++i) {
    auto s = (*ds)->get(i);
    ASSERT_TRUE(s.ok()) << s.error().str();
    const std::string name = std::filesystem::path(s->id).filename().string();
    auto ref = test::read_ref(dir.file(name + ".ref")).at("output");
    ASSERT_EQ(s->image.sizes(), ref.sizes());
    auto diff = (s->image - ref).abs();
    // One uint8 step after normalisation is 1 / 255 / 0.225 = 0.0174; PIL's
    // fixed-point resampling rounds a few pixels the other way.
    EXPECT_LE(diff.max().item<float>(), 2.0f / 255 / 0.224f + 1e-5f) << name;
    EXPECT_LE(diff.mean().item<float>(), 5e-4f) << name;
    std::cout << name << ": max diff " << diff.max().item<float>() << ", mean " << diff.mean().item<float>() << "\n";
  }
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

}  // namespace
}  // namespace tracr::experiments
