// What a newcomer meets first (issue #20), run as the built tracrctl and the
// shipped scripts: a devices file named but missing is refused by every
// command (not replaced by the embedded default), a Python tracr config
// points to `tracrctl convert`, the reading commands find the database `run`
// wrote, and the test-bed scripts take their names and ports as options, are
// safe to run twice and fail loudly when their sshd or namespaces did not come
// up (a real sshd on 127.0.0.1/127.0.0.2, real namespaces and a veth pair).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "controller/cli/help_format.hpp"
#include "core/text.hpp"
#include "core/user_error.hpp"
#include "fleet/launcher.hpp"
#include "store/default_db.hpp"
#include "tests/system/system_util.hpp"

namespace {

using tracr::testing::sh;
using tracr::testing::TempDir;
namespace fs = std::filesystem;

const std::string kCtl = tracr::testing::tracrctl();
const std::string kScripts = std::string(TRACR_SOURCE_DIR) + "/scripts/";

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// A listening TCP socket on 127.0.0.1 at a free port (the port is read back).
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4) != 0) return;
    socklen_t n = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

TEST(FrontDoor, ADevicesFileNamedButMissingIsRefusedByEveryCommand) {
  TempDir d;
  const std::string missing = (d.path / "config/devices_confg.yaml").string();
  for (const std::string& cmd : std::vector<std::string>{"devices check", "devices setup --dry-run", "agents status", "agents deploy"}) {
    auto r = sh(kCtl + " " + cmd + " --devices " + missing);
    EXPECT_EQ(r.status, 2) << cmd << "\n" << r.out;
    EXPECT_TRUE(has(r.out, missing)) << cmd << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "does not exist")) << cmd << "\n" << r.out;
    EXPECT_FALSE(has(r.out, " ok")) << cmd << " checked the embedded default instead:\n" << r.out;
  }
}

TEST(FrontDoor, ErrorsReadAsSentencesWithoutInternalCodes) {
  TempDir d;
  const std::string db = (d.path / "none.db").string();
  const std::regex code(R"((^|[\s:])(not_found|invalid_argument|io|config|remote|internal|timeout|unsupported): )");
  for (const std::string& cmd :
       std::vector<std::string>{"results show 999 --db " + db, "results list --db " + db, "report 9 -o " + (d.path / "x.html").string() +
        " --db " + db, "run " + (d.path / "no_such.yaml").string(), "devices check --devices " + db + ".yaml",
        "plan 3 --db " + db}) {
    auto r = sh(kCtl + " " + cmd);
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_FALSE(std::regex_search(r.out, code)) << cmd << " printed an internal code:\n" << r.out;
    EXPECT_GT(r.out.size(), 20u) << cmd << " said nothing useful:\n" << r.out;
  }
}

// A line of fields breaks between them, continuation indented (#20).
TEST(FrontDoor, AFieldLineBreaksBetweenFields) {
  using tracr::core::fit_fields;
  const std::string line = "  started 2026-11-27T14:12:40.265Z  ended 2026-11-27T14:12:49.414Z  duration 9.1 s";
  EXPECT_EQ(fit_fields(line, 0), line);
  EXPECT_EQ(fit_fields(line, 120), line);
  EXPECT_EQ(fit_fields(line + "\n", 60), "  started 2026-11-27T14:12:40.265Z\n"
                                         "    ended 2026-11-27T14:12:49.414Z  duration 9.1 s\n");
  EXPECT_EQ(fit_fields("A: run 1 quickstart [completed]  model alexnet  codec none", 40),
            "A: run 1 quickstart [completed]\n  model alexnet  codec none");
  // A first field as short as the continuation indent is still followed by two spaces.
  EXPECT_EQ(fit_fields("  ab  cd  a-longer-field-here", 12), "  ab  cd\n    a-longer-field-here");
}

// An agent's FAIL line carries "code: message" for programs; a person reads
// the message (#20: "SERVER agent on server failed: invalid_argument: ...").
TEST(FrontDoor, AnAgentsReportedErrorLosesItsCode) {
  using tracr::core::reported_error_text;
  EXPECT_EQ(reported_error_text("invalid_argument: /etc/passwd: not a PyTorch zip archive"),
            "/etc/passwd: not a PyTorch zip archive");
  EXPECT_EQ(reported_error_text("not_found: imagefolder: no .jpg files"), "imagefolder: no .jpg files");
  EXPECT_EQ(reported_error_text("model: 'x' cannot be loaded: bad"), "model: 'x' cannot be loaded: bad");
  EXPECT_EQ(reported_error_text("unknown: kept"), "unknown: kept");
  EXPECT_EQ(reported_error_text("io: \x1b[2Jclear"), "\\x1B[2Jclear");
}

