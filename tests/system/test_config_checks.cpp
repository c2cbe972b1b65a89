// Mistakes caught by tracrctl before any agent starts (real tracrctl
// processes on real files): an unknown model, a split or training cut beyond
// the model, an input the model cannot take, a second YAML document; paths
// relative to the experiment file from another directory; exit statuses.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "store/results.hpp"
#include "system/system_util.hpp"

using namespace tracr::testing;

namespace {

// An existing database with no run in it: a rejected experiment must leave it so.
std::string empty_db(const TempDir& d) {
  const std::string db = (d.path / "r.db").string();
  auto h = tracr::store::ResultsDb::open(db);
  EXPECT_TRUE(h.ok());
  return db;
}

// No LibTorch backtrace reaches the user: a message of a few lines.
void expect_short_message(const std::string& out) {
  EXPECT_EQ(out.find("Exception raised from"), std::string::npos) << out;
  EXPECT_EQ(out.find("frame #"), std::string::npos) << out;
  EXPECT_LE(std::count(out.begin(), out.end(), '\n'), 2) << out;
}

}  // namespace

TEST(ConfigChecks, UnknownModelIsRejectedBeforeDeployWithTheClosestId) {
  TempDir d;
  const std::string db = empty_db(d);
  for (const auto& [model, closest] : {std::pair<std::string, std::string>{"resnet34", "resnet18"}, {"ResNet18", "resnet18"},
                                       {"alexnt", "alexnet"}}) {
    const std::string exp = d.file("exp.yaml", "name: wrong\nmodel: " + model + "\noutput: " + db + "\n");
    auto r = sh(tracrctl() + " run " + exp + " --no-progress");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(exp + ":2:8: model: unknown model '" + model + "' (did you mean '" + closest + "'?); "
                         "expected a registry id ("),
              std::string::npos)
        << r.out;
    expect_short_message(r.out);
  }
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
  // Without a database yet, none is created (nothing was started).
  const std::string fresh = (d.path / "fresh" / "r.db").string();
  auto r = sh(tracrctl() + " run " + d.file("e2.yaml", "model: resnet34\noutput: " + fresh + "\n"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_FALSE(std::filesystem::exists(d.path / "fresh"));
}

TEST(ConfigChecks, SplitBeyondTheModelIsRejectedWithItsPosition) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string exp =
      d.file("exp.yaml", "model: alexnet\ninput_size: 64\nsplit: [0, 23]\nrepetitions: 1\noutput: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(exp + ":3:8: split: split point 23 is beyond model 'alexnet' with 22 layers; expected 0..22"),
            std::string::npos)
      << r.out;
  // The environment override names itself.
  r = sh("TRACR_SPLIT='[40]' " + tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("env TRACR_SPLIT: split: split point 40 is beyond"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
  // The last layer itself is fine (split N: everything on the participant).
  r = sh(tracrctl() + " run " + d.file("ok.yaml", "model: alexnet\ninput_size: 64\nsplit: [22]\nwarmup: 0\n"
                                                    "repetitions: 1\ndataset: {max_samples: 1}\nrecord: {layers: false}\n"
                                                    "probe: {enabled: false}\noutput: " + db + "\n") +
         " --no-progress");
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST(ConfigChecks, InputTheModelCannotTakeIsRejectedWithoutABacktrace) {
  TempDir d;
  const std::string db = empty_db(d);
  // AlexNet needs at least 63x63, VGG 32x32.
  for (const auto& [model, size, line] :
       {std::tuple<std::string, std::string, std::string>{"alexnet", "28", "[3, 28, 28]"},
        {"vgg11", "[3, 16, 16]", "[3, 16, 16]"}}) {
    const std::string exp = d.file("exp.yaml", "model: " + model + "\ninput_size: " + size + "\noutput: " + db + "\n");
    auto r = sh(tracrctl() + " run " + exp + " --no-progress");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(exp + ":2:13: input_size: model '" + model + "' cannot take input " + line + ": "),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("layer "), std::string::npos) << r.out;  // the layer that cannot run
    EXPECT_NE(r.out.find("; expected a shape it accepts ("), std::string::npos) << r.out;
    expect_short_message(r.out);
  }
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}

TEST(ConfigChecks, TrainingCutsBeyondTheModelAreRejectedBeforeLaunching) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string exp = d.file("t.yaml", "model: fmnist_cnn\ntrain:\n  cuts: [3, 40]\n  max_steps: 1\noutput: " + db +
                                               "\n");
  auto r = sh(tracrctl() + " train " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(exp + ":3:9: train.cuts[1]: cut 40 is outside model 'fmnist_cnn' with "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("expected cuts in 1.."), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
  r = sh(tracrctl() + " train " + d.file("m.yaml", "model: ResNet18\ntrain: {cuts: [2]}\noutput: " + db + "\n"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("(did you mean 'resnet18'?)"), std::string::npos) << r.out;
}

TEST(ConfigChecks, SecondYamlDocumentIsAnErrorNamingItsLine) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string exp = d.file("two.yaml", "model: alexnet\noutput: " + db + "\n---\nmodel: vgg16\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(exp + ":3:1: a second YAML document begins here ('---'); expected one experiment per file"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}

// An experiment in its own directory with a devices file and a database named
// relative to it, run from an unrelated directory; --show-config says so.
TEST(ConfigChecks, RelativePathsResolveAgainstTheExperimentFileFromAnyDirectory) {
  TempDir d;
  d.file("lab/devices.yaml", "devices:\n  - device_type: SERVER\n    name: lab_server\n    transport: local\n"
                              "  - device_type: PARTICIPANT\n    name: lab_edge\n    transport: local\n");
  const std::string exp = d.file("lab/exp/e.yaml", "model: alexnet\ninput_size: 64\nsplit: [2]\nwarmup: 0\n"
                                                  "repetitions: 1\ndataset: {max_samples: 1}\nrecord: {layers: false}\n"
                                                  "probe: {enabled: false}\ndevices: ../devices.yaml\n"
                                                  "output: ../results/r.db\n");
  std::filesystem::create_directories(d.path / "elsewhere");
  const std::string cd = "cd " + (d.path / "elsewhere").string() + " && ";
  auto show = sh(cd + tracrctl() + " run " + exp + " --show-config");
  ASSERT_EQ(show.status, 0) << show.out;
  EXPECT_NE(show.out.find((d.path / "lab/devices.yaml").string()), std::string::npos) << show.out;
  EXPECT_NE(show.out.find((d.path / "lab/results/r.db").string()), std::string::npos) << show.out;
  auto r = sh(cd + tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("devices " + (d.path / "lab/devices.yaml").string()), std::string::npos) << r.out;
  const std::string db = (d.path / "lab/results/r.db").string();
  EXPECT_EQ(query(db, "select status from runs"), "completed");
  EXPECT_EQ(query(db, "select group_concat(device, ',') from (select device from devices order by device)"),
            "lab_edge,lab_server");
  EXPECT_FALSE(std::filesystem::exists(d.path / "elsewhere" / "results"));

  // Without a devices file, --show-config says the embedded default is used, and where it looked.
  const std::string plain = d.file("lab/exp/plain.yaml", "model: alexnet\n");
  auto s2 = sh(cd + tracrctl() + " run " + plain + " --show-config");
  ASSERT_EQ(s2.status, 0) << s2.out;
  EXPECT_NE(s2.out.find("<embedded default>"), std::string::npos) << s2.out;
  EXPECT_NE(s2.out.find("config/devices_config.yaml not found from " + (d.path / "elsewhere").string()),
            std::string::npos)
      << s2.out;
}

TEST(ConfigChecks, ExitStatusesAreTheDocumentedOnes) {
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  // 2: usage or configuration errors.
  EXPECT_EQ(sh(tracrctl()).status, 2);
  EXPECT_EQ(sh(tracrctl() + " frobnicate").status, 2);
  EXPECT_EQ(sh(tracrctl() + " run").status, 2);
  EXPECT_EQ(sh(tracrctl() + " run " + d.file("e.yaml", "model: alexnet\n") + " --bogus").status, 2);
  EXPECT_EQ(sh(tracrctl() + " run " + d.file("bad.yaml", "model: alexnet\nwarmup: -1\n")).status, 2);
  EXPECT_EQ(sh(tracrctl() + " run " + (d.path / "missing.yaml").string()).status, 2);
  EXPECT_EQ(sh(tracrctl() + " demo --reps abc").status, 2);
  auto prof = sh(tracrctl() + " profile resnet34");
  EXPECT_EQ(prof.status, 2) << prof.out;
  auto shape = sh(tracrctl() + " profile alexnet --input-shape 3,16,16");
  EXPECT_EQ(shape.status, 2) << shape.out;
  expect_short_message(shape.out);
  EXPECT_EQ(sh(tracrctl() + " results list --status done --db " + db).status, 2);
  // 1: the command ran and failed (here: an agent that exits at once; a missing database).
  auto failed = sh(tracrctl() + " run " +
                   d.file("f.yaml", "model: alexnet\ninput_size: 64\nsplit: [1]\noutput: " + db + "\n") +
                   " --no-progress --agent /bin/true");
  EXPECT_EQ(failed.status, 1) << failed.out;
  EXPECT_EQ(query(db, "select status from runs"), "failed");
  EXPECT_EQ(sh(tracrctl() + " results show 1 --db " + (d.path / "none.db").string()).status, 1);
  // 0: done.
  EXPECT_EQ(sh(tracrctl() + " version").status, 0);
  EXPECT_EQ(sh(tracrctl() + " results list --db " + db).status, 0);
}

TEST(ConfigChecks, ProfileWritesCsvAndJsonAndNamesBadNumbers) {
  TempDir d;
  const std::string csv = (d.path / "p.csv").string(), json = (d.path / "p.json").string();
  auto r = sh(tracrctl() + " profile fmnist_cnn --reps 3 --batch 2 --csv " + csv + " --json " + json);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream c(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(c, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 11u) << "a header and one row per layer of fmnist_cnn";
  EXPECT_EQ(lines[0].rfind("index,name,type,device,repetitions,median_ms", 0), 0u);
  EXPECT_EQ(lines[1].rfind("0,conv1,Conv2d,cpu,3,", 0), 0u) << lines[1];
  std::ifstream j(json);
  const std::string text((std::istreambuf_iterator<char>(j)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"model\":\"fmnist_cnn\""), std::string::npos);
  EXPECT_NE(text.find("\"input\":[2,1,28,28]"), std::string::npos);
  EXPECT_NE(text.find("{\"split\":10,"), std::string::npos) << "every split 0..N";
  // A parseable document: Debian's python3 reads it.
  auto py = sh("/usr/bin/python3 -c \"import json,sys; d=json.load(open('" + json +
               "')); print(len(d['layers']), len(d['splits']))\"");
  EXPECT_EQ(py.out, "10 11\n") << py.out;
  auto bad = sh(tracrctl() + " profile fmnist_cnn --reps abc");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("tracrctl profile: --reps: expected an integer 1..1000000, got 'abc'"), std::string::npos) << bad.out;
}

// #23: a traced model runs as optimised graph segments, whose cost is not its layers' sum: `profile` times
// each head and tail whole at the first, last and 3 splits between (by default), or at the splits named, beside
// the layer sums, and writes them in the JSON. A zoo model (run layer by layer) gets none unless asked.
TEST(ConfigChecks, ProfileTimesATracedModelsHeadsAndTailsWhole) {
  TempDir d;
  const std::string pt = (d.path / "r18.pt").string(), json = (d.path / "p.json").string();
  auto ex = sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/export_model.py resnet18 " + pt +
               " --input-shape 3,32,32");
  ASSERT_EQ(ex.status, 0) << ex.out;
  auto r = sh(tracrctl() + " profile torchscript:" + pt + " --reps 2 --json " + json);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("heads and tails timed whole, as a run executes them (graph-optimized), at 5 of "),
            std::string::npos)
      << r.out;
  auto py = sh("/usr/bin/python3 -c \"import json; d=json.load(open('" + json +
               "')); n=len(d['layers']); s=d['segments']; print(d['execution'], len(s), s[0]['split'], "
               "s[-1]['split'] == n, s[0]['head_ms'], s[-1]['tail_ms'], "
               "all(x['head_ms'] > 0 for x in s[1:]), all(x['tail_ms'] > 0 for x in s[:-1]))\"");
  EXPECT_EQ(py.out, "graph-optimized 5 0 True None None True True\n") << py.out;
  auto named = sh(tracrctl() + " profile torchscript:" + pt + " --reps 2 --segments 3,5");
  ASSERT_EQ(named.status, 0) << named.out;
  EXPECT_NE(named.out.find("at 2 of "), std::string::npos) << named.out;
  auto bad = sh(tracrctl() + " profile torchscript:" + pt + " --segments 3,999");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("tracrctl profile: --segments: expected all, none or split points K1,K2,... in 0.."),
            std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("got '999'"), std::string::npos) << bad.out;
  auto zoo = sh(tracrctl() + " profile fmnist_cnn --reps 2");
  ASSERT_EQ(zoo.status, 0) << zoo.out;
  EXPECT_EQ(zoo.out.find("timed whole"), std::string::npos) << zoo.out;
  auto zoo_asked = sh(tracrctl() + " profile fmnist_cnn --reps 2 --segments 4");
  ASSERT_EQ(zoo_asked.status, 0) << zoo_asked.out;
  EXPECT_NE(zoo_asked.out.find("as a run executes them (layers), at 1 of 11 splits"), std::string::npos)
      << zoo_asked.out;
}

// A model trained on grayscale images over an image folder: ImageNet's
// 3-value normalization cannot apply, so the controller asks for
// dataset.mean/std before deploy; given, the run completes with labels.
TEST(ConfigChecks, GrayscaleImageFolderNeedsItsNormalizationBeforeAnythingStarts) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string imgs = (d.path / "imgs").string();
  ASSERT_EQ(sh("/usr/bin/python3 " + std::string(TRACR_SOURCE_DIR) + "/scripts/fmnist_imagefolder.py " + imgs +
               " --per-class 1").status,
            0);
  const std::string base = "model: fmnist_cnn\ninput_size: [1, 28, 28]\ndataset:\n  type: imagefolder\n  path: " +
                           imgs + "\nsplit: [3]\nrepetitions: 1\nwarmup: 0\nbatch_size: 5\noutput: " + db + "\n";
  const std::string exp = d.file("exp.yaml", base);
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("dataset.mean: no default for an image folder read as 1 channel"), std::string::npos) << r.out;
  expect_short_message(r.out);
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
  auto ok = sh(tracrctl() + " run " + exp + " --no-progress --set dataset.mean=0.286 --set dataset.std=0.353");
  ASSERT_EQ(ok.status, 0) << ok.out;
  // Ten images, one per class folder, every one labelled.
  EXPECT_EQ(query(db, "select sum(batch) from frames where correct >= 0"), "10");
}

