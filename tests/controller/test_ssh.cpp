// SshSession and RemoteProcess against a real sshd on loopback.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "fleet/ssh.hpp"
#include "tests/controller/sshd_fixture.hpp"

namespace tracr::controller {
using namespace tracr::fleet;
namespace {

using tracr::testing::slurp;
using tracr::testing::spit;
using tracr::testing::SshdTest;

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Whether a process with this pid exists (checked through the session):
// kill -0 succeeds and it is not a zombie (in containers whose init does not
// reap, orphans stay zombies).
bool remote_pid_alive(SshSession& s, long pid) {
  const std::string p = std::to_string(pid);
  auto r = s.run("kill -0 " + p + " 2>/dev/null && ! grep -q '^State:.*Z' /proc/" + p + "/status 2>/dev/null");
  return r && r->exit_status == 0;
}

// Polls until the pid is gone (a process being torn down may linger briefly).
bool remote_pid_gone_eventually(SshSession& s, long pid) {
  for (int i = 0; i < 100; ++i) {
    if (!remote_pid_alive(s, pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

using SshSessionTest = SshdTest;

TEST_F(SshSessionTest, RunsCommandAndCapturesOutputAndExitStatus) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto r = s->run("echo hi");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "hi\n");
  EXPECT_EQ(r->exit_status, 0);

  r = s->run("echo out; echo err >&2; exit 3");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_status, 3);
  EXPECT_EQ(s->label(), "root@127.0.0.1:" + std::to_string(sshd().port()));
}

TEST_F(SshSessionTest, ReportsDeathBySignal) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto r = s->run("kill -TERM $$");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->exit_signal, "TERM");
  EXPECT_EQ(r->exit_status, 128 + 15);
}

TEST_F(SshSessionTest, StdinRoundTrip) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto r = s->run("cat", "hello\nworld\n");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "hello\nworld\n");

  // Larger than the SSH window in both directions at once: must not deadlock.
  std::string big(3 << 20, '\0');
  std::mt19937 rng(7);
  for (auto& ch : big) ch = static_cast<char>(rng());
  r = s->run("cat", big, 30000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out.size(), big.size());
  EXPECT_TRUE(r->out == big);
}

TEST_F(SshSessionTest, WrongKeyIsRefused) {
  sshd().trust();
  auto t = sshd().target();
  t.key_path = sshd().make_key("not_authorized");
  ASSERT_FALSE(t.key_path.empty()) << sshd().error();
  auto s = SshSession::connect(t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::auth_refused) << s.error().str();
  EXPECT_TRUE(contains(s.error().message, "root@127.0.0.1")) << s.error().message;
  EXPECT_TRUE(contains(s.error().message, t.key_path)) << s.error().message;
}

TEST_F(SshSessionTest, KeyReadableByOthersIsRefusedWithChmodHint) {
  sshd().trust();
  auto t = sshd().target();
  ASSERT_EQ(::chmod(t.key_path.c_str(), 0644), 0);
  auto s = SshSession::connect(t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::key_permissions) << s.error().str();
  EXPECT_TRUE(contains(s.error().message, "chmod 600 " + t.key_path)) << s.error().message;
  EXPECT_TRUE(contains(s.error().message, "0644")) << s.error().message;
}

TEST_F(SshSessionTest, MissingKeyIsNotFound) {
  auto t = sshd().target();
  t.key_path = sshd().dir() + "/no_such_key";
  auto s = SshSession::connect(t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::not_found) << s.error().str();
}

TEST_F(SshSessionTest, UnknownHostIsRefusedWithoutTrustOnFirstUse) {
  auto s = SshSession::connect(sshd().target(false));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::host_key_unknown) << s.error().str();
  EXPECT_TRUE(contains(s.error().message, "SHA256:")) << s.error().message;
  EXPECT_EQ(slurp(sshd().known_hosts()), "");
}

TEST_F(SshSessionTest, TrustOnFirstUseAddsHostKeyForLaterConnects) {
  auto first = SshSession::connect(sshd().target(true));
  ASSERT_TRUE(first.ok()) << first.error().str();
  EXPECT_TRUE(contains(slurp(sshd().known_hosts()), "[127.0.0.1]:" + std::to_string(sshd().port())));
  auto second = SshSession::connect(sshd().target(false));
  ASSERT_TRUE(second.ok()) << second.error().str();
  auto r = (*second)->run("echo again");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "again\n");
}

