// Helpers for end-to-end tests: temp dirs, running tracrctl, reading the DB.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>

namespace tracr::testing {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("tracr-sys-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& content) const {
    auto p = path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content;
    return p.string();
  }
};

struct CmdResult {
  int status = -1;
  std::string out;
};

// Runs a shell command, capturing stdout+stderr.
inline CmdResult sh(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string tracrctl() { return std::string(TRACR_BIN_DIR) + "/tracrctl"; }

// Runs one statement that changes the database (as a user editing it with
// sqlite3 would); false, with SQLite's message in `error`, when it fails.
inline bool modify(const std::string& db, const std::string& sql, std::string* error = nullptr) {
  sqlite3* h = nullptr;
  bool ok = sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK;
  char* msg = nullptr;
  if (ok) {
    sqlite3_busy_timeout(h, 5000);
    ok = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &msg) == SQLITE_OK && sqlite3_changes(h) > 0;
  }
  if (error) *error = msg ? msg : sqlite3_errmsg(h);
  sqlite3_free(msg);
  sqlite3_close(h);
  return ok;
}

// First column of the first row of a query, as text ("" when none).
inline std::string query(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return "";
  }
  sqlite3_busy_timeout(h, 5000);
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* t = sqlite3_column_text(st, 0);
    if (t) out = reinterpret_cast<const char*>(t);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

inline std::vector<std::string> query_col(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  std::vector<std::string> out;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK)
    while (sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out.push_back(t ? reinterpret_cast<const char*>(t) : "");
    }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

// Process ids of a run's agents of `role` (SERVER | PARTICIPANT), from the
// agent_started events ("... (local, pid N)").
inline std::vector<long> agent_pids(const std::string& db, const std::string& role) {
  std::vector<long> out;
  for (const auto& m : query_col(db, "select message from events where kind = 'agent_started'")) {
    if (m.rfind(role + " ", 0) != 0) continue;
    auto p = m.rfind("pid ");
    if (p != std::string::npos) out.push_back(std::atol(m.c_str() + p + 4));
  }
  return out;
}

// True while a process with this pid exists (and is not a zombie).
inline bool alive(long pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(st, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// No agent of the run is left behind: `count` agents of these roles were
// started (agent_started events) and none of them is alive.
inline void expect_agents_gone(const std::string& db, const std::vector<std::string>& roles, size_t count) {
  size_t n = 0;
  for (const auto& role : roles)
    for (long p : agent_pids(db, role)) {
      ++n;
      EXPECT_FALSE(alive(p)) << role << " pid " << p;
    }
  EXPECT_EQ(n, count);
}

// The `field` numbers of the rows a failure says it saved ("saved in
// FILE.jsonl" in `text`), which must lie in `dir`; none when it saved none.
inline std::set<int64_t> saved_numbers(const std::string& text, const std::string& dir, const std::string& field) {
  std::set<int64_t> out;
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("saved in (\\S+\\.jsonl)"))) return out;
  const std::string saved = m[1];
  EXPECT_EQ(saved.rfind(dir, 0), 0u) << saved;
  std::ifstream in(saved);
  const std::regex value("\"" + field + "\":(\\d+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch f;
    EXPECT_TRUE(std::regex_search(line, f, value)) << line;
    if (!f.empty()) out.insert(std::stoll(f[1]));
  }
  return out;
}

// The cause of a run its database could not take survives for the next
// read-write open: on a copy of `db` in `copy_dir` (with room to write),
// run 1 is failed with `cause` in its error, whether the row itself took it
// or the open recorded it from the note (#24).
inline void expect_next_open_records(const std::string& db, const std::string& copy_dir, const std::string& cause) {
  std::filesystem::create_directories(copy_dir);
  sh("cp -a " + db + "* " + copy_dir + "/");
  const std::string copy = copy_dir + "/" + std::filesystem::path(db).filename().string();
  auto mig = sh(tracrctl() + " results migrate --db " + copy);
  ASSERT_EQ(mig.status, 0) << mig.out;
  EXPECT_EQ(query(copy, "select status from runs where id = 1"), "failed");
  const std::string error = query(copy, "select error from runs where id = 1");
  EXPECT_NE(error.find(cause), std::string::npos) << error;
}

