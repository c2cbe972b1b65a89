// tracrctl train end to end: real agents on loopback (a data owner and two
// workers), real Fashion-MNIST, real sessions with AES-256-GCM. Split
// training must equal single-process training step by step, keep the raw
// data and the labels on the owner, resume exactly from a checkpoint, and
// pass turns between several owners.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "wire/identity.hpp"
#include "experiments/datasets.hpp"
#include "experiments/registry.hpp"
#include "experiments/train.hpp"
#include "experiments/weights.hpp"
#include "system/system_util.hpp"

using namespace tracr::testing;
namespace ex = tracr::experiments;

namespace {

std::string devices_yaml(int owners) {
  std::string y = "devices:\n";
  for (int k = 0; k < owners; ++k)
    y += "  - device_type: PARTICIPANT\n    name: " + std::string(k ? "owner" + std::to_string(k + 1) : "owner") +
         "\n    transport: local\n    connection_params:\n      - host: 127.0.0.1\n        default: true\n";
  y += "  - device_type: SERVER\n    name: worker_a\n    transport: local\n    connection_params:\n"
       "      - host: 127.0.0.1\n        port: 0\n        default: true\n";
  y += "  - device_type: PARTICIPANT\n    name: worker_b\n    transport: local\n    connection_params:\n"
       "      - host: 127.0.0.1\n        default: true\n";
  return y;
}

// U-shaped: the owner keeps [0, 3) and [8, 10) (the loss side), worker_a
// holds conv2..pool2, worker_b flatten + fc1.
std::string train_yaml(const TempDir& d, const std::string& extra, int owners = 1) {
  const std::string devices = d.file("devices.yaml", devices_yaml(owners));
  return "name: fmnist_split\nmodel: fmnist_cnn\ndevices: " + devices + "\noutput: " + (d.path / "t.db").string() +
         "\nseed: 3\ndataset:\n  type: fashion_mnist\ntrain:\n  cuts: [3, 6, 8]\n"
         "  segments: [owner, worker_a, worker_b, owner]\n  batch_size: 64\n  train_samples: 3000\n"
         "  test_samples: 500\n  checkpoint_dir: " +
         (d.path / "ckpt").string() + "\n" + extra;
}

ex::TensorDataset fmnist_train(int64_t n) {
  ex::DatasetConfig dc;
  dc.kind = "fashion-mnist";
  dc.path = "/usr/share/datasets/fashion-mnist";
  dc.split = "train";
  dc.input_shape = {1, 28, 28};
  dc.resize_mode = "none";
  dc.mean = {0.2860f};  // as every agent normalises Fashion-MNIST
  dc.std = {0.3530f};
  auto ds = ex::open_dataset(dc);
  EXPECT_TRUE(ds) << ds.error().str();
  auto t = ex::load_tensor_dataset(**ds, n);
  EXPECT_TRUE(t) << t.error().str();
  return *t;
}

std::vector<double> reference_losses(int64_t steps, uint64_t seed) {
  ex::ModelConfig mc;
  mc.seed = seed;
  mc.device = "cpu";
  auto m = ex::create_model("fmnist_cnn", mc);
  EXPECT_TRUE(m);
  ex::OptimizerSpec opt;  // the settings' defaults: adam, lr 0.001
  auto ref = ex::train_reference(std::shared_ptr<ex::SplitModel>(std::move(*m)), opt, fmnist_train(3000), 64, steps, seed);
  EXPECT_TRUE(ref) << ref.error().str();
  std::vector<double> out;
  for (const auto& r : *ref) out.push_back(r.loss);
  return out;
}

void expect_same(const std::vector<std::string>& got, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = std::stod(got[i]);
    const double rel = std::abs(v - ref[i]) / std::abs(ref[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "step " << i + 1 << ": split " << v << ", single-process " << ref[i];
  }
  std::printf("worst relative loss difference over %zu steps: %.3g\n", ref.size(), worst);
}

// A training run long enough to be interrupted (100 epochs), started as
// `tracrctl train EXP --no-progress` with stdout and stderr in a file, its
// database at `db` (default: in the test's directory).
struct LongTraining {
  TempDir d;
  std::string db, out, exp;
  pid_t pid = -1;
  explicit LongTraining(const std::string& db_path = "") {
    db = db_path.empty() ? (d.path / "t.db").string() : db_path;
    out = (d.path / "out.txt").string();
    exp = d.file("t.yaml", std::regex_replace(train_yaml(d, "  epochs: 100\n"), std::regex("output: \\S+"),
                                              "output: " + db));
    pid = fork();
    if (pid == 0) {
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string bin = tracrctl();
      execl(bin.c_str(), bin.c_str(), "train", exp.c_str(), "--no-progress", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  // Waits (up to 120 s) until the run has committed `n` steps.
  bool wait_steps(int n) const {
    for (int i = 0; i < 1200; ++i) {
      const std::string c = query(db, "select count(*) from train_steps");
      if (!c.empty() && std::stoi(c) >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // The command's exit code and what it printed.
  std::pair<int, std::string> wait() {
    int status = 0;
    const bool exited = waitpid(pid, &status, 0) == pid && WIFEXITED(status);
    pid = -1;
    std::ifstream f(out);
    return {exited ? WEXITSTATUS(status) : -1,
            std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>())};
  }
  ~LongTraining() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

// The session loop run and train share (#22): a signal stops the data
// owners (as it stops a run's participants), every step they still deliver
// is kept, the run is interrupted, no agent is left behind.
TEST(Train, SigtermStopsTheOwnerKeepsItsStepsAndMarksTheRunInterrupted) {
  LongTraining t;
  ASSERT_GT(t.pid, 0);
  ASSERT_TRUE(t.wait_steps(3)) << "no step committed within 120 s";
  ASSERT_EQ(kill(t.pid, SIGTERM), 0);
  const auto [code, text] = t.wait();
  const std::string& db = t.db;
  EXPECT_EQ(code, 143) << text;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "interrupted");
  EXPECT_NE(query(db, "select error from runs where id = 1").find("SIGTERM"), std::string::npos);
  EXPECT_EQ(query(db, "select message from events where kind = 'run_interrupted' and level = 'warn'"),
            "SIGTERM received: stopping the data owners");
  // Every step the controller counted is in the database, numbered without a gap.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("(\\d+) steps received"))) << text;
  EXPECT_EQ(query(db, "select count(*) from train_steps"), m[1].str());
  EXPECT_EQ(query(db, "select max(step) from train_steps"), m[1].str());
  EXPECT_NE(text.find("resume with --resume 1"), std::string::npos) << text;
  expect_agents_gone(db, {"TRAIN_OWNER", "TRAIN_WORKER"}, 3);
}

// An agent that dies fails a training run the way it fails a run: named,
// with its log's tail, the steps so far kept, the others stopped.
TEST(Train, AWorkerThatDiesFailsTheRunNamingItAndKeepsTheSteps) {
  LongTraining t;
  ASSERT_GT(t.pid, 0);
  ASSERT_TRUE(t.wait_steps(3)) << "no step committed within 120 s";
  const auto workers = agent_pids(t.db, "TRAIN_WORKER");
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_EQ(kill(static_cast<pid_t>(workers[0]), SIGKILL), 0);
  const auto [code, text] = t.wait();
  EXPECT_EQ(code, 1) << text;
  EXPECT_EQ(query(t.db, "select status from runs where id = 1"), "failed");
  const std::string error = query(t.db, "select error from runs where id = 1");
  EXPECT_NE(error.find("TRAIN_WORKER agent on worker_a exited unexpectedly"), std::string::npos) << error;
  EXPECT_GE(std::stoi(query(t.db, "select count(*) from train_steps")), 3);
  expect_agents_gone(t.db, {"TRAIN_OWNER", "TRAIN_WORKER"}, 3);
}

// A database that stops taking rows ends a training run as it ends a run:
// exit 1, the cause kept for the next open, and every received step either
// in the database or in the file the failure names.
TEST(Train, AFullDiskKeepsTheCauseAndEveryReceivedStep) {
  TempDir d;
  SmallTmpfs mnt((d.path / "small").string());
  if (!mnt.mounted) {
    if (std::getenv("TRACR_REQUIRE_SSHD")) FAIL() << "cannot mount a tmpfs (root needed)";
    GTEST_SKIP() << "cannot mount a tmpfs here (root needed)";
  }
  const std::string tmp = (d.path / "tmp").string();
  std::filesystem::create_directories(tmp);
  setenv("TMPDIR", tmp.c_str(), 1);
  LongTraining t(mnt.dir + "/t.db");
  unsetenv("TMPDIR");
  ASSERT_GT(t.pid, 0);
  ASSERT_TRUE(t.wait_steps(3)) << "no step committed within 120 s";
  sh("dd if=/dev/zero of=" + mnt.dir + "/filler bs=64k");  // fills the file system
  const auto [code, text] = t.wait();
  EXPECT_EQ(code, 1) << text;
  EXPECT_NE(text.find("database or disk is full"), std::string::npos) << text;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("(\\d+) steps received"))) << text;
  const int64_t received = std::stoll(m[1]);
  std::set<int64_t> steps = saved_numbers(text, tmp, "step");
  for (const auto& v : query_col(t.db, "select step from train_steps")) steps.insert(std::stoll(v));
  ASSERT_FALSE(steps.empty()) << text;
  EXPECT_EQ(static_cast<int64_t>(steps.size()), received) << text;
  EXPECT_EQ(*steps.rbegin(), received);  // steps 1..received, none missing
  expect_next_open_records(t.db, (d.path / "copy").string(), "database or disk is full");
}

TEST(Train, ThreeAgentsMatchSingleProcessTrainingAndKeepDataOnTheOwner) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  const std::string exp = d.file("t.yaml", train_yaml(d, "  max_steps: 50\n  trace_frames: true\n"));
  auto r = sh(tracrctl() + " train " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("run 1 completed: 50 steps"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "completed");
  // Three agents, each with its hardware identity.
  EXPECT_EQ(query(db, "select group_concat(role) from (select role from devices where run_id = 1 order by role)"),
            "TRAIN_OWNER,TRAIN_WORKER,TRAIN_WORKER");
  EXPECT_EQ(query(db, "select group_concat(device, ',') from (select device from train_segments order by segment)"),
            "owner,worker_a,worker_b,owner");
  EXPECT_EQ(query(db, "select end_layer from train_segments where segment = 3"), "10");
  EXPECT_EQ(query(db, "select sum(params) from train_segments"), "206922");  // every parameter of fmnist_cnn, once

  // Step by step, the losses of single-process training of the same model.
  expect_same(query_col(db, "select loss from train_steps where run_id = 1 order by step"), reference_losses(50, 3));
  // Bytes each way per step, as the cut tensors' sizes say: 64 x 16x14x14
  // to worker_a and back as its gradient; 64 x 32x7x7 back from worker_a,
  // on to worker_b, and its gradient the same way back (the owner relays
  // between workers); 64 x 128 from worker_b and its gradient; float32.
  const int64_t raw = 2 * 64 * 4 * (16 * 14 * 14 + 2 * 32 * 7 * 7 + 128);
  EXPECT_EQ(query(db, "select min(up_raw + down_raw) from train_steps where batch = 64"), std::to_string(raw));
  EXPECT_EQ(query(db, "select min(up_raw) || ' ' || max(up_raw) from train_steps where batch = 64"),
            std::to_string(raw / 2) + " " + std::to_string(raw / 2));
  // Uncompressed, the wire carries the tensors plus headers and AES-GCM tags.
  EXPECT_EQ(query(db, "select count(*) from train_steps where up_bytes < up_raw or down_bytes < down_raw"), "0");
  // A short run already learns: evaluated on 500 test images.
  EXPECT_GT(std::stod(query(db, "select max(test_acc) from train_epochs")), 0.6);
  EXPECT_EQ(query(db, "select test_n from train_epochs limit 1"), "500");

  // What the workers received: only the cut tensors, never the images or labels.
  auto traces = query_col(db, "select device || ' ' || message from events where kind = 'frame_received' order by id");
  ASSERT_GE(traces.size(), 200u);  // 50 steps x 2 directions x 2 workers, plus evaluation, checkpoints, export
  std::set<std::string> names;
  std::set<std::string> hashes;
  std::regex tensor(R"((\S+):(\w+):\[([0-9,]*)\]:([0-9a-f]{16}))");
  for (const auto& t : traces) {
    for (auto it = std::sregex_iterator(t.begin(), t.end(), tensor); it != std::sregex_iterator(); ++it) {
      names.insert(t.substr(0, t.find(' ')) + " " + (*it)[1].str() + ":" + (*it)[2].str());
      hashes.insert((*it)[4].str());
      EXPECT_NE((*it)[3].str(), "64,1,28,28") << t;
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"worker_a pool1:float32", "worker_a pool2:float32",
                                           "worker_b pool2:float32", "worker_b fc1:float32"}));
  // No received tensor holds the bytes of an input batch or a label batch.
  auto data = fmnist_train(3000);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    auto order = ex::epoch_order(data.size(), 3, epoch);
    for (int64_t first = 0; first < data.size(); first += 64) {
      auto [x, y] = ex::gather_batch(data, order, first, 64);
      x = x.contiguous();
      y = y.contiguous();
      for (const auto& [ptr, n] : {std::pair<const void*, size_t>{x.data_ptr(), x.nbytes()}, {y.data_ptr(), y.nbytes()}})
        EXPECT_FALSE(hashes.count(fmt::format("{:016x}", tracr::wire::fnv1a(ptr, n))));
    }
  }

  // The exported model is the trained one, usable for inference.
  const std::string exported = query(db, "select export_path from train_runs where run_id = 1");
  ASSERT_FALSE(exported.empty());
  ex::ModelConfig mc;
  mc.device = "cpu";
  mc.weights = exported;
  auto m = ex::create_model("fmnist_cnn", mc);
  ASSERT_TRUE(m) << m.error().str();
  auto dt = fmnist_train(256);
  auto out = (*m)->forward(dt.images);
  ASSERT_TRUE(out);
  const double acc = out->at(0).tensor.argmax(1).eq(dt.labels).to(torch::kDouble).mean().item<double>();
  EXPECT_GT(acc, 0.6) << "exported weights classify the training images";
}

TEST(Train, ResumedRunContinuesExactlyWhereTheCheckpointWas) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  const std::string exp = d.file("t.yaml", train_yaml(d, "  max_steps: 20\n  checkpoint_steps: 10\n"));
  auto r1 = sh(tracrctl() + " train " + exp + " --no-progress");
  ASSERT_EQ(r1.status, 0) << r1.out;
  EXPECT_EQ(query(db, "select group_concat(step) from (select step from train_checkpoints order by step)"), "10,20");
  // The second run goes on to 40 steps from run 1's step-20 checkpoint.
  auto r2 = sh("TRACR_TRAIN_MAX_STEPS=40 " + tracrctl() + " train " + exp + " --resume last --no-progress");
  ASSERT_EQ(r2.status, 0) << r2.out;
  EXPECT_NE(r2.out.find("resuming run 1 at step 20"), std::string::npos) << r2.out;
  EXPECT_EQ(query(db, "select resumed_from || ':' || resume_step from train_runs where run_id = 2"), "1:20");
  EXPECT_EQ(query(db, "select min(step) || '-' || max(step) from train_steps where run_id = 2"), "21-40");
  auto losses = query_col(db, "select loss from train_steps order by run_id, step");
  expect_same(losses, reference_losses(40, 3));
  // A run that recorded no checkpoint cannot be resumed, and says so.
  auto bad = sh(tracrctl() + " train " + exp + " --resume 7 --no-progress");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("run 7 is not a training run"), std::string::npos) << bad.out;
}

// Piped, a training run says how far each owner is: a line at every tenth
// of its steps, out of the steps it will take, with the time left.
TEST(Train, APipedRunReportsStepsOutOfTheirTotalWithTimeLeft) {
  TempDir d;
  const std::string exp = d.file("t.yaml", train_yaml(d, "  max_steps: 20\n"));
  auto r = sh(tracrctl() + " train " + exp);
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<int> steps;
  const std::regex line(R"(progress: owner 0 step (\d+)/20 \((\d+)%\))");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), line); it != std::sregex_iterator(); ++it) {
    steps.push_back(std::stoi((*it)[1]));
    EXPECT_EQ(std::stoi((*it)[2]), steps.back() * 5) << (*it)[0];
  }
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20})) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(step 18/20 \(90%\).*about \d+ s left)"))) << r.out;
}

