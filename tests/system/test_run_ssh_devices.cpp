// Devices that differ, through a real sshd on loopback: the experiment's data
// staged to the participants that read it (or found at a declared path),
// several participants started together, an agent with a missing shared
// library refused by name, and `tracrctl devices setup`.
#include <algorithm>
#include <filesystem>
#include <regex>

#include "controller/sshd_fixture.hpp"

#include "system/system_util.hpp"

using namespace tracr::testing;
namespace fs = std::filesystem;

namespace {

class RunSshDevices : public SshdTest {
 protected:
  TempDir d;
  std::string db() const { return (d.path / "r.db").string(); }
  std::string env() { return "TRACR_KNOWN_HOSTS=" + sshd().known_hosts() + " "; }
  std::string device(const std::string& role, const std::string& name, const std::string& extra = "") {
    return "  - device_type: " + role + "\n    name: " + name + "\n    transport: ssh\n    work_dir: " +
           (d.path / name).string() + "\n" + extra + "    connection_params:\n      - host: 127.0.0.1\n        user: " +
           sshd().user() + "\n        pkey_fp: " + sshd().user_key() + "\n        port: 0\n        ssh_port: " +
           std::to_string(sshd().port()) + "\n";
  }
  // A server and participants edge1 .. edgeN; `extra` goes into every participant.
  std::string devices(int participants, const std::string& extra = "") {
    std::string y = "devices:\n" + device("SERVER", "srv");
    for (int i = 1; i <= participants; ++i) y += device("PARTICIPANT", "edge" + std::to_string(i), extra);
    return d.file("devices.yaml", y);
  }
  // Fashion-MNIST's test split copied to a directory of this test (the
  // controller's path, not one the device would have), with class names.
  std::string fmnist_experiment(const std::string& devices_file) {
    const fs::path data = d.path / "controller-data" / "fmnist";
    fs::create_directories(data);
    for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
      fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / f, data / f, fs::copy_options::overwrite_existing);
    d.file("controller-data/names.txt",
           "tshirt\ntrouser\npullover\ndress\ncoat\nsandal\nshirt\nsneaker\nbag\nboot\n");
    return d.file("exp.yaml", "name: staged\nmodel: fmnist_cnn\ninput_size: [1, 28, 28]\n"
                              "dataset:\n  type: fashion_mnist\n  path: controller-data/fmnist\n"
                              "  class_names: controller-data/names.txt\n  max_samples: 2\n"
                              "split: [2]\nwarmup: 0\nrepetitions: 1\nbatch_size: 1\nseed: 3\n"
                              "output: " + db() + "\ndevices: " + devices_file + "\n");
  }
  CmdResult tracr(const std::string& args) { return sh(env() + tracrctl() + " " + args); }
};

