// Staging the experiment's files on devices (fleet/staging.hpp), missing
// shared libraries of a deployed agent, and `devices setup`'s package plan
// (fleet/device_setup.hpp), through a real sshd on loopback.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "fleet/deploy.hpp"
#include "fleet/device_setup.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "fleet/staging.hpp"
#include "tests/controller/sshd_fixture.hpp"

namespace tracr::controller {
using namespace tracr::core;
using namespace tracr::fleet;
namespace {

namespace fs = std::filesystem;
using tracr::testing::slurp;
using tracr::testing::spit;
using tracr::testing::SshdTest;

const std::string kAgent = std::string(TRACR_BIN_DIR) + "/tracr-agent";

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// A directory tree with nested files, one empty.
std::string make_tree(const std::string& root) {
  fs::create_directories(root + "/cats/small");
  fs::create_directories(root + "/dogs");
  spit(root + "/cats/a.txt", "meow");
  spit(root + "/cats/small/b.bin", std::string(300000, 'x'));
  spit(root + "/dogs/c.txt", "");
  spit(root + "/labels.txt", "cat\ndog\n");
  return root;
}

settings::DeviceConfig ssh_device(const std::string& work_dir) {
  settings::DeviceConfig d;
  d.name = "edge";
  d.role = settings::DeviceRole::participant;
  d.work_dir = work_dir;
  return d;
}

TEST(Staging, DirectoryHashIsTheSha256sumListingOfItsSortedFiles) {
  const std::string root = fs::temp_directory_path() / ("tracr-stage-" + std::to_string(::getpid()));
  fs::remove_all(root);
  make_tree(root);
  auto h = content_hash(root);
  ASSERT_TRUE(h.ok()) << h.error().str();
  EXPECT_TRUE(h->is_dir);
  EXPECT_EQ(h->files, 4u);
  EXPECT_EQ(h->bytes, 4u + 300000u + 0u + 8u);
  // What the device runs to verify an uploaded tree.
  const auto r = run_local_command("cd " + shell_quote(root) +
                                   " && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | "
                                   "cut -c1-64");
  EXPECT_EQ(h->sha256, r.text);
  auto f = content_hash(root + "/labels.txt");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->is_dir);
  EXPECT_EQ(f->sha256, run_local_command("sha256sum " + root + "/labels.txt | cut -c1-64").text);
  EXPECT_EQ(content_hash(root + "/none").error().code, Errc::not_found);
  fs::remove_all(root);
}

TEST(Staging, RolesReadTheirFilesOnly) {
  settings::ExperimentConfig c;
  c.model = "torchscript:/m/model.pt";
  c.weights = "/m/w.pt";
  c.dataset.kind = settings::DatasetKind::imagefolder;
  c.dataset.path = "/data/images";
  c.dataset.class_names_file = "/data/names.txt";
  auto keys = [](const std::vector<AgentFile>& v) {
    std::string s;
    for (const auto& f : v) s += f.key + "=" + f.local + " ";
    return s;
  };
  EXPECT_EQ(keys(agent_files(c, wire::AgentRole::server)), "model=/m/model.pt weights=/m/w.pt ");
  EXPECT_EQ(keys(agent_files(c, wire::AgentRole::train_worker)), "model=/m/model.pt weights=/m/w.pt ");
  EXPECT_EQ(keys(agent_files(c, wire::AgentRole::participant)),
            "model=/m/model.pt weights=/m/w.pt dataset.path=/data/images dataset.class_names=/data/names.txt ");
  EXPECT_EQ(keys(agent_files(c, wire::AgentRole::train_owner)), keys(agent_files(c, wire::AgentRole::participant)));
  // The device paths replace the controller's in what the agent is sent.
  std::vector<StagedFile> st(4);
  st[0].key = "model", st[0].remote = "/d/m.pt";
  st[1].key = "weights", st[1].remote = "/d/w.pt";
  st[2].key = "dataset.path", st[2].remote = "/d/images";
  st[3].key = "dataset.class_names", st[3].remote = "/d/names.txt";
  auto out = with_device_paths(c, st);
  EXPECT_EQ(out.model, "torchscript:/d/m.pt");
  EXPECT_EQ(out.weights, "/d/w.pt");
  EXPECT_EQ(out.dataset.path, "/d/images");
  EXPECT_EQ(out.dataset.class_names_file, "/d/names.txt");
}

TEST(Staging, DeclaredPathsMapFilesAndTreesBeneathThem) {
  settings::DeviceConfig d;
  d.paths["/data"] = "/mnt/store";
  d.paths["/data/imagenet"] = "~/imagenet";
  d.paths["/w/model.pt"] = "/opt/model.pt";
  EXPECT_EQ(declared_device_path(d, "/w/model.pt"), std::optional<std::string>("/opt/model.pt"));
  EXPECT_EQ(declared_device_path(d, "/data/imagenet"), std::optional<std::string>("~/imagenet"));
  EXPECT_EQ(declared_device_path(d, "/data/imagenet/val"), std::optional<std::string>("~/imagenet/val"));
  EXPECT_EQ(declared_device_path(d, "/data/other/x.txt"), std::optional<std::string>("/mnt/store/other/x.txt"));
  EXPECT_FALSE(declared_device_path(d, "/database/x"));
  EXPECT_FALSE(declared_device_path(d, "/w/model.pt.bak"));
}

TEST(Staging, DevicesFileDeclaresPathsRelativeToItself) {
  const std::string server = "  - device_type: SERVER\n    transport: local\n";
  auto d = settings::parse_devices(
      "devices:\n" + server + "  - device_type: PARTICIPANT\n    transport: ssh\n    paths:\n      data/images: /srv/images\n"
      "      /abs/w.pt: ~/w.pt\n    connection_params:\n      - host: 127.0.0.1\n        user: u\n        pkey_fp: k\n",
      "/etc/tracr/devices.yaml");
  ASSERT_TRUE(d.ok()) << d.error().str();
  const auto& p = d->devices[1].paths;
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p.at("/etc/tracr/data/images"), "/srv/images");
  EXPECT_EQ(p.at("/abs/w.pt"), "~/w.pt");
  auto bad = settings::parse_devices(
      "devices:\n" + server + "  - device_type: PARTICIPANT\n    transport: ssh\n    paths: [a, b]\n"
      "    connection_params:\n      - host: 127.0.0.1\n        user: u\n        pkey_fp: k\n",
      "/etc/tracr/devices.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.error().str(), "paths")) << bad.error().str();
  EXPECT_TRUE(contains(bad.error().str(), "controller path")) << bad.error().str();
}

using StagingSsh = SshdTest;

TEST_F(StagingSsh, UploadsATreeAndAFileOnceThenFindsThemByHash) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string tree = make_tree(sshd().dir() + "/local/images");
  const std::string names = sshd().dir() + "/local/names.txt";
  spit(names, "cat\ndog\n");
  const auto dev = ssh_device(sshd().dir() + "/work");
  const std::vector<AgentFile> files = {{"dataset.path", tree}, {"dataset.class_names", names}};

