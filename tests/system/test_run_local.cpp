// tracrctl run end to end with local agents on loopback and in-process.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <filesystem>
#include <csignal>
#include <cstdio>
#include <regex>

#include "fleet/detached.hpp"
#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {
const int kAlexNetLayers = 22;  // splits 0..22
}

namespace {

// `tracrctl run EXP --no-progress` in the background, its output and exit
// status kept in files: a test waits for frames, breaks something, then
// reads how the run ended.
class BackgroundRun {
 public:
  BackgroundRun(const TempDir& d, const std::string& exp) : out_((d.path / "out.txt").string()) {
    thread_ = std::thread([this, exp] {
      sh(tracrctl() + " run " + exp + " --no-progress > " + out_ + " 2>&1; echo $? > " + out_ + ".rc");
    });
  }
  ~BackgroundRun() {
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the run to end; its exit status (-1 when unknown).
  int join() {
    if (thread_.joinable()) thread_.join();
    std::ifstream rc(out_ + ".rc");
    int code = -1;
    rc >> code;
    return code;
  }
  std::string output() const {
    std::ifstream o(out_);
    return std::string((std::istreambuf_iterator<char>(o)), std::istreambuf_iterator<char>());
  }

 private:
  std::string out_;
  std::thread thread_;
};

// Polls until `count_sql` (a count over the database) exceeds n; false
// after 60 s.
bool wait_for_count(const std::string& db, const std::string& count_sql, int n) {
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto c = query(db, count_sql);
    if (!c.empty() && std::stoi(c) > n) return true;
  }
  return false;
}

// Three local agents: phone (PARTICIPANT) -> edge -> cloud.
std::string chain_devices(TempDir& d) {
  return d.file("devices.yaml", "devices:\n"
                                "  - {device_type: SERVER, name: edge, transport: local}\n"
                                "  - {device_type: SERVER, name: cloud, transport: local}\n"
                                "  - {device_type: PARTICIPANT, name: phone, transport: local}\n");
}

}  // namespace

TEST(RunLocal, SweepsEverySplitAndPrintsTableFromSqlite) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string exp = d.file("exp.yaml", small_experiment(db));
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("completed: per-split table read back from"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "completed");
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1"), std::to_string((kAlexNetLayers + 1) * 2));
  EXPECT_EQ(query(db, "select count(distinct split) from summaries where run_id = 1"),
            std::to_string(kAlexNetLayers + 1));
  // Each agent names the BLAS its LibTorch loaded when it is the netlib reference one (Debian's default, 10 to
  // 20 times slower on linear layers), and says nothing of an optimised one.
  std::error_code ec;
  const bool reference = std::filesystem::canonical("/usr/lib/x86_64-linux-gnu/libblas.so.3", ec)
                             .string()
                             .find("/blas/libblas.so") != std::string::npos;
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'agent_log' and level = 'warn' and message like "
                      "'%is the netlib reference BLAS%libopenblas0-openmp%'"),
            reference ? "2" : "0");
  // Printed once per run (both agents said the same; both are stored), on one line.
  size_t printed = 0;
  for (size_t at = r.out.find(": blas: /"); at != std::string::npos; at = r.out.find(": blas: /", at + 1)) ++printed;
  EXPECT_EQ(printed, reference ? 1u : 0u) << r.out;
  EXPECT_EQ(query(db, "select count(*) from frames where ok = 0"), "0");
  // Per-layer profiles from both devices, every layer.
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where device_role = 'SERVER'"), std::to_string(kAlexNetLayers));
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where device_role = 'PARTICIPANT'"),
            std::to_string(kAlexNetLayers));
  // Split 0 sends the input (3x64x64 float32), split N the 1000 logits.
  EXPECT_EQ(query(db, "select raw_bytes from frames where split = 0 limit 1"), std::to_string(3 * 64 * 64 * 4));
  EXPECT_EQ(query(db, "select raw_bytes from frames where split = 22 limit 1"), "4000");
  EXPECT_EQ(query(db, "select cipher from frames limit 1"), "aes-256-gcm");
  EXPECT_EQ(query(db, "select codec from frames limit 1"), "blosc-lz4");
  // The printed table lists every split.
  // (the fastest split's row starts with '*')
  for (int k : {0, 11, 22})
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\n[* ] +" + std::to_string(k) + " +[^ ]+ +2 "))) << k << "\n" << r.out;
}

// Before its first frame a run deploys, loads and profiles, which can take
// minutes: piped, it says so one line at a time, then the progress lines (#20).
TEST(RunLocal, APipedRunSaysWhatItDoesBeforeItsFirstFrame) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  // Every split: 46 frames, so a line per frame would show (#20: piped
  // output printed one progress line per frame; now one per 10 %).
  const std::string y = small_experiment(db, "probe:\n  duration_ms: 200\n");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y));  // stderr is a pipe here
  ASSERT_EQ(r.status, 0) << r.out;
  const auto server = r.out.find("  starting the SERVER agent on server (it loads the model and profiles it first) ...\n");
  const auto parts = r.out.find("  starting 1 PARTICIPANT agent (model, profiles, link probe) ...\n");
  const auto profiling = r.out.find("  PARTICIPANT participant: profiling its 22 layers ...\n");
  const auto probed = r.out.find("  PARTICIPANT participant: link probed, frames next ...\n");
  const auto progress = r.out.find("  progress: ");
  ASSERT_NE(server, std::string::npos) << r.out;
  ASSERT_NE(parts, std::string::npos) << r.out;
  ASSERT_NE(profiling, std::string::npos) << r.out;
  ASSERT_NE(probed, std::string::npos) << r.out;
  ASSERT_NE(progress, std::string::npos) << r.out;
  EXPECT_LT(server, parts);
  EXPECT_LT(parts, profiling);
  EXPECT_LT(profiling, probed);
  EXPECT_LT(probed, progress);
  EXPECT_EQ(r.out.find("\r"), std::string::npos) << "no carriage returns when piped";
  size_t lines = 0;
  for (size_t at = r.out.find("  progress: "); at != std::string::npos; at = r.out.find("  progress: ", at + 1)) ++lines;
  EXPECT_GE(lines, 2u) << r.out;
  EXPECT_LE(lines, 11u) << "a line per 10 % of 46 frames, and the last:\n" << r.out;
  EXPECT_NE(r.out.find("  progress: 46/46 frames (100%)"), std::string::npos) << r.out;
}

// A list of models runs the experiment once per model, models outer, each
// run named after its model, then one table (#20: a second model needed a
// second experiment file). Every model is checked before the first starts.
TEST(RunLocal, AModelListTimesACodecListIsOneRunEachAndOneTable) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("model: alexnet"), 14, "model: [alexnet, resnet18]");
  y.replace(y.find("split: all"), 10, "split: [0, 5]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: [none, fp16]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select group_concat(name || ' ' || model || ' ' || codec, ',') from runs order by id"),
            "system/alexnet/none alexnet none,system/alexnet/fp16 alexnet fp16,system/resnet18/none resnet18 none,"
            "system/resnet18/fp16 resnet18 fp16");
  EXPECT_EQ(query(db, "select count(*) from frames where ok = 0"), "0");
  EXPECT_EQ(query(db, "select count(distinct run_id) from frames"), "4");
  EXPECT_NE(r.out.find("== model resnet18, compression fp16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("median total ms per split and model and codec (runs 1 2 3 4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resnet18/fp16"), std::string::npos) << r.out;
  // A split that one model lacks is refused before anything runs, naming the model.
  const std::string db2 = (d.path / "r2.db").string();
  std::string bad = small_experiment(db2, "probe:\n  enabled: false\n");
  bad.replace(bad.find("model: alexnet"), 14, "model: [resnet18, alexnet]");
  bad.replace(bad.find("split: all"), 10, "split: [0, 30]");
  auto refused = sh(tracrctl() + " run " + d.file("bad.yaml", bad) + " --no-progress");
  EXPECT_EQ(refused.status, 2) << refused.out;
  EXPECT_NE(refused.out.find("model[1]: "), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("split point 30 is beyond model 'alexnet'"), std::string::npos) << refused.out;
  EXPECT_FALSE(std::filesystem::exists(db2)) << "nothing started, so no database";
}

// A list of input sizes runs the experiment once per size, after models
// and before codecs, each run named after its size, then one table (#20).
// Every size is checked before the first run: one that the model cannot
// take is refused naming the list entry, before any database exists.
TEST(RunLocal, AnInputSizeListIsOneRunPerSizeAndOneTable) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("input_size: [3, 64, 64]"), 23, "input_size: [[3, 64, 64], 96]");
  y.replace(y.find("split: all"), 10, "split: [0, 5]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: [none, fp16]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select group_concat(name || ' ' || codec, ',') from runs order by id"),
            "system/3x64x64/none none,system/3x64x64/fp16 fp16,system/3x96x96/none none,system/3x96x96/fp16 fp16");
  EXPECT_EQ(query(db, "select count(*) from frames where ok = 0"), "0");
  // Each run carries its own size: its frames' wire bytes at split 0 are the
  // raw input, 3 x H x W float32 values.
  EXPECT_EQ(query(db, "select group_concat(raw_bytes, ',') from (select distinct run_id, raw_bytes from frames "
                      "where split = 0 order by run_id)"),
            "49152,49152,110592,110592");
  EXPECT_NE(r.out.find("== input size 3x96x96, compression fp16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("median total ms per split and input size and codec (runs 1 2 3 4)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("3x96x96/fp16"), std::string::npos) << r.out;
  // AlexNet's pooling cannot take 32 x 32: refused before anything runs.
  const std::string db2 = (d.path / "r2.db").string();
  std::string bad = small_experiment(db2, "probe:\n  enabled: false\n");
  bad.replace(bad.find("input_size: [3, 64, 64]"), 23, "input_size: [[3, 64, 64], [3, 32, 32]]");
  auto refused = sh(tracrctl() + " run " + d.file("bad.yaml", bad) + " --no-progress");
  EXPECT_EQ(refused.status, 2) << refused.out;
  EXPECT_NE(refused.out.find("tracrctl run: input_size[1]: "), std::string::npos) << refused.out;
  EXPECT_FALSE(std::filesystem::exists(db2)) << "nothing started, so no database";
}