// A device that cannot be reached is named with the reason as a sentence
// (#20: "FAIL  unreachable: cannot reach ..."). Port 1 on loopback has no sshd.
TEST(FrontDoor, AnUnreachableDeviceIsReportedWithoutAnInternalCode) {
  TempDir d;
  std::filesystem::create_directories(d.path / "pkeys");
  ASSERT_EQ(sh("ssh-keygen -q -t ed25519 -N '' -f " + (d.path / "pkeys" / "k").string()).status, 0);
  const std::string devices =
      d.file("devices.yaml", "devices:\n  - device_type: SERVER\n    name: far\n    connection_params:\n"
                             "      - host: 127.0.0.1\n        user: nobody\n        ssh_port: 1\n        pkey_fp: k\n"
                             "        default: true\n  - {device_type: PARTICIPANT, transport: local}\n");
  const std::regex code(R"((unreachable|auth_refused|host_key_unknown|host_key_changed|peer_closed|timeout|io|remote): )");
  for (const char* cmd : {"devices check", "agents status"}) {
    auto r = sh(kCtl + " " + cmd + " --devices " + devices);
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "far")) << cmd << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "FAIL  cannot reach nobody@127.0.0.1:1")) << cmd << "\n" << r.out;
    EXPECT_FALSE(std::regex_search(r.out, code)) << cmd << " printed an internal code:\n" << r.out;
  }
}

TEST(FrontDoor, HelpWrapsAtWordsToTheTerminalWidth) {
  EXPECT_EQ(tracr::controller::wrap_words("one two three four", 9), "one two\nthree\nfour");
  EXPECT_EQ(tracr::controller::wrap_words("averyveryverylongword x", 5), "averyveryverylongword\nx");
  EXPECT_EQ(tracr::controller::wrap_words("as it is", 0), "as it is");
  for (const std::string& cmd : std::vector<std::string>{"--help", "run --help", "plan --help", "report --help",
                                                          "results export --help", "devices check --help"}) {
    auto r = sh("COLUMNS=80 " + kCtl + " " + cmd);
    ASSERT_EQ(r.status, 0) << cmd << "\n" << r.out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      EXPECT_LE(line.size(), 80u) << cmd << ": a line wider than the terminal:\n" << line;
  }
}

// `results show`'s events: the message wraps under a hanging indent (#20).
TEST(FrontDoor, EventMessagesWrapUnderAHangingIndent) {
  using tracr::core::align_wrap_last;
  const std::vector<std::vector<std::string>> rows = {
      {"  12:00:01", "info", "run_started", "alexnet with every split on two local agents, encrypted frames"},
      {"  12:00:02", "warn", "agent_log", "short"},
      {"  12:00:03", "info", "done", ""}};
  EXPECT_EQ(align_wrap_last(rows, {0, 1, 2, 3}, 0), tracr::core::align(rows, {0, 1, 2, 3}));
  EXPECT_EQ(align_wrap_last(rows, {0, 1, 2, 3}, 200), tracr::core::align(rows, {0, 1, 2, 3}));
  const std::string fit = align_wrap_last(rows, {0, 1, 2, 3}, 60);
  EXPECT_EQ(fit,
            "  12:00:01  info  run_started  alexnet with every split on\n"
            "                               two local agents, encrypted\n"
            "                               frames\n"
            "  12:00:02  warn  agent_log    short\n"
            "  12:00:03  info  done\n");
  // Too narrow for a column beside the others: the message below, indented by 4.
  const std::string narrow = align_wrap_last(rows, {0, 1, 2, 3}, 40);
  EXPECT_EQ(narrow.substr(0, narrow.find("short")),
            "  12:00:01  info  run_started\n"
            "    alexnet with every split on two\n"
            "    local agents, encrypted frames\n"
            "  12:00:02  warn  agent_log\n    ");
  for (const std::string& out : {fit, narrow}) {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) EXPECT_LE(line.size(), 60u) << line;
  }
}

