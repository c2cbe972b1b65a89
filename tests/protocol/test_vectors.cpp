// The test vectors printed in protocol/PROTOCOL.md ("Test vectors") are read
// from that file and recomputed here, so the spec and the code cannot drift.
// TRACR_PRINT_VECTORS=1 prints the computed values.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "frame_fixture.hpp"
#include "spec_vectors.hpp"
#include "protocol/session.hpp"

using namespace tracr;
using namespace tracr::protocol;

namespace {

std::vector<uint8_t> hex(const std::string& s) { return *from_hex(s); }
std::string hx(const uint8_t* p, size_t n) { return to_hex(p, n); }
template <class C> std::string hx(const C& c) { return to_hex(c.data(), c.size()); }

// S = 00 01 .. 1f, the session secret of the key-schedule vectors.
std::vector<uint8_t> spec_secret() {
  std::vector<uint8_t> s(32);
  for (int i = 0; i < 32; ++i) s[i] = static_cast<uint8_t>(i);
  return s;
}

// RFC 7748 section 6.1: Alice's (participant) and Bob's (server) private keys.
std::pair<Key256, Key256> rfc7748_private_keys() {
  Key256 a{}, b{};
  auto ab = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
  auto bb = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
  std::copy(ab.begin(), ab.end(), a.begin());
  std::copy(bb.begin(), bb.end(), b.begin());
  return {a, b};
}

using Check = tracr::testing::SpecCheck;
using tracr::testing::spec_vectors;

}  // namespace

TEST(Vectors, SpecFileHasVectors) { EXPECT_GE(spec_vectors().size(), 10u); }

TEST(Vectors, NonceLayout) {
  Check check;
  Iv96 iv{};
  auto ivb = hex(check.print ? "000102030405060708090a0b" : check.spec["nonce.iv"]);
  std::copy(ivb.begin(), ivb.end(), iv.begin());
  auto n = make_nonce(iv, 0x1122334455667788ull);
  check("nonce.iv", hx(iv));
  check("nonce.counter_0x1122334455667788", hx(n));
}

TEST(Vectors, KeySchedule) {
  Check check;
  std::vector<uint8_t> secret = spec_secret(), nc(32, 0x11), ns(32, 0x22);
  const auto [a, b] = rfc7748_private_keys();
  auto pa = x25519_public(a), pb = x25519_public(b);
  auto shared = x25519_shared(a, *pb);
  ASSERT_TRUE(shared.ok());
  std::vector<uint8_t> dh(shared->begin(), shared->end());
  std::vector<uint8_t> pub_c(pa->begin(), pa->end()), pub_s(pb->begin(), pb->end());
  auto k = derive_keys(secret, dh, nc, ns, pub_c, pub_s, 0x0102030405060708ull);
  ASSERT_TRUE(k.ok());
  check("kx.shared", hx(dh));
  check("keys.x25519.c2s_key", hx(k->c2s.key));
  check("keys.x25519.c2s_iv", hx(k->c2s.iv));
  check("keys.x25519.s2c_key", hx(k->s2c.key));
  check("keys.x25519.s2c_iv", hx(k->s2c.iv));
  auto k2 = derive_keys(secret, {}, nc, ns, {}, {}, 0x0102030405060708ull);
  ASSERT_TRUE(k2.ok());
  check("keys.secret_only.c2s_key", hx(k2->c2s.key));
  check("keys.secret_only.c2s_iv", hx(k2->c2s.iv));
}

TEST(Vectors, EncryptedFrame) {
  Check check;
  FrameWriter w;
  w.set_session(42);
  Key256 key{};
  Iv96 iv{};
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 12; ++i) iv[i] = static_cast<uint8_t>(0xf0 + i);
  ASSERT_TRUE(w.set_key(key, iv).ok());
  float vals[2] = {1.0f, -2.0f};
  Bundle b{Tensor::view("x", DType::float32, {2}, vals)};
  Header h;
  h.type = MsgType::infer_request;
  h.split = 3;
  std::vector<Segment> segs;
  ASSERT_TRUE(w.write(h, b, SendOptions{}, [&](Segment&& s) {
                  segs.push_back(std::move(s));
                  return Status{};
                }).ok());
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].size(), 3u);
  auto part = [&](size_t i) { return hx(static_cast<const uint8_t*>(segs[0][i].data()), segs[0][i].size()); };
  check("frame.enc.header", part(0));
  check("frame.enc.part1", part(1));
  check("frame.enc.seal", part(2));
  // And the reader accepts exactly these bytes.
  FrameReader r;
  r.set_session(42);
  ASSERT_TRUE(r.set_key(key, iv).ok());
  auto out = r.feed(segs[0]);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error().str();
  EXPECT_EQ(0, std::memcmp(out[0]->tensors[0].data, vals, 8));
}