TEST(RunLocal, InProcessMatchesNetworkedNumerics) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string exp = d.file("exp.yaml", small_experiment(db, "record:\n  layers: false\n"));
  auto a = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = sh(tracrctl() + " run " + exp + " --no-progress --in-process");
  ASSERT_EQ(b.status, 0) << b.out;
  auto net = query_col(db, "select split || '/' || sample || '=' || result from frames where run_id = 1 order by split, sample");
  auto loc = query_col(db, "select split || '/' || sample || '=' || result from frames where run_id = 2 order by split, sample");
  ASSERT_EQ(net.size(), size_t((kAlexNetLayers + 1) * 2));
  EXPECT_EQ(net, loc);
  // In-process frames keep the identity with nothing negative: the reply was
  // made inside send(), so it never queued (queue 0) and its decode is return_ns.
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 2 and (flags is not null or queue_ns <> 0 or network_ns < 0 "
                      "or total_ns <> head_ns + encode_ns + network_ns + server_ns + queue_ns + return_ns + post_ns)"),
            "0");
  // Same recorded fields: wire bytes agree too (same frames, same codec).
  EXPECT_EQ(query_col(db, "select raw_bytes from frames where run_id = 1 order by split, sample"),
            query_col(db, "select raw_bytes from frames where run_id = 2 order by split, sample"));
}

TEST(RunLocal, BadExperimentNamesFileLineAndColumn) {
  TempDir d;
  const std::string exp = d.file("bad.yaml", "model: alexnet\nsplitt: all\n");
  auto r = sh(tracrctl() + " run " + exp);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("bad.yaml:2:1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("split"), std::string::npos) << r.out;
}

TEST(RunLocal, KilledServerFailsRunCleanlyAndKeepsRows) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  // Many repetitions so the run is still going when the server dies; the
  // agent_started events name the agents' pids.
  const std::string exp = d.file(
      "exp.yaml", "name: kill\nmodel: alexnet\ninput_size: [3, 64, 64]\ndataset:\n  type: synthetic\n  max_samples: 4\n"
                  "split: all\nwarmup: 0\nrepetitions: 200\nseed: 424242\noutput: " + db + "\nrecord:\n  layers: false\n");
  BackgroundRun run(d, exp);
  // Wait until frames are being recorded, then kill the SERVER agent.
  ASSERT_TRUE(wait_for_count(db, "select count(*) from frames", 5));
  const auto servers = agent_pids(db, "SERVER");
  const auto participants = agent_pids(db, "PARTICIPANT");
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_EQ(participants.size(), 1u);
  ASSERT_EQ(::kill(static_cast<pid_t>(servers[0]), SIGKILL), 0);
  const int code = run.join();
  const std::string out = run.output();
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("SERVER"), std::string::npos) << out;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "failed");
  EXPECT_GT(std::stoi(query(db, "select count(*) from frames where run_id = 1")), 5);
  EXPECT_EQ(query(db, "pragma integrity_check"), "ok");
  // No agent is left behind.
  EXPECT_FALSE(alive(servers[0]));
  EXPECT_FALSE(alive(participants[0]));
}

// A chain's middle device SIGKILLed mid-run (#43): the run fails naming it,
// every frame the participant finished before is stored, nothing is left
// running and the controller does not hang on the lost hop.
TEST(RunLocal, AChainsMiddleDeviceKilledMidRunIsNamedAndKeepsTheRows) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = chain_devices(d);
  const std::string exp = d.file(
      "exp.yaml", "name: chainkill\nmodel: alexnet\ninput_size: [3, 64, 64]\ndataset:\n  type: synthetic\n  max_samples: 4\n"
                  "chain: [edge, cloud]\nsplit: [[3, 13], [5, 20]]\nwarmup: 0\nrepetitions: 200\nseed: 434344\n"
                  "probe: {enabled: false}\noutput: " + db + "\ndevices: " + devices + "\nrecord:\n  layers: false\n");
  BackgroundRun run(d, exp);
  ASSERT_TRUE(wait_for_count(db, "select count(*) from frames", 5));
  auto pid_of = [&](const std::string& device) {
    const std::string m = query(db, "select message from events where kind = 'agent_started' and device = '" + device + "'");
    const auto p = m.rfind("pid ");
    return p == std::string::npos ? 0L : std::atol(m.c_str() + p + 4);
  };
  const long edge = pid_of("edge"), cloud = pid_of("cloud"), phone = pid_of("phone");
  ASSERT_GT(edge, 0);
  ASSERT_GT(cloud, 0);
  ASSERT_GT(phone, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(static_cast<pid_t>(edge), SIGKILL), 0);
  const int code = run.join();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = run.output();
  std::printf("[ chain kill ] the controller ended %.1f s after the middle device was killed\n", waited);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("edge"), std::string::npos) << out;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "failed");
  EXPECT_NE(query(db, "select error from runs where id = 1").find("edge"), std::string::npos)
      << query(db, "select error from runs where id = 1");
  EXPECT_GE(std::stoi(query(db, "select count(*) from frames where run_id = 1 and ok = 1")), 5);
  // Stored frames are whole: consecutive from 0 on the participant, none twice.
  EXPECT_EQ(query(db, "select count(distinct frame) = max(frame) + 1 and min(frame) = 0 from frames where run_id = 1"),
            "1");
  EXPECT_EQ(query(db, "pragma integrity_check"), "ok");
  EXPECT_FALSE(alive(edge));
  EXPECT_FALSE(alive(cloud));
  EXPECT_FALSE(alive(phone));
}

// on_participant_loss: continue (#24; the default since #46): one of two
// participants is killed mid-run; the other finishes its frames, the run is
// completed, and the loss is recorded with its cause, said at the end and in
// results list / show.
TEST(RunLocal, AParticipantsDeathLeavesTheOthersRunningWhenAskedTo) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml",
                                     "devices:\n  - {device_type: SERVER, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p1, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p2, transport: local}\n");
  const std::string exp = d.file(
      "exp.yaml", "name: spare\nmodel: alexnet\ninput_size: [3, 64, 64]\ndataset:\n  type: synthetic\n  max_samples: 4\n"
                  "split: [5]\nwarmup: 0\nrepetitions: 150\nseed: 434343\noutput: " + db + "\ndevices: " + devices +
                  "\nrecord:\n  layers: false\n");
  BackgroundRun run(d, exp);
  ASSERT_TRUE(wait_for_count(db, "select count(*) from frames where participant = 'p1'", 5));
  const auto participants = agent_pids(db, "PARTICIPANT");
  ASSERT_EQ(participants.size(), 2u);
  ASSERT_EQ(::kill(static_cast<pid_t>(participants[0]), SIGKILL), 0);  // p1 (device order)
  const int code = run.join();
  const std::string out = run.output();
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "completed");
  EXPECT_NE(out.find("run 1 completed without 1 lost participant(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: run 1 went on without participant p1 after "), std::string::npos) << out;
  EXPECT_NE(out.find("PARTICIPANT agent on p1 exited unexpectedly"), std::string::npos) << out;
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'participant_lost' and device = 'p1'"), "1");
  // p2 delivered every frame; p1 fewer.
  EXPECT_EQ(query(db, "select count(*) from frames where participant = 'p2'"), "600");
  EXPECT_LT(std::stoi(query(db, "select count(*) from frames where participant = 'p1'")), 600);
  EXPECT_EQ(query(db, "pragma integrity_check"), "ok");
  auto list = sh(tracrctl() + " results list --db " + db);
  EXPECT_NE(list.out.find("completed (1 lost)"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.rfind("runs in " + db + "\n", 0), 0u) << list.out;  // names the database it read (#45)
  auto show = sh(tracrctl() + " results show 1 --db " + db);
  EXPECT_NE(show.out.find("[completed (1 lost)]"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("database " + db + "\n"), std::string::npos) << show.out;
}

TEST(RunLocal, FashionMnistTemplatesTrainThenReportAccuracyPerSplit) {
  // The shipped templates: split training writes the weights (a short run
  // here), then the inference template runs real Fashion-MNIST test images
  // through them, batches of 8, int8+zstd, two frames in flight.
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string weights = (d.path / "w.pt").string();
  const std::string src = TRACR_SOURCE_DIR;
  auto t = sh("TRACR_DEVICES=" + src + "/config/devices_train.yaml TRACR_TRAIN_MAX_STEPS=120 "
              "TRACR_TRAIN_TEST_SAMPLES=500 TRACR_TRAIN_CHECKPOINT_DIR=" + (d.path / "ckpt").string() +
              " TRACR_TRAIN_EXPORT=" + weights + " " + tracrctl() + " train " + src +
              "/config/experiments/train_fmnist.yaml --no-progress --db " + db);
  ASSERT_EQ(t.status, 0) << t.out;
  auto r = sh("TRACR_WEIGHTS=" + weights + " " + tracrctl() + " run " + src +
              "/config/experiments/fashion_mnist.yaml --no-progress --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select status from runs where id = 2"), "completed");
  // 3 splits x 5 repetitions x 8 batches of 8.
  EXPECT_EQ(query(db, "select count(*) from frames where warmup = 0"), "120");
  EXPECT_EQ(query(db, "select count(*) from frames where warmup = 1"), "6");  // 2 per split, stored
  EXPECT_EQ(query(db, "select min(batch) || '/' || max(batch) from frames"), "8/8");
  EXPECT_EQ(query(db, "select codec from frames limit 1"), "int8+blosc-zstd:level=5");
  // A flag means a negative stage and a negative stage is flagged. A reply
  // that lands between the participant's clock read and its non-blocking
  // check gives a negative queue of a few microseconds (kept and flagged):
  // on a loaded machine that happens, so both flags are allowed here.
  EXPECT_EQ(query(db,
                  "select count(*) from frames where (network_ns < 0 or queue_ns < 0) <> (flags is not null) "
                  "or total_ns <= 0"),
            "0");
  EXPECT_EQ(query(db,
                  "select count(*) from frames where flags is not null and flags not in ('negative_network', "
                  "'negative_queue', 'negative_network,negative_queue')"),
            "0");
  // The label and sample identity of every sample travel with the frame.
  EXPECT_EQ(query(db, "select count(*) from frames where length(label) - length(replace(label, ';', '')) <> 7"), "0");
  EXPECT_EQ(query(db, "select sample_id like 'fashion-mnist/test/%' from frames limit 1"), "1");
  // int8 shrinks the crossing tensors about 4x before zstd.
  EXPECT_LT(std::stod(query(db, "select avg(wire_bytes * 1.0 / raw_bytes) from frames")), 0.3);
  // Real accuracy at every split: the trained weights classify the test images.
  EXPECT_EQ(query(db, "select count(*) from frames where correct < 0"), "0");
  for (const auto& acc : query_col(db, "select sum(correct) * 1.0 / sum(batch) from frames where warmup = 0 "
                                       "group by split"))
    EXPECT_GT(std::stod(acc), 0.6);
  EXPECT_NE(r.out.find("accuracy per split and codec (timed frames with a label)"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("split +6 +int8\\+blosc-zstd:level=5 +320 samples +top-1 +[0-9.]+% "
                                                  "\\([0-9]+\\) +top-5 +[0-9.]+% \\([0-9]+\\)")))
      << r.out;
  // Top-5 is never below top-1; summaries and the per-codec table agree with the frames.
  EXPECT_EQ(query(db, "select count(*) from frames where top5_correct < correct or top5_correct > batch"), "0");
  EXPECT_EQ(query(db, "select group_concat(s.top1_correct = a.top1_correct and s.top5_correct = a.top5_correct "
                      "and s.labelled = 320) from summaries s join accuracy a using (run_id, split) where run_id = 2"),
            "1,1,1");
  EXPECT_EQ(query(db, "select count(*) from summaries where run_id = 2 and top5_acc < top1_acc"), "0");
  // Five ranked classes per sample, probabilities descending, top-1 agreeing with frames.correct.
  EXPECT_EQ(query(db, "select count(*) from frame_topk where run_id = 2"), std::to_string(126 * 8 * 5));
  EXPECT_EQ(query(db, "select count(*) from frame_topk a join frame_topk b using (run_id, participant, frame, pos) "
                      "where b.rank = a.rank + 1 and b.prob > a.prob"),
            "0");
  EXPECT_EQ(query(db, "select class_name from frame_topk where run_id = 2 and class_name = 'Ankle boot' limit 1"),
            "Ankle boot");
}

