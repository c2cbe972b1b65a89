// Early exits end to end (#44): linear exits of fmnist_cnn trained by
// `tracrctl train`, a run that stores every exit's answer, the offline sweep
// of `tracrctl results exits` against an independent Python reading of the
// same rows, and re-runs at two thresholds against the sweep, sample by
// sample. Fashion-MNIST from Debian's dataset-fashion-mnist package.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

const char* kFmnist = "/usr/share/datasets/fashion-mnist";

// fmnist_cnn: conv1 relu1 pool1 conv2 relu2 pool2 flatten fc1 relu3 fc2; exits after pool1 and pool2, split 8.
std::string exits_experiment(const std::string& db, const std::string& threshold, const std::string& extra = "") {
  return "name: exits\nmodel: fmnist_cnn\nseed: 5\n"
         "dataset:\n  type: fashion_mnist\n  max_samples: 150\n"
         "split: [8]\nwarmup: 0\nrepetitions: 1\nbatch_size: 1\n"
         "exits:\n  - {after: pool1, head: linear}\n  - {after: pool2}\n"
         "exit_policy: {measure: max_softmax, threshold: " +
         threshold +
         "}\n"
         "train: {train_samples: 3000, test_samples: 500, epochs: 15}\n"
         "record: {layers: true}\nprobe: {enabled: false}\n"
         "output: " +
         db + "\n" + extra;
}

// CSV text -> rows of cells.
std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::istringstream l(line);
    for (std::string c; std::getline(l, c, ',');) cells.push_back(c);
    out.push_back(cells);
  }
  return out;
}

std::map<std::string, std::string> by_header(const std::vector<std::string>& header, const std::vector<std::string>& row) {
  std::map<std::string, std::string> m;
  for (size_t i = 0; i < header.size() && i < row.size(); ++i) m[header[i]] = row[i];
  return m;
}

}  // namespace