  auto check = stage_files(*s, dev, files, true);
  ASSERT_TRUE(check.ok()) << check.error().str();
  ASSERT_EQ(check->size(), 2u);
  EXPECT_EQ((*check)[0].how, StagedFile::How::would_upload);
  EXPECT_TRUE(contains((*check)[0].describe(), "4 files")) << (*check)[0].describe();
  EXPECT_FALSE(fs::exists(sshd().dir() + "/work/data"));  // a check creates nothing

  auto first = stage_files(*s, dev, files);
  ASSERT_TRUE(first.ok()) << first.error().str();
  const auto h = content_hash(tree);
  ASSERT_TRUE(h.ok());
  const std::string remote_tree = sshd().dir() + "/work/data/" + h->sha256.substr(0, 16) + "/images";
  EXPECT_EQ((*first)[0].remote, remote_tree);
  EXPECT_EQ((*first)[0].how, StagedFile::How::uploaded);
  EXPECT_EQ((*first)[1].how, StagedFile::How::uploaded);
  EXPECT_EQ(slurp(remote_tree + "/cats/small/b.bin"), std::string(300000, 'x'));
  EXPECT_TRUE(fs::exists(remote_tree + "/dogs/c.txt"));
  EXPECT_EQ(slurp((*first)[1].remote), "cat\ndog\n");
  // No temporary directory is left beside it.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(fs::path(remote_tree).parent_path())) entries += e.path() != remote_tree;
  EXPECT_EQ(entries, 0);