TEST(RunLocal, DetachedServerStartedOnceServesSeveralRunsUntilStopped) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\n");
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  y.replace(y.find("seed: 7"), 7, "seed: 777123");
  const std::string exp = d.file("exp.yaml", y);
  const std::string xdg = "XDG_STATE_HOME=" + (d.path / "state").string() + " ";  // its own index, never the user's
  // A log left world-readable by an older tracr is made owner-only when the agent starts (#46).
  const std::string old_log = (d.path / "agents" / "server.log").string();
  ASSERT_EQ(sh("mkdir -p " + (d.path / "agents").string() + " && touch " + old_log + " && chmod 644 " + old_log).status,
            0);
  auto start = sh(xdg + tracrctl() + " agents start " + exp);
  ASSERT_EQ(start.status, 0) << start.out;
  EXPECT_EQ(sh("stat -c %a " + old_log).out, "600\n");
  const std::string state = (d.path / "agents" / "server.state").string();
  struct stat st {};
  ASSERT_EQ(::stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << "the state holds the session secret";
  for (int i = 0; i < 2; ++i) {
    auto r = sh(tracrctl() + " run " + exp + " --no-progress");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("using the detached SERVER agent"), std::string::npos) << r.out;
  }
  EXPECT_EQ(query(db, "select count(*) from runs where status = 'completed'"), "2");
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'agent_reused'"), "2");
  // Each run records the reused SERVER's hardware identity (from its READY at start).
  EXPECT_EQ(query(db, "select count(distinct run_id) from devices where role = 'SERVER' and hw_id <> '' and cores > 0"), "2");
  // The detached server outlived both runs; stop ends it and forgets its state.
  const std::string agent_cmd = "pgrep -f 'tracr-agen[t] --role SERVER.*" + (d.path / "agents").string() + "/server.experiment.yaml'";
  EXPECT_EQ(sh(agent_cmd).status, 0);
  auto stop = sh(xdg + tracrctl() + " agents stop --state-dir " + (d.path / "agents").string());
  EXPECT_EQ(stop.status, 0) << stop.out;
  EXPECT_NE(sh(agent_cmd).status, 0);
  EXPECT_NE(::stat(state.c_str(), &st), 0);
}

// An experiment whose output is outside results/ keeps its detached agent's
// state beside its database; `agents stop` without --state-dir, run from
// anywhere, still finds and stops it (#24: it was silently missed), and says
// which recorded directories it can no longer search.
TEST(RunLocal, AgentsStopFindsDetachedAgentsWhereverTheirOutputIs) {
  TempDir d;
  const std::string db = (d.path / "elsewhere" / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\n");
  y.replace(y.find("split: all"), 10, "split: [22]");
  y.replace(y.find("seed: 7"), 7, "seed: 777124");
  const std::string exp = d.file("exp.yaml", y);
  const std::string xdg = "XDG_STATE_HOME=" + (d.path / "state").string() + " ";
  auto start = sh(xdg + tracrctl() + " agents start " + exp);
  ASSERT_EQ(start.status, 0) << start.out;
  const std::string agents = (d.path / "elsewhere" / "agents").string();
  const std::string index = (d.path / "state" / "tracr" / "detached-dirs").string();
  EXPECT_EQ(sh("cat " + index).out, agents + "\n");
  // A directory the index lists that was deleted since: said, not skipped in silence.
  {
    std::ofstream f(index, std::ios::app);
    f << (d.path / "deleted" / "agents").string() << "\n";
  }
  const std::string agent_cmd = "pgrep -f 'tracr-agen[t] --role SERVER.*" + agents + "/server.experiment.yaml'";
  EXPECT_EQ(sh(agent_cmd).status, 0);
  auto status = sh("cd " + d.path.string() + " && " + xdg + tracrctl() + " agents status");
  EXPECT_EQ(status.status, 1) << status.out;  // the deleted directory is reported, once
  EXPECT_NE(status.out.find("detached SERVER agent on server: pid "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("(state in " + agents + ")"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find((d.path / "deleted" / "agents").string() + " (listed in " + index +
                            ") no longer exists: detached agents started with their state there cannot be found"),
            std::string::npos)
      << status.out;
  auto stop = sh("cd " + d.path.string() + " && " + xdg + tracrctl() + " agents stop");
  EXPECT_EQ(stop.status, 0) << stop.out;
  EXPECT_NE(stop.out.find("stopped the detached SERVER agent on server"), std::string::npos) << stop.out;
  EXPECT_NE(sh(agent_cmd).status, 0);
  EXPECT_FALSE(std::filesystem::exists(agents + "/server.state"));
  // Both directories are gone from the index now.
  auto again = sh("cd " + d.path.string() + " && " + xdg + tracrctl() + " agents stop");
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(sh("cat " + index).out, "");
}

// A detached SERVER that dies during a run is named as the cause within a
// few seconds (#24: it was found only by the participants' 60 s frame
// timeout, and the error blamed the PARTICIPANT).
TEST(RunLocal, ADeadDetachedServerIsNamedAsTheCause) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\n");
  y.replace(y.find("split: all"), 10, "split: [5]");
  y.replace(y.find("repetitions: 1"), 14, "repetitions: 5000");
  y.replace(y.find("seed: 7"), 7, "seed: 777125");
  const std::string exp = d.file("exp.yaml", y);
  const std::string xdg = "XDG_STATE_HOME=" + (d.path / "state").string() + " ";
  auto start = sh(xdg + tracrctl() + " agents start " + exp);
  ASSERT_EQ(start.status, 0) << start.out;
  auto state = tracr::fleet::read_detached((d.path / "agents" / "server.state").string());
  ASSERT_TRUE(state.ok()) << state.error().str();
  BackgroundRun run(d, exp);
  ASSERT_TRUE(wait_for_count(db, "select count(*) from frames", 5));
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(static_cast<pid_t>(state->pid), SIGKILL), 0);
  const int code = run.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string out = run.output();
  std::printf("[ detached ] the run ended %.1f s after its detached SERVER was killed (steady clock, this test)\n", secs);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("the detached SERVER agent on server (pid " + std::to_string(state->pid)), std::string::npos) << out;
  EXPECT_NE(out.find("is gone: no process with its identity runs here any more"), std::string::npos) << out;
  EXPECT_EQ(out.find("timed out"), std::string::npos) << out;
  EXPECT_EQ(query(db, "select status from runs where id = 1"), "failed");
  EXPECT_EQ(sh(xdg + tracrctl() + " agents stop --state-dir " + (d.path / "agents").string()).status, 0);
}

