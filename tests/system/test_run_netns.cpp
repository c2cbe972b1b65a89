// Two namespaced test hosts joined by a veth pair whose both ends are rate
// limited with tc tbf; the SERVER agent runs in one, the PARTICIPANT in the
// other, and the experiment's frames cross that link.
#include <unistd.h>

#include "system/system_util.hpp"

using namespace tracr::testing;


TEST(RunNetns, ExperimentCrossesRateLimitedVethLink) {
  NetnsPair net("40mbit");
  if (!net.ok) {
    // CI runs as root where namespaces work: there this must not skip.
    if (std::getenv("CI")) FAIL() << "network namespaces unavailable on CI: " << net.why;
    GTEST_SKIP() << net.why;
  }
  TempDir d;
  const std::string db = (d.path / "r.db").string();
  const std::string devices = d.file("devices.yaml", net.devices_yaml());
  std::string y = small_experiment(db, "record:\n  layers: false\n", devices);
  y.replace(y.find("split: all"), 10, "split: [0, 22]");
  y.replace(y.find("compression: blosc-lz4"), 22, "compression: none");
  const std::string exp = d.file("exp.yaml", y);
  auto r = sh(tracrctl() + " run " + exp + " --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(db, "select status from runs"), "completed");
  EXPECT_EQ(query(db, "select count(*) from frames"), "4");
  EXPECT_NE(query(db, "select devices_json from runs"), "");
  EXPECT_NE(query(db, "select devices_json from runs").find(net.a), std::string::npos);
  // Split 0 ships the 49,152-byte input across a 40 Mbit/s link in one
  // segment handed over after encoding: its network time cannot be below the
  // serialisation time (a physical lower bound of the link, with 30% slack
  // for tbf's burst).
  const double min_ns = 49152 * 8 / 40e6 * 1e9 * 0.7;
  for (const auto& v : query_col(db, "select network_ns from frames where split = 0"))
    EXPECT_GT(std::stod(v), min_ns) << "network " << v << " ns";
}