// Tables narrower than the terminal stay as they are; wider ones leave
// columns out in the given order and say which (#20: tables fit the terminal).
TEST(FrontDoor, ATableLeavesColumnsOutToFitAndNamesThem) {
  using tracr::core::fit_table;
  const std::vector<std::vector<std::string>> rows = {
      {"id", "name", "status", "started", "model", "cipher", "frames"},
      {"1", "quickstart", "completed", "2026-11-27T14:12:40.265Z", "alexnet", "aes-256-gcm", "10"}};
  EXPECT_EQ(fit_table(rows, {1, 2, 3, 4, 5}, 0, {5, 3}), tracr::core::align(rows, {1, 2, 3, 4, 5}));
  EXPECT_EQ(fit_table(rows, {1, 2, 3, 4, 5}, 120, {5, 3}), tracr::core::align(rows, {1, 2, 3, 4, 5}));
  EXPECT_EQ(fit_table(rows, {1, 2, 3, 4, 5}, 72, {5, 3}),
            "id  name        status     started                   model    frames\n"
            " 1  quickstart  completed  2026-11-27T14:12:40.265Z  alexnet      10\n"
            "(cipher left out to fit 72 columns)\n");
  EXPECT_EQ(fit_table(rows, {1, 2, 3, 4, 5}, 50, {5, 3}),
            "id  name        status     model    frames\n"
            " 1  quickstart  completed  alexnet      10\n"
            "(started, cipher left out to fit 50 columns)\n");
}

TEST(FrontDoor, APythonTracrConfigPointsToConvert) {
  TempDir d;
  const std::string old = d.file("alexnetsplit.yaml",
                                 "default:\n  device: cpu\n  save_layer_images: false\n"
                                 "model:\n  model_name: alexnet\n  split_layer: 5\n"
                                 "dataloader:\n  batch_size: 1\n");
  auto r = sh(kCtl + " run " + old + " --no-progress");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r.out, "default")) << r.out;
  EXPECT_TRUE(has(r.out, "Python tracr config")) << r.out;
  EXPECT_TRUE(has(r.out, "tracrctl convert " + old)) << r.out;
  // The hint is only for a Python config's keys: a typo gets the suggestion alone.
  auto typo = sh(kCtl + " run " + d.file("typo.yaml", "modle: alexnet\n") + " --no-progress");
  EXPECT_EQ(typo.status, 2) << typo.out;
  EXPECT_TRUE(has(typo.out, "did you mean 'model'")) << typo.out;
  EXPECT_FALSE(has(typo.out, "tracrctl convert")) << typo.out;
}

// The reading commands' default database: $TRACR_OUTPUT, else results/tracr.db
// here, else the project's (where the shipped experiments write from any directory).
TEST(FrontDoor, TheDefaultDatabaseIsTheOneRunWrites) {
  TempDir d;
  const fs::path cwd = fs::current_path();
  fs::current_path(d.path);
  const char* old_env = std::getenv("TRACR_OUTPUT");
  const std::string saved = old_env ? old_env : "";
  ::unsetenv("TRACR_OUTPUT");
  const fs::path project = fs::path(TRACR_SOURCE_DIR) / "results" / "tracr.db";
  EXPECT_EQ(tracr::store::default_results_db(), fs::exists(project) ? project.string() : "results/tracr.db");
  fs::create_directories(d.path / "results");
  { std::ofstream(d.path / "results" / "tracr.db") << ""; }
  EXPECT_EQ(tracr::store::default_results_db(), "results/tracr.db");
  ::setenv("TRACR_OUTPUT", "/x/y.db", 1);
  EXPECT_EQ(tracr::store::default_results_db(), "/x/y.db");
  if (saved.empty()) ::unsetenv("TRACR_OUTPUT");
  else ::setenv("TRACR_OUTPUT", saved.c_str(), 1);
  fs::current_path(cwd);
}

// Host keys go to the project's pkeys/known_hosts (as documented), never to
// a folder above a devices file that lives elsewhere.
TEST(FrontDoor, KnownHostsAreThePkeysFolderOfTheDevicesFilesProject) {
  TempDir d;
  fs::create_directories(d.path / "proj" / "pkeys");
  fs::create_directories(d.path / "proj" / "config");
  fs::create_directories(d.path / "proj" / "results" / "ssh_testbed");
  EXPECT_EQ(tracr::fleet::known_hosts_for((d.path / "proj/config/devices_config.yaml").string()),
            (d.path / "proj/pkeys/known_hosts").string());
  EXPECT_EQ(tracr::fleet::known_hosts_for((d.path / "proj/results/ssh_testbed/devices.yaml").string()),
            (d.path / "proj/pkeys/known_hosts").string());
  fs::create_directories(d.path / "elsewhere" / "sub");
  fs::create_directories(d.path / "pkeys");  // a stray pkeys/ with no config/ beside it is no project
  EXPECT_EQ(tracr::fleet::known_hosts_for((d.path / "elsewhere/sub/devices.yaml").string()),
            (d.path / "elsewhere/sub/pkeys/known_hosts").string());
  EXPECT_EQ(tracr::fleet::known_hosts_for((d.path / "elsewhere/devices.yaml").string()),
            (d.path / "elsewhere/pkeys/known_hosts").string());
  // A relative devices file resolves against the current directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(d.path / "proj");
  EXPECT_EQ(tracr::fleet::known_hosts_for("config/devices_config.yaml"),
            (d.path / "proj/pkeys/known_hosts").string());
  fs::current_path(cwd);
}