TEST(Train, TwoOwnersTakeTurnsOnTheSharedSegments) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  const std::string exp = d.file("t.yaml", train_yaml(d, "  owners: [owner, owner2]\n  max_steps: 6\n  turn_steps: 2\n"
                                                        "  trace_frames: true\n", 2));
  auto r = sh(tracrctl() + " train " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select group_concat(n) from (select count(*) n from train_steps group by owner order by owner)"),
            "6,6");
  // worker_a saw the owners' training frames in turns of two steps.
  auto seq = query_col(db, "select message from events where kind = 'frame_received' and device = 'worker_a' "
                           "and message like 'TRAIN_FORWARD % op train %' order by id");
  ASSERT_EQ(seq.size(), 12u);
  std::string owners;
  for (const auto& m : seq) owners += m.find("owner=1") != std::string::npos ? '1' : '0';
  EXPECT_EQ(owners, "001100110011") << "owner of each training forward in arrival order";
  // Each owner trained on its own half of the data and evaluated its own model.
  EXPECT_EQ(query(db, "select count(distinct owner) from train_epochs"), "2");
}

TEST(Train, LayoutMistakesAreRefusedBeforeAnyAgentStarts) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  auto unknown = sh(tracrctl() + " train " +
                    d.file("a.yaml", train_yaml(d, "").replace(train_yaml(d, "").find("worker_b, owner]"), 16,
                                                                 "worker_c, owner]")) +
                    " --no-progress");
  EXPECT_EQ(unknown.status, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("train.segments[2]: no device 'worker_c'"), std::string::npos) << unknown.out;
  auto not_train = sh(tracrctl() + " train " + d.file("b.yaml", "model: fmnist_cnn\noutput: " + db + "\n"));
  EXPECT_EQ(not_train.status, 2) << not_train.out;
  EXPECT_NE(not_train.out.find("not a training experiment: set train.cuts"), std::string::npos) << not_train.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "") << "no run row for a refused layout";
  // A cut beyond the model is refused by the controller before any agent starts, naming the entry.
  const std::string c_yaml =
      d.file("c.yaml", train_yaml(d, "").replace(train_yaml(d, "").find("[3, 6, 8]"), 9, "[3, 6, 12]"));
  auto beyond = sh(tracrctl() + " train " + c_yaml + " --no-progress");
  EXPECT_EQ(beyond.status, 2) << beyond.out;
  EXPECT_NE(beyond.out.find(c_yaml + ":9:9: train.cuts[2]: cut 12 is outside model 'fmnist_cnn' with 10 layers; "
                            "expected cuts in 1..9"),
            std::string::npos)
      << beyond.out;
  // A list of codecs is a series of inference runs; training takes one codec.
  auto codecs = sh(tracrctl() + " train " + d.file("d.yaml", train_yaml(d, "")) +
                   " --set 'compression=[none, fp16]' --no-progress");
  EXPECT_EQ(codecs.status, 2) << codecs.out;
  EXPECT_NE(codecs.out.find("compression: 2 codecs given"), std::string::npos) << codecs.out;
  // So is a list of models.
  auto models = sh(tracrctl() + " train " + d.file("d.yaml", train_yaml(d, "")) +
                   " --set 'model=[fmnist_cnn, alexnet]' --no-progress");
  EXPECT_EQ(models.status, 2) << models.out;
  EXPECT_NE(models.out.find("model: 2 models given"), std::string::npos) << models.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "") << "no run row for a refused layout";
}