TEST_F(SshSessionTest, TrustOnFirstUseRecordsAHostKeyOnceForTwoDevicesOnOneHostPort) {
  // Two devices on one host:port connecting at once (a run's server and participant).
  std::vector<std::thread> th;
  std::atomic<int> ok{0};
  for (int i = 0; i < 2; ++i)
    th.emplace_back([&] {
      if (SshSession::connect(sshd().target(true)).ok()) ++ok;
    });
  for (auto& t : th) t.join();
  ASSERT_EQ(ok.load(), 2);
  auto again = SshSession::connect(sshd().target(true));
  ASSERT_TRUE(again.ok()) << again.error().str();
  const std::string text = slurp(sshd().known_hosts());
  const std::string host = "[127.0.0.1]:" + std::to_string(sshd().port()) + " ";
  size_t lines = 0;
  for (size_t i = 0; (i = text.find(host, i)) != std::string::npos; i += host.size()) ++lines;
  EXPECT_EQ(lines, 1u) << text;
}

TEST_F(SshSessionTest, TrustOnFirstUseCreatesMissingKnownHostsFile) {
  auto t = sshd().target(true);
  t.known_hosts_path = sshd().dir() + "/sub/dir/known_hosts";
  auto s = SshSession::connect(t);
  ASSERT_TRUE(s.ok()) << s.error().str();
  EXPECT_TRUE(contains(slurp(t.known_hosts_path), "ssh-ed25519"));
}

TEST_F(SshSessionTest, ChangedHostKeyIsRefusedEvenWithTrustOnFirstUse) {
  ASSERT_TRUE(connect_trusted());
  const std::string before = slurp(sshd().known_hosts());
  ASSERT_TRUE(sshd().restart_with_new_host_key()) << sshd().error();
  for (bool tofu : {false, true}) {
    auto s = SshSession::connect(sshd().target(tofu));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, Errc::host_key_mismatch) << s.error().str();
    EXPECT_TRUE(contains(s.error().message, "ssh-keygen -R")) << s.error().message;
  }
  EXPECT_EQ(slurp(sshd().known_hosts()), before);  // never rewritten
}

TEST_F(SshSessionTest, ClosedPortIsUnreachableWithoutHanging) {
  auto t = sshd().target();
  t.port = tracr::testing::free_loopback_port();
  auto s = SshSession::connect(t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::unreachable) << s.error().str();
  EXPECT_TRUE(contains(s.error().message, "127.0.0.1:" + std::to_string(t.port))) << s.error().message;
}

TEST_F(SshSessionTest, UnroutableHostIsUnreachableWithinTheTimeout) {
  auto t = sshd().target();
  t.host = "192.0.2.1";  // TEST-NET-1: never routed
  t.port = 22;
  t.timeout_ms = 300;
  auto s = SshSession::connect(t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::unreachable) << s.error().str();
  EXPECT_TRUE(contains(s.error().message, "192.0.2.1:22")) << s.error().message;
}

TEST_F(SshSessionTest, CommandTimeoutKillsTheCommandAndKeepsTheSession) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  const std::string pidfile = sshd().dir() + "/sleep.pid";
  auto r = s->run("echo $$ > " + pidfile + "; exec sleep 600", "", 2000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::timeout) << r.error().str();
  long pid = std::stol(slurp(pidfile));
  EXPECT_TRUE(remote_pid_gone_eventually(*s, pid));
  auto again = s->run("echo still here");
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_EQ(again->out, "still here\n");
}