TEST(FrontDoor, SshTestbedFailsLoudlyOnATakenPortAndIsSafeToRunTwice) {
  if (sh("command -v /usr/sbin/sshd && command -v ssh-keyscan").status != 0) {
    if (std::getenv("CI")) FAIL() << "openssh-server missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "sshd not installed";
  }
  TempDir d;
  const std::string dir = (d.path / "tb").string();
  Listener taken;
  ASSERT_GT(taken.port, 0);
  const std::string port = std::to_string(taken.port);
  auto r = sh("bash " + kScripts + "ssh_testbed.sh up --port " + port + " --dir " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "FAILED")) << r.out;
  EXPECT_TRUE(has(r.out, port)) << r.out;
  EXPECT_FALSE(has(r.out, "devices file")) << "reported success:\n" << r.out;
  taken.close();
  auto up = sh("bash " + kScripts + "ssh_testbed.sh up --port " + port + " --dir " + dir);
  EXPECT_EQ(up.status, 0) << up.out;
  auto again = sh("bash " + kScripts + "ssh_testbed.sh up --port " + port + " --dir " + dir);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_TRUE(has(again.out, "already running")) << again.out;
  EXPECT_TRUE(fs::exists(dir + "/devices.yaml"));
  // Another port while it runs: refused, and the running one keeps its
  // configuration and still answers where it did.
  const std::string other = std::to_string(taken.port == 65535 ? 65534 : taken.port + 1);
  auto moved = sh("bash " + kScripts + "ssh_testbed.sh up --port " + other + " --dir " + dir);
  EXPECT_EQ(moved.status, 1) << moved.out;
  EXPECT_TRUE(has(moved.out, "already running on port " + port)) << moved.out;
  auto still = sh("bash " + kScripts + "ssh_testbed.sh up --port " + port + " --dir " + dir);
  EXPECT_EQ(still.status, 0) << still.out;
  auto bad = sh("bash " + kScripts + "ssh_testbed.sh up --port nope --dir " + dir);
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_EQ(sh("bash " + kScripts + "ssh_testbed.sh down --port " + port + " --dir " + dir).status, 0);
}

TEST(FrontDoor, NetnsTestbedTakesItsNamesAndIsSafeToRunTwice) {
  if (::geteuid() != 0 || sh("ip netns list").status != 0) {
    if (std::getenv("CI")) FAIL() << "needs root and ip netns";
    GTEST_SKIP() << "needs root (ip netns add)";
  }
  TempDir d;
  const std::string prefix = "trfd" + std::to_string(::getpid() % 100000);
  const std::string subnet = "10.253." + std::to_string(::getpid() % 250);
  const std::string opts = " --prefix " + prefix + " --subnet " + subnet;
  const std::string devices = (d.path / "devices.yaml").string();
  auto up = sh("bash " + kScripts + "netns_testbed.sh up" + opts + " --devices " + devices);
  ASSERT_EQ(up.status, 0) << up.out;
  auto again = sh("bash " + kScripts + "netns_testbed.sh up" + opts);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_TRUE(has(again.out, "already up")) << again.out;
  // The namespaces hold their addresses and reach each other over the veth.
  EXPECT_TRUE(has(sh("ip -n " + prefix + "-edge -br addr").out, subnet + ".2/24"));
  auto reach = sh("ip netns exec " + prefix + "-srv bash -c '</dev/tcp/" + subnet + ".2/9' 2>&1");
  EXPECT_TRUE(has(reach.out, "refused")) << "no reply from the edge namespace: " << reach.out;
  std::ifstream in(devices);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(has(text, "netns: " + prefix + "-srv")) << text;
  EXPECT_TRUE(has(text, "host: " + subnet + ".1")) << text;
  EXPECT_EQ(sh("bash " + kScripts + "netns_testbed.sh down" + opts).status, 0);
  EXPECT_EQ(sh("bash " + kScripts + "netns_testbed.sh status" + opts).status, 1);
  EXPECT_EQ(sh("bash " + kScripts + "netns_testbed.sh up --prefix 'bad name'").status, 2);
}

}  // namespace