// `agents stop` signals a detached agent only when its pid still names the
// process that started (pid plus start time): a reused pid is left alone, and
// a state without a start time is not acted on at all.
TEST(RunLocal, DetachedAgentsAreStoppedByIdentityNotByABarePid) {
  TempDir d;
  const std::string agents = (d.path / "agents").string();
  std::filesystem::create_directories(agents);
  // A process that merely holds the pid a state file names.
  pid_t bystander = fork();
  ASSERT_GE(bystander, 0);
  if (bystander == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  auto write_state = [&](const std::string& device, const std::string& start) {
    std::ofstream f(agents + "/" + device + ".state");
    f << "device=" << device << "\ntransport=local\nendpoint=tcp://127.0.0.1:1\nsecret=00\nidentity=x\nlog=/dev/null\n"
      << "pid=" << bystander << "\n" << start;
  };
  write_state("reused", "start=1\n");  // the pid now belongs to another process
  write_state("old", "");                // written before start times were recorded
  auto stop = sh(tracrctl() + " agents stop --state-dir " + agents);
  EXPECT_EQ(stop.status, 1) << stop.out;  // the state without a start time is reported
  EXPECT_NE(stop.out.find("the detached SERVER agent on reused (pid " + std::to_string(bystander) +
                          ") had already ended"),
            std::string::npos)
      << stop.out;
  EXPECT_NE(stop.out.find("records no start time"), std::string::npos) << stop.out;
  EXPECT_EQ(::kill(bystander, 0), 0) << "a process that reused the pid was signalled";
  EXPECT_FALSE(std::filesystem::exists(agents + "/reused.state"));
  EXPECT_TRUE(std::filesystem::exists(agents + "/old.state"));
  ::kill(bystander, SIGKILL);
  int st = 0;
  ::waitpid(bystander, &st, 0);
}

// A state whose pid was changed to another process's (#46): the decoy is not
// signalled, and the real agent is found by its own identity (the secret
// file it was started with) and stopped; its state is never dropped while it
// runs.
TEST(RunLocal, ADetachedAgentWhoseStateNamesADecoyIsFoundByItsSecretAndStopped) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\n");
  const std::string exp = d.file("exp.yaml", y);
  const std::string xdg = "XDG_STATE_HOME=" + (d.path / "state").string() + " ";
  auto start = sh(xdg + tracrctl() + " agents start " + exp);
  ASSERT_EQ(start.status, 0) << start.out;
  const std::string state = (d.path / "agents" / "server.state").string();
  std::ifstream in(state);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find("\npid=") + 5;
  const int64_t agent = std::stoll(text.substr(at, text.find('\n', at) - at));
  ASSERT_TRUE(alive(agent));
  pid_t decoy = fork();
  ASSERT_GE(decoy, 0);
  if (decoy == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  text.replace(at, text.find('\n', at) - at, std::to_string(decoy));
  std::ofstream(state, std::ios::trunc) << text;
  auto stop = sh(xdg + tracrctl() + " agents stop --state-dir " + (d.path / "agents").string());
  EXPECT_EQ(stop.status, 0) << stop.out;
  EXPECT_NE(stop.out.find("stopped the detached SERVER agent on server (pid " + std::to_string(agent) +
                          ", found by its --secret-file: its state named pid " + std::to_string(decoy)),
            std::string::npos)
      << stop.out;
  EXPECT_EQ(::kill(decoy, 0), 0) << "the decoy was signalled";
  EXPECT_FALSE(alive(agent)) << "the real agent was left running";
  EXPECT_FALSE(std::filesystem::exists(state));
  ::kill(decoy, SIGKILL);
  int st = 0;
  ::waitpid(decoy, &st, 0);
}

TEST(RunLocal, AutoCompressionChoosesALosslessCodecPerSplitAndNamesIt) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\n");
  y.replace(y.find("split: all"), 10, "split: [2, 5, 13]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: auto");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select codec from runs where id = 1"), "auto");
  // One choice per split, from the probed link and the split's own activations.
  auto chosen = query_col(db, "select message from events where kind = 'codec_chosen' order by id");
  ASSERT_EQ(chosen.size(), 3u);
  const std::vector<std::string> candidates = {"none", "sparse", "blosc-lz4", "sparse+blosc-lz4", "blosc-zstd",
                                               "sparse+blosc-zstd"};
  std::regex re("^split ([0-9]+): auto chose (\\S+) [0-9.]+ ms .* at [0-9.]+ Mbit/s");
  for (const auto& m : chosen) {
    std::smatch g;
    ASSERT_TRUE(std::regex_search(m, g, re)) << m;
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), g[2].str()), candidates.end()) << m;
    // Every frame of that split names the chosen codec.
    EXPECT_EQ(query(db, "select group_concat(distinct codec) from frames where split = " + g[1].str()), g[2].str()) << m;
  }
  // Lossless: the same top-1 class and confidence per frame as an uncompressed run of the same inputs,
  // whose frames are coded on 4 threads at each end (the wire bytes do not depend on it).
  std::string y2 = y + "codec_threads: 4\n";
  y2.replace(y2.find("compression: auto"), 17, "compression: none");
  y2.replace(y2.find("output: " + db), 8 + db.size(), "output: " + (d.path / "n.db").string());
  auto r2 = sh(tracrctl() + " run " + d.file("none.yaml", y2) + " --no-progress");
  ASSERT_EQ(r2.status, 0) << r2.out;
  EXPECT_EQ(query_col(db, "select result from frames order by split, sample"),
            query_col((d.path / "n.db").string(), "select result from frames order by split, sample"));
}

TEST(RunLocal, DevicesFileSetsTheTorchDeviceAndThreadsPerDevice) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto devices = [&](const std::string& server_extra) {
    return d.file("devices.yaml", "devices:\n  - device_type: SERVER\n    transport: local\n" + server_extra +
                                      "    connection_params:\n      - host: 127.0.0.1\n        port: 0\n"
                                      "  - device_type: PARTICIPANT\n    transport: local\n    device: cpu\n"
                                      "    threads: 1\n");
  };
  std::string y = small_experiment(db, "record:\n  layers: false\n", devices("    device: cpu\n    threads: 2\n"));
  y.replace(y.find("split: all"), 10, "split: [5]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'agent_ready' and message like 'SERVER %device=cpu threads=2%'"),
            "1");
  // This LibTorch has no CUDA: a device asking for it fails the run before any frame, saying why.
  if (query(db, "select gpu from devices limit 1").empty()) {
    auto c = sh(tracrctl() + " run " +
                d.file("cuda.yaml", small_experiment((d.path / "c.db").string(), "", devices("    device: cuda\n"))) +
                " --no-progress");
    EXPECT_EQ(c.status, 1) << c.out;
    EXPECT_NE(c.out.find("device 'cuda' requested but CUDA is not available"), std::string::npos) << c.out;
    EXPECT_EQ(query((d.path / "c.db").string(), "select count(*) from frames"), "0");
  }
  // A device's own agent binary: a wrapper that leaves a mark, then runs the real one.
  const std::string wrapper = d.file("agent-arm.sh", "#!/bin/sh\ntouch " + (d.path / "wrapper-ran").string() +
                                                          "\nexec " + std::string(TRACR_BIN_DIR) + "/tracr-agent \"$@\"\n");
  ::chmod(wrapper.c_str(), 0755);
  auto w = sh(tracrctl() + " run " +
              d.file("w.yaml", small_experiment((d.path / "w.db").string(), "record:\n  layers: false\n",
                                                devices("    agent: agent-arm.sh\n"))) +
              " --no-progress");
  EXPECT_EQ(w.status, 0) << w.out;
  EXPECT_TRUE(std::filesystem::exists(d.path / "wrapper-ran")) << "the SERVER ran the device's own agent";
  auto missing = sh(tracrctl() + " run " +
                    d.file("m.yaml", small_experiment((d.path / "m.db").string(), "", devices("    agent: nope/tracr-agent\n"))) +
                    " --no-progress");
  EXPECT_EQ(missing.status, 2) << missing.out;
  EXPECT_NE(missing.out.find("device 'server': agent " + (d.path / "nope/tracr-agent").string() +
                             " is not an executable file here"),
            std::string::npos)
      << missing.out;
  // A bad value is a configuration error naming the key.
  auto bad = sh(tracrctl() + " run " +
                d.file("bad.yaml", small_experiment((d.path / "b.db").string(), "", devices("    device: gpu0\n"))) +
                " --no-progress");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("device: expected cpu, cuda, cuda:N or auto"), std::string::npos) << bad.out;
}

// #21: --repeat N runs the whole series N times, repetitions outermost (every codec once, then again), names
// each run with its repetition, and prints per codec and split the median of the runs' medians with the lowest,
// the highest and the spread.
TEST(RunLocal, RepeatRunsTheSeriesNTimesAndPrintsTheSpread) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record:\n  layers: false\nprobe:\n  enabled: false\n");
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: [blosc-lz4, fp16]");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", y) + " --no-progress --repeat 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select group_concat(name, ' ') from (select name from runs order by id)"),
            "system/blosc-lz4#1 system/fp16#1 system/blosc-lz4#2 system/fp16#2");
  EXPECT_NE(r.out.find("== repetition 2 of 2, compression fp16"), std::string::npos) << r.out;
  const size_t t = r.out.find("median total ms per split over 2 repetitions (runs 1..4)");
  ASSERT_NE(t, std::string::npos) << r.out;
  const std::string table = r.out.substr(t);
  EXPECT_NE(table.find("blosc-lz4"), std::string::npos) << table;
  EXPECT_NE(table.find("fp16"), std::string::npos) << table;
  // One row per split, each cell "median [lowest, highest]" and a spread in percent.
  EXPECT_NE(table.find("\n0 "), std::string::npos) << table;
  EXPECT_NE(table.find("\n22 "), std::string::npos) << table;
  const std::string body = table.substr(table.find("\nsplit"));  // below the title
  size_t cells = 0;
  for (size_t i = 0; (i = body.find(" [", i)) != std::string::npos; ++i) ++cells;
  EXPECT_EQ(cells, 4u) << table;  // 2 splits x 2 codecs
  std::printf("%s", table.c_str());
}

// lockstep (#21): three participants sweep three splits together. Each waits before every split until all have
// finished the one before, so every frame of a split (warm-up included) arrives before any frame of the next, and
// each split is measured with all three on it. The controller resumes them once per split, together.
TEST(RunLocal, LockstepParticipantsStartEverySplitTogether) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml",
                                     "devices:\n  - {device_type: SERVER, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p1, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p2, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p3, transport: local}\n");
  const std::string exp = d.file(
      "exp.yaml", "name: lockstep\nmodel: alexnet\ninput_size: [3, 64, 64]\ndataset:\n  type: synthetic\n  max_samples: 2\n"
                  "split: [0, 5, 22]\nwarmup: 1\nrepetitions: 3\nseed: 5\noutput: " + db + "\ndevices: " + devices +
                  "\nlockstep: true\nprobe:\n  enabled: false\nrecord:\n  layers: false\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select status from runs"), "completed");
  // 3 participants x 3 splits x (1 warm-up + 3 x 2 samples).
  EXPECT_EQ(query(db, "select count(*) from frames"), "63");
  // Every frame of a split arrived before any frame of the next (rows are written in arrival order).
  for (const auto& [a, b] : {std::pair{0, 5}, std::pair{5, 22}})
    EXPECT_EQ(query(db, "select (select max(rowid) from frames where split = " + std::to_string(a) +
                            ") < (select min(rowid) from frames where split = " + std::to_string(b) + ")"),
              "1")
        << a << " before " << b;
  // Each participant waited before each of its 3 splits; the controller resumed all three at once, 3 times.
  EXPECT_EQ(query(db, "select group_concat(device || ':' || n, ' ') from (select device, count(*) n from events "
                      "where kind = 'step_waiting' group by device order by device)"),
            "p1:3 p2:3 p3:3");
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'command_sent' and message like "
                      "'%resume (lockstep: step _, 3 participants)%'"),
            "9");
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'resumed'"), "9");
}