  auto second = stage_files(*s, dev, files);
  ASSERT_TRUE(second.ok()) << second.error().str();
  EXPECT_EQ((*second)[0].how, StagedFile::How::present);
  EXPECT_EQ((*second)[1].how, StagedFile::How::present);

  // A changed file is a different content: staged beside the old one.
  spit(names, "cat\ndog\nbird\n");
  auto third = stage_files(*s, dev, files);
  ASSERT_TRUE(third.ok()) << third.error().str();
  EXPECT_EQ((*third)[1].how, StagedFile::How::uploaded);
  EXPECT_NE((*third)[1].remote, (*first)[1].remote);
  EXPECT_EQ(slurp((*third)[1].remote), "cat\ndog\nbird\n");
}

// A staged tree changed or thinned out on the device is found by its
// manifest hash and staged again (#24: it was trusted by name).
TEST_F(StagingSsh, AStagedTreeChangedOnTheDeviceIsStagedAgain) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string tree = make_tree(sshd().dir() + "/local/images");
  const auto dev = ssh_device(sshd().dir() + "/work");
  const std::vector<AgentFile> files = {{"dataset.path", tree}};
  auto first = stage_files(*s, dev, files);
  ASSERT_TRUE(first.ok()) << first.error().str();
  const std::string remote = (*first)[0].remote;
  ASSERT_EQ(slurp(remote + "/dogs/c.txt"), slurp(tree + "/dogs/c.txt"));
  // Edited there.
  spit(remote + "/dogs/c.txt", "tampered");
  auto check = stage_files(*s, dev, files, true);
  ASSERT_TRUE(check.ok()) << check.error().str();
  EXPECT_EQ((*check)[0].how, StagedFile::How::would_upload);
  EXPECT_TRUE(contains((*check)[0].describe(), "it would be staged again")) << (*check)[0].describe();
  EXPECT_EQ(slurp(remote + "/dogs/c.txt"), "tampered");  // a check changes nothing
  auto again = stage_files(*s, dev, files);
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_EQ((*again)[0].how, StagedFile::How::uploaded);
  EXPECT_EQ((*again)[0].remote, remote);
  EXPECT_TRUE(contains((*again)[0].describe(), "staged again")) << (*again)[0].describe();
  EXPECT_EQ(slurp(remote + "/dogs/c.txt"), slurp(tree + "/dogs/c.txt"));
  // A file deleted there.
  fs::remove(remote + "/cats/small/b.bin");
  auto thinned = stage_files(*s, dev, files);
  ASSERT_TRUE(thinned.ok()) << thinned.error().str();
  EXPECT_EQ((*thinned)[0].how, StagedFile::How::uploaded);
  EXPECT_EQ(slurp(remote + "/cats/small/b.bin"), std::string(300000, 'x'));
  // And a sound copy is still found as it is.
  auto sound = stage_files(*s, dev, files);
  ASSERT_TRUE(sound.ok()) << sound.error().str();
  EXPECT_EQ((*sound)[0].how, StagedFile::How::present);
  EXPECT_TRUE((*sound)[0].replaced.empty());
}

TEST_F(StagingSsh, DeclaredPathIsUsedWhenPresentAndNamedWhenMissing) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string tree = make_tree(sshd().dir() + "/local/images");
  const std::string there = make_tree(sshd().dir() + "/device-copy");
  auto dev = ssh_device(sshd().dir() + "/work");
  dev.paths[tree] = there;
  auto ok = stage_files(*s, dev, {{"dataset.path", tree}});
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ((*ok)[0].how, StagedFile::How::declared);
  EXPECT_EQ((*ok)[0].remote, there);
  EXPECT_FALSE(fs::exists(sshd().dir() + "/work/data"));

  dev.paths[tree] = sshd().dir() + "/nowhere";
  auto missing = stage_files(*s, dev, {{"dataset.path", tree}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::config);
  EXPECT_TRUE(contains(missing.error().message, "device edge")) << missing.error().message;
  EXPECT_TRUE(contains(missing.error().message, sshd().dir() + "/nowhere")) << missing.error().message;
  EXPECT_TRUE(contains(missing.error().message, "does not exist")) << missing.error().message;
}

