// `tracrctl convert`: Python tracr model configs (alexnetsplit.yaml and the
// like, as the Python tracr's README describes them) become experiment files
// that tracr's own parser accepts and `tracrctl run --show-config` prints;
// what cannot be carried over is reported by key; bad input is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../system/system_util.hpp"
#include "controller/commands/convert.hpp"
#include "settings/config.hpp"

namespace tracr::controller {
namespace {

using tracr::testing::sh;
using tracr::testing::TempDir;
using tracr::testing::tracrctl;

// config/alexnetsplit.yaml of the Python tracr: the sections its README and
// code use (default, logging, model, dataset, dataloader, compression) with
// the values of its AlexNet quick start.
const char* kAlexnetSplit = R"(# config/alexnetsplit.yaml
default:
  device: cuda
  font_path: fonts/DejaVuSans-Bold.ttf
  save_layer_images: false
  collect_metrics: true

logging:
  log_level: INFO
  log_file: logs/app.log

model:
  model_name: alexnet
  version: null
  pretrained: true
  weight_path: null
  input_size: [3, 224, 224]
  split_layer: 5
  save_layers: [2, 4, 6]
  num_classes: 1000
  mode: eval
  depth: 2
  flush_buffer_size: 100
  warmup_iterations: 10
  log_file: logs/alexnet_model.log

dataset:
  module: imagenet
  class: ImageNetDataset
  args:
    root: data/imagenet
    class_names: data/imagenet/imagenet_classes.txt
    img_directory: data/imagenet/sample_images
    transform: null
    max_samples: -1

dataloader:
  batch_size: 1
  shuffle: false
  num_workers: 4
  collate_fn: imagenet_collate

compression:
  clevel: 3
  filter: SHUFFLE
  codec: ZSTD
)";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> keys(const Conversion& c) {
  std::vector<std::string> k;
  for (const auto& d : c.not_carried) k.push_back(d.key);
  return k;
}

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A Python tracr checkout: config/alexnetsplit.yaml, the ImageNet sample
// folder and class names its README sets up.
struct PythonCheckout {
  TempDir dir;
  std::string config;
  PythonCheckout() {
    config = dir.file("tracr-py/config/alexnetsplit.yaml", kAlexnetSplit);
    dir.file("tracr-py/data/imagenet/imagenet_classes.txt", "tench\ngoldfish\n");
    std::filesystem::create_directories(dir.path / "tracr-py/data/imagenet/sample_images");
  }
};

TEST(Convert, AlexnetSplitBecomesAnExperimentTheParserAccepts) {
  PythonCheckout py;
  const std::string out = (py.dir.path / "mine/alexnet.yaml").string();
  auto c = convert_python_config(kAlexnetSplit, py.config, out);
  ASSERT_TRUE(c.ok()) << c.error().str();
  // Where each value came from is written beside it.
  EXPECT_NE(c->yaml.find("model.split_layer"), std::string::npos) << c->yaml;
  EXPECT_NE(c->yaml.find("dataloader.batch_size"), std::string::npos) << c->yaml;

  auto cfg = settings::parse_experiment(c->yaml, out, false);
  ASSERT_TRUE(cfg.ok()) << cfg.error().str() << "\n" << c->yaml;
  EXPECT_EQ(cfg->model, "alexnet");
  EXPECT_EQ(cfg->name, "alexnetsplit");
  EXPECT_EQ(cfg->input_size, (std::vector<int64_t>{3, 224, 224}));
  EXPECT_EQ(cfg->split.points(), (std::vector<int>{5}));
  EXPECT_EQ(cfg->warmup, 10);
  EXPECT_EQ(cfg->batch_size, 1);
  EXPECT_EQ(cfg->compression, "blosc-zstd:level=3");  // byte shuffle is blosc's default
  EXPECT_EQ(cfg->dataset.kind, settings::DatasetKind::imagefolder);
  EXPECT_EQ(cfg->dataset.max_samples, 0);
  EXPECT_TRUE(cfg->record.layers);
  // Paths: the Python tracr's are relative to its project root (the parent
  // of config/), the experiment's to its own directory.
  EXPECT_NE(c->yaml.find("path: ../tracr-py/data/imagenet/sample_images"), std::string::npos) << c->yaml;
  EXPECT_NE(c->yaml.find("class_names: ../tracr-py/data/imagenet/imagenet_classes.txt"), std::string::npos);

  // Not carried over, each by name with a reason.
  const auto k = keys(*c);
  for (const char* key : {"default.device", "default.font_path", "default.save_layer_images", "logging",
                          "model.pretrained", "model.save_layers", "model.depth",
                          "model.flush_buffer_size", "model.log_file",
                          "dataloader.num_workers", "dataloader.collate_fn", "dataset.args.root"})
    EXPECT_TRUE(has(k, key)) << key << " not reported";
  // Carried over, so not reported.
  // Carried over, or nothing to carry (null, or what tracr does anyway), so
  // not reported.
  for (const char* key : {"model.model_name", "model.split_layer", "model.num_classes", "dataloader.batch_size",
                          "dataloader.shuffle", "compression.clevel", "dataset.args.transform", "model.mode",
                          "model.version", "model.weight_path"})
    EXPECT_FALSE(has(k, key)) << key << " reported though carried";
  for (const auto& d : c->not_carried) EXPECT_FALSE(d.reason.empty()) << d.key;
  // The file itself lists them too.
  EXPECT_NE(c->yaml.find("#   default.device: cuda -- "), std::string::npos) << c->yaml;
}