// server.batch (#46): four lockstep participants at one split; the SERVER
// holds their requests (one from each: each waits for its reply before its
// next) until all four are here and runs the four tails as one. Every frame
// says so (server_batch 4, its wait inside server_ns), and the answers are
// those of the same run unbatched, where every frame says server_batch 1.
TEST(RunLocal, AServerBatchRunsTheParticipantsTailsAsOneWithTheSameAnswers) {
  TempDir d;
  const std::string devices = d.file("devices.yaml",
                                     "devices:\n  - {device_type: SERVER, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p1, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p2, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p3, transport: local}\n"
                                     "  - {device_type: PARTICIPANT, name: p4, transport: local}\n");
  auto experiment = [&](const std::string& name, const std::string& db, const std::string& extra) {
    return d.file(name, "name: batch\nmodel: alexnet\ninput_size: [3, 64, 64]\ndataset:\n  type: synthetic\n"
                        "  max_samples: 3\nsplit: [5]\nwarmup: 1\nrepetitions: 2\nseed: 5\noutput: " + db +
                        "\ndevices: " + devices + "\nlockstep: true\nprobe:\n  enabled: false\nrecord:\n  layers: false\n" +
                        extra);
  };
  const std::string db1 = (d.path / "alone.db").string(), db4 = (d.path / "batched.db").string();
  // A batch waits up to 10 s for its fourth frame: on a loaded machine too, every batch fills.
  auto r = sh(tracrctl() + " run " + experiment("batched.yaml", db4, "server:\n  batch: {max: 4, max_wait_ms: 10000}\n") +
              " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  r = sh(tracrctl() + " run " + experiment("alone.yaml", db1, "") + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const auto& db : {db1, db4}) {
    EXPECT_EQ(query(db, "select status from runs"), "completed");
    EXPECT_EQ(query(db, "select count(*) from frames where ok = 1"), "28");  // 4 x (1 + 2 x 3)
    // The timing identity holds; the batch's wait and tail are inside the server's time.
    EXPECT_EQ(query(db, "select count(*) from frames where total_ns = head_ns + encode_ns + network_ns + server_ns + "
                        "queue_ns + return_ns + post_ns and batch_wait_ns >= 0 and batch_wait_ns + tail_ns <= server_ns"),
              "28");
  }
  EXPECT_EQ(query(db1, "select group_concat(distinct server_batch) from frames"), "1");
  EXPECT_EQ(query(db4, "select group_concat(distinct server_batch) from frames"), "4");
  // The stored experiment says it, and the same answers, frame by frame.
  EXPECT_NE(query(db4, "select config_yaml from runs").find("batch: {max: 4, max_wait_ms: 10000}"), std::string::npos);
  const std::string answers =
      "select group_concat(p, ' ') from (select participant || '/' || frame || '=' || substr(result, 1, instr(result, "
      "':') - 1) p from frames order by participant, frame)";
  const std::string a1 = query(db1, answers);
  EXPECT_EQ(query(db4, answers), a1);
  EXPECT_NE(a1.find("p4/6="), std::string::npos) << a1;
}

// server.batch on a model whose answers depend on the batch (half the
// batch's mean is taken away after the cut): one participant with two frames
// in flight (two different samples each time); the SERVER's first batch at
// the split, compared with its frames run alone, answers otherwise, so the
// SERVER says so (a warning, stored) and answers every frame alone, with the
// answers of a run without batching.
TEST(RunLocal, AServerBatchThatWouldChangeTheAnswersRunsEachFrameAlone) {
  TempDir d;
  auto tr = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/trace_graph_model.py " +
               d.path.string() + " batch_mean@8");
  ASSERT_EQ(tr.status, 0) << tr.out;
  auto experiment = [&](const std::string& name, const std::string& db, const std::string& extra) {
    return d.file(name, "name: batch_mean\nmodel: torchscript:" + (d.path / "batch_mean@8.pt").string() +
                            "\ninput_size: [3, 8, 8]\ndataset: {type: synthetic, max_samples: 4}\nsplit: [1]\n"
                            "warmup: 0\nrepetitions: 2\nseed: 5\ninflight: 2\nprobe: {enabled: false}\n"
                            "record: {layers: false}\noutput: " + db + "\n" + extra);
  };
  const std::string db1 = (d.path / "alone.db").string(), db2 = (d.path / "batched.db").string();
  auto r = sh(tracrctl() + " run " + experiment("b.yaml", db2, "server: {batch: {max: 2, max_wait_ms: 10000}}\n") +
              " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("gives other answers batched than alone"), std::string::npos) << r.out;
  ASSERT_EQ(sh(tracrctl() + " run " + experiment("a.yaml", db1, "") + " --no-progress").status, 0);
  EXPECT_EQ(query(db2, "select count(*) from events where kind = 'agent_log' and message like '%segment [1, %) of "
                       "%gives other answers batched than alone%'"),
            "1");
  EXPECT_EQ(query(db2, "select count(*) || ' ' || group_concat(distinct server_batch) from frames where ok = 1"),
            "8 1");
  const std::string answers =
      "select group_concat(p, ' ') from (select frame || '=' || result p from frames order by frame)";
  EXPECT_EQ(query(db2, answers), query(db1, answers));
}

// `chain: [<the SERVER>]` is today's two-tier run (#43): the same rows, and a
// one-device chain may name a PARTICIPANT device to serve, its hop's link and
// codec becoming the run's.
TEST(RunLocal, AChainOfTheServerAloneStoresTheSameRowsAsTwoTiers) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", "devices:\n"
                                                     "  - {device_type: SERVER, name: cloud, transport: local}\n"
                                                     "  - {device_type: PARTICIPANT, name: phone, transport: local}\n"
                                                     "  - {device_type: PARTICIPANT, name: box, transport: local}\n");
  // Both runs have both participants (box at a split of its own) and cloud serving.
  // small_experiment at three splits instead of all.
  auto exp = [&](const std::string& extra) {
    std::string y = small_experiment(db, "probe: {enabled: false}\n" + extra, devices);
    y.replace(y.find("split: all"), 10, "split: [0, 11, 22]");
    return y;
  };
  const std::string two = d.file("two.yaml", exp("participant_splits: {box: [3]}\n"));
  const std::string chained = d.file("chain.yaml", exp("participant_splits: {box: [3]}\nchain: [cloud]\n"));
  auto a = sh(tracrctl() + " run " + two + " --no-progress");
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = sh(tracrctl() + " run " + chained + " --no-progress");
  ASSERT_EQ(b.status, 0) << b.out;
  const std::string cols =
      "select participant || ' ' || split || ' ' || sample || ' ' || warmup || ' ' || ok || ' ' || result || ' ' || "
      "raw_bytes || ' ' || wire_bytes || ' ' || codec || ' ' || cipher from frames where run_id = ";
  const auto rows1 = query_col(db, cols + "1 order by participant, split, sample, warmup");
  ASSERT_EQ(rows1.size(), size_t(3 * 2 + 1 * 2));  // phone: 3 splits x 2 samples; box: split 3
  EXPECT_EQ(rows1, query_col(db, cols + "2 order by participant, split, sample, warmup"));
  for (const char* t : {"devices", "layer_profiles", "summaries"})
    EXPECT_EQ(query(db, std::string("select count(*) from ") + t + " where run_id = 1"),
              query(db, std::string("select count(*) from ") + t + " where run_id = 2"))
        << t;

  // A PARTICIPANT device named as the chain serves; its hop's codec is the run's.
  const std::string box = d.file("box.yaml", exp("chain: [{device: box, compression: none}]\n"));
  auto c = sh(tracrctl() + " run " + box + " --no-progress");
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(query(db, "select group_concat(device || ':' || role, ',') from (select device, role from devices where "
                      "run_id = 3 order by device)"),
            "box:SERVER,phone:PARTICIPANT");
  EXPECT_EQ(query(db, "select group_concat(distinct participant) from frames where run_id = 3"), "phone");
  EXPECT_EQ(query(db, "select group_concat(distinct codec) from frames where run_id = 3"), "none");
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 3 and ok = 1"), "6");
}

