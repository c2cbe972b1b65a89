// `tracrctl bench protocol --compare-only`: the side-by-side table against
// the Python tracr pipeline (bench/python_baseline.py) and raw ZeroMQ runs
// end to end and prints every expected row. No timing is asserted.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

std::pair<int, std::string> run(const std::string& cmd) {
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return {pclose(f), out};
}

// The rows of `out` for one size whose pipeline column starts with `what`.
std::vector<std::vector<std::string>> rows(const std::string& out, const std::string& bytes, const std::string& what) {
  std::vector<std::vector<std::string>> found;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string x;
    while (ls >> x) f.push_back(x);
    if (f.size() < 3 || f[0] != bytes) continue;
    std::string pipeline = f[1] + " " + f[2];
    if (pipeline.rfind(what, 0) == 0) found.push_back(f);
  }
  return found;
}

}  // namespace

TEST(BenchProtocol, ComparisonWithPythonPrintsEveryRowAndTheVerdicts) {
  auto probe = run("/usr/bin/python3 -c 'import blosc, torch, torchvision' 2>&1");
  if (probe.first != 0) {
    if (std::getenv("CI")) FAIL() << "CI needs python3-blosc, python3-torch, python3-torchvision: " << probe.second;
    GTEST_SKIP() << "Debian's python3-blosc/torch/torchvision missing: " << probe.second;
  }
  auto [rc, out] = run(std::string(TRACR_BIN_DIR) + "/tracrctl bench protocol --compare-only --quick --reps 5 " +
                       "--sizes 36864,774400 --python-script " + TRACR_SOURCE_DIR + "/bench/python_baseline.py 2>&1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("python-blosc"), std::string::npos) << "names the Python side's versions\n" << out;
  for (std::string bytes : {"36864", "774400"}) {
    auto py = rows(out, bytes, "python pickle+blosc-zstd3/tcp");
    ASSERT_EQ(py.size(), 1u) << out;
    // columns: bytes pipeline rtt_us p95_us MB/s payload_B ratio x_python x_raw check
    ASSERT_EQ(py[0].size(), 11u) << out;
    EXPECT_GT(std::stod(py[0][3]), 0);
    EXPECT_LT(std::stoull(py[0][6]), std::stoull(bytes)) << "blosc zstd shrinks post-ReLU activations";
    EXPECT_EQ(rows(out, bytes, "raw zeromq").size(), 1u) << out;
    for (std::string codec : {"none/aes", "sparse/aes", "sparse+blosc-lz4/aes", "sparse+blosc-zstd/aes"}) {
      auto r = rows(out, bytes, "tracr " + codec);
      ASSERT_EQ(r.size(), 1u) << codec << "\n" << out;
      EXPECT_EQ(r[0].back(), "exact") << codec << " is lossless\n" << out;
    }
    // Sparse codecs shrink real activations; none/aes only adds the tags.
    EXPECT_LT(std::stoull(rows(out, bytes, "tracr sparse/aes")[0][6]), std::stoull(bytes));
    EXPECT_GT(std::stoull(rows(out, bytes, "tracr none/aes")[0][6]), std::stoull(bytes));
  }
  EXPECT_NE(out.find("774400: encrypted uncompressed round trip none/aes"), std::string::npos) << out;
  EXPECT_NE(out.find("774400: best lossless at >= python's ratio"), std::string::npos) << out;
}