TEST_F(SshSessionTest, UploadReplacesAtomicallyAndReadsBack) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  std::string data(300000, '\0');
  std::mt19937 rng(1);
  for (auto& ch : data) ch = static_cast<char>(rng());
  const std::string local = sshd().dir() + "/local.bin";
  const std::string remote_dir = sshd().dir() + "/remote";
  std::filesystem::create_directory(remote_dir);
  const std::string remote = remote_dir + "/file.bin";
  spit(local, data);
  auto st = s->upload(local, remote, 0640);
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(
      std::filesystem::status(remote).permissions() & std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | std::filesystem::perms::group_read);
  auto back = s->read_file(remote);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_TRUE(*back == data);

  // Over an existing file, and no temporary files left behind.
  spit(local, "second version\n");
  st = s->upload(local, remote, 0755);
  ASSERT_TRUE(st.ok()) << st.error().str();
  back = s->read_file(remote);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(*back, "second version\n");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(remote_dir)) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "file.bin");
  }
  EXPECT_EQ(entries, 1);

  auto tail = s->read_file_tail(remote, 8);
  ASSERT_TRUE(tail.ok()) << tail.error().str();
  EXPECT_EQ(*tail, "version\n");
  auto too_big = s->read_file(remote, 4);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().code, Errc::limit_exceeded);
  auto missing = s->read_file(remote_dir + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found) << missing.error().str();
  auto no_local = s->upload(sshd().dir() + "/no_such_local", remote, 0644);
  ASSERT_FALSE(no_local.ok());
  EXPECT_EQ(no_local.error().code, Errc::not_found);
}

TEST_F(SshSessionTest, StartedProcessStreamsLinesAndExitsOnStdinEof) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto p = s->start("cat");
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_GT((*p)->pid(), 0);
  ASSERT_TRUE((*p)->write_stdin("first\nsecond\n").ok());
  auto l = (*p)->read_line(5000);
  ASSERT_TRUE(l.ok()) << l.error().str();
  EXPECT_EQ(*l, "first");
  l = (*p)->read_line(5000);
  ASSERT_TRUE(l.ok()) << l.error().str();
  EXPECT_EQ(*l, "second");
  EXPECT_TRUE((*p)->running());

  auto none = (*p)->read_line(50);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::timeout);

  (*p)->close_stdin();
  auto eof = (*p)->read_line(5000);
  ASSERT_FALSE(eof.ok());
  EXPECT_EQ(eof.error().code, Errc::peer_closed) << eof.error().str();
  auto st = (*p)->stop(5000);
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(*st, 0);
  EXPECT_EQ((*p)->exit_status(), 0);
}

TEST_F(SshSessionTest, StopKillsAProcessThatIgnoresStdin) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto p = s->start("sh -c 'trap \"\" HUP; sleep 600; sleep 600'");
  ASSERT_TRUE(p.ok()) << p.error().str();
  long pid = (*p)->pid();
  ASSERT_TRUE(remote_pid_alive(*s, pid));
  auto st = (*p)->stop(100);
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(*st, 128 + 15);
  EXPECT_TRUE(remote_pid_gone_eventually(*s, pid));
  // The sleeps (same process group) are gone too.
  auto left = s->run("ps -eo pid=,pgid=,stat=,args= | awk '$2 == " + std::to_string(pid) + " && $3 !~ /^Z/'");
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->out, "");
}

TEST_F(SshSessionTest, ProcessAndCommandsShareTheSessionAcrossThreads) {
  auto s = connect_trusted();
  ASSERT_TRUE(s);
  auto p = s->start("cat");
  ASSERT_TRUE(p.ok()) << p.error().str();
  std::string got;
  std::thread reader([&] {
    auto l = (*p)->read_line(20000);  // waits while the main thread uses the session
    got = l ? *l : l.error().str();
  });
  auto r = s->run("echo side");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "side\n");
  ASSERT_TRUE((*p)->write_stdin("through cat\n").ok());
  reader.join();
  EXPECT_EQ(got, "through cat");
  auto st = (*p)->stop(5000);
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(*st, 0);
}

TEST_F(SshSessionTest, ConcurrentConnectsFromFourThreads) {
  sshd().trust();
  std::atomic<int> ok{0};
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto s = SshSession::connect(sshd().target());
      if (!s) {
        errors[i] = s.error().str();
        return;
      }
      for (int k = 0; k < 3; ++k) {
        auto r = (*s)->run("echo " + std::to_string(i * 10 + k));
        if (!r || r->out != std::to_string(i * 10 + k) + "\n") {
          errors[i] = r ? "wrong output " + r->out : r.error().str();
          return;
        }
      }
      ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4) << errors[0] << errors[1] << errors[2] << errors[3];
}

TEST(ShellQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shell_quote("/opt/tracr/agent-1.2"), "/opt/tracr/agent-1.2");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
}

}  // namespace
}  // namespace tracr::controller