// `tracrctl run` on a chain of three local agents (#43): the controller
// starts the chain from its end, the participant sends to the first device,
// each placement's frames are stored with it, and their results equal a
// two-tier run's at the same first cut (the outputs are the unsplit model's).
TEST(RunLocal, AChainOfThreeLocalAgentsRunsPlacementsAsTheTwoTierModel) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = chain_devices(d);
  auto exp = [&](const std::string& split, const std::string& extra) {
    std::string y = small_experiment(db, "probe: {enabled: false}\ninflight: 2\n" + extra, devices);
    y.replace(y.find("split: all"), 10, "split: " + split);
    return y;
  };
  // 3|13 and 3|20 share their first cut: each placement is its own summary.
  auto chain = sh(tracrctl() + " run " + d.file("chain.yaml", exp("[[3, 13], [0, 22], [22, 22], [5, 5], [3, 20]]",
                                                                  "chain: [edge, {device: cloud, compression: sparse}]\n")) +
                  " --no-progress");
  ASSERT_EQ(chain.status, 0) << chain.out;
  auto two = sh(tracrctl() + " run " + d.file("two.yaml", exp("[3, 0, 22, 5]", "chain: [cloud]\n")) + " --no-progress");
  ASSERT_EQ(two.status, 0) << two.out;
  // Every agent's log beside the database is readable by its user only (#46): 3 + 2 agents.
  EXPECT_EQ(sh("stat -c %a " + (d.path / "logs").string() + "/run-*.log | sort | uniq -c | tr -s ' '").out, " 5 600\n");
  EXPECT_EQ(query(db, "select group_concat(device || ':' || role, ',') from (select device, role from devices where "
                      "run_id = 1 order by device)"),
            "cloud:SERVER,edge:SERVER,phone:PARTICIPANT");
  EXPECT_EQ(query(db, "select group_concat(placement, ',') from (select distinct placement from frames where run_id = 1 "
                      "order by placement)"),
            "0|22,22|22,3|13,3|20,5|5");
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1 and ok = 1"), "10");
  EXPECT_EQ(query(db, "select group_concat(placement || ':' || split || ':' || frames, ',') from (select * from "
                      "summaries where run_id = 1 order by split, placement)"),
            "0|22:0:2,3|13:3:2,3|20:3:2,5|5:5:2,22|22:22:2");
  EXPECT_EQ(query(db, "select count(distinct placement) from stage_stats where run_id = 1"), "5");
  EXPECT_EQ(query(db, "select group_concat(placement, ',') from (select placement from summaries where run_id = 2 "
                      "order by split)"),
            "0,3,5,22");  // a two-tier run's placement is its split
  // The split table names placements, each on its own row.
  auto show = sh(tracrctl() + " results show 1 --db " + db);
  ASSERT_EQ(show.status, 0) << show.out;
  EXPECT_NE(show.out.find("placement"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("3|20"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("3|13"), std::string::npos) << show.out;
  const std::string cols = "select split || ' ' || sample || ' ' || result from frames where warmup = 0 and "
                           "coalesce(placement, '') <> '3|20' and run_id = ";
  const auto chained = query_col(db, cols + "1 order by split, sample");
  ASSERT_EQ(chained.size(), 8u);
  EXPECT_EQ(chained, query_col(db, cols + "2 order by split, sample"));
  // Every device of every chain frame is stored, named, with its hop's codec (hop 2's set in
  // its chain entry: sparse, encoded by edge), and the hops add up to the participant's times.
  EXPECT_EQ(query(db, "select count(*) from frame_hops where run_id = 1"), "20");
  EXPECT_EQ(query(db, "select group_concat(hop || ':' || device || ':' || codec, ',') from (select distinct hop, "
                      "device, codec from frame_hops where run_id = 1 order by hop)"),
            "1:edge:blosc-lz4,2:cloud:sparse");
  EXPECT_EQ(query(db, "select count(*) from frame_hops where run_id = 2"), "0");  // two-tier frames have none
  const std::string h1 = "(select * from frame_hops where run_id = 1 and hop = 1)", h2 =
      "(select * from frame_hops where run_id = 1 and hop = 2)";
  EXPECT_EQ(query(db, "select count(*) from frames f join " + h1 + " a on a.participant = f.participant and a.frame = "
                      "f.frame where f.run_id = 1 and a.server_ns = f.server_ns and a.network_ns = f.network_ns and "
                      "a.in_wire_bytes = f.wire_bytes and a.first_layer = f.split"),
            "10");
  EXPECT_EQ(query(db, "select count(*) from " + h1 + " a join " + h2 + " b on a.participant = b.participant and "
                      "a.frame = b.frame where a.forward_ns = b.send_encode_ns + b.network_ns + b.server_ns + "
                      "b.reply_decode_ns and a.end_layer = b.first_layer and b.end_layer = 22 and b.forward_ns is null"),
            "10");
  EXPECT_EQ(query(db, "select count(*) from frame_hops where run_id = 1 and server_ns = compute_ns + "
                      "coalesce(forward_ns, 0) + other_ns"),
            "20");
  // The JSON export carries every hop row.
  ASSERT_EQ(sh(tracrctl() + " results export 1 --json " + (d.path / "chain.json").string() + " --db " + db).status, 0);
  auto json = sh("/usr/bin/python3 -c \"import json,sys; d = json.load(open(sys.argv[1])); "
                 "print(len(d['frame_hops']), sorted(set(h['device'] for h in d['frame_hops'])))\" " +
                 (d.path / "chain.json").string());
  EXPECT_EQ(json.out, "20 ['cloud', 'edge']\n") << json.out;
  // The planner over placements: every one of AlexNet's 276 predicted from the run's profiles and
  // hops, checked against the 5 it measured.
  auto plan = sh(tracrctl() + " plan 1 --db " + db);
  ASSERT_EQ(plan.status, 0) << plan.out;
  EXPECT_NE(plan.out.find("plan over placements from run 1 (alexnet, 22 layers): phone -> edge -> cloud; 276 "
                          "placements predicted, 5 measured"),
            std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find("latency MAPE"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("chosen (lowest predicted latency): "), std::string::npos) << plan.out;
  // Each device's compute is scaled to the run's frames: the phone's by its heads' medians over the
  // profiled sum of the layers before each placement's first cut (3|13 and 3|20 count twice), that sum
  // checked from the database.
  std::smatch scale;
  ASSERT_TRUE(std::regex_search(plan.out, scale,
                                std::regex(R"(phone x([0-9.]+) \(([0-9.]+) ms measured / ([0-9.]+) ms profiled\))")))
      << plan.out;
  EXPECT_EQ(scale[3].str(),
            query(db, "select printf('%.1f', sum(coalesce(l.mean_ns, l.median_ns)) / 1e6) from (select distinct placement, split "
                      "from frames where run_id = 1 and warmup = 0 and ok = 1) f join layer_profiles l on l.run_id = 1 "
                      "and l.device = 'phone' and l.layer_index < f.split"));
  const double ratio = std::stod(scale[2].str()) / std::stod(scale[3].str());  // each printed to 0.1 ms
  EXPECT_NEAR(std::stod(scale[1].str()), ratio, 0.01 * ratio + 0.001) << plan.out;
  // Stored (#43, migration 26): the plan's row, every placement, each device's segment; the terms add up to the
  // latency, the segments tile the layers, and the chosen is the fastest placement.
  EXPECT_NE(plan.out.find("stored as plan 1 in " + db), std::string::npos) << plan.out;
  EXPECT_EQ(query(db, "select chain || ';' || placements || ';' || validation_runs || ';' || (chosen is null) || ';' "
                      "|| (mape_pct is not null) || ';' || input_shape from plans where id = 1"),
            "phone -> edge -> cloud;276;1;1;1;3,64,64");
  EXPECT_EQ(query(db, "select count(*) || ',' || sum(measured_ms is not null) from plan_placements where plan_id = 1"),
            "276,5");
  EXPECT_EQ(query(db, "select count(*) from plan_segments where plan_id = 1"), "828");
  EXPECT_EQ(query(db, "select count(*) from plan_placements p where plan_id = 1 and abs(latency_ms - post_ms - (select "
                      "sum(compute_ms + coalesce(link_ms, 0) + coalesce(own_ms, 0)) from plan_segments s where "
                      "s.plan_id = 1 and s.placement = p.placement)) > 1e-9 * latency_ms"),
            "0");
  EXPECT_EQ(query(db, "select count(*) from plan_segments a join plan_segments b on a.plan_id = b.plan_id and "
                      "a.placement = b.placement and b.position = a.position + 1 where a.plan_id = 1 and "
                      "(a.end_layer <> b.first_layer or b.device <> case b.position when 1 then 'edge' else 'cloud' "
                      "end)"),
            "0");
  EXPECT_EQ(query(db, "select chosen_placement = (select placement from plan_placements where plan_id = 1 order by "
                      "latency_ms limit 1) from plans where id = 1"),
            "1");
  auto linked = sh(tracrctl() + " plan 1 --db " + db + " --link wifi");
  EXPECT_EQ(linked.status, 2) << linked.out;
  EXPECT_NE(linked.out.find("run 1 ran a chain"), std::string::npos) << linked.out;
  // The two-tier run plans by split, as before (it ran without a probe: the link is given).
  auto two_plan = sh(tracrctl() + " plan 2 --link wifi --db " + db);
  EXPECT_EQ(two_plan.status, 0) << two_plan.out;
  EXPECT_EQ(two_plan.out.find("placements"), std::string::npos) << two_plan.out;
  // plan --chain: the same chain planned before it ran, from two-tier runs of its devices (phone -> edge
  // probed here, cloud's profiles from run 2), checked on the chain run 1.
  // Its devices file limits the edge's memory (#43): AlexNet's classifier (~200 MB of float32 weights) cannot go there.
  const std::string limited = d.file("limited.yaml", "devices:\n"
                                                     "  - {device_type: SERVER, name: edge, transport: local, "
                                                     "memory_mb: 5}\n"
                                                     "  - {device_type: SERVER, name: cloud, transport: local}\n"
                                                     "  - {device_type: PARTICIPANT, name: phone, transport: local, "
                                                     "power_model: {idle_w: 2, busy_w: 6}}\n");
  std::string edge_yaml = small_experiment(db, "probe: {enabled: true, duration_ms: 200}\nchain: [edge]\n", limited);
  edge_yaml.replace(edge_yaml.find("split: all"), 10, "split: [3]");
  auto edge = sh(tracrctl() + " run " + d.file("edge.yaml", edge_yaml) + " --no-progress");
  ASSERT_EQ(edge.status, 0) << edge.out;
  auto unprobed = sh(tracrctl() + " plan 3 --chain edge,cloud --db " + db);
  EXPECT_EQ(unprobed.status, 1) << unprobed.out;
  EXPECT_NE(unprobed.out.find("hop 2 (edge -> cloud): no stored link probe from edge to cloud"), std::string::npos)
      << unprobed.out;
  auto planned = sh(tracrctl() + " plan 3 --chain edge,cloud --link probe,wan --validate-on 1 --db " + db);
  ASSERT_EQ(planned.status, 0) << planned.out;
  for (const char* want :
       {"from the two-tier profiles of run(s) 2, 3 (alexnet, 22 layers): phone -> edge -> cloud; 276 placements "
        "predicted, 5 measured",
        "phone from run 3, edge from run 3, cloud from run 2", "hop 1 (phone -> edge): network",
        "(run 3's link probe from phone to edge", "hop 2 (edge -> cloud): network", "link profile wan",
        "cloud's own time", "run 2's splits as its SERVER", "latency MAPE", "planned from two-tier runs",
        "memory limits: edge 5 MB (run 3's devices file)", "placements exceed a limit and are not chosen",
        "chosen (lowest predicted latency within the memory limits)", "memory MB per device", " over\n"})
    EXPECT_NE(planned.out.find(want), std::string::npos) << want << "\n" << planned.out;
  // The phone's energy per placement (its power_model's layer energy in run 3): the head's layers + idle power
  // while the rest of the frame runs; no radio, as hop 1's link (the probe's) names none.
  for (const char* want : {"edge J", "edge J: phone's energy per frame = its layer energy over the head (run 3) + idle "
                                     "power 2 W x the rest of the frame (no radio model"})
    EXPECT_NE(planned.out.find(want), std::string::npos) << want << "\n" << planned.out;
  EXPECT_EQ(query(db, "select count(*) || ',' || sum(abs(energy_j - (coalesce((select sum(joules) from energy e where "
                      "e.run_id = 3 and e.stage = 'layer' and e.device = 'phone' and e.layer_index < cast(substr("
                      "placement, 1, instr(placement, '|') - 1) as integer)), 0) + 2 * (latency_ms - head_ms) / 1e3)) "
                      "< 1e-9) || ',' || (select energy_source like 'modelled:plan(modelled:power_model)' from plans "
                      "where id = 3) from plan_placements where plan_id = 3"),
            "276,276,1");
  auto radio = sh(tracrctl() + " plan 3 --chain edge,cloud --link wifi,wan --no-store --db " + db);
  EXPECT_NE(radio.out.find("+ radio-wifi for hop 1"), std::string::npos) << radio.out;
  // Stored as plan 3 (plan 2: the two-tier run's) with the limit: a placement fits exactly when its edge
  // segment needs at most 5 MB.
  EXPECT_NE(planned.out.find("stored as plan 3 in "), std::string::npos) << planned.out;
  EXPECT_EQ(query(db, "select (chain is null) || ',' || (select chain from plans where id = 3) || ',' || (select "
                      "validation_runs || ';' || memory_limits from plans where id = 3) from plans where id = 2"),
            "1,phone -> edge -> cloud,1;edge 5 MB (run 3's devices file)");
  EXPECT_EQ(query(db, "select count(*) || ',' || sum(fits = (select memory_mb <= 5 from plan_segments s where "
                      "s.plan_id = 3 and s.placement = p.placement and s.device = 'edge')) || ',' || (sum(fits = 0) > 0) "
                      "from plan_placements p where plan_id = 3"),
            "276,276,1");
  // The chosen row (marked *) fits: its edge segment holds no fully connected layer.
  const size_t star = planned.out.find("\n* ");
  ASSERT_NE(star, std::string::npos) << planned.out;
  EXPECT_EQ(planned.out.substr(star, planned.out.find('\n', star + 1) - star).find(" over"), std::string::npos)
      << planned.out;
  // The two-tier planner keeps the same limit: run 3's edge is its SERVER, and every tail that holds a linear
  // layer of AlexNet's classifier needs more than 5 MB, so only split 22 (an empty tail) fits.
  auto two_limited = sh(tracrctl() + " plan 3 --link wifi --no-store --db " + db);
  EXPECT_EQ(two_limited.status, 0) << two_limited.out;
  for (const char* want : {"memory limits: SERVER edge 5 MB (run 3's devices file)", "22 of 23 rows exceed a limit",
                           "head MB", "tail MB", "(over memory_mb)", "* chosen: split 22\n"})
    EXPECT_NE(two_limited.out.find(want), std::string::npos) << want << "\n" << two_limited.out;
  // A limit no placement meets is an error naming the device and its smallest need (the stored devices file of
  // run 3, edited as a stricter file would have stored it).
  std::string sql_error;
  ASSERT_TRUE(modify(db,
                     "update runs set devices_json = (select json_set(devices_json, '$.devices[' || key || "
                     "'].memory_mb', 0.001) from json_each(devices_json, '$.devices') where json_extract(value, "
                     "'$.name') = 'edge') where id = 3",
                     &sql_error))
      << sql_error;
  auto none_fit = sh(tracrctl() + " plan 3 --chain edge,cloud --link probe,wan --db " + db);
  EXPECT_EQ(none_fit.status, 2) << none_fit.out;
  EXPECT_NE(none_fit.out.find("no placement of alexnet over phone -> edge -> cloud fits the devices' memory: edge "
                              "memory_mb 0.001 (its smallest segment needs"),
            std::string::npos)
      << none_fit.out;
  auto two_none = sh(tracrctl() + " plan 3 --link wifi --no-store --db " + db);
  EXPECT_NE(two_none.out.find("no split meets the constraints (23 of 23 rows over memory_mb"), std::string::npos)
      << two_none.out;
  EXPECT_EQ(sh(tracrctl() + " plan 3 --chain edge,cloud --link wan --validate-on 2 --db " + db).status, 2);
  EXPECT_EQ(sh(tracrctl() + " plan 3 --chain edge,edge --link wan --db " + db).status, 2);
  EXPECT_EQ(sh(tracrctl() + " plan 3 --chain edge,cloud --link wan,wan,wan --db " + db).status, 2);
  EXPECT_EQ(sh(tracrctl() + " plan 3 --chain edge,cloud --link probe, --db " + db).status, 2);
  EXPECT_EQ(sh(tracrctl() + " plan 3 --chain edge,cloud --link wan --max-latency-ms 5 --db " + db).status, 2);
  auto typo = sh(tracrctl() + " plan 3 --chain edg,cloud --link wan --db " + db);
  EXPECT_EQ(typo.status, 2) << typo.out;
  EXPECT_NE(typo.out.find("no run of alexnet in this database had a device named 'edg'; expected one of cloud, edge, "
                          "phone"),
            std::string::npos)
      << typo.out;
  // At 5|5 the middle runs nothing and sends on what it got: the same tensors, its own codec.
  EXPECT_EQ(query(db, "select count(*) from " + h1 + " a join " + h2 + " b on a.participant = b.participant and "
                      "a.frame = b.frame where a.first_layer = 5 and a.end_layer = 5 and a.in_raw_bytes = "
                      "b.in_raw_bytes and a.in_wire_bytes <> b.in_wire_bytes"),
            "2");
  // Every frame keeps the participant's timing identity.
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1 and total_ns <> head_ns + encode_ns + network_ns + "
                      "server_ns + queue_ns + return_ns + post_ns"),
            "0");
  // A hop whose placements all sent the same bytes has no slope to extrapolate: its own time is flat
  // (this run did not probe, so its link line is kept, and said so).
  ASSERT_TRUE(modify(db, "update frame_hops set in_wire_bytes = 1000 where run_id = 1 and hop = 2"));
  auto flat = sh(tracrctl() + " plan 1 --db " + db);
  ASSERT_EQ(flat.status, 0) << flat.out;
  EXPECT_NE(flat.out.find("hop 2: its placements' wire bytes span 0.0 KB of the "), std::string::npos) << flat.out;
  EXPECT_NE(flat.out.find("too little for a slope: link line kept (the run did not probe the hop), cloud's other flat "
                          "at "),
            std::string::npos)
      << flat.out;
  // A held-out chain run at another batch is refused, naming both (run 1's stored experiment edited as a
  // batch-2 run stores it).
  ASSERT_TRUE(modify(db, "update runs set config_yaml = replace(config_yaml, char(10) || 'batch_size: 1' || char(10), "
                         "char(10) || 'batch_size: 2' || char(10)) where id = 1"));
  auto batch = sh(tracrctl() + " plan 3 --chain edge,cloud --link probe,wan --validate-on 1 --no-store --db " + db);
  EXPECT_EQ(batch.status, 2) << batch.out;
  EXPECT_NE(batch.out.find("--validate-on 1: run 1 ran input 3x64x64 at batch 2, the plan's run 3 input 3x64x64 at "
                           "batch 1; expected a run at the same input and batch"),
            std::string::npos)
      << batch.out;
}