TEST(Train, ResultsShowAndTheReportDrawTheTrainingCurves) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  std::string y = train_yaml(d, "  max_steps: 60\n");
  y.replace(y.find("train_samples: 3000"), 19, "train_samples: 1280");
  auto r = sh(tracrctl() + " train " + d.file("t.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // Three epochs of 20 steps: one table row each.
  auto show = sh(tracrctl() + " results show 1 --db " + db);
  ASSERT_EQ(show.status, 0) << show.out;
  EXPECT_TRUE(std::regex_search(show.out, std::regex("\n +0 +2 +60 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0\\.[0-9]+"))) << show.out;
  EXPECT_NE(show.out.find("owner 0: 60 steps, median step"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("TRAIN_WORKER"), std::string::npos) << show.out;  // the devices it ran on
  const std::string page = (d.path / "report.html").string();
  const std::string figs = (d.path / "figs").string();
  auto rep = sh(tracrctl() + " report 1 -o " + page + " --figures " + figs + " --db " + db);
  ASSERT_EQ(rep.status, 0) << rep.out;
  const char* browser = "/usr/bin/chromium";
  if (::access(browser, X_OK) != 0) {
    if (std::getenv("CI")) FAIL() << "chromium missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "chromium not installed";
  }
  auto dom = sh(std::string(browser) + " --headless --no-sandbox --disable-gpu --no-first-run --disable-dev-shm-usage "
                "--user-data-dir=" + (d.path / "chrome").string() + " --virtual-time-budget=10000 --dump-dom file://" +
                page + " 2>/dev/null");
  ASSERT_EQ(dom.status, 0);
  // The page draws its figures as inline SVG (matplotlib's, no script):
  // Chromium's DOM holds a loss line through every step (60 vertices: paths
  // are not simplified) and one accuracy marker per epoch and metric.
  auto figure = [&](const std::string& id) {
    const size_t at = dom.out.find("id=\"fig-" + id + "\"");
    return at == std::string::npos ? std::string() : dom.out.substr(at, dom.out.find("</figure>", at) - at);
  };
  auto rows = [&](const std::string& csv) {  // data rows of a figure's CSV
    std::ifstream in(figs + "/" + csv);
    size_t n = 0;
    for (std::string l; std::getline(in, l);) n += !l.empty();
    return n - 1;
  };
  auto longest_line = [](const std::string& fig) {  // vertices of the longest path (M, then one L per vertex)
    size_t best = 0;
    for (size_t at = fig.find(" d=\"M "); at != std::string::npos; at = fig.find(" d=\"M ", at + 1)) {
      const std::string d = fig.substr(at + 4, fig.find('"', at + 4) - at - 4);
      size_t n = 1;
      for (size_t l = 1; l + 1 < d.size(); ++l) n += d[l] == 'L' && std::isspace(static_cast<unsigned char>(d[l - 1]));
      best = std::max(best, n);
    }
    return best;
  };
  const std::string loss = figure("train_loss_1"), acc = figure("train_accuracy_1");
  ASSERT_FALSE(loss.empty()) << dom.out.substr(0, 2000);
  ASSERT_FALSE(acc.empty()) << dom.out.substr(0, 2000);
  EXPECT_NE(loss.find("<svg"), std::string::npos);
  EXPECT_EQ(longest_line(loss), 60u) << "one point per training step";
  EXPECT_EQ(rows("train_loss_1.csv"), 60u);
  EXPECT_EQ(rows("train_accuracy_1.csv") % 3, 0u) << "top-1 (and top-5) after each of the 3 epochs";
  EXPECT_GE(rows("train_accuracy_1.csv"), 3u);
  EXPECT_NE(acc.find("top-1"), std::string::npos);
}

TEST(Train, ALossyCodecShrinksActivationsAndGradientsBothWays) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  auto r = sh("TRACR_COMPRESSION=fp16 " + tracrctl() + " train " + d.file("t.yaml", train_yaml(d, "  max_steps: 20\n")) +
              " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select codec from runs where id = 1"), "fp16");
  // fp16 halves the tensors each way: forward activations and the gradients the workers send back.
  EXPECT_EQ(query(db, "select count(*) from train_steps where up_bytes * 10 > up_raw * 6 or down_bytes * 10 > down_raw * 6"),
            "0");
  EXPECT_EQ(query(db, "select count(*) from train_steps"), "20");
  // The loss moves off the lossless one but training still works.
  auto lossy = query_col(db, "select loss from train_steps order by step");
  auto exact = reference_losses(20, 3);
  ASSERT_EQ(lossy.size(), exact.size());
  EXPECT_NE(std::stod(lossy.back()), exact.back());
  EXPECT_LT(std::stod(lossy.back()), std::stod(lossy.front()));
  // int8 per channel on activations and gradients; the exported weights
  // (1-D biases included) still travel exactly, without the lossy stage.
  auto r8 = sh("TRACR_COMPRESSION=int8_channel TRACR_TRAIN_EXPORT=" + (d.path / "w8.pt").string() + " " + tracrctl() +
               " train " + d.file("t.yaml", train_yaml(d, "  max_steps: 10\n")) + " --no-progress");
  ASSERT_EQ(r8.status, 0) << r8.out;
  EXPECT_EQ(query(db, "select count(*) from train_steps where run_id = 2 and up_bytes * 10 > up_raw * 3"), "0");
  ex::ModelConfig mc;
  mc.device = "cpu";
  mc.weights = (d.path / "w8.pt").string();
  auto m = ex::create_model("fmnist_cnn", mc);
  ASSERT_TRUE(m) << m.error().str();
}