TEST(Vectors, PlainFrameWithMetaAndInt8) {
  Check check;
  FrameWriter w;
  w.set_session(7);
  float vals[4] = {0.0f, 0.5f, 1.0f, 2.0f};
  Bundle b{Tensor::view("act", DType::float32, {1, 4}, vals)};
  Header h;
  h.type = MsgType::infer_result;
  h.split = 0;
  h.meta = {{"tail_ns", int64_t{1500}}};
  SendOptions so;
  so.codec = *CodecSpec::parse("int8");
  std::vector<Segment> segs;
  ASSERT_TRUE(w.write(h, b, so, [&](Segment&& s) {
                  segs.push_back(std::move(s));
                  return Status{};
                }).ok());
  ASSERT_EQ(segs[0].size(), 2u);
  check("frame.plain_int8.header", hx(static_cast<const uint8_t*>(segs[0][0].data()), segs[0][0].size()));
  check("frame.plain_int8.part1", hx(static_cast<const uint8_t*>(segs[0][1].data()), segs[0][1].size()));
}

// A middle device's reply (PROTOCOL.md 3.4 "Forwarding"): its own times,
// then the next device's under "d.", and the one after that under "d.d.";
// meta stays a flat map (keys sorted, as msgpack maps are written here).
TEST(Vectors, ForwardedReplyNestsTheNextDevicesMeta) {
  Check check;
  FrameWriter w;
  w.set_session(7);
  float vals[2] = {1.0f, -2.0f};
  Bundle b{Tensor::view("fc", DType::float32, {1, 2}, vals)};
  Header h;
  h.type = MsgType::infer_result;
  h.split = 6;
  h.meta = {{"req_seq", int64_t{3}},       {"last", int64_t{13}},         {"srv_ns", int64_t{900000}},
            {"srv_tail_ns", int64_t{200000}}, {"fwd_encode_ns", int64_t{30000}}, {"fwd_rtt_ns", int64_t{600000}},
            {"fwd_decode_ns", int64_t{20000}}, {"d.srv_ns", int64_t{400000}},   {"d.last", int64_t{20}},
            {"d.d.srv_ns", int64_t{100000}}};
  std::vector<Segment> segs;
  ASSERT_TRUE(w.write(h, b, SendOptions{}, [&](Segment&& s) {
                  segs.push_back(std::move(s));
                  return Status{};
                }).ok());
  check("frame.forward_reply.header", hx(static_cast<const uint8_t*>(segs[0][0].data()), segs[0][0].size()));
  // The reader gives the nested keys back as they were written.
  FrameReader r;
  r.set_session(7);
  auto out = r.feed(segs[0]);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error().str();
  EXPECT_EQ(out[0]->header.meta, h.meta);
}

// The sparse stage (PROTOCOL.md 4.4) on 11 float32 elements: zeros, -0.0 and
// a NaN with a payload, so the bitmap has padding bits; alone, after fp16
// and after int8 (whose codes are recentred on the zero point).
TEST(Vectors, PlainFramesWithSparseCodecs) {
  Check check;
  const uint32_t bits[11] = {0x00000000u, 0x3fc00000u, 0, 0, 0x80000000u, 0x7fc00001u,
                             0x40000000u, 0,           0, 0, 0x40400000u};
  float vals[11];
  std::memcpy(vals, bits, sizeof vals);
  for (const char* codec : {"sparse", "fp16+sparse", "int8+sparse"}) {
    FrameWriter w;
    w.set_session(7);
    Bundle b{Tensor::view("act", DType::float32, {1, 11}, vals)};
    Header h;
    h.type = MsgType::infer_request;
    h.split = 2;
    SendOptions so;
    so.codec = *CodecSpec::parse(codec);
    std::vector<Segment> segs;
    ASSERT_TRUE(w.write(h, b, so, [&](Segment&& s) {
                    segs.push_back(std::move(s));
                    return Status{};
                  }).ok());
    ASSERT_EQ(segs.size(), 1u);
    ASSERT_EQ(segs[0].size(), 2u);
    std::string key = std::string("frame.plain_") + codec;
    for (auto& c : key) c = c == '+' ? '_' : c;
    if (std::string(codec) == "sparse") {
      check(key + ".header", hx(static_cast<const uint8_t*>(segs[0][0].data()), segs[0][0].size()));
    }
    check(key + ".part1", hx(static_cast<const uint8_t*>(segs[0][1].data()), segs[0][1].size()));
    // The reader gives back the lossy stage's values, zeros included.
    FrameReader r;
    r.set_session(7);
    auto out = r.feed(segs[0]);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].ok()) << out[0].error().str();
    if (std::string(codec) == "sparse") {
      EXPECT_EQ(0, std::memcmp(out[0]->tensors[0].data, bits, sizeof bits));
    }
  }
}

