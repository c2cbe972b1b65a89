// The README's "first hour" walkthroughs, run as the README writes them:
// scripts/fmnist_imagefolder.py makes a labelled image folder from Debian's
// Fashion-MNIST, scripts/ssh_testbed.sh stands up two SSH devices on
// loopback (a real sshd), and the shipped imagefolder_resnet18.yaml template
// runs across them with its image folder staged to the PARTICIPANT.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "controller/sshd_fixture.hpp"
#include "system/system_util.hpp"

namespace tracr::testing {
namespace {

namespace fs = std::filesystem;

std::string slurp_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Walkthrough, SshTestbedRunsTheImageFolderTemplateWithItsFolderStagedToTheParticipant) {
  if (!fs::exists("/usr/sbin/sshd")) GTEST_SKIP() << "no /usr/sbin/sshd (Debian's openssh-server)";
  TempDir d;
  const std::string src = TRACR_SOURCE_DIR;
  const std::string tb = (d.path / "tb").string();
  const int port = free_loopback_port();
  ASSERT_GT(port, 0);
  const std::string env = "TRACR_TESTBED_DIR=" + tb + " TRACR_TESTBED_PORT=" + std::to_string(port) + " ";
  struct Down {
    std::string cmd;
    ~Down() { sh(cmd); }
  } down{env + "bash " + src + "/scripts/ssh_testbed.sh down"};

  // Walkthrough 2's image folder: 2 real test images per class, numbered class folders.
  const std::string imgs = (d.path / "imgs").string();
  auto made = sh("/usr/bin/python3 " + src + "/scripts/fmnist_imagefolder.py " + imgs + " --per-class 2");
  ASSERT_EQ(made.status, 0) << made.out;
  EXPECT_TRUE(fs::exists(d.path / "imgs" / "0_T-shirt_top"));
  EXPECT_TRUE(fs::exists(d.path / "imgs" / "9_Ankle_boot"));

  // Walkthrough 3: the test-bed, then its devices file pointed at this test's work dirs.
  auto up = sh(env + "bash " + src + "/scripts/ssh_testbed.sh up");
  ASSERT_EQ(up.status, 0) << up.out;
  const fs::path devices = fs::path(tb) / "devices.yaml";
  std::string text = slurp_file(devices);
  ASSERT_NE(text.find("device_type: PARTICIPANT"), std::string::npos) << text;
  for (size_t at; (at = text.find("~/.cache/tracr-testbed")) != std::string::npos;)
    text.replace(at, 22, (d.path / "work").string());
  std::ofstream(devices) << text;

  const std::string known = "TRACR_KNOWN_HOSTS=" + (d.path / "known_hosts").string() + " ";
  auto check = sh(known + tracrctl() + " devices check --devices " + devices.string() + " --trust-new-hosts");
  ASSERT_EQ(check.status, 0) << check.out;
  EXPECT_NE(check.out.find("127.0.0.2:" + std::to_string(port)), std::string::npos) << check.out;

  const std::string db = (d.path / "r.db").string();
  const std::string run = known + tracrctl() + " run " + src + "/config/experiments/imagefolder_resnet18.yaml" +
                          " --set devices=" + devices.string() + " --set dataset.path=" + imgs + " --set output=" + db +
                          " --set 'split=[5]' --set repetitions=1 --set warmup=0 --no-progress";
  auto r = sh(run);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("top-1"), std::string::npos) << r.out;
  // Every image was labelled by its folder; 20 samples in 2 frames of 10.
  EXPECT_EQ(query(db, "select sum(batch) from frames where correct >= 0 and top5_correct >= 0"), "20");
  EXPECT_EQ(query(db, "select count(*) from frame_topk where rank = 1"), "20");
  // The folder reached the PARTICIPANT only, by content hash, under its work_dir.
  const auto staged = query_col(db, "select message from events where kind = 'file_staged' and device = 'edge'");
  ASSERT_EQ(staged.size(), 1u);
  EXPECT_NE(staged[0].find("dataset.path " + imgs + " -> " + (d.path / "work" / "edge" / "data").string()),
            std::string::npos)
      << staged[0];
  EXPECT_NE(staged[0].find("20 files"), std::string::npos) << staged[0];
  EXPECT_NE(staged[0].find(", uploaded)"), std::string::npos) << staged[0];
  EXPECT_EQ(query(db, "select count(*) from events where kind = 'file_staged' and device = 'server'"), "0");
  EXPECT_FALSE(fs::exists(d.path / "work" / "server" / "data"));

  // The second run finds the folder there.
  auto again = sh(run);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(query(db, "select count(*) from events where run_id = 2 and kind = 'file_staged' and message like "
                      "'%already there)'"),
            "1");
}

}  // namespace
}  // namespace tracr::testing