// Training places segments on devices by name: a devices file without a
// SERVER (three PARTICIPANTs, as three boards might all be listed) trains
// the same as with one. Without train.segments the middle segments need a
// SERVER to default to, and the error says so before anything starts.
TEST(Train, DevicesWithoutAServerTrainWhenSegmentsNameTheirDevices) {
  TempDir d;
  const std::string db = (d.path / "t.db").string();
  std::string y = train_yaml(d, "  max_steps: 4\n");
  auto devices = devices_yaml(1);
  devices.replace(devices.find("device_type: SERVER"), 19, "device_type: PARTICIPANT");
  d.file("devices.yaml", devices);  // the file train_yaml named, now without a SERVER
  const std::string exp = d.file("t.yaml", y);
  auto r = sh(tracrctl() + " train " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select count(*) from train_steps"), "4");
  expect_same(query_col(db, "select loss from train_steps order by step"), reference_losses(4, 3));
  // The same without train.segments: no SERVER to default the middle to.
  const std::string seg_line = "  segments: [owner, worker_a, worker_b, owner]\n";
  y.erase(y.find(seg_line), seg_line.size());
  auto bad = sh(tracrctl() + " train " + d.file("u.yaml", y) + " --no-progress");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("train.segments is not set and " + (d.path / "devices.yaml").string() + " has no SERVER"),
            std::string::npos)
      << bad.out;
  // Inference still needs its SERVER.
  auto run = sh(tracrctl() + " run " + d.file("i.yaml", "model: fmnist_cnn\ndevices: " + (d.path / "devices.yaml").string() +
                                                         "\noutput: " + (d.path / "i.db").string() + "\n"));
  EXPECT_EQ(run.status, 2) << run.out;
  EXPECT_NE(run.out.find("expected exactly one device with device_type: SERVER, found 0"), std::string::npos) << run.out;
}