// HELLO and WELCOME as sent (header, then MAC; PROTOCOL.md section 6.3).
TEST(Vectors, AuthenticatedHandshake) {
  Check check;
  auto hk = derive_hello_keys(spec_secret());
  ASSERT_TRUE(hk.ok());
  check("hello.key_c2s", hx(hk->c2s));
  check("hello.key_s2c", hx(hk->s2c));
  const auto [a, b] = rfc7748_private_keys();
  auto pa = x25519_public(a), pb = x25519_public(b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  auto header_of = [](MsgType type, uint64_t sid, uint8_t nonce_byte, const Key256& pub, const char* role) {
    Header h;
    h.type = type;
    Handshake hs;
    hs.versions = {1};
    hs.ciphers = {"aes-256-gcm"};
    hs.kx = {"x25519"};
    hs.nonce.assign(32, nonce_byte);
    hs.pub.assign(pub.begin(), pub.end());
    hs.role = role;
    hs.agent = "tracr/0.1";
    hs.max_frame_bytes = 1ull << 30;
    if (type == MsgType::hello) hs.ts_ms = 1767225600000ull;  // 2026-01-01T00:00:00Z (6.3 freshness)
    h.hs = std::move(hs);
    FrameWriter w;
    w.set_session(sid);
    std::vector<uint8_t> bytes;
    EXPECT_TRUE(w.write(h, {}, SendOptions{}, [&](Segment&& s) {
                   EXPECT_EQ(s.size(), 1u);
                   bytes.assign(static_cast<const uint8_t*>(s[0].data()),
                                static_cast<const uint8_t*>(s[0].data()) + s[0].size());
                   return Status{};
                 }).ok());
    return bytes;
  };
  auto hello = header_of(MsgType::hello, 0, 0x11, *pa, "PARTICIPANT");
  auto hmac = hello_mac(*hk, hello.data(), hello.size());
  check("hello.header", hx(hello));
  check("hello.mac", hx(hmac));
  auto welcome = header_of(MsgType::welcome, 0x0102030405060708ull, 0x22, *pb, "SERVER");
  check("welcome.header", hx(welcome));
  check("welcome.mac", hx(welcome_mac(*hk, welcome.data(), welcome.size(), hmac.data())));
}

// A control message on a plain session: header with `ctr`, then the seal
// (PROTOCOL.md 5.1). Same key, IV and session as the encrypted frame.
TEST(Vectors, PlainSessionSealedHeartbeat) {
  Check check;
  Key256 key{};
  Iv96 iv{};
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 12; ++i) iv[i] = static_cast<uint8_t>(0xf0 + i);
  FrameWriter w;
  w.set_session(42);
  ASSERT_TRUE(w.set_control_key(key, iv).ok());
  Header h;
  h.type = MsgType::heartbeat;
  std::vector<Segment> segs;
  ASSERT_TRUE(w.write(h, {}, SendOptions{}, [&](Segment&& s) {
                  segs.push_back(std::move(s));
                  return Status{};
                }).ok());
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].size(), 2u);
  check("control.plain_heartbeat.header", hx(static_cast<const uint8_t*>(segs[0][0].data()), segs[0][0].size()));
  check("control.plain_heartbeat.seal", hx(static_cast<const uint8_t*>(segs[0][1].data()), segs[0][1].size()));
  FrameReader r;
  r.set_session(42);
  ASSERT_TRUE(r.set_control_key(key, iv).ok());
  auto out = r.feed(segs[0]);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].ok()) << out[0].error().str();
}
