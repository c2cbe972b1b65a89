// TRACR_LOG (core/log.hpp): the level is checked before formatting, and a
// line is written whole to the sink.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/log.hpp"

namespace tracr::core {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::tmpfile();
    ASSERT_NE(sink_, nullptr);
    before_ = log_level();
    set_log_sink(sink_);
  }
  void TearDown() override {
    set_log_sink(nullptr);
    set_log_level(before_);
    std::fclose(sink_);
  }
  std::string written() {
    std::fflush(sink_);
    std::rewind(sink_);
    std::string s;
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, sink_)) > 0) s.append(buf, n);
    return s;
  }
  std::FILE* sink_ = nullptr;
  LogLevel before_ = LogLevel::info;
};

TEST_F(LogTest, LineBelowTheLevelIsNeitherFormattedNorWritten) {
  set_log_level(LogLevel::warn);
  int evaluated = 0;
  auto costly = [&] { return ++evaluated; };
  TRACR_LOG(debug, "frame {}", costly());
  TRACR_LOG(info, "frame {}", costly());
  EXPECT_EQ(evaluated, 0);
  EXPECT_EQ(written(), "");
}

TEST_F(LogTest, LineAtOrAboveTheLevelIsWrittenWithItsNewline) {
  set_log_level(LogLevel::info);
  TRACR_LOG(warn, "detached agent on {}: {}", "server", "device not in devices.yaml");
  TRACR_LOG(info, "{} of {}", 3, 4);
  EXPECT_EQ(written(), "detached agent on server: device not in devices.yaml\n3 of 4\n");
}

}  // namespace
}  // namespace tracr::core