// A small tmpfs of the test's own at `dir` (root only), for a disk that
// fills up; unmounted when destroyed. mounted is false when it could not be.
struct SmallTmpfs {
  std::string dir;
  bool mounted = false;
  explicit SmallTmpfs(std::string d, const std::string& size = "4m") : dir(std::move(d)) {
    std::filesystem::create_directories(dir);
    mounted = sh("mount -t tmpfs -o size=" + size + " tmpfs " + dir).status == 0;
  }
  ~SmallTmpfs() {
    if (mounted) sh("umount " + dir);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
};

// Two namespaced test hosts joined by a veth pair, both ends rate limited
// with tc tbf: a (10.231.x.1) and b (10.231.x.2). Removed when destroyed.
struct NetnsPair {
  std::string a, b, va, vb, subnet;
  bool ok = false;
  std::string why;
  // Both veth ends shaped with tbf at `rate` (tc syntax, e.g. "40mbit"); "" = not shaped.
  explicit NetnsPair(const std::string& rate, const std::string& burst = "32kbit") {
    const std::string id = std::to_string(getpid() % 100000);
    a = "trs" + id;
    b = "trp" + id;
    va = "vs" + id;
    vb = "vp" + id;
    subnet = "10.231." + std::to_string(getpid() % 250) + ".";
    if (geteuid() != 0) {
      why = "network namespaces need root";
      return;
    }
    const std::string cmds[] = {
        "ip netns add " + a,
        "ip netns add " + b,
        "ip link add " + va + " type veth peer name " + vb,
        "ip link set " + va + " netns " + a,
        "ip link set " + vb + " netns " + b,
        "ip -n " + a + " addr add " + subnet + "1/24 dev " + va,
        "ip -n " + b + " addr add " + subnet + "2/24 dev " + vb,
        "ip -n " + a + " link set " + va + " up",
        "ip -n " + b + " link set " + vb + " up",
        "ip -n " + a + " link set lo up",
        "ip -n " + b + " link set lo up",
        "ip netns exec " + a + " tc qdisc add dev " + va + " root tbf rate " + rate + " burst " + burst + " latency 400ms",
        "ip netns exec " + b + " tc qdisc add dev " + vb + " root tbf rate " + rate + " burst " + burst + " latency 400ms",
    };
    for (const auto& c : cmds) {
      if (rate.empty() && c.find(" tc qdisc ") != std::string::npos) continue;  // unshaped pair
      auto r = sh(c);
      if (r.status != 0) {
        why = "'" + c + "' failed: " + r.out;
        return;
      }
    }
    ok = true;
  }
  // A devices file: the SERVER agent in namespace a, the PARTICIPANT in b.
  std::string devices_yaml() const {
    return "devices:\n"
           "  - device_type: SERVER\n    transport: local\n    netns: " + a + "\n"
           "    connection_params:\n      - host: " + subnet + "1\n        port: 0\n"
           "  - device_type: PARTICIPANT\n    transport: local\n    netns: " + b + "\n"
           "    connection_params:\n      - host: " + subnet + "2\n";
  }
  // The same, the PARTICIPANT's link shaped by the devices file: `profile`
  // is its link_profile map (e.g. "{rate_mbit: 8, delay_ms: 20}").
  std::string devices_yaml(const std::string& profile) const {
    std::string y = devices_yaml();
    y.replace(y.find("netns: " + b), 7 + b.size(), "netns: " + b + "\n    link_profile: " + profile);
    return y;
  }
  ~NetnsPair() {
    sh("ip netns del " + a);
    sh("ip netns del " + b);
  }
};


// Namespace tests skip where they cannot run, except on CI, where that is a failure.
#define NEED_NETNS(net)                                                                     \
  if (!(net).ok) {                                                                          \
    if (std::getenv("CI")) FAIL() << "network namespaces unavailable on CI: " << (net).why; \
    GTEST_SKIP() << (net).why;                                                              \
  }

// A small, fast experiment: AlexNet at 64x64 on synthetic data.
inline std::string small_experiment(const std::string& db, const std::string& extra = "",
                                    const std::string& devices = "") {
  std::string y = "name: system\nmodel: alexnet\ninput_size: [3, 64, 64]\n"
                  "dataset:\n  type: synthetic\n  max_samples: 2\n"
                  "split: all\nwarmup: 0\nrepetitions: 1\nbatch_size: 1\n"
                  "compression: blosc-lz4\nencryption: true\nseed: 7\n"
                  "output: " + db + "\n";
  if (!devices.empty()) y += "devices: " + devices + "\n";
  return y + extra;
}

}  // namespace tracr::testing