// split: plan on a chain of three local agents (#43): the middle probes its
// hop to the next device before it serves, the participant probes hop 1,
// profiles and waits; the controller plans every placement from those rows
// and the participant sweeps the plan_k best, best first.
TEST(RunLocal, SplitPlanSweepsThePlannersBestPlacementsFromProfilesAndPerHopProbes) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = chain_devices(d);
  std::string y = small_experiment(db, "probe: {enabled: true, duration_ms: 200}\nchain: [edge, cloud]\nplan_k: 3\n",
                                   devices);
  y.replace(y.find("split: all"), 10, "split: plan");
  auto r = sh(tracrctl() + " run " + d.file("plan.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  // One probe per hop, each by the hop's sending device.
  EXPECT_EQ(query(db, "select group_concat(participant, ',') from (select participant from probes where run_id = 1 "
                      "order by participant)"),
            "edge,phone");
  EXPECT_EQ(query(db, "select count(*) from probes where run_id = 1 and up_mbps > 0 and rtt_min_ns > 0"), "2");
  // The plan: recorded once, with its terms; the 3 best of AlexNet's 276 placements, sent as one command.
  const std::string planned = query(db, "select message from events where run_id = 1 and kind = 'placements_planned'");
  EXPECT_NE(planned.find("the 3 best of 276 placements by predicted latency (plan_k 3)"), std::string::npos) << planned;
  EXPECT_NE(planned.find("hop 2 (edge -> cloud)"), std::string::npos) << planned;
  const std::string sent = query(db, "select message from events where run_id = 1 and kind = 'command_sent'");
  const auto at = sent.find("placements ");
  ASSERT_NE(at, std::string::npos) << sent;
  const std::string list = sent.substr(at + 11, sent.find(' ', at + 11) - at - 11);
  // The participant swept exactly those, in that order (best predicted first), every frame answered.
  EXPECT_EQ(query(db, "select group_concat(placement, ',') from (select placement from frames where run_id = 1 "
                      "group by placement order by min(rowid))"),
            list);
  EXPECT_EQ(std::count(list.begin(), list.end(), ','), 2) << list;
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 1 and ok = 1"), "6");
  // The predicted latencies in the event are in order, best first.
  std::vector<double> ms;
  for (size_t p = planned.find(" ms"); p != std::string::npos; p = planned.find(" ms", p + 1)) {
    size_t b = planned.rfind(' ', p - 1);
    ms.push_back(std::atof(planned.substr(b + 1, p - b - 1).c_str()));
    if (ms.size() == 3) break;
  }
  ASSERT_EQ(ms.size(), 3u) << planned;
  EXPECT_LE(ms[0], ms[1]);
  EXPECT_LE(ms[1], ms[2]);
  EXPECT_GT(ms[0], 0);
  // The report draws the placements as a heat map over the two cuts (#45), one cell per placement swept.
  const std::string figs = (d.path / "figs").string();
  auto rep = sh(tracrctl() + " report 1 --figures " + figs + " --only chain --size column --db " + db);
  ASSERT_EQ(rep.status, 0) << rep.out;
  std::ifstream chain_csv(figs + "/chain.csv");
  size_t cells = 0;
  for (std::string l; std::getline(chain_csv, l);) cells += !l.empty();
  EXPECT_EQ(cells, 4u) << "a header and the 3 placements";
  EXPECT_TRUE(std::filesystem::exists(figs + "/chain.pdf")) << rep.out;
  // Held out: each hop's network from the held-out run's probes (here the run itself: the path, not a figure).
  auto held = sh(tracrctl() + " plan 1 --validate-on 1 --db " + db);
  ASSERT_EQ(held.status, 0) << held.out;
  for (const char* want : {"held out, hop 1 (phone -> edge): network", "held out, hop 2 (edge -> cloud): network",
                           "measured = each placement's median over run(s) 1", "over the 3 placements the held-out"})
    EXPECT_NE(held.out.find(want), std::string::npos) << want << "\n" << held.out;
  auto bad = sh(tracrctl() + " plan 1 --validate-on 1, --db " + db);
  EXPECT_EQ(bad.status, 2) << bad.out;
}

// split: plan is refused before anything starts where it cannot plan.
TEST(RunLocal, SplitPlanIsRefusedWhereThePlannerHasNothingToPlanFrom) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = chain_devices(d);
  auto refused = [&](const std::string& extra, const std::string& want) {
    std::string y = small_experiment(db, extra, devices);
    y.replace(y.find("split: all"), 10, "split: plan");
    auto r = sh(tracrctl() + " run " + d.file("p.yaml", y) + " --no-progress");
    EXPECT_EQ(r.status, 2) << extra << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << extra << "\n" << r.out;
  };
  refused("chain: [cloud]\n", "split: plan: the planner chooses placements on a chain of two or more devices");
  refused("chain: [edge, cloud]\nprobe: {enabled: false}\n", "split: plan: needs probe.enabled: true");
  refused("chain: [edge, cloud]\nrecord: {layers: false}\n", "split: plan: needs record.layers: true");
  refused("chain: [edge, cloud]\nplan_k: 0\n", "plan_k");
  EXPECT_FALSE(std::filesystem::exists(db));
}

