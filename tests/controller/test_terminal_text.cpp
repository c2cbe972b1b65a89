// Text bound for a terminal (#24): a name from a database or a peer cannot
// carry an ANSI escape to the user's terminal, through a table or an error.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/text.hpp"
#include "core/user_error.hpp"

using tracr::core::align;
using tracr::core::terminal_text;

TEST(TerminalText, ControlBytesAreWrittenAsText) {
  EXPECT_EQ(terminal_text("run\x1b[2J\x1b]0;pwned\x07"), "run\\x1B[2J\\x1B]0;pwned\\x07");
  EXPECT_EQ(terminal_text("a\x7f" "b\rc"), "a\\x7Fb\\x0Dc");
  // Messages keep their lines; table cells do not.
  EXPECT_EQ(terminal_text("line 1\n\tline 2"), "line 1\n\tline 2");
  EXPECT_EQ(terminal_text("line 1\nline 2", false), "line 1\\x0Aline 2");
  // UTF-8 names stay as they are.
  EXPECT_EQ(terminal_text("r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93"), "r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93");
}

TEST(TerminalText, TablesAndErrorsEscapeWhatTheyShow) {
  const std::string t = align({{"id", "name"}, {"1", "evil\x1b[31m"}, {"2", "two\nlines"}}, {1});
  EXPECT_EQ(t.find('\x1b'), std::string::npos) << t;
  EXPECT_NE(t.find("evil\\x1B[31m"), std::string::npos) << t;
  EXPECT_NE(t.find("two\\x0Alines"), std::string::npos) << t;
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 3) << t;  // one line per row
  tracr::Error e{tracr::Errc::config, "run 'x\x1b[8m' failed\nsecond line"};
  EXPECT_EQ(tracr::core::user_text(e), "run 'x\\x1B[8m' failed\nsecond line");
}