// A real binary linking a shared library that is then removed.
std::string binary_missing_a_library(const std::string& dir) {
  fs::create_directories(dir);
  spit(dir + "/gone.c", "int tracr_gone(void) { return 7; }\n");
  spit(dir + "/main.c", "int tracr_gone(void);\nint main(void) { return tracr_gone() == 7 ? 0 : 1; }\n");
  const auto lib = run_local_command("cc -shared -fPIC -o " + dir + "/libtracrgone.so " + dir + "/gone.c");
  EXPECT_EQ(lib.status, 0) << lib.text;
  const auto bin = run_local_command("cc -o " + dir + "/needs-gone " + dir + "/main.c -L" + dir +
                                     " -ltracrgone -Wl,-rpath," + dir);
  EXPECT_EQ(bin.status, 0) << bin.text;
  EXPECT_EQ(run_local_command(dir + "/needs-gone").status, 0);  // runs while the library is there
  fs::remove(dir + "/libtracrgone.so");
  return dir + "/needs-gone";
}

TEST_F(StagingSsh, MissingSharedLibrariesAreNamedAndTheLaunchIsRefused) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string bin = binary_missing_a_library(sshd().dir() + "/bin");
  auto missing = remote_missing_libraries(*s, bin);
  ASSERT_TRUE(missing.ok()) << missing.error().str();
  EXPECT_EQ(*missing, std::vector<std::string>{"libtracrgone.so"});
  auto none = remote_missing_libraries(*s, kAgent);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  settings::DeviceConfig dev = ssh_device(sshd().dir() + "/work");
  LaunchSpec ls;
  ls.device = &dev;
  ls.role = wire::AgentRole::server;
  ls.secret.assign(32, 1);
  ls.ssh_target = sshd().target();
  ls.installed_path = bin;
  auto conn = launch_agent(ls);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.error().code, Errc::config);
  EXPECT_TRUE(contains(conn.error().message, "libtracrgone.so")) << conn.error().message;
  EXPECT_TRUE(contains(conn.error().message, "tracrctl devices setup")) << conn.error().message;
}

TEST(DeviceSetup, AgentPackagesAreDebianPackagesInstalledHere) {
  auto rp = agent_runtime_packages(kAgent);
  ASSERT_TRUE(rp.ok()) << rp.error().str();
  EXPECT_FALSE(rp->libraries.empty());
  EXPECT_TRUE(rp->unowned.empty()) << rp->unowned.front();
  // LibTorch, ZeroMQ and the C library come from Debian packages.
  std::string all;
  for (const auto& p : rp->packages) all += " " + p;
  EXPECT_TRUE(contains(all, " libtorch")) << all;
  EXPECT_TRUE(contains(all, " libzmq")) << all;
  EXPECT_TRUE(contains(all, " libc6")) << all;
  // Every one is installed on this machine, where the agent runs.
  auto plan = plan_setup(local_shell(), rp->packages);
  ASSERT_TRUE(plan.ok()) << plan.error().str();
  EXPECT_TRUE(plan->missing.empty()) << plan->missing.front();
  EXPECT_EQ(plan->command, "");
}

TEST_F(StagingSsh, SetupPlanListsOnlyMissingPackagesWithTheExactCommand) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto plan = plan_setup(ssh_shell(*s), {"libc6", "tracr-test-no-such-package", "coreutils"});
  ASSERT_TRUE(plan.ok()) << plan.error().str();
  EXPECT_EQ(plan->missing, std::vector<std::string>{"tracr-test-no-such-package"});
  EXPECT_EQ(plan->root, ::geteuid() == 0);
  EXPECT_EQ(plan->command, std::string(plan->root ? "" : "sudo -n env ") +
                               "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
                               "tracr-test-no-such-package");
  EXPECT_EQ(apt_install_command({"a", "b"}, false),
            "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends a b");
}

}  // namespace
}  // namespace tracr::controller
