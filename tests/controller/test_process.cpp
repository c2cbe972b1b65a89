// fleet/process.hpp helpers that need no child process.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fleet/process.hpp"
#include "fleet/ssh.hpp"

namespace tracr::fleet {
namespace {

TEST(NetnsExec, NoNamespaceAddsNothing) {
  EXPECT_TRUE(netns_exec_argv("").empty());
  EXPECT_EQ(netns_exec_prefix(""), "");
}

TEST(NetnsExec, ArgvAndShellPrefixSpellTheSameCommand) {
  EXPECT_EQ(netns_exec_argv("trp12"), (std::vector<std::string>{"/usr/sbin/ip", "netns", "exec", "trp12"}));
  // The namespace name is quoted for the shell, whatever it holds.
  EXPECT_EQ(netns_exec_prefix("a b;x"), "/usr/sbin/ip netns exec " + shell_quote("a b;x") + " ");
}

}  // namespace
}  // namespace tracr::fleet
