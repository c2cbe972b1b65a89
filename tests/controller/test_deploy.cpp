// deploy_agent, and the launcher over SSH, with the real tracr-agent through a real sshd.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <filesystem>
#include <thread>

#include "fleet/deploy.hpp"
#include "fleet/launcher.hpp"
#include "fleet/process.hpp"
#include "fleet/ssh.hpp"
#include "tests/controller/sshd_fixture.hpp"

namespace tracr::controller {
using namespace tracr::fleet;
namespace {

using tracr::testing::slurp;
using tracr::testing::SshdTest;

const std::string kAgent = std::string(TRACR_BIN_DIR) + "/tracr-agent";
const std::string kSecret(64, 'a');

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// kill -0 succeeds, and the process is not a zombie (in containers whose
// init does not reap, orphans stay zombies).
bool remote_pid_alive(SshSession& s, long pid) {
  const std::string p = std::to_string(pid);
  auto r = s.run("kill -0 " + p + " 2>/dev/null && ! grep -q '^State:.*Z' /proc/" + p + "/status 2>/dev/null");
  return r && r->exit_status == 0;
}

bool remote_pid_gone_eventually(SshSession& s, long pid) {
  for (int i = 0; i < 200; ++i) {
    if (!remote_pid_alive(s, pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

using DeployTest = SshdTest;

// Hashing on the device gets time for the file's size: the session's timeout
// plus 1 s per 2 MB (the 109 MB agent took over 10 s to hash on a loaded
// machine, and a board's SD card is slower still).
TEST(Deploy, HashingTimeGrowsWithTheFileSize) {
  EXPECT_EQ(hash_timeout_ms(10000, 0), 10000);
  EXPECT_EQ(hash_timeout_ms(0, 0), 10000);  // the session's default
  EXPECT_EQ(hash_timeout_ms(10000, 109124376), 10000 + 54562);
  EXPECT_EQ(hash_timeout_ms(5000, 1000000000), 5000 + 500000);
  EXPECT_EQ(hash_timeout_ms(10000, uint64_t(1) << 50), 24 * 3600 * 1000);  // capped at a day
}

TEST_F(DeployTest, UploadsTheAgentThenSkipsAnIdenticalCopy) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string dir = sshd().dir() + "/agents";
  auto first = deploy_agent(*s, kAgent, dir);
  ASSERT_TRUE(first.ok()) << first.error().str();
  EXPECT_TRUE(first->uploaded);
  EXPECT_EQ(first->sha256.size(), 64u);
  EXPECT_EQ(first->remote_path, dir + "/tracr-agent-" + first->sha256.substr(0, 16));
  struct utsname u {};
  ::uname(&u);
  EXPECT_EQ(first->remote_arch, u.machine);
  EXPECT_EQ(slurp(first->remote_path), slurp(kAgent));
  struct stat st {};
  ASSERT_EQ(::stat(first->remote_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);

  auto second = deploy_agent(*s, kAgent, dir);
  ASSERT_TRUE(second.ok()) << second.error().str();
  EXPECT_FALSE(second->uploaded);
  EXPECT_EQ(second->remote_path, first->remote_path);
  EXPECT_EQ(second->sha256, first->sha256);
}

TEST_F(DeployTest, UploadPrunesOldAgentsAndStaleTemporaryFiles) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string dir = sshd().dir() + "/agents";
  ASSERT_EQ(tracr::testing::run_process({"/bin/mkdir", "-p", dir}), 0);
  // Four older agents (oldest first), a stale and a fresh upload temporary, and a user's file.
  const char* old_agents[] = {"tracr-agent-0000000000000001", "tracr-agent-0000000000000002",
                              "tracr-agent-0000000000000003", "tracr-agent-0000000000000004"};
  int age = 40;
  for (const char* a : old_agents) {
    tracr::testing::spit(dir + "/" + a, "old");
    ASSERT_EQ(tracr::testing::run_process({"/usr/bin/touch", "-d", std::to_string(age--) + " minutes ago", dir + "/" + a}), 0);
  }
  tracr::testing::spit(dir + "/tracr-agent-0000000000000009.tmp-abc", "interrupted");
  ASSERT_EQ(tracr::testing::run_process({"/usr/bin/touch", "-d", "30 minutes ago", dir + "/tracr-agent-0000000000000009.tmp-abc"}), 0);
  tracr::testing::spit(dir + "/tracr-agent-000000000000000a.tmp-def", "uploading now");
  tracr::testing::spit(dir + "/notes.txt", "mine");
  auto d = deploy_agent(*s, kAgent, dir);
  ASSERT_TRUE(d.ok()) << d.error().str();
  EXPECT_TRUE(d->uploaded);
  EXPECT_TRUE(d->note.empty()) << d->note;
  auto exists = [&](const std::string& f) { return std::filesystem::exists(dir + "/" + f); };
  EXPECT_TRUE(std::filesystem::exists(d->remote_path));
  // The two newest older agents stay, the two oldest go.
  EXPECT_FALSE(exists(old_agents[0]));
  EXPECT_FALSE(exists(old_agents[1]));
  EXPECT_TRUE(exists(old_agents[2]));
  EXPECT_TRUE(exists(old_agents[3]));
  EXPECT_FALSE(exists("tracr-agent-0000000000000009.tmp-abc"));
  EXPECT_TRUE(exists("tracr-agent-000000000000000a.tmp-def"));  // maybe another controller's upload in progress
  EXPECT_TRUE(exists("notes.txt"));
}

TEST_F(DeployTest, ReplacesACorruptedCopy) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string dir = sshd().dir() + "/agents";
  auto first = deploy_agent(*s, kAgent, dir);
  ASSERT_TRUE(first.ok()) << first.error().str();
  tracr::testing::spit(first->remote_path, "truncated");
  auto again = deploy_agent(*s, kAgent, dir);
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_TRUE(again->uploaded);
  EXPECT_EQ(slurp(again->remote_path), slurp(kAgent));
}

// Starts `remote_path` on the fixture's sshd through the launcher (the one
// way tracrctl starts agents), as the SERVER of an echo run.
Result<std::unique_ptr<AgentConn>> launch(const SshTarget& target, const std::string& remote_path,
                                          const std::vector<std::string>& args) {
  static settings::DeviceConfig dev;
  dev.name = "sshd";
  dev.transport = settings::Transport::ssh;
  LaunchSpec ls;
  ls.device = &dev;
  ls.role = tracr::wire::AgentRole::server;
  ls.args = args;
  ls.secret = std::vector<uint8_t>(32, 0xaa);
  ls.ssh_target = target;
  ls.installed_path = remote_path;
  ls.log_name = "tracr-agent-test.log";
  return launch_agent(ls);
}

TEST_F(DeployTest, LaunchedAgentIsReadyAndGoneAfterStop) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto d = deploy_agent(*s, kAgent, sshd().dir() + "/agents");
  ASSERT_TRUE(d.ok()) << d.error().str();
  auto a = launch(sshd().target(true), d->remote_path, {"--bind", "tcp://127.0.0.1:0"});
  ASSERT_TRUE(a.ok()) << a.error().str();
  auto ready = (*a)->wait_ready(15000);
  ASSERT_TRUE(ready.ok()) << ready.error().str();
  const std::string ep = ready->get_or("endpoint", "");
  EXPECT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;
  EXPECT_NE(ep, "tcp://127.0.0.1:0");
  const long pid = (*a)->proc().pid();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(remote_pid_alive(*s, pid));

  // The secret went over stdin, not the command line.
  auto cmdline = s->run("tr '\\0' ' ' < /proc/" + std::to_string(pid) + "/cmdline");
  ASSERT_TRUE(cmdline.ok()) << cmdline.error().str();
  EXPECT_TRUE(contains(cmdline->out, "--role SERVER")) << cmdline->out;
  EXPECT_FALSE(contains(cmdline->out, std::string(64, 'a')));
  // Its stderr log sits beside the agent.
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(d->remote_path).parent_path() / "tracr-agent-test.log"));

