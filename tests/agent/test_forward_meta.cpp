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

// A chain of three devices after the participant (placement 3|13|20 of 22
// layers): each device's stages from the reply's nested meta, the first
// hop's from the participant's own figures, and the identities that make
// the hops add up to the participant's time.
TEST(ForwardMeta, AChainsReplyGivesEveryDevicesStagesAndTheyAddUp) {
  Meta m;
  // Device 1 (the middle the participant sends to).
  m[mk::kSrvNs] = int64_t{9000};
  m[mk::kSrvDecodeNs] = int64_t{100};
  m[mk::kSrvTailNs] = int64_t{1000};
  m[mk::kFwdEncodeNs] = int64_t{200};
  m[mk::kFwdRawBytes] = int64_t{4096};
  m[mk::kFwdWireBytes] = int64_t{4200};
  m[mk::kFwdRttNs] = int64_t{7500};
  m[mk::kFwdDecodeNs] = int64_t{50};
  m[mk::kFwdReplyBytes] = int64_t{80};
  // Device 2, nested.
  m["d.srv_ns"] = int64_t{6000};
  m["d.srv_decode_ns"] = int64_t{90};
  m["d.srv_tail_ns"] = int64_t{2000};
  m["d.fwd_encode_ns"] = int64_t{150};
  m["d.fwd_raw_bytes"] = int64_t{1024};
  m["d.fwd_wire_bytes"] = int64_t{1100};
  m["d.fwd_rtt_ns"] = int64_t{3500};
  m["d.fwd_decode_ns"] = int64_t{40};
  m["d.fwd_reply_bytes"] = int64_t{70};
  // Device 3, the last: no forwarding keys.
  m["d.d.srv_ns"] = int64_t{3000};
  m["d.d.srv_decode_ns"] = int64_t{30};
  m["d.d.srv_tail_ns"] = int64_t{2500};
  wire::FrameRecord r;
  r.raw_bytes = 12288;
  r.wire_bytes = 12400;
  r.reply_bytes = 90;
  r.encode_ns = 300;
  r.network_ns = 700;
  r.server_ns = 9000;
  r.return_ns = 60;
  const auto hops = hops_of_reply(m, r, {3, 13, 20}, 22);
  ASSERT_EQ(hops.size(), 3u);
  EXPECT_EQ(hops[0].hop, 1);
  EXPECT_EQ(hops[0].first_layer, 3);
  EXPECT_EQ(hops[0].end_layer, 13);
  EXPECT_EQ(hops[2].first_layer, 20);
  EXPECT_EQ(hops[2].end_layer, 22);
  // Hop 1 is the participant's own measurement.
  EXPECT_EQ(hops[0].in_wire_bytes, 12400);
  EXPECT_EQ(hops[0].network_ns, 700);
  EXPECT_EQ(hops[0].send_encode_ns, 300);
  EXPECT_EQ(hops[0].reply_decode_ns, 60);
  // Hop 2 as device 1 measured it: the round trip less its encoding, device 2's time and the reply's decoding.
  EXPECT_EQ(hops[1].in_raw_bytes, 4096);
  EXPECT_EQ(hops[1].in_wire_bytes, 4200);
  EXPECT_EQ(hops[1].reply_bytes, 80);
  EXPECT_EQ(hops[1].network_ns, 7500 - 200 - 6000 - 50);
  EXPECT_EQ(hops[2].network_ns, 3500 - 150 - 3000 - 40);
  EXPECT_EQ(hops[2].in_wire_bytes, 1100);
  EXPECT_FALSE(hops[2].forward_ns.has_value());
  EXPECT_EQ(hops[1].compute_ns, 2000);
  EXPECT_EQ(hops[2].decode_ns, 30);
  // The identities: every device's time is its compute, its round trip onward and a residual;
  // the round trip is the next hop's stages.
  for (size_t h = 0; h < 3; ++h) {
    EXPECT_EQ(*hops[h].server_ns, *hops[h].compute_ns + hops[h].forward_ns.value_or(0) + *hops[h].other_ns) << h;
    if (h + 1 < 3)
      EXPECT_EQ(*hops[h].forward_ns, *hops[h + 1].send_encode_ns + *hops[h + 1].network_ns + *hops[h + 1].server_ns +
                                         *hops[h + 1].reply_decode_ns)
          << h;
  }
  EXPECT_EQ(hops[0].server_ns, r.server_ns);
  // A figure the reply lacks is NULL, and so is what is computed from it.
  m.erase("d.srv_ns");
  const auto partial = hops_of_reply(m, r, {3, 13, 20}, 22);
  EXPECT_FALSE(partial[1].server_ns.has_value());
  EXPECT_FALSE(partial[1].network_ns.has_value());
  EXPECT_FALSE(partial[1].other_ns.has_value());
  EXPECT_TRUE(partial[2].network_ns.has_value());
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
