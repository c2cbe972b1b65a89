#include <gtest/gtest.h>

#include "wire/control.hpp"

using namespace tracr;
using namespace tracr::wire;

namespace {
std::vector<uint8_t> secret(uint8_t b) { return std::vector<uint8_t>(32, b); }
std::string strip(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}
}  // namespace

TEST(Control, LinesRoundTripWithEscapedValues) {
  ControlCodec tx(secret(1), ControlDir::agent_to_controller);
  ControlCodec rx(secret(1), ControlDir::agent_to_controller);
  std::map<std::string, std::string> f{{"endpoint", "tcp://127.0.0.1:5555"}, {"msg", "a b=c#d%e\nf"}, {"n", "42"}};
  auto m = rx.decode(strip(tx.encode("READY", f)));
  ASSERT_TRUE(m.ok()) << m.error().str();
  EXPECT_EQ(m->kind, "READY");
  EXPECT_EQ(m->fields, f);
  EXPECT_EQ(*m->get_int("n"), 42);
  EXPECT_FALSE(m->get_int("msg").ok());
  EXPECT_EQ(m->get_int("missing").error().code, Errc::missing_field);
}

TEST(Control, WrongSecretIsRejected) {
  ControlCodec tx(secret(1), ControlDir::agent_to_controller);
  ControlCodec rx(secret(2), ControlDir::agent_to_controller);
  auto m = rx.decode(strip(tx.encode("HEARTBEAT", {})));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, Errc::auth_failed);
}

TEST(Control, DirectionsUseDifferentKeys) {
  ControlCodec tx(secret(1), ControlDir::controller_to_agent);
  ControlCodec rx(secret(1), ControlDir::agent_to_controller);
  EXPECT_EQ(rx.decode(strip(tx.encode("STOP", {}))).error().code, Errc::auth_failed);
}

TEST(Control, TamperedOrReplayedLineIsRejected) {
  ControlCodec tx(secret(1), ControlDir::agent_to_controller);
  ControlCodec rx(secret(1), ControlDir::agent_to_controller);
  std::string l1 = strip(tx.encode("FRAME", {{"split", "3"}}));
  std::string bad = l1;
  bad[bad.find("split=3") + 6] = '4';
  EXPECT_EQ(rx.decode(bad).error().code, Errc::auth_failed);
  ASSERT_TRUE(rx.decode(l1).ok());
  EXPECT_EQ(rx.decode(l1).error().code, Errc::replay);
  EXPECT_EQ(rx.decode("garbage").error().code, Errc::malformed_header);
}

// control_kinds.def is the one list: every kind it names decodes in its
// direction, and a kind it does not name (or one from the wrong side) is
// an error naming the kind, never a line skipped in silence (#22).
TEST(Control, OnlyTheListedKindsOfADirectionDecode) {
  for (ControlDir dir : {ControlDir::agent_to_controller, ControlDir::controller_to_agent}) {
    ControlCodec tx(secret(1), dir), rx(secret(1), dir);
    const std::string kinds = control_kinds(dir);
    ASSERT_FALSE(kinds.empty());
    size_t n = 0;
    for (size_t a = 0; a < kinds.size();) {
      const size_t b = std::min(kinds.find(", ", a), kinds.size());
      const std::string k = kinds.substr(a, b - a);
      auto m = rx.decode(strip(tx.encode(k, {{"x", "1"}})));
      ASSERT_TRUE(m.ok()) << k << ": " << m.error().str();
      EXPECT_EQ(m->kind, k);
      ++n;
      a = b + 2;
    }
    EXPECT_GE(n, dir == ControlDir::agent_to_controller ? 17u : 4u) << kinds;
    auto bogus = rx.decode(strip(tx.encode("BOGUS\x01", {})));
    ASSERT_FALSE(bogus.ok());
    EXPECT_EQ(bogus.error().code, Errc::malformed_header);
    EXPECT_NE(bogus.error().message.find("unknown kind 'BOGUS?'"), std::string::npos) << bogus.error().message;
    EXPECT_NE(bogus.error().message.find("expected one of " + kinds), std::string::npos) << bogus.error().message;
  }
  EXPECT_TRUE(control_kind_known(ControlDir::agent_to_controller, "FRAME"));
  EXPECT_FALSE(control_kind_known(ControlDir::controller_to_agent, "FRAME"));
  EXPECT_TRUE(control_kind_known(ControlDir::controller_to_agent, "CMD"));
  EXPECT_FALSE(control_kind_known(ControlDir::agent_to_controller, "CMD"));
  EXPECT_TRUE(control_kind_known(ControlDir::controller_to_agent, "HEARTBEAT"));
  EXPECT_TRUE(control_kind_known(ControlDir::agent_to_controller, "HEARTBEAT"));
}