  EXPECT_EQ((*a)->stop(5000), 0);  // exited by itself on stdin EOF
  EXPECT_TRUE(remote_pid_gone_eventually(*s, pid));
  EXPECT_EQ((*a)->stop(5000), 0);  // idempotent
}

TEST_F(DeployTest, AgentExitsWhenTheConnectionDies) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto d = deploy_agent(*s, kAgent, sshd().dir() + "/agents");
  ASSERT_TRUE(d.ok()) << d.error().str();
  auto a = launch(sshd().target(true), d->remote_path, {});
  ASSERT_TRUE(a.ok()) << a.error().str();
  ASSERT_TRUE((*a)->wait_ready(15000).ok());
  const long pid = (*a)->proc().pid();
  // Kill the sshd process serving the launcher's connection, as if the
  // controller's machine vanished: the agent's stdin closes and it exits.
  auto ppid = s->run("awk '{print $4}' /proc/" + std::to_string(pid) + "/stat");
  ASSERT_TRUE(ppid.ok() && ppid->exit_status == 0);
  auto killed = s->run("kill -KILL " + ppid->out);
  ASSERT_TRUE(killed.ok() && killed->exit_status == 0) << (killed ? killed->err : killed.error().str());
  EXPECT_TRUE(remote_pid_gone_eventually(*s, pid));
  // Stopping over the dead connection neither hangs nor throws.
  (void)(*a)->stop(200);
}