TEST(ConfigChecks, NumClassesThatDisagreeWithTheModelsOutputAreRejectedNamingTheKey) {
  // A TorchScript model keeps its own classifier: 7 outputs, whatever the experiment says.
  TempDir d;
  const std::string db = empty_db(d);
  const std::string ts = (d.path / "m7.ts").string();
  ASSERT_EQ(sh("/usr/bin/python3 -c \"import torch; torch.jit.script(torch.nn.Sequential(torch.nn.Flatten(), "
               "torch.nn.Linear(3 * 8 * 8, 7))).save('" + ts + "')\"").status,
            0);
  const std::string exp = d.file("exp.yaml", "model: torchscript:" + ts + "\ninput_size: [3, 8, 8]\nnum_classes: 10\n"
                                             "output: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(exp + ":3:14: num_classes: 10 but model 'torchscript:" + ts + "' outputs 7 classes"),
            std::string::npos)
      << r.out;
  expect_short_message(r.out);
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}

// #45 items 1 and 7: a namespaced device whose namespace is not there says
// how to bring it up; one run without root says entering it needs root
// (both failed later as "`id -u` failed"); neither leaves a run row.
TEST(ConfigChecks, ANamespacedDeviceNeedsItsNamespaceAndRoot) {
  TempDir d;
  const std::string ns = "tracr-cc-" + std::to_string(::getpid());
  auto devices = [&](const std::string& name) {
    return d.file("devices.yaml", "devices:\n  - {device_type: SERVER, transport: local, netns: " + name +
                                      "}\n  - {device_type: PARTICIPANT, transport: local}\n");
  };
  devices(ns);
  const std::string db = empty_db(d);
  const std::string exp = d.file("exp.yaml", "name: ns\nmodel: fmnist_cnn\ndevices: devices.yaml\noutput: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("device 'server': network namespace " + ns +
                       " does not exist; expected it up: bring it up with scripts/netns_testbed.sh up"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
  if (::geteuid() != 0 || sh("ip netns add " + ns).status != 0) GTEST_SKIP() << "needs root to make a namespace";
  // As nobody, in a folder nobody may write to.
  std::filesystem::permissions(d.path, std::filesystem::perms::all);
  auto n = sh("cd " + d.path.string() + " && setpriv --reuid=65534 --regid=65534 --clear-groups " + tracrctl() +
              " run exp.yaml --set output=" + (d.path / "nobody.db").string() + " --no-progress");
  sh("ip netns del " + ns);
  EXPECT_EQ(n.status, 2) << n.out;
  EXPECT_NE(n.out.find("device 'server' runs in network namespace " + ns +
                       ", and entering one (ip netns exec) needs root; expected tracrctl run as root"),
            std::string::npos)
      << n.out;
  EXPECT_FALSE(std::filesystem::exists(d.path / "nobody.db"));
}

// An SSH device's key is checked before a run row or a login (#24: these
// failed after the run row as "unknown libssh error"). Port 1 on loopback
// has no sshd: a login attempt would say so instead.
TEST(ConfigChecks, AnSshKeyThatCannotServeIsRefusedBeforeAnythingStarts) {
  TempDir d;
  const std::string db = empty_db(d);
  std::filesystem::create_directories(d.path / "pkeys" / "adir");
  d.file("pkeys/notakey", "hello, I am not a private key\n");
  std::filesystem::permissions(d.path / "pkeys" / "notakey", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::filesystem::create_symlink("loop_b", d.path / "pkeys" / "loop_a");
  std::filesystem::create_symlink("loop_a", d.path / "pkeys" / "loop_b");
  const std::string exp = d.file("exp.yaml", "name: key\nmodel: fmnist_cnn\ndevices: devices.yaml\noutput: " + db + "\n");
  for (const auto& [key, want] : std::vector<std::pair<std::string, std::string>>{
           {"missing", "does not exist"},
           {"adir", "is a directory; expected a private key file"},
           {"notakey", "(not a private key, or protected by a passphrase"},
           {"loop_a", "is a loop of symbolic links"}}) {
    d.file("devices.yaml", "devices:\n  - device_type: SERVER\n    connection_params:\n"
                           "      - host: 127.0.0.1\n        user: nobody\n        ssh_port: 1\n        pkey_fp: " +
                               key + "\n        default: true\n  - {device_type: PARTICIPANT, transport: local}\n");
    auto r = sh(tracrctl() + " run " + exp + " --no-progress");
    EXPECT_EQ(r.status, 2) << key << ": " << r.out;
    EXPECT_NE(r.out.find(d.path.string() + "/devices.yaml:4:9: device 'server': pkey_fp '" + key + "': "),
              std::string::npos)
        << key << ": " << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << key << ": " << r.out;
    EXPECT_EQ(r.out.find("libssh"), std::string::npos) << r.out;
  }
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}

// Split training of a model that cannot be trained (a traced TorchScript
// graph runs for inference only) is refused before any agent starts (#24:
// the agents refused it after launch, with a --resume hint that could not
// help).
TEST(ConfigChecks, TrainingAModelThatCannotBeTrainedIsRefusedBeforeLaunching) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string ts = (d.path / "skip.ts").string();
  const std::string py = d.file("trace.py",
                                "import sys, torch\n"
                                "class M(torch.nn.Module):\n"
                                "    def __init__(self):\n"
                                "        super().__init__()\n"
                                "        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)\n"
                                "        self.fc = torch.nn.Linear(4 * 8 * 8, 5)\n"
                                "    def forward(self, x):\n"
                                "        return self.fc(torch.flatten(self.conv(x) + x[:, :1], 1))\n"
                                "torch.jit.trace(M().eval(), torch.zeros(1, 3, 8, 8)).save(sys.argv[1])\n");
  ASSERT_EQ(sh("/usr/bin/python3 " + py + " " + ts).status, 0);
  const std::string exp = d.file("exp.yaml", "model: torchscript:" + ts + "\ninput_size: [3, 8, 8]\ndataset:\n  type: synthetic\n"
                                             "train:\n  cuts: [1]\noutput: " + db + "\n");
  auto r = sh(tracrctl() + " train " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(exp + ":1:8: model: 'torchscript:" + ts + "' cannot be trained: its layer '"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("is part of a TorchScript graph, which runs for inference only"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--resume"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}

// weights that are no state dict, or do not fit the model, are refused before
// anything starts, naming the setting (#24: both agents failed after launch
// with "invalid_argument: ... not a PyTorch zip archive").
TEST(ConfigChecks, WeightsThatCannotBeLoadedAreRefusedBeforeAnythingStarts) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string text = d.file("notes.pt", "these are not weights\n");
  const std::string exp = d.file("exp.yaml", "model: alexnet\ninput_size: [3, 64, 64]\nweights: " + text +
                                                 "\ndataset:\n  type: synthetic\nsplit: [1]\noutput: " + db + "\n");
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(exp + ":3:10: weights: cannot be loaded: " + text), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("invalid_argument"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
  // Weights of another model: its keys and shapes are named, still before anything starts.
  const std::string other = (d.path / "fmnist.pt").string();
  const std::string py = d.file("save.py",
                                "import sys, torch\n"
                                "torch.save({'features.0.weight': torch.zeros(2, 2)}, sys.argv[1])\n");
  ASSERT_EQ(sh("/usr/bin/python3 " + py + " " + other).status, 0);
  const std::string exp2 = d.file("exp2.yaml", "model: alexnet\ninput_size: [3, 64, 64]\nweights: " + other +
                                                   "\ndataset:\n  type: synthetic\nsplit: [1]\noutput: " + db + "\n");
  auto m = sh(tracrctl() + " run " + exp2 + " --no-progress");
  EXPECT_EQ(m.status, 2) << m.out;
  EXPECT_NE(m.out.find(exp2 + ":3:10: weights: cannot be loaded: "), std::string::npos) << m.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}

// An emulated link between two agents on loopback is refused, pointing to the
// namespace test-bed that makes one possible (#20: the refusal did not say how).
TEST(ConfigChecks, ALinkOverLoopbackPointsToTheNamespaceTestbed) {
  TempDir d;
  const std::string db = empty_db(d);
  const std::string exp = d.file("exp.yaml", small_experiment(db, "link: lte\n"));
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("will not shape lo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`sudo bash scripts/netns_testbed.sh up` makes two namespaces that `devices: "
                       "config/devices_netns.yaml` names"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");  // refused before anything starts
}

// A SERVER port another process holds is found before the model loads and
// profiles (#45 friction 7): the error names the port and suggests port: 0.
TEST(ConfigChecks, AServerPortInUseIsFoundBeforeTheModelLoads) {
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(held, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(held, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  TempDir d;
  const std::string db = empty_db(d);
  const std::string devices = d.file("devices.yaml", "devices:\n"
                                                     "  - device_type: SERVER\n    name: lab\n    transport: local\n"
                                                     "    connection_params:\n      - host: 127.0.0.1\n        port: " +
                                                         port + "\n        default: true\n"
                                                     "  - {device_type: PARTICIPANT, transport: local}\n");
  auto r = sh(tracrctl() + " run " + d.file("exp.yaml", small_experiment(db, "", devices)) + " --no-progress");
  ::close(held);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("port " + port + " is already in use on this device (checked before loading the model)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("port: 0 for any free one"), std::string::npos) << r.out;
  EXPECT_EQ(query(db, "select count(*) from layer_profiles where device_role = 'SERVER'"), "0") << r.out;
}

// A chain is read and checked before anything starts, and what chains cannot
// do yet is refused naming it (#43).
TEST(ConfigChecks, AChainIsCheckedAgainstTheDevicesAndWhatChainsCannotDoYetIsNamed) {
  TempDir d;
  const std::string db = empty_db(d);
  d.file("devices.yaml", "devices:\n"
                         "  - {device_type: SERVER, name: edge, transport: local}\n"
                         "  - {device_type: SERVER, name: cloud, transport: local}\n"
                         "  - {device_type: PARTICIPANT, name: phone, transport: local}\n");
  auto run = [&](const std::string& name, const std::string& extra) {
    const std::string exp = d.file(name, "model: alexnet\ninput_size: 64\nwarmup: 0\nrepetitions: 1\n"
                                         "devices: devices.yaml\noutput: " + db + "\n" + extra);
    return std::make_pair(exp, sh(tracrctl() + " run " + exp + " --no-progress"));
  };
  {
    auto [exp, r] = run("none.yaml", "split: [3]\n");  // two SERVERs and no chain naming one
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("expected exactly one device with device_type: SERVER, found 2"), std::string::npos) << r.out;
  }
  {
    auto [exp, r] = run("short.yaml", "chain: [edge, cloud]\nsplit: [3, [3, 13]]\n");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("split[0]: 3 is one cut point; the chain [edge, cloud] has 2 devices"), std::string::npos)
        << r.out;
  }
  {
    auto [exp, r] = run("beyond.yaml", "chain: [edge, cloud]\nsplit: [[3, 13], [13, 30]]\n");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("split[1]: placement 13|30: cut 30 is outside 0..22"), std::string::npos) << r.out;
  }
  {
    auto [exp, r] = run("unknown.yaml", "chain: [edge, clowd]\nsplit: [[3, 13]]\n");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("chain[1]: device 'clowd' is not in devices file"), std::string::npos) << r.out;
  }
  // What chains cannot do yet, named before anything starts.
  {
    auto [exp, r] = run("shared.yaml", "chain: [edge, cloud]\nsplit: [[3, 13], [3, 15]]\nrecord: {outputs: true}\n");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(exp + ":8:8: chain: [edge, cloud]: placements 3|13 and 3|15 share their first cut 3: "
                               "record.outputs keeps one file per participant, split and codec"),
              std::string::npos)
        << r.out;
    expect_short_message(r.out);
  }
  {
    // A hop's link on agents that reach each other over loopback: named by hop, with the chain test-bed's command.
    auto [exp, r] = run("linked.yaml", "chain: [edge, {device: cloud, link: wifi}]\nsplit: [[3, 13]]\n");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("hop 2 (edge -> cloud): "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("over loopback"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("scripts/netns_testbed.sh up --chain"), std::string::npos) << r.out;
  }
  EXPECT_EQ(query(db, "select count(*) from runs"), "0");
}
