// deploy_agent / launch_agent with the real tracr-agent through a real sshd.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "controller/deploy.hpp"
#include "tests/controller/sshd_fixture.hpp"

namespace tracr::controller {
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

TEST_F(DeployTest, LaunchedAgentIsReadyAndGoneAfterStop) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto d = deploy_agent(*s, kAgent, sshd().dir() + "/agents");
  ASSERT_TRUE(d.ok()) << d.error().str();
  auto a = launch_agent(*s, d->remote_path, {"--role", "SERVER", "--bind", "tcp://127.0.0.1:0"}, kSecret, 15000);
  ASSERT_TRUE(a.ok()) << a.error().str();
  EXPECT_TRUE(contains(a->ready_line(), "READY")) << a->ready_line();
  EXPECT_EQ(a->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << a->endpoint();
  EXPECT_NE(a->endpoint(), "tcp://127.0.0.1:0");
  const long pid = a->pid();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(a->running());
  EXPECT_TRUE(remote_pid_alive(*s, pid));

  // The secret went over stdin, not the command line.
  auto cmdline = s->run("tr '\\0' ' ' < /proc/" + std::to_string(pid) + "/cmdline");
  ASSERT_TRUE(cmdline.ok()) << cmdline.error().str();
  EXPECT_TRUE(contains(cmdline->out, "--role SERVER")) << cmdline->out;
  EXPECT_FALSE(contains(cmdline->out, kSecret));
  EXPECT_EQ(std::filesystem::path(a->log_path()).parent_path(), std::filesystem::path(d->remote_path).parent_path());

  auto st = a->stop(5000);
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(*st, 0);  // exited by itself on stdin EOF
  EXPECT_FALSE(a->running());
  EXPECT_TRUE(remote_pid_gone_eventually(*s, pid));
  auto again = a->stop();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  auto logs = fetch_logs(*s, *a);
  ASSERT_TRUE(logs.ok()) << logs.error().str();
}

TEST_F(DeployTest, AgentExitsWhenTheConnectionDies) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto d = deploy_agent(*s, kAgent, sshd().dir() + "/agents");
  ASSERT_TRUE(d.ok()) << d.error().str();
  auto owner = SshSession::connect(sshd().target());
  ASSERT_TRUE(owner.ok()) << owner.error().str();
  auto a = launch_agent(**owner, d->remote_path, {"--role", "SERVER"}, kSecret, 15000);
  ASSERT_TRUE(a.ok()) << a.error().str();
  const long pid = a->pid();
  // Kill the sshd process serving the owner's connection, as if the
  // controller's machine vanished: the agent's stdin closes and it exits.
  auto ppid = s->run("awk '{print $4}' /proc/" + std::to_string(pid) + "/stat");
  ASSERT_TRUE(ppid.ok() && ppid->exit_status == 0);
  auto killed = s->run("kill -KILL " + ppid->out);
  ASSERT_TRUE(killed.ok() && killed->exit_status == 0) << (killed ? killed->err : killed.error().str());
  EXPECT_TRUE(remote_pid_gone_eventually(*s, pid));
  // Stopping over the dead connection neither hangs nor throws.
  (void)a->stop(200);
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
    auto a = launch_agent(*s, fake, {}, kSecret, 15000);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.error().code, Errc::peer_closed) << a.error().str();
    EXPECT_TRUE(contains(a.error().message, "exited before READY")) << a.error().message;
    EXPECT_TRUE(contains(a.error().message, "fatal: bad config")) << a.error().message;
    EXPECT_TRUE(contains(a.error().message, "exit status 3")) << a.error().message;
  }
  // The real agent with a bad option.
  auto d = deploy_agent(*s, kAgent, sshd().dir() + "/agents");
  ASSERT_TRUE(d.ok()) << d.error().str();
  auto a = launch_agent(*s, d->remote_path, {"--role", "NOPE"}, kSecret, 15000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::peer_closed) << a.error().str();
  EXPECT_TRUE(contains(a.error().message, "NOPE")) << a.error().message;  // the agent's complaint, from its log
}

TEST_F(DeployTest, AgentWithoutReadyLineTimesOut) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  // A stand-in "agent" that never prints READY.
  const std::string fake = sshd().dir() + "/silent-agent";
  tracr::testing::spit(fake, "#!/bin/sh\necho starting >&2\nexec cat\n");
  ::chmod(fake.c_str(), 0755);
  auto a = launch_agent(*s, fake, {}, kSecret, 300);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::timeout) << a.error().str();
  EXPECT_TRUE(contains(a.error().message, "starting")) << a.error().message;
  auto left = s->run("pgrep -f " + fake);
  ASSERT_TRUE(left.ok());
  EXPECT_NE(left->exit_status, 0) << left->out;
}

TEST_F(DeployTest, SecretMustBeHex) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto a = launch_agent(*s, "/bin/true", {}, "zz\nrm -rf /", 1000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::invalid_argument);
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

}  // namespace
}  // namespace tracr::controller