// The data set went to each participant once, named by its hash; the server,
// which reads no data, got none; the run recorded where each file was.
TEST_F(RunSshDevices, DatasetIsStagedToEachParticipantByContentHash) {
  sshd().trust();
  const std::string exp = fmnist_experiment(devices(2));
  auto check = tracr("devices check --experiment " + exp);
  EXPECT_EQ(check.status, 0) << check.out;
  EXPECT_NE(check.out.find("dataset.path " + (d.path / "controller-data/fmnist").string()), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("would be uploaded"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("the next run uploads"), std::string::npos) << check.out;

  auto r = tracr("run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db(), "select status from runs"), "completed");
  EXPECT_EQ(query(db(), "select count(*) from frames where warmup = 0"), "4");  // 2 participants x 2 samples
  EXPECT_EQ(query(db(), "select count(*) from frames where sample_id like 'fashion-mnist/test/%'"), "4");
  // The participants read the staged class names: their top-1 results use this file's names.
  const std::string names = "|tshirt|trouser|pullover|dress|coat|sandal|shirt|sneaker|bag|boot|";
  for (const auto& res : query_col(db(), "select result from frames")) {
    ASSERT_NE(res.find(':'), std::string::npos) << res;
    EXPECT_NE(names.find("|" + res.substr(0, res.find(':')) + "|"), std::string::npos) << res;
  }
  for (const std::string edge : {"edge1", "edge2"}) {
    const auto staged = query_col(db(), "select message from events where kind = 'file_staged' and device = '" + edge + "'");
    ASSERT_EQ(staged.size(), 2u) << edge;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(staged[0], m, std::regex("dataset.path \\S+ -> (\\S+/data/([0-9a-f]{16})/fmnist) "
                                                            "\\(sha256 ([0-9a-f]{64}), 2 files, [0-9.]+ MiB, uploaded\\)")))
        << staged[0];
    EXPECT_EQ(m[1].str(), (d.path / edge / "data").string() + "/" + m[2].str() + "/fmnist");
    EXPECT_EQ(m[3].str().substr(0, 16), m[2].str());
    EXPECT_TRUE(fs::exists(m[1].str() + "/t10k-images-idx3-ubyte.gz"));
    EXPECT_NE(staged[1].find("dataset.class_names"), std::string::npos) << staged[1];
    EXPECT_NE(staged[1].find("names.txt (sha256 "), std::string::npos) << staged[1];
  }
  EXPECT_EQ(query(db(), "select count(*) from events where kind = 'file_staged' and device = 'srv'"), "0");
  EXPECT_FALSE(fs::exists(d.path / "srv" / "data"));

  // Run again: already there, nothing uploaded.
  auto again = tracr("run " + exp + " --no-progress");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(query(db(), "select count(*) from events where run_id = 2 and kind = 'file_staged' and message like "
                        "'%already there)'"),
            "4");
}

// Participants start together: every launch was issued before the first
// one had finished starting (recorded in the agent_started events).
TEST_F(RunSshDevices, ParticipantsOnSeveralDevicesStartConcurrently) {
  sshd().trust();
  const std::string devs = devices(3);
  std::string y = small_experiment(db(), "record:\n  layers: false\n", devs);
  y.replace(y.find("split: all"), 10, "split: [5]");
  auto r = tracr("run " + d.file("exp.yaml", y) + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db(), "select count(distinct participant) from frames"), "3");
  const auto started = query_col(db(), "select message from events where kind = 'agent_started' and message like "
                                       "'PARTICIPANT %' order by id");
  ASSERT_EQ(started.size(), 3u);
  double last_issued = -1, first_started = 1e300;
  for (const auto& m : started) {
    std::smatch g;
    ASSERT_TRUE(std::regex_search(m, g, std::regex("launch issued at \\+([0-9.]+) ms, started at \\+([0-9.]+) ms"))) << m;
    last_issued = std::max(last_issued, std::stod(g[1].str()));
    first_started = std::min(first_started, std::stod(g[2].str()));
  }
  EXPECT_LT(last_issued, first_started) << "the launches did not overlap";
  // Device order is kept.
  EXPECT_EQ(started[0].rfind("PARTICIPANT edge1 ", 0), 0u) << started[0];
  EXPECT_EQ(started[2].rfind("PARTICIPANT edge3 ", 0), 0u) << started[2];
}