TEST_F(DeployTest, AgentThatExitsBeforeReadyReportsItsLog) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  // A stand-in agent that fails at start-up, with or without reading stdin.
  for (const char* body :
       {"echo 'fatal: bad config' >&2; exit 3", "read secret; echo 'fatal: bad config' >&2; exit 3"}) {
    const std::string fake = sshd().dir() + "/failing-agent";
    tracr::testing::spit(fake, std::string("#!/bin/sh\n") + body + "\n");
    ::chmod(fake.c_str(), 0755);
    auto a = launch(sshd().target(true), fake, {});
    Result<wire::ControlMsg> r = a ? (*a)->wait_ready(15000) : Result<wire::ControlMsg>(a.error());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::peer_closed) << r.error().str();
    EXPECT_TRUE(contains(r.error().message, "exited before READY")) << r.error().message;
    EXPECT_TRUE(contains(r.error().message, "fatal: bad config")) << r.error().message;
    EXPECT_TRUE(contains(r.error().message, "exit status 3")) << r.error().message;
  }
  // The real agent with a bad option: its own complaint, from its log.
  auto d = deploy_agent(*s, kAgent, sshd().dir() + "/agents");
  ASSERT_TRUE(d.ok()) << d.error().str();
  auto a = launch(sshd().target(true), d->remote_path, {"--frobnicate"});
  ASSERT_TRUE(a.ok());
  auto r = (*a)->wait_ready(15000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::peer_closed) << r.error().str();
  EXPECT_TRUE(contains(r.error().message, "frobnicate")) << r.error().message;
}

TEST_F(DeployTest, AgentWithoutReadyLineTimesOutAndIsStopped) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  // A stand-in "agent" that never prints READY.
  const std::string fake = sshd().dir() + "/silent-agent";
  tracr::testing::spit(fake, "#!/bin/sh\necho starting >&2\nwhile :; do sleep 1; done\n");
  ::chmod(fake.c_str(), 0755);
  auto a = launch(sshd().target(true), fake, {});
  ASSERT_TRUE(a.ok()) << a.error().str();
  auto r = (*a)->wait_ready(300);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::timeout) << r.error().str();
  EXPECT_TRUE(contains(r.error().message, "starting")) << r.error().message;
  auto left = s->run("pgrep -f 'silent-agen[t]'");
  ASSERT_TRUE(left.ok());
  EXPECT_NE(left->exit_status, 0) << left->out;
}

TEST_F(DeployTest, UnknownHostKeyIsRefusedWithAHint) {
  auto a = launch(sshd().target(/*tofu=*/false), "/bin/true", {});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::host_key_unknown) << a.error().str();
  EXPECT_TRUE(contains(a.error().message, "--trust-new-hosts")) << a.error().message;
}

TEST(DeployLocal, AgentArchitectureMatchesThisMachine) {
  auto arch = elf_arch(kAgent);
  ASSERT_TRUE(arch.ok()) << arch.error().str();
  struct utsname u {};
  ::uname(&u);
  EXPECT_TRUE(arch_compatible(*arch, u.machine)) << *arch << " vs " << u.machine;
  EXPECT_FALSE(arch_compatible("aarch64", "x86_64"));
  EXPECT_FALSE(arch_compatible("x86_64", "aarch64"));
  EXPECT_TRUE(arch_compatible("arm", "armv7l"));
  EXPECT_FALSE(arch_compatible("arm", "arm64"));
  EXPECT_TRUE(arch_compatible("aarch64", "arm64"));
  auto not_elf = elf_arch(std::string(TRACR_SOURCE_DIR) + "/ARCHITECTURE.md");
  ASSERT_FALSE(not_elf.ok());
  EXPECT_EQ(not_elf.error().code, Errc::invalid_argument);
  auto missing = sha256_file("/nonexistent/tracr-agent");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found);
}

// A caught signal ends hashing and uploads (#24: 188 GB were hashed while
// SIGINT and SIGTERM went unanswered, and only SIGKILL stopped tracrctl).
TEST_F(DeployTest, ACaughtSignalEndsHashingAndUploads) {
  const std::string big = (std::filesystem::path(sshd().dir()) / "big.bin").string();
  {
    std::ofstream f(big, std::ios::binary);
    const std::string mib(1u << 20, 'x');
    for (int i = 0; i < 8; ++i) f << mib;
  }
  ASSERT_TRUE(sha256_file(big).ok());
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  {
    SignalCatcher catcher;
    ASSERT_EQ(::raise(SIGTERM), 0);
    ASSERT_EQ(SignalCatcher::signal(), SIGTERM);
    auto h = sha256_file(big);
    ASSERT_FALSE(h.ok());
    EXPECT_NE(h.error().message.find("hashing " + big + " interrupted by signal 15"), std::string::npos)
        << h.error().message;
    const std::string remote = (std::filesystem::path(sshd().dir()) / "remote.bin").string();
    auto up = s->upload(big, remote);
    ASSERT_FALSE(up.ok());
    EXPECT_NE(up.error().message.find("interrupted by signal 15"), std::string::npos) << up.error().message;
    EXPECT_FALSE(std::filesystem::exists(remote));
    for (const auto& e : std::filesystem::directory_iterator(sshd().dir()))
      EXPECT_EQ(e.path().filename().string().rfind("remote.bin.tmp", 0), std::string::npos) << "partial upload left";
  }
  SignalCatcher reset;  // the caught signal is process-wide: clear it for the tests after this one
}

}  // namespace
}  // namespace tracr::controller