TEST(Convert, CommandWritesAFileThatRunShowConfigReads) {
  PythonCheckout py;
  const std::string out = (py.dir.path / "alexnet.yaml").string();
  auto r = sh(tracrctl() + " convert " + py.config + " -o " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("not carried over from"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dataloader.num_workers: 4 -- "), std::string::npos) << r.out;
  ASSERT_TRUE(std::filesystem::exists(out));

  auto show = sh(tracrctl() + " run " + out + " --show-config");
  ASSERT_EQ(show.status, 0) << show.out;
  EXPECT_NE(show.out.find("alexnet"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("blosc-zstd:level=3"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("sample_images"), std::string::npos) << show.out;

  // An existing output is kept unless --force.
  const std::string before = read_all(out);
  r = sh(tracrctl() + " convert " + py.config + " -o " + out);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  EXPECT_EQ(read_all(out), before);
  r = sh(tracrctl() + " convert " + py.config + " -o " + out + " --force");
  EXPECT_EQ(r.status, 0) << r.out;
  // The controller's stderr lines go through one TRACR_LOG: at TRACR_LOG_LEVEL=error the informative lines
  // are left out, the errors are not.
  r = sh("TRACR_LOG_LEVEL=error " + tracrctl() + " convert " + py.config + " -o " + out + " --force");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("not carried over from"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("wrote "), std::string::npos) << r.out;
  r = sh("TRACR_LOG_LEVEL=error " + tracrctl() + " convert " + py.config + " -o " + out);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("exists; add --force to replace it"), std::string::npos) << r.out;

  // Without -o the experiment goes to stdout with absolute paths.
  r = sh(tracrctl() + " convert " + py.config + " 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("path: " + (py.dir.path / "tracr-py/data/imagenet/sample_images").string()),
            std::string::npos)
      << r.out;
}

TEST(Convert, OtherModelNamesAndCompressionSettingsMap) {
  TempDir dir;
  const std::string src = dir.file("config/resnetsplit.yaml", "");
  auto c = convert_python_config(R"(model:
  name: ResNet-18
  split_layer: 0
  batch_size: 4
  num_classes: 10
dataset:
  module: fashion_mnist
  class: FashionMNISTDataset
  args:
    root: data/fmnist
    train: false
compression:
  clevel: 0
  codec: LZ4
)",
                                 src, dir.file("exp.yaml", ""));
  ASSERT_TRUE(c.ok()) << c.error().str();
  auto cfg = settings::parse_experiment(c->yaml, dir.file("exp.yaml", ""), false);
  ASSERT_TRUE(cfg.ok()) << cfg.error().str() << "\n" << c->yaml;
  EXPECT_EQ(cfg->model, "resnet18");
  EXPECT_EQ(cfg->split.points(), (std::vector<int>{0}));
  EXPECT_EQ(cfg->batch_size, 4);
  EXPECT_EQ(cfg->compression, "none");  // clevel 0
  EXPECT_EQ(cfg->dataset.kind, settings::DatasetKind::fashion_mnist);
  EXPECT_EQ(cfg->dataset.split, "test");
  // ResNet-18 has 1000 classes: a 10-class head is not something it can carry.
  EXPECT_TRUE(has(keys(*c), "model.num_classes"));
  EXPECT_TRUE(has(keys(*c), "dataset.args.root"));

  c = convert_python_config("model:\n  model_name: mobilenetv2\ncompression:\n  clevel: 9\n  filter: BITSHUFFLE\n"
                            "  codec: LZ4HC\n",
                            src, dir.file("exp.yaml", ""));
  ASSERT_TRUE(c.ok()) << c.error().str();
  cfg = settings::parse_experiment(c->yaml, dir.file("exp.yaml", ""), false);
  ASSERT_TRUE(cfg.ok()) << cfg.error().str();
  EXPECT_EQ(cfg->model, "mobilenet_v2");
  EXPECT_EQ(cfg->compression, "blosc-lz4:level=9,shuffle=bit");
  EXPECT_TRUE(has(keys(*c), "compression.codec"));  // LZ4HC became LZ4
}

TEST(Convert, ModelOutsideTheZooIsReportedAndKeptSoRunRefusesIt) {
  TempDir dir;
  const std::string src = dir.file("config/yolov8split.yaml", "model:\n  model_name: yolov8s\n  split_layer: 3\n");
  auto c = convert_python_config(read_all(src), src, "");
  ASSERT_TRUE(c.ok()) << c.error().str();
  ASSERT_TRUE(has(keys(*c), "model.model_name"));
  for (const auto& d : c->not_carried)
    if (d.key == "model.model_name") {
      EXPECT_EQ(d.value, "yolov8s");
      EXPECT_NE(d.reason.find("torchscript:"), std::string::npos) << d.reason;
    }
  EXPECT_NE(c->yaml.find("model: yolov8s"), std::string::npos) << c->yaml;

  // The run refuses it by name before anything starts (exit 2).
  const std::string out = dir.file("yolo.yaml", "");
  auto r = sh(tracrctl() + " convert " + src + " -o " + out + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  r = sh(tracrctl() + " run " + out + " --db " + dir.file("r.db", ""));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("unknown model 'yolov8s'"), std::string::npos) << r.out;
}

TEST(Convert, BadInputIsRefusedNamingFileKeyAndExpectation) {
  TempDir dir;
  const std::string src = dir.file("config/bad.yaml", "");
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    auto c = convert_python_config(text, src, "");
    ASSERT_FALSE(c.ok()) << "accepted:\n" << text;
    EXPECT_EQ(c.error().code, Errc::config);
    EXPECT_NE(c.error().message.find(src), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find(needle), std::string::npos) << c.error().message;
  };
  expect_error("model:\n  model_name: alexnet\n  split_layer: five\n",
               "bad.yaml:3:16: model.split_layer: expected an integer 0..100000, got 'five'");
  expect_error("model:\n  model_name: alexnet\ndataloader:\n  batch_size: 0\n", "dataloader.batch_size");
  expect_error("model:\n  model_name: alexnet\n  input_size: [3, 224]\n", "model.input_size: expected [C, H, W]");
  expect_error("model:\n  model_name: alexnet\ncompression:\n  codec: BROTLI\n", "compression.codec");
  expect_error("model:\n  model_name: alexnet\ncompression:\n  clevel: 12\n", "compression.clevel");
  expect_error("model:\n  split_layer: 3\n", "model.model_name: missing");
  expect_error("dataset:\n  module: imagenet\n", "model: missing");
  expect_error("model: [1, 2\n", "not valid YAML");
  expect_error("", "an empty file");

  // The command: exit 2, the file and key named, nothing written.
  const std::string bad = dir.file("config/bad2.yaml", "model:\n  model_name: alexnet\n  split_layer: -4\n");
  auto r = sh(tracrctl() + " convert " + bad + " -o " + dir.file("out.yaml", "") + " --force");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("bad2.yaml:3:16: model.split_layer"), std::string::npos) << r.out;
  EXPECT_EQ(read_all((dir.path / "out.yaml").string()), "");  // left as it was
  r = sh(tracrctl() + " convert " + dir.path.string() + "/absent.yaml");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("absent.yaml: cannot read"), std::string::npos) << r.out;
  r = sh(tracrctl() + " convert " + bad + " --frobnicate");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--frobnicate"), std::string::npos) << r.out;
}

TEST(Convert, PythonReadmeDevicesFileWorksUnchanged) {
  // docs/FROM_PYTHON_TRACR.md: the devices file of the Python tracr's
  // "Detailed Setup Guide" (placeholders filled in) is read as it is.
  TempDir dir;
  const std::string devices = dir.file("config/devices_config.yaml", R"(devices:
  - device_type: SERVER
    connection_params:
      - host: 192.168.1.100        # e.g., 192.168.1.100
        user: researcher         # your SSH username
        pkey_fp: server_key.rsa
        default: true

  - device_type: PARTICIPANT
    connection_params:
      - host: 192.168.1.101   # e.g., 192.168.1.101
        user: researcher
        pkey_fp: participant_key.rsa
        default: true
)");
  auto d = settings::load_devices(devices);
  ASSERT_TRUE(d.ok()) << d.error().str();
  EXPECT_EQ(d->server().connection().host, "192.168.1.100");
  ASSERT_EQ(d->participants().size(), 1u);
  EXPECT_EQ(d->participants()[0]->connection().pkey_fp, "participant_key.rsa");
}

}  // namespace
}  // namespace tracr::controller