// Data that already lives on the device is used there, and checked.
TEST_F(RunSshDevices, DeclaredDevicePathIsUsedAndCheckedInsteadOfStaging) {
  sshd().trust();
  const fs::path on_device = d.path / "device-data" / "fmnist";
  fs::create_directories(on_device);
  for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / f, on_device / f);
  const std::string controller_data = (d.path / "controller-data" / "fmnist").string();
  const std::string exp =
      fmnist_experiment(devices(1, "    paths:\n      " + controller_data + ": " + on_device.string() + "\n"));
  auto check = tracr("devices check --experiment " + exp);
  EXPECT_EQ(check.status, 0) << check.out;
  EXPECT_NE(check.out.find("path " + controller_data + " -> " + on_device.string() + ": present"), std::string::npos)
      << check.out;
  auto r = tracr("run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db(), "select count(*) from events where kind = 'file_staged' and message like 'dataset.path % -> " +
                            on_device.string() + " (declared in the devices file''s paths)'"),
            "1");
  // Only the class names were staged; the data set stayed where it was declared.
  EXPECT_NE(sh("ls -d " + (d.path / "edge1" / "data").string() + "/*/fmnist").status, 0);
  EXPECT_EQ(sh("ls -d " + (d.path / "edge1" / "data").string() + "/*/names.txt").status, 0);

  // Declared but missing there: devices check says so, the run refuses before any frame.
  fs::remove_all(on_device);
  auto bad = tracr("devices check --experiment " + exp);
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("does not exist"), std::string::npos) << bad.out;
  auto refused = tracr("run " + exp + " --no-progress");
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_NE(refused.out.find(on_device.string() + ", which does not exist"), std::string::npos) << refused.out;
  EXPECT_EQ(query(db(), "select count(*) from frames where run_id = 2"), "0");
}

// A device lacking a library the agent links: named by devices check and by
// the run, which refuses before any frame.
TEST_F(RunSshDevices, MissingSharedLibraryIsNamedByDevicesCheckAndTheRun) {
  sshd().trust();
  const fs::path dir = d.path / "bin";
  fs::create_directories(dir);
  d.file("bin/gone.c", "int tracr_gone(void) { return 7; }\n");
  d.file("bin/main.c", "int tracr_gone(void);\nint main(void) { return tracr_gone() == 7 ? 0 : 1; }\n");
  ASSERT_EQ(sh("cc -shared -fPIC -o " + (dir / "libtracrgone.so").string() + " " + (dir / "gone.c").string()).status, 0);
  const std::string bin = (dir / "needs-gone").string();
  auto cc = sh("cc -o " + bin + " " + (dir / "main.c").string() + " -L" + dir.string() + " -ltracrgone -Wl,-rpath," +
               dir.string());
  ASSERT_EQ(cc.status, 0) << cc.out;
  fs::remove(dir / "libtracrgone.so");
  const std::string devs = devices(1);
  ASSERT_EQ(tracr("agents deploy --devices " + devs + " --agent " + bin).status, 0);
  auto check = tracr("devices check --devices " + devs + " --agent " + bin);
  EXPECT_EQ(check.status, 1) << check.out;
  EXPECT_NE(check.out.find("lacks shared libraries the agent"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("libtracrgone.so"), std::string::npos) << check.out;
  auto r = tracr("run " + d.file("exp.yaml", small_experiment(db(), "", devs)) + " --no-progress --agent " + bin);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("libtracrgone.so"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tracrctl devices setup"), std::string::npos) << r.out;
  EXPECT_EQ(query(db(), "select count(*) from frames"), "0");
}

// This machine runs the agent, so a device on it lacks none of its packages.
TEST_F(RunSshDevices, DevicesSetupHasNothingToInstallWhereTheAgentRuns) {
  sshd().trust();
  const std::string devs = devices(1);
  auto dry = tracr("devices setup --devices " + devs + " --dry-run");
  ASSERT_EQ(dry.status, 0) << dry.out;
  EXPECT_NE(dry.out.find("Debian packages: "), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("libtorch"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("srv"), std::string::npos) << dry.out;
  EXPECT_TRUE(std::regex_search(dry.out, std::regex("edge1 +ssh +\\S+ ok +nothing to install"))) << dry.out;
  // Nothing to install: no confirmation is needed, even without a terminal.
  auto run = tracr("devices setup --devices " + devs + " < /dev/null");
  EXPECT_EQ(run.status, 0) << run.out;
  auto wrong = tracr("devices setup --devices " + devs + " --experiment x.yaml");
  EXPECT_EQ(wrong.status, 2) << wrong.out;
  EXPECT_NE(wrong.out.find("--experiment is an option of `tracrctl devices check`"), std::string::npos) << wrong.out;
  auto bad = tracr("devices setup --devices " + devs + " --bogus");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--bogus"), std::string::npos) << bad.out;
}

}  // namespace
