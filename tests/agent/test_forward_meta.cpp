// What a chain's middle device sends on (PROTOCOL.md 3.4 "Forwarding"): the
// downstream request's meta from the request's `last` and `then`, and the
// faults named before any segment runs.
#include <gtest/gtest.h>

#include "agent/forward.hpp"
#include "protocol/meta_keys.hpp"

using namespace tracr;
using namespace tracr::agent;
using namespace tracr::protocol;
namespace mk = tracr::protocol::meta_key;

namespace {

Frame request(Meta meta) {
  Frame f;
  f.header.type = MsgType::infer_request;
  f.header.split = 3;
  f.header.meta = std::move(meta);
  return f;
}

}  // namespace

TEST(ForwardMeta, TheCutsAfterLastBecomeTheNextDevicesRequest) {
  // No `then`: the request ends here.
  auto none = forward_meta(request({{mk::kLast, int64_t{13}}}));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // `then` "": the next device runs to N (no last, no then); the model fingerprint goes along.
  auto tail = forward_meta(request({{mk::kLast, int64_t{13}}, {mk::kThen, std::string()}, {mk::kModelFp, std::string("ab")}}));
  ASSERT_TRUE(tail.ok()) << tail.error().str();
  ASSERT_TRUE(tail->has_value());
  EXPECT_EQ(**tail, (Meta{{mk::kModelFp, std::string("ab")}}));
  // Three devices after this one: 20|31 -> the next runs [13, 20) and forwards 31 on.
  auto more = forward_meta(request({{mk::kLast, int64_t{13}}, {mk::kThen, std::string("20|31")}}));
  ASSERT_TRUE(more.ok()) << more.error().str();
  EXPECT_EQ(**more, (Meta{{mk::kLast, int64_t{20}}, {mk::kThen, std::string("31")}}));
  auto one = forward_meta(request({{mk::kLast, int64_t{13}}, {mk::kThen, std::string("13")}}));
  ASSERT_TRUE(one.ok()) << one.error().str();
  EXPECT_EQ(**one, (Meta{{mk::kLast, int64_t{13}}, {mk::kThen, std::string()}}));  // an empty segment forwards
}

TEST(ForwardMeta, BadForwardingIsNamed) {
  struct Case {
    Meta meta;
    Errc code;
    std::string text;
  };
  const Case cases[] = {
      {{{mk::kLast, int64_t{13}}, {mk::kThen, int64_t{20}}}, Errc::field_type, "meta.then must be a string"},
      {{{mk::kThen, std::string("20")}}, Errc::invalid_argument, "meta.then needs meta.last"},
      {{{mk::kLast, std::string("13")}, {mk::kThen, std::string("20")}}, Errc::invalid_argument,
       "meta.then needs meta.last"},
      {{{mk::kLast, int64_t{13}}, {mk::kThen, std::string("9")}}, Errc::invalid_argument,
       "meta.then '9': cut 9 comes before 13"},
      {{{mk::kLast, int64_t{13}}, {mk::kThen, std::string("20|15")}}, Errc::invalid_argument,
       "meta.then '20|15': cut 15 comes before 20"},
      {{{mk::kLast, int64_t{13}}, {mk::kThen, std::string("20|")}}, Errc::invalid_argument,
       "meta.then: placement '20|'"},
  };
  for (const auto& [meta, code, text] : cases) {
    auto r = forward_meta(request(meta));
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, code) << r.error().str();
    EXPECT_NE(r.error().message.find(text), std::string::npos) << r.error().message;
  }
}
