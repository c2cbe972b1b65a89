// The test vectors of protocol/PROTOCOL.md (section 9), read from its
// ```vectors block: `key = value` lines, a long value continuing on lines
// that repeat its key. Check compares a computed value with the spec's;
// TRACR_PRINT_VECTORS=1 prints the computed values instead, in that format.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

namespace tracr::testing {

inline std::map<std::string, std::string> spec_vectors() {
  std::ifstream f(std::string(TRACR_SOURCE_DIR) + "/protocol/PROTOCOL.md");
  std::map<std::string, std::string> v;
  std::string line;
  bool in_block = false;
  while (std::getline(f, line)) {
    if (line.rfind("```vectors", 0) == 0) { in_block = true; continue; }
    if (in_block && line.rfind("```", 0) == 0) { in_block = false; continue; }
    if (!in_block) continue;
    auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    v[line.substr(0, eq)] += line.substr(eq + 3);  // long values continue with the same key
  }
  return v;
}

struct SpecCheck {
  std::map<std::string, std::string> spec = spec_vectors();
  bool print = std::getenv("TRACR_PRINT_VECTORS") != nullptr;
  void operator()(const std::string& key, const std::string& computed) {
    if (print) {
      for (size_t i = 0; i < computed.size(); i += 96) std::printf("%s = %s\n", key.c_str(), computed.substr(i, 96).c_str());
      return;
    }
    ASSERT_TRUE(spec.count(key)) << "PROTOCOL.md has no vector '" << key << "'";
    EXPECT_EQ(spec[key], computed) << key;
  }
};

}  // namespace tracr::testing
