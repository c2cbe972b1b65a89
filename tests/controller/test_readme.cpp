// The README's commands, extracted from its ```sh blocks: every tracrctl
// line names a command that answers --help and only options that command
// lists, every script and config file it names exists (scripts pass bash
// -n), and walkthrough 1 runs as written (with TRACR_OUTPUT pointing its
// database into a temporary folder instead of the project's results/).
// tests/system/test_walkthrough.cpp runs walkthroughs 2 and 3.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/system/system_util.hpp"

namespace {

using tracr::testing::sh;
using tracr::testing::TempDir;
namespace fs = std::filesystem;

const std::string kSrc = TRACR_SOURCE_DIR;

// The command lines of the README's ```sh blocks, comments removed.
std::vector<std::string> readme_commands() {
  std::ifstream in(kSrc + "/README.md");
  std::vector<std::string> out;
  bool in_sh = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) {
      in_sh = !in_sh && line == "```sh";
      continue;
    }
    if (!in_sh) continue;
    // A '#' after whitespace, outside quotes, starts a comment.
    char quote = 0;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '#' && (i == 0 || line[i - 1] == ' ')) {
        line.resize(i);
        break;
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Shell words (single and double quotes, no expansion).
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::string cur;
  bool any = false;
  char quote = 0;
  for (char c : line) {
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      any = true;
    } else if (c == ' ') {
      if (any || !cur.empty()) w.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
    }
  }
  if (any || !cur.empty()) w.push_back(cur);
  return w;
}

TEST(Readme, EveryCommandNamesARealCommandOptionsItTakesAndFilesThatExist) {
  const auto lines = readme_commands();
  ASSERT_GT(lines.size(), 15u);
  size_t tracrctl_lines = 0;
  for (const auto& line : lines) {
    const auto w = words(line);
    ASSERT_FALSE(w.empty());
    // Files of the project a command names.
    for (const auto& t : w)
      for (const char* dir : {"config/", "scripts/"}) {
        if (t.rfind(dir, 0) == 0) {
          EXPECT_TRUE(fs::exists(kSrc + "/" + t)) << line << ": no " << t;
        }
      }
    if (w[0] == "bash" && w.size() > 1 && w[1].rfind("scripts/", 0) == 0) {
      EXPECT_EQ(sh("bash -n " + kSrc + "/" + w[1]).status, 0) << line;
      continue;
    }
    if (w[0] != "tracrctl") continue;
    ++tracrctl_lines;
    ASSERT_GT(w.size(), 1u) << line;
    std::string chain = w[1];
    size_t next = 2;
    static const std::set<std::string> groups = {"results", "devices", "agents", "link"};
    if (groups.count(w[1]) && w.size() > 2) {
      chain += " " + w[2];
      next = 3;
    }
    auto help = sh(tracr::testing::tracrctl() + " " + chain + " --help");
    ASSERT_EQ(help.status, 0) << line << "\n" << help.out;
    for (size_t i = next; i < w.size(); ++i) {
      if (w[i].rfind("--", 0) != 0) continue;
      const std::string opt = w[i].substr(0, w[i].find('='));
      EXPECT_NE(help.out.find(opt), std::string::npos) << line << ": `tracrctl " << chain << "` has no " << opt;
    }
  }
  EXPECT_GE(tracrctl_lines, 12u);
}

TEST(Readme, WalkthroughOneRunsAsWritten) {
  TempDir d;
  const std::string env = "cd " + kSrc + " && TRACR_OUTPUT=" + (d.path / "w1.db").string() + " PATH=" +
                          std::string(TRACR_BIN_DIR) + ":$PATH ";
  const auto lines = readme_commands();
  std::vector<std::string> w1;
  for (const auto& l : lines)
    if (l.find("quickstart.yaml") != std::string::npos || l == "tracrctl results show last") w1.push_back(l);
  ASSERT_EQ(w1.size(), 3u);
  for (const auto& l : w1) {
    auto r = sh(env + l + (l.find(" run ") != std::string::npos ? " --no-progress" : ""));
    ASSERT_EQ(r.status, 0) << l << "\n" << r.out;
    if (l == "tracrctl results show last") {
      EXPECT_NE(r.out.find("quickstart"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("split"), std::string::npos) << r.out;
    }
  }
}

}  // namespace
