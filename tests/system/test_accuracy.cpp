// Accuracy and outputs end to end (real tracrctl, real local agents, real
// Fashion-MNIST and a real PNG): stored logits compared with numpy across
// splits and codecs, the per-split table's width and --wide, top-1/top-5
// columns, and ImageNet class names for a 1000-class model.
#include <fstream>
#include <sstream>

#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

std::string fmnist_experiment(const std::string& db, const std::string& codec) {
  return "name: acc\nmodel: fmnist_cnn\ndataset:\n  type: fashion_mnist\n  max_samples: 16\n"
         "split: [3, 6]\nwarmup: 1\nrepetitions: 2\nbatch_size: 4\ncompression: " + codec +
         "\nencryption: true\nprobe: {enabled: false}\nrecord: {outputs: true, layers: true}\nseed: 3\n"
         "output: " + db + "\n";
}

// The lines of the per-split table: from its header to the '*' footer.
std::vector<std::string> table_lines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  bool on = false;
  for (std::string l; std::getline(in, l);) {
    if (l.find("split") != std::string::npos && l.find("cut after") != std::string::npos) on = true;
    if (on) lines.push_back(l);
    if (on && l.rfind("* lowest median total time", 0) == 0) break;
  }
  return lines;
}

}  // namespace

TEST(Accuracy, StoredLogitsAgreeAcrossSplitsAndFp16IsCloseButNotEqual) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto a = sh(tracrctl() + " run " + d.file("none.yaml", fmnist_experiment(db, "none")) + " --no-progress");
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = sh(tracrctl() + " run " + d.file("fp16.yaml", fmnist_experiment(db, "fp16")) + " --no-progress");
  ASSERT_EQ(b.status, 0) << b.out;
  // One file per (run, participant, split, codec): 16 samples x 2 passes, 10 classes.
  EXPECT_EQ(query(db, "select group_concat(run_id || '/' || split || '/' || codec || '/' || shape || '/' || frames, ' ') "
                      "from outputs"),
            "1/3/none/32,10/8 1/6/none/32,10/8 2/3/fp16/32,10/8 2/6/fp16/32,10/8");
  const std::string check = d.file("check.py", R"py(
import hashlib, os, sqlite3, sys
import numpy as np
db = sys.argv[1]
base = os.path.dirname(db)
rows = sqlite3.connect(db).execute("select run_id, split, path, sha256, dtype from outputs order by run_id, split").fetchall()
x = {}
for run, split, path, sha, dtype in rows:
    data = open(os.path.join(base, path), "rb").read()
    assert hashlib.sha256(data).hexdigest() == sha, path
    arr = np.load(os.path.join(base, path))
    assert arr.dtype == np.dtype(dtype) == np.float32, arr.dtype
    x[(run, split)] = arr
a3, a6, h3, h6 = x[(1, 3)], x[(1, 6)], x[(2, 3)], x[(2, 6)]
assert a3.shape == a6.shape == h3.shape == h6.shape == (32, 10), a3.shape
assert np.abs(a3).max() > 0
# The same model cut at another layer: the same logits to float tolerance.
assert np.allclose(a3, a6, rtol=1e-5, atol=1e-5), np.abs(a3 - a6).max()
# Both passes over the data give the same logits.
assert np.allclose(a3[:16], a3[16:], rtol=1e-6, atol=1e-6)
# fp16 on the crossing tensors: different, but close.
for h, a in ((h3, a3), (h6, a6)):
    d = np.abs(h - a).max()
    assert 0 < d < 0.02 * np.abs(a).max() + 1e-3, (d, np.abs(a).max())
print("ok", np.abs(h3 - a3).max(), np.abs(a3 - a6).max())
)py");
  // A second database in the same folder, whose run 1 has the same participant, splits and codec
  // (#46): its files must not overwrite r.db's, and removing its run must not delete them.
  const std::string other = (d.path / "s.db").string();
  auto o = sh(tracrctl() + " run " + d.file("other.yaml", fmnist_experiment(other, "none")) + " --no-progress");
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(query(other, "select count(*) from outputs where run_id = 1"), "2");
  // Only the finished files are left (written as <name>.npy.part while the run goes on).
  auto npy_files = [&] {
    size_t files = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(d.path / "outputs"))
      if (e.is_regular_file()) {
        ++files;
        EXPECT_EQ(e.path().extension(), ".npy") << e.path();
      }
    return files;
  };
  EXPECT_EQ(npy_files(), 6u);
  auto py = sh("/usr/bin/python3 " + check + " " + db);
  EXPECT_EQ(py.status, 0) << py.out;
  EXPECT_EQ(py.out.rfind("ok ", 0), 0u) << py.out;
  auto rm = sh(tracrctl() + " results rm 1 --db " + other);
  ASSERT_EQ(rm.status, 0) << rm.out;
  EXPECT_EQ(npy_files(), 4u);
  py = sh("/usr/bin/python3 " + check + " " + db);
  EXPECT_EQ(py.status, 0) << py.out;
  // Labelled data: top-1 and top-5 per split, in summaries and per codec.
  EXPECT_EQ(query(db, "select group_concat(labelled, ',') from summaries where run_id = 2"), "32,32");
  EXPECT_EQ(query(db, "select count(*) from accuracy where top5_correct < top1_correct or labelled <> 32"), "0");
  EXPECT_EQ(query(db, "select count(*) from frame_topk where run_id = 1"), std::to_string(18 * 4 * 5));  // 2 splits x (1 warm-up + 2 x 4) frames

  // The table of `tracrctl run` fits 120 columns and names the cut layer.
  const auto lines = table_lines(b.out);
  ASSERT_GE(lines.size(), 5u) << b.out;
  for (const auto& l : lines) EXPECT_LE(l.size(), 120u) << l;
  EXPECT_NE(lines[0].find("top-1"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("MB/s"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("frames/s"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("encode med"), std::string::npos) << lines[0];
  const std::string layer2 = query(db, "select name from layer_profiles where run_id = 2 and layer_index = 2 limit 1");
  ASSERT_FALSE(layer2.empty());
  bool named = false;
  for (const auto& l : lines) named = named || (l.find(" 3  " + layer2) != std::string::npos);
  EXPECT_TRUE(named) << "split 3 cuts after layer 2 '" << layer2 << "'\n" << b.out;
  // --wide shows every column.
  auto w = sh(tracrctl() + " results show 2 --wide --db " + db);
  ASSERT_EQ(w.status, 0) << w.out;
  const auto wide = table_lines(w.out);
  ASSERT_GE(wide.size(), 5u) << w.out;
  for (const char* col : {"encode med", "queue med", "return med", "post med", "raw bytes", "ratio", "samples/s", "top-5"})
    EXPECT_NE(wide[0].find(col), std::string::npos) << col << "\n" << wide[0];
  EXPECT_GT(wide[2].size(), lines[2].size());
  // results compare shows each run's accuracy.
  auto c = sh(tracrctl() + " results compare 1 2 --db " + db);
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_NE(c.out.find("A top-1"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("B top-5"), std::string::npos) << c.out;
}

// #46 item 4: a model with several outputs (yolo_like: a tuple of three
// head levels) keeps each output tensor in its own .npy, named by it, in its
// own shape per sample, the same at every split; and (item 6) with
// record.layers: false the per-split table still names the cut layer, from
// model_layers.
TEST(Accuracy, EachOutputTensorOfAGraphModelIsStoredByNameInItsOwnShape) {
  TempDir d;
  auto tr = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/trace_graph_model.py " +
               d.path.string() + " yolo_like@32");
  ASSERT_EQ(tr.status, 0) << tr.out;
  const std::string db = (d.path / "r.db").string();
  const std::string exp = d.file(
      "exp.yaml", "name: heads\nmodel: torchscript:" + (d.path / "yolo_like@32.pt").string() +
                      "\ninput_size: [3, 32, 32]\ndataset: {type: synthetic, max_samples: 4}\nsplit: [0, 2]\n"
                      "batch_size: 2\nwarmup: 0\nrepetitions: 1\nseed: 4\nprobe: {enabled: false}\n"
                      "record: {outputs: true, layers: false}\noutput: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // Three files per split, each one output's name and its shape: 4 samples x [13, s, s].
  EXPECT_EQ(query(db, "select group_concat(n, ' ') from (select split || ':' || count(*) || ':' || "
                      "group_concat(shape, '/') n from (select * from outputs order by split, shape) group by split)"),
            "0:3:4,13,1,1/4,13,2,2/4,13,4,4 2:3:4,13,1,1/4,13,2,2/4,13,4,4");
  EXPECT_EQ(query(db, "select count(distinct output) || ' ' || count(distinct path) || ' ' || sum(output = '') "
                      "from outputs"),
            "3 6 0");
  const std::string check = d.file("check.py", R"py(
import hashlib, os, sqlite3, sys
import numpy as np
db = sys.argv[1]
base = os.path.dirname(db)
rows = sqlite3.connect(db).execute("select split, output, path, shape, sha256 from outputs").fetchall()
x = {}
for split, output, path, shape, sha in rows:
    data = open(os.path.join(base, path), "rb").read()
    assert hashlib.sha256(data).hexdigest() == sha, path
    arr = np.load(os.path.join(base, path))
    assert arr.dtype == np.float32 and arr.shape == tuple(int(v) for v in shape.split(",")), (path, arr.shape, shape)
    assert np.abs(arr).max() > 0, path
    x[(split, output)] = arr
outs = sorted({o for _, o in x})
for o in outs:  # the whole model on the SERVER and cut after layer 2: the same outputs
    assert np.allclose(x[(0, o)], x[(2, o)], rtol=1e-5, atol=1e-5), (o, np.abs(x[(0, o)] - x[(2, o)]).max())
print("ok", " ".join(outs))
)py");
  auto py = sh("/usr/bin/python3 " + check + " " + db);
  EXPECT_EQ(py.status, 0) << py.out;
  EXPECT_EQ(py.out.rfind("ok ", 0), 0u) << py.out;

  // No layer profiles, yet every layer is named and the table says where split 2 cuts.
  EXPECT_EQ(query(db, "select count(*) from layer_profiles"), "0");
  const std::string layer1 = query(db, "select name from model_layers where run_id = 1 and layer_index = 1");
  ASSERT_FALSE(layer1.empty());
  EXPECT_GE(std::stoi(query(db, "select count(*) from model_layers where run_id = 1")), 3);
  bool named = false;
  for (const auto& l : table_lines(r.out)) named = named || (l.find(" 2  " + layer1) != std::string::npos);
  EXPECT_TRUE(named) << "split 2 cuts after layer 1 '" << layer1 << "'\n" << r.out;
}

// #45 item 5: synthetic inputs carry no ground truth (their labels are only
// their index modulo the classes): no label stored, no accuracy judged or
// printed, even where the classes would fit the model (fmnist_cnn, 10).
TEST(Accuracy, SyntheticInputsAreNeverJudged) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string exp = d.file(
      "exp.yaml", "model: fmnist_cnn\ninput_size: [1, 28, 28]\ndataset:\n  type: synthetic\n  max_samples: 4\n"
                  "split: [3]\nwarmup: 0\nrepetitions: 1\nprobe: {enabled: false}\nrecord: {layers: false}\n"
                  "output: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress --in-process");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select count(*) from frames where warmup = 0"), "4");
  EXPECT_EQ(query(db, "select count(*) from frames where correct <> -1 or top5_correct <> -1 or label <> ''"), "0");
  EXPECT_EQ(r.out.find("top-1"), std::string::npos) << r.out;
}

TEST(Accuracy, Resnet18OnARealImageGetsAnImageNetClassName) {
  // debconf's Debian logo (48x48 RGBA PNG) in an image folder of one class:
  // the dataset's one name cannot name 1000 outputs, so the shipped ImageNet
  // names do; its label does not index ImageNet classes, so accuracy is unknown.
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::filesystem::create_directories(d.path / "images" / "logo");
  std::filesystem::copy_file("/usr/share/pixmaps/debian-logo.png", d.path / "images" / "logo" / "debian-logo.png");
  const std::string exp = d.file(
      "exp.yaml", "model: resnet18\ninput_size: 64\ndataset:\n  type: imagefolder\n  path: " +
                      (d.path / "images").string() +
                      "\nsplit: [5]\nwarmup: 0\nrepetitions: 1\nprobe: {enabled: false}\nrecord: {layers: false}\n"
                      "output: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select count(*) from frame_topk"), "5");
  EXPECT_EQ(query(db, "select correct || '/' || top5_correct from frames"), "-1/-1");
  std::vector<std::string> names;
  std::ifstream in(std::string(TRACR_SOURCE_DIR) + "/experiments/imagenet_classes.txt");
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') names.push_back(l);
  ASSERT_EQ(names.size(), 1000u);
  for (const auto& row : query_col(db, "select class_index || '|' || class_name from frame_topk order by rank")) {
    const auto bar = row.find('|');
    const int idx = std::stoi(row.substr(0, bar));
    ASSERT_TRUE(idx >= 0 && idx < 1000) << row;
    EXPECT_EQ(row.substr(bar + 1), names[idx]) << row;
  }
  EXPECT_EQ(query(db, "select result like (select class_name from frame_topk where rank = 1) || ':%' from frames"), "1");
}

// One unreadable image fails alone: a junk .jpg, a truncated PNG and a
// truncated JPEG are each stored as one ok = 0 row naming the file and the
// reason, the other samples (also in the same batch) run and are classified,
// and the run exits 0. With max_consecutive_failures below the bad files in
// a row, the run fails and says why, with every row before it kept.
TEST(Accuracy, AnUnreadableImageIsARecordedSampleFailureNotTheEndOfTheRun) {
  TempDir d;
  const auto img = d.path / "images";
  for (const char* c : {"a", "b", "c"}) std::filesystem::create_directories(img / c);
  const std::string png = "/usr/share/pixmaps/debian-logo.png";
  const std::string jpg = "/usr/share/doc/nodejs/thin-white-stripe.jpg";
  std::filesystem::copy_file(png, img / "a" / "1.png");
  d.file("images/a/2.jpg", "this is not a JPEG\n");
  auto read_file = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string png_bytes = read_file(png), jpg_bytes = read_file(jpg);
  d.file("images/b/3.png", png_bytes.substr(0, png_bytes.size() / 2));
  d.file("images/b/4.jpg", jpg_bytes.substr(0, jpg_bytes.size() / 2));
  std::filesystem::copy_file(jpg, img / "c" / "5.jpg");
  auto experiment = [&](const std::string& db, int max_failures) {
    return "model: resnet18\ninput_size: 32\ndataset:\n  type: imagefolder\n  path: " + img.string() +
           "\nbatch_size: 2\nsplit: [4]\nwarmup: 1\nrepetitions: 1\nprobe: {enabled: false}\nrecord: {layers: false}\n"
           "max_consecutive_failures: " + std::to_string(max_failures) + "\noutput: " + db + "\n";
  };
  const std::string db = (d.path / "r.db").string();
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", experiment(db, 3)) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select status from runs"), "completed");
  // Timed rows in frame order: [1.png | 2.jpg failed], [3.png, 4.jpg failed], [5.jpg].
  EXPECT_EQ(query(db, "select group_concat(ok || ':' || batch || ':' || sample || ':' || coalesce(flags, ''), ' ') from "
                      "(select * from frames where warmup = 0 order by frame)"),
            "0:0:1:sample_error 1:1:0: 0:0:2:sample_error 0:0:3:sample_error 1:1:4:");
  for (const char* f : {"a/2.jpg", "b/3.png", "b/4.jpg"}) {
    const std::string id = (img / f).string();
    EXPECT_EQ(query(db, "select count(*) from frames where ok = 0 and sample_id = '" + id + "' and error like '%" + id +
                            "%' and total_ns = 0"),
              "1")
        << f << "\n" << query(db, "select group_concat(sample_id || ' ' || error, '\n') from frames");
  }
  EXPECT_EQ(query(db, "select count(*) from frames where error like '%file is truncated%'"), "2")
      << query(db, "select group_concat(error, '\n') from frames where ok = 0");
  EXPECT_EQ(query(db, "select group_concat(sample_id, ' ') from frames where ok = 1 and warmup = 0 order by frame"),
            (img / "a" / "1.png").string() + " " + (img / "c" / "5.jpg").string());
  EXPECT_EQ(query(db, "select count(*) from frame_topk where rank = 1 and frame in (select frame from frames where "
                      "warmup = 0)"),
            "2");
  // The failures are counted in the summary, not in the timings.
  EXPECT_EQ(query(db, "select failed || '/' || frames from summaries"), "3/2")
      << query(db, "select * from summaries");

  const std::string db2 = (d.path / "r2.db").string();
  auto f = sh(tracrctl() + " run " + d.file("exp2.yaml", experiment(db2, 1)) + " --no-progress");
  EXPECT_EQ(f.status, 1) << f.out;
  EXPECT_NE(f.out.find("2 frames in a row failed"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find((img / "b" / "4.jpg").string()), std::string::npos) << f.out;
  EXPECT_EQ(query(db2, "select count(*) from frames where warmup = 0"), "4");
}