// A model with one cut refused for aliasing (a view written in place across
// it) runs with the defaults (#46: layer profiling failed on that cut, and
// the run with it): every layer profiled on both devices, every other split
// swept; `tracrctl profile` prints it too.
TEST(RunLocal, AModelWithARefusedCutRunsWithTheDefaultsAndProfilesEveryLayer) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto tr = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/trace_graph_model.py " +
               d.path.string() + " view_inplace@8");
  ASSERT_EQ(tr.status, 0) << tr.out;
  const std::string pt = (d.path / "view_inplace@8.pt").string();
  const std::string exp = d.file("exp.yaml", "name: refused\nmodel: torchscript:" + pt +
                                                 "\ninput_size: [3, 8, 8]\ndataset: {type: synthetic, max_samples: "
                                                 "2}\nwarmup: 0\nrepetitions: 1\nprobe: {enabled: false}\noutput: " +
                                                 db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("the sweep skips split"), std::string::npos) << r.out;
  const int n = std::stoi(query(db, "select count(*) from layer_profiles where run_id = 1 and device_role = 'SERVER'"));
  EXPECT_GE(n, 3);
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where run_id = 1 and device_role = 'PARTICIPANT'"),
            std::to_string(n));
  // Every split but the refused one, 2 frames each.
  EXPECT_EQ(query(db, "select count(distinct split) from frames where run_id = 1 and ok = 1"), std::to_string(n));
  auto p = sh(tracrctl() + " profile torchscript:" + pt + " --input-shape 3,8,8 --reps 2 --segments none");
  EXPECT_EQ(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("addone"), std::string::npos) << p.out;
}

// #45 item 9: splits by the name of the layer they cut after, as every table
// names them: the agents run the numbers (the stored experiment says them),
// `profile --segments` takes names too, and a name the model has not is one
// line with the nearest name before anything starts.
TEST(RunLocal, SplitsGivenByLayerNameRunWhereThoseLayersEnd) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record: {layers: false}\n");
  y.replace(y.find("split: all"), 10, "split: [features.5, avgpool]");
  auto r = sh(tracrctl() + " run " + d.file("e.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select group_concat(s, ',') from (select distinct split s from frames order by split)"), "6,14");
  EXPECT_EQ(query(db, "select instr(config_yaml, char(10) || 'split: [6, 14]' || char(10)) > 0 from runs"), "1");
  EXPECT_EQ(query(db, "select group_concat(name, ',') from model_layers where layer_index in (5, 13)"),
            "features.5,avgpool");

  y.replace(y.find("split: [features.5, avgpool]"), 28, "split: [featurs.5]");
  auto bad = sh(tracrctl() + " run " + d.file("bad.yaml", y) + " --no-progress");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("split[0]: model 'alexnet' has no layer 'featurs.5' (did you mean 'features.5'?)"),
            std::string::npos)
      << bad.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "1");

  auto p = sh(tracrctl() + " profile alexnet --input-shape 3,64,64 --reps 1 --segments features.5,0");
  ASSERT_EQ(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("at 2 of 23 splits"), std::string::npos) << p.out;
  auto nope = sh(tracrctl() + " profile alexnet --input-shape 3,64,64 --reps 1 --segments avgpol");
  EXPECT_NE(nope.status, 0);
  EXPECT_NE(nope.out.find("--segments: alexnet has no layer 'avgpol' (did you mean 'avgpool'?)"), std::string::npos)
      << nope.out;
}

// `run --again RUN` (#45): a stored run's experiment runs again as it was
// stored (a run without a devices file reads back `devices: ~`: not set),
// --set on top, into the database it came from; bad uses are one line.
TEST(RunLocal, AStoredRunRunsAgainFromItsStoredExperiment) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  std::string y = small_experiment(db, "record: {layers: false}\n");
  y.replace(y.find("split: all"), 10, "split: [0, 5]");
  auto first = sh("cd " + d.path.string() + " && " + tracrctl() + " run " + d.file("e.yaml", y) + " --no-progress");
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_NE(query(db, "select config_yaml from runs where id = 1").find("\ndevices: ~\n"), std::string::npos);
  auto again = sh("cd " + d.path.string() + " && " + tracrctl() + " run --again 1 --db " + db +
                  " --set 'split=[5]' --no-progress");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("again: run 1 'system' of " + db + ", its stored experiment with split=[5]"),
            std::string::npos)
      << again.out;
  EXPECT_EQ(query(db, "select group_concat(distinct split) from frames where run_id = 2"), "5");
  EXPECT_EQ(query(db, "select count(*) from frames where run_id = 2 and ok = 1"), "2");
  // The same model, input, codec and seed: the same answers as run 1 at split 5.
  EXPECT_EQ(query_col(db, "select result from frames where run_id = 1 and split = 5 order by sample"),
            query_col(db, "select result from frames where run_id = 2 order by sample"));
  EXPECT_EQ(query(db, "select name from runs where id = 2"), "system");
  // Both, neither, or a run the database lacks: one line, nothing run.
  auto both = sh(tracrctl() + " run " + d.file("e.yaml", y) + " --again 1 --db " + db);
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_NE(both.out.find("expected an EXPERIMENT.yaml or --again RUN, not both"), std::string::npos) << both.out;
  EXPECT_EQ(sh(tracrctl() + " run --db " + db).status, 2);
  auto missing = sh(tracrctl() + " run --again 9 --db " + db);
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_NE(missing.out.find("--again 9: "), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("no run with id 9"), std::string::npos) << missing.out;
  EXPECT_EQ(sh(tracrctl() + " run --again abc --db " + db).status, 2);  // not a RUN: a usage error
  // A link probe is stored as a run too, but is no sweep to run again.
  ASSERT_EQ(sh(tracrctl() + " link probe " + d.file("e.yaml", y) + " --no-progress").status, 0);
  auto probe = sh(tracrctl() + " run --again last --db " + db);
  EXPECT_EQ(probe.status, 2) << probe.out;
  EXPECT_NE(probe.out.find("is a link probe, not a sweep"), std::string::npos) << probe.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "3");
}

// #45 friction 2: profiles are reused across runs of the same model file,
// input, batch, device and settings (the agent's profile key): a second run
// times none of its layers and none of the segments the first timed, its
// rows copied and naming the run that timed them; another batch, or
// --reprofile, times them anew.
TEST(RunLocal, ASecondRunOfTheSameModelReusesItsProfilesAndSaysWhichRunTimedThem) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  auto tr = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/trace_graph_model.py " +
               d.path.string() + " view_inplace@8");
  ASSERT_EQ(tr.status, 0) << tr.out;
  auto exp = [&](const std::string& name, const std::string& extra) {
    return d.file(name, "name: reuse\nmodel: torchscript:" + (d.path / "view_inplace@8.pt").string() +
                            "\ninput_size: [3, 8, 8]\ndataset: {type: synthetic, max_samples: 2}\nwarmup: 0\n"
                            "repetitions: 1\nprobe: {enabled: false}\noutput: " + db + "\n" + extra);
  };
  auto r1 = sh(tracrctl() + " run " + exp("a.yaml", "split: [0, 1]\n") + " --no-progress");
  ASSERT_EQ(r1.status, 0) << r1.out;
  const std::string layers = query(db, "select count(*) from layer_profiles where run_id = 1");
  ASSERT_GE(std::stoi(layers), 6) << "3+ layers on each of two devices";
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where run_id = 1 and measured_run = 1 and "
                      "length(profile_key) = 16"),
            layers);
  EXPECT_EQ(query(db, "select group_concat(side || split, ',') from (select side, split from segment_profiles "
                      "where run_id = 1 and measured_run = 1 order by side, split)"),
            "head1,tail0,tail1");  // split 0's head is empty: nothing to time

  // The whole sweep: the layers and splits 0, 1 reused, the other splits timed.
  auto r2 = sh(tracrctl() + " run " + exp("b.yaml", "split: all\n") + " --no-progress");
  ASSERT_EQ(r2.status, 0) << r2.out;
  EXPECT_NE(r2.out.find("SERVER server: " + std::to_string(std::stoi(layers) / 2) +
                        " layer profiles reused, timed in run 1"),
            std::string::npos)
      << r2.out;
  EXPECT_EQ(query(db, "select count(*) from layer_profiles a join layer_profiles b on a.device = b.device and "
                      "a.layer_index = b.layer_index and a.median_ns = b.median_ns and a.profile_key = b.profile_key "
                      "where a.run_id = 2 and b.run_id = 1 and a.measured_run = 1"),
            layers);
  EXPECT_EQ(query(db, "select group_concat(side || split || '@' || measured_run, ',') from (select * from "
                      "segment_profiles where run_id = 2 and split <= 1 order by side, split)"),
            "head1@1,tail0@1,tail1@1");
  const std::string later = query(db, "select count(*) from segment_profiles where run_id = 2 and split > 1");
  EXPECT_GE(std::stoi(later), 2);
  EXPECT_EQ(query(db, "select count(*) from segment_profiles where run_id = 2 and split > 1 and measured_run = 2"),
            later);
  EXPECT_EQ(query(db, "select count(*) from events where run_id = 2 and kind = 'profiles_reused'"), "4");
  // The frames ran as before: every split but the refused one.
  EXPECT_EQ(query(db, "select count(distinct split) from frames where run_id = 2 and ok = 1"),
            std::to_string(std::stoi(layers) / 2));

  // Another batch is another key: timed anew; so is --reprofile.
  auto r3 = sh(tracrctl() + " run " + exp("c.yaml", "split: [0, 1]\nbatch_size: 2\n") + " --no-progress");
  ASSERT_EQ(r3.status, 0) << r3.out;
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where run_id = 3 and measured_run = 3"), layers);
  EXPECT_EQ(query(db, "select count(distinct profile_key) from layer_profiles where run_id in (1, 3)"), "2");
  auto r4 = sh(tracrctl() + " run " + exp("a.yaml", "split: [0, 1]\n") + " --no-progress --reprofile");
  ASSERT_EQ(r4.status, 0) << r4.out;
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where run_id = 4 and measured_run = 4"), layers);
  EXPECT_EQ(query(db, "select count(*) from segment_profiles where run_id = 4 and measured_run = 4"), "3");
  EXPECT_EQ(query(db, "select count(*) from events where run_id = 4 and kind = 'profiles_reused'"), "0");
}
