// A real OpenSSH server for tests: keys generated with ssh-keygen in a
// temporary directory, sshd listening on a free loopback port, logging in as
// the current user with a generated ed25519 key. Needs root (sshd's
// privilege separation) and openssh-server/openssh-client; see
// sshd_skip_reason(). The server is killed and the directory removed in the
// destructor.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fleet/ssh.hpp"

extern char** environ;

namespace tracr::testing {

inline constexpr const char* kSshd = "/usr/sbin/sshd";
inline constexpr const char* kSshKeygen = "/usr/bin/ssh-keygen";

// Why the sshd tests cannot run here ("" when they can).
inline std::string sshd_skip_reason() {
  if (::geteuid() != 0) return "the sshd fixture needs root (sshd privilege separation, /run/sshd); CI runs as root";
  if (::access(kSshd, X_OK) != 0) return std::string(kSshd) + " not found: apt-get install openssh-server";
  if (::access(kSshKeygen, X_OK) != 0) return std::string(kSshKeygen) + " not found: apt-get install openssh-client";
  return {};
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// Runs argv with stdout+stderr to `output`; returns the exit status (-1 when
// it could not start).
inline int run_process(const std::vector<std::string>& argv, std::string* output = nullptr) {
  char tmpl[] = "/tmp/tracr-proc-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fd);
  int status = -1;
  if (rc == 0) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  if (output) *output = slurp(tmpl);
  ::unlink(tmpl);
  return rc == 0 ? status : -1;
}

inline int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

inline bool port_accepts(int port, const std::string& addr = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

class Sshd {
 public:
  // On loopback; or, with `netns`, inside that network namespace listening on
  // `addr` port 22 (the namespace is the test's own, so the port is free).
  explicit Sshd(const std::string& netns = "", const std::string& addr = "127.0.0.1") : netns_(netns), addr_(addr) {
    char tmpl[] = "/tmp/tracr-sshd-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      error_ = std::string("mkdtemp: ") + std::strerror(errno);
      return;
    }
    dir_ = tmpl;
    const passwd* pw = ::getpwuid(::geteuid());
    user_ = pw ? pw->pw_name : "root";
    if (!keygen(host_key_path(), "ed25519") || !keygen(user_key(), "ed25519")) return;
    spit(dir_ + "/authorized_keys", slurp(user_key() + ".pub"));
    spit(known_hosts(), "");
    if (netns_.empty()) {
      start_with_retries();
    } else {
      port_ = 22;
      start();
    }
  }
  ~Sshd() {
    stop();
    if (!dir_.empty() && std::getenv("TRACR_KEEP_SSHD_DIR") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  Sshd(const Sshd&) = delete;
  Sshd& operator=(const Sshd&) = delete;

  bool ok() const { return error_.empty() && pid_ > 0; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  int port() const { return port_; }
  // The login user: the current user (looked up once; getpwuid is not thread-safe).
  const std::string& user() const { return user_; }
  std::string user_key() const { return dir_ + "/id_ed25519"; }
  std::string known_hosts() const { return dir_ + "/known_hosts"; }
  std::string host_key_path() const { return dir_ + "/host_ed25519"; }
  std::string log() const { return slurp(dir_ + "/sshd.log"); }

  // A target for this server; known_hosts starts empty (see trust()).
  fleet::SshTarget target(bool tofu = false) const {
    fleet::SshTarget t;
    t.host = addr_;
    t.port = port_;
    t.user = user();
    t.key_path = user_key();
    t.known_hosts_path = known_hosts();
    t.trust_on_first_use = tofu;
    // Generous: each command starts the login shell, which can be slow (a
    // .bashrc that runs `pyenv init` costs 0.6 s here), and under ctest -j2
    // on 2 loaded cores four sessions at once have taken more than 5 s.
    t.timeout_ms = 30000;
    return t;
  }
  // Adds the server's current host key to known_hosts.
  void trust() const {
    std::string pub = slurp(host_key_path() + ".pub");
    std::ofstream out(known_hosts(), std::ios::app);
    out << "[" << addr_ << "]:" << port_ << " " << pub.substr(0, pub.find('\n')) << "\n";
  }
  // A new key pair `name` in the directory, not authorized on the server.
  std::string make_key(const std::string& name) {
    std::string p = dir_ + "/" + name;
    return keygen(p, "ed25519") ? p : std::string();
  }
  // Restarts sshd on the same port with a freshly generated host key.
  bool restart_with_new_host_key() {
    stop();
    ::unlink(host_key_path().c_str());
    ::unlink((host_key_path() + ".pub").c_str());
    if (!keygen(host_key_path(), "ed25519")) return false;
    return start();
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  bool keygen(const std::string& path, const std::string& type) {
    std::string out;
    int rc = run_process({kSshKeygen, "-q", "-t", type, "-N", "", "-C", "tracr-test", "-f", path}, &out);
    if (rc != 0) error_ = "ssh-keygen -f " + path + " failed: " + out;
    return rc == 0;
  }

  void write_config() {
    std::ostringstream c;
    c << "ListenAddress " << addr_ << "\n"
      << "Port " << port_ << "\n"
      << "HostKey " << host_key_path() << "\n"
      << "AuthorizedKeysFile " << dir_ << "/authorized_keys\n"
      << "PidFile " << dir_ << "/sshd.pid\n"
      << "PubkeyAuthentication yes\n"
      << "PasswordAuthentication no\n"
      << "KbdInteractiveAuthentication no\n"
      << "PermitRootLogin prohibit-password\n"
      << "StrictModes no\n"
      << "UsePAM no\n"
      << "UseDNS no\n"
      << "MaxStartups 64\n"
      << "MaxSessions 64\n"
      << "LogLevel VERBOSE\n"
      << "Subsystem sftp internal-sftp\n";
    spit(dir_ + "/sshd_config", c.str());
  }

  void start_with_retries() {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_loopback_port();
      if (port_ <= 0) {
        error_ = "no free loopback port";
        return;
      }
      if (start()) return;
    }
  }

  // Starts sshd on port_ and waits until it accepts connections.
  bool start() {
    error_.clear();
    write_config();
    ::mkdir("/run/sshd", 0755);  // privilege separation directory
    const std::string logf = dir_ + "/sshd.log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logf.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::string cfg = dir_ + "/sshd_config";
    std::vector<std::string> argv = {kSshd, "-D", "-e", "-f", cfg};
    if (!netns_.empty()) argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", netns_});
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      error_ = std::string("cannot start sshd: ") + std::strerror(rc);
      return false;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = "sshd exited at start-up: " + log();
        return false;
      }
      // Its own "Server listening" line, not just a port that accepts: under
      // ctest -j another test's sshd may have taken the port this one chose
      // (this one then fails to bind, exits, and start_with_retries picks another).
      if (log().find("Server listening on") != std::string::npos && port_accepts(port_, addr_)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop();
    error_ = "sshd did not accept connections within 10 s: " + log();
    return false;
  }

  std::string netns_, addr_;
  std::string dir_;
  std::string user_;
  std::string error_;
  int port_ = -1;
  pid_t pid_ = -1;
};

// GoogleTest fixture: a fresh sshd per test. Skips (printing the reason)
// where the machine cannot run sshd; with TRACR_REQUIRE_SSHD=1 (CI) that is a
// failure instead.
class SshdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = sshd_skip_reason();
    if (!why.empty()) {
      if (std::getenv("TRACR_REQUIRE_SSHD")) FAIL() << why;
      GTEST_SKIP() << why;
    }
    sshd_ = std::make_unique<Sshd>();
    ASSERT_TRUE(sshd_->ok()) << sshd_->error();
  }
  Sshd& sshd() { return *sshd_; }
  // Connects with the fixture's key after trusting the host key.
  std::unique_ptr<fleet::SshSession> connect_trusted() {
    sshd_->trust();
    auto s = fleet::SshSession::connect(sshd_->target());
    EXPECT_TRUE(s.ok()) << (s ? "" : s.error().str()) << "\nsshd log:\n" << sshd_->log();
    return s ? std::move(*s) : nullptr;
  }
  std::unique_ptr<Sshd> sshd_;
};

}  // namespace tracr::testing