TEST(Exits, TrainedLinearExitsRunAndTheOfflineSweepEqualsReRunsAndAnIndependentScript) {
  if (!std::filesystem::exists(std::string(kFmnist) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  // A run refuses linear exits that were never trained, before anything starts.
  const std::string basis = d.file("basis.yaml", exits_experiment(db, "1"));
  auto untrained = sh(tracrctl() + " run " + basis + " --no-progress --in-process");
  EXPECT_EQ(untrained.status, 2) << untrained.out;
  EXPECT_NE(untrained.out.find("exits[0].file: no trained head at"), std::string::npos) << untrained.out;
  EXPECT_NE(untrained.out.find("tracrctl train"), std::string::npos) << untrained.out;

  auto tr = sh(tracrctl() + " train " + basis);
  ASSERT_EQ(tr.status, 0) << tr.out;
  EXPECT_NE(tr.out.find("backbone unchanged"), std::string::npos) << tr.out;
  const auto head0 = d.path / "exits" / "fmnist_cnn.pool1.pt";
  ASSERT_TRUE(std::filesystem::exists(head0)) << tr.out;
  ASSERT_TRUE(std::filesystem::exists(d.path / "exits" / "fmnist_cnn.pool2.pt")) << tr.out;

  // The basis: threshold 1, so (almost) every frame is sent and every exit's answer stored.
  auto r1 = sh(tracrctl() + " run " + basis + " --no-progress --in-process");
  ASSERT_EQ(r1.status, 0) << r1.out;
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1 and warmup = 0"), "150");
  // Every frame holds both exits' answers and times, and the exits' cost.
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1 and exit_results like '0=%:%:% 1=%:%:%' and "
                      "exit_times like '% %' and exit_ns > 0"),
            "150");
  // The threshold sweep, and the same counts from the rows by an independent reader.
  const std::string csv = (d.path / "sweep.csv").string();
  auto sw = sh(tracrctl() + " results exits 1 --db " + db + " --thresholds 0.3,0.35,0.45 --csv " + csv);
  ASSERT_EQ(sw.status, 0) << sw.out;
  std::ifstream cf(csv);
  const auto ours = csv_rows(std::string((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>()));
  auto py = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/exits_sweep.py " + db + " 1 0.3,0.35,0.45");
  ASSERT_EQ(py.status, 0) << py.out;
  const auto theirs = csv_rows(py.out);
  ASSERT_EQ(ours.size(), 4u) << sw.out;
  ASSERT_EQ(theirs.size(), 4u) << py.out;
  int64_t exited_somewhere = 0;
  for (size_t i = 1; i < 4; ++i) {
    auto a = by_header(ours[0], ours[i]), b = by_header(theirs[0], theirs[i]);
    for (const char* k : {"placement", "threshold", "frames", "sent", "unknown", "labelled", "correct", "exited_0",
                          "exited_1"})
      EXPECT_EQ(a[k], b[k]) << k << " at row " << i << "\n" << sw.out << "\n" << py.out;
    exited_somewhere += std::stoll(a["exited_0"]) + std::stoll(a["exited_1"]);
  }
  EXPECT_GT(exited_somewhere, 0) << sw.out;  // trained exits are sure of some samples

  // Re-runs at 0.3 and 0.35 (a threshold list: one run each) take, sample by
  // sample, the exit the sweep of the basis says. (The backbone has random
  // weights: its exits are seldom sure, so the thresholds are low.)
  const std::string again = d.file("again.yaml", exits_experiment(db, "[0.3, 0.35]"));
  auto r2 = sh(tracrctl() + " run " + again + " --no-progress --in-process");
  ASSERT_EQ(r2.status, 0) << r2.out;
  for (int run : {2, 3}) {
    const std::string t = run == 2 ? "0.3" : "0.35";
    // The basis decided at t: the first exit whose stored max softmax reaches it.
    auto py_taken = sh("/usr/bin/python3 -c \"import sqlite3,struct,sys\n"
                       "f=lambda x: struct.unpack('f', struct.pack('f', float(x)))[0]\n"
                       "for sid,res in sqlite3.connect('" + db + "').execute('select sample_id, exit_results from "
                       "frames where run_id=1 and warmup=0 order by sample'):\n"
                       "  e=[a.split('=') for a in res.split()]\n"
                       "  k=next((int(i) for i,v in e if f(v.split(':')[1])>=" + t + "), None)\n"
                       "  print(sid, '-' if k is None else k)\"");
    ASSERT_EQ(py_taken.status, 0) << py_taken.out;
    const auto rerun = query_col(db, "select sample_id || ' ' || coalesce(exit_index, '-') from frames where run_id = " +
                                         std::to_string(run) + " and warmup = 0 order by sample");
    std::string joined;
    for (const auto& l : rerun) joined += l + "\n";
    EXPECT_EQ(joined, py_taken.out) << "threshold " << t;
    // A frame that exited sent nothing and its stages add up to its total.
    EXPECT_EQ(query(db, "select count(*) from frames where run_id = " + std::to_string(run) +
                            " and exit_index is not null and (wire_bytes != 0 or total_ns != head_ns + post_ns)"),
              "0");
  }
  // The report's exits figure (#45): accuracy against latency per threshold, swept from the basis's answers.
  const std::string figs = (d.path / "figs").string();
  auto rep = sh(tracrctl() + " report 1 --figures " + figs + " --only exits --db " + db);
  ASSERT_EQ(rep.status, 0) << rep.out;
  std::ifstream ecsv(figs + "/exits.csv");
  std::string header, line;
  std::getline(ecsv, header);
  size_t points = 0;
  while (std::getline(ecsv, line)) points += !line.empty();
  EXPECT_EQ(points, 50u) << "thresholds 0.50 .. 0.99 at split 8, none unknown (the basis sent every frame)";
  EXPECT_NE(header.find("threshold,exit_rate,value,xvalue,front"), std::string::npos) << header;
  EXPECT_TRUE(std::filesystem::exists(figs + "/exits.pdf")) << rep.out;
  // The (split, threshold) planner judged on held-out runs (#44): planned
  // from run 4 (agents of their own: both devices profiled), every pair it
  // predicts measured by run 1's offline sweep (equal to re-runs, above) or,
  // with --validate, by run 4's own.
  auto r4 = sh(tracrctl() + " run " + basis + " --no-progress");
  ASSERT_EQ(r4.status, 0) << r4.out;
  for (const char* how : {"--validate-on 1", "--validate"}) {
    auto pv = sh(tracrctl() + " plan 4 --db " + db + " --link wifi --max-latency-ms 100000 " + how);
    ASSERT_EQ(pv.status, 0) << how << "\n" << pv.out;
    EXPECT_NE(pv.out.find(std::string("validation of the (split, threshold) choice on run(s) ") +
                          (std::string(how) == "--validate" ? "4 " : "1 ")),
              std::string::npos)
        << pv.out;
    EXPECT_NE(pv.out.find("chosen split 8 at "), std::string::npos) << pv.out;
    EXPECT_NE(pv.out.find("meets 100000 ms"), std::string::npos) << pv.out;
    EXPECT_NE(pv.out.find("  measured best: split 8 at "), std::string::npos) << pv.out;
    EXPECT_EQ(pv.out.find("pairs measured, planned latency MAPE -"), std::string::npos) << pv.out;
  }
  // The run's summary keeps exited and sent frames apart.
  auto show = sh(tracrctl() + " results show 3 --db " + db);
  EXPECT_NE(show.out.find("early exits (max_softmax >= 0.35"), std::string::npos) << show.out;
}

TEST(Exits, BadExitsAreOneLineErrorsBeforeAnythingStarts) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto refused = [&](const std::string& exits, const std::string& extra, const std::string& expect) {
    const std::string y = "name: bad\nmodel: fmnist_cnn\ndataset: {type: synthetic, max_samples: 2}\nsplit: [8]\n"
                          "output: " + db + "\n" + exits + extra;
    auto r = sh(tracrctl() + " run " + d.file("bad.yaml", y) + " --no-progress --in-process");
    EXPECT_EQ(r.status, 2) << exits << extra << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << exits << extra << "\n" << r.out;
    EXPECT_FALSE(std::filesystem::exists(db)) << "a refused run wrote a database: " << exits;
  };
  refused("exits: [{after: pool9}]\n", "", "exits[0].after: 'pool9' is not a layer of fmnist_cnn");
  refused("exits: [{after: fc2}]\n", "", "is fmnist_cnn's last layer");
  refused("exits: [{after: pool2}, {after: pool1}]\n", "", "expected the exits in backbone order");
  refused("exits: [{after: pool1, head: softmax}]\n", "", "expected linear (trained by `tracrctl train`) or torchscript:");
  refused("exits: [{after: pool1, head: 'torchscript:nowhere.pt'}]\n", "", "nowhere.pt' does not exist");
  refused("exits: [{after: pool1}]\n", "batch_size: 4\n", "expected batch_size: 1");
  refused("exits: [{after: pool1}]\n", "exit_policy: {threshold: 1.5}\n", "exit_policy.threshold");
  // A head whose output is not the model's classes: a linear head trained for 7 classes.
  const std::string mk = "/usr/bin/python3 -c \"import torch\n"
                         "class H(torch.nn.Module):\n"
                         "  def __init__(s):\n    super().__init__(); s.l = torch.nn.Linear(16, 7)\n"
                         "  def forward(s, x):\n    return s.l(x.mean((2, 3)))\n"
                         "torch.jit.trace(H(), torch.zeros(2, 16, 14, 14)).save('" + (d.path / "h7.pt").string() +
                         "')\"";
  ASSERT_EQ(sh(mk).status, 0);
  refused("exits: [{after: pool1, head: 'torchscript:" + (d.path / "h7.pt").string() + "'}]\n", "",
          "answers 7 classes; expected the model's 10");
  // And one that does not take that layer's output (16 channels): after pool2 (32).
  refused("exits: [{after: pool2, head: 'torchscript:" + (d.path / "h7.pt").string() + "'}]\n", "",
          "does not take the output of 'pool2'");
}
