// Tests for protocol/crypto: published known-answer vectors (FIPS 180-2,
// RFC 4231, RFC 5869, RFC 7748, McGrew-Viega GCM spec) and the behaviour the
// channel relies on (tamper detection, nonce layout, error codes).
#include "protocol/crypto.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tracr::protocol {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes hex(std::string_view h) {
  auto r = from_hex(h);
  EXPECT_TRUE(r.ok()) << h;
  return r.ok() ? r.value() : Bytes{};
}

template <size_t N>
std::array<uint8_t, N> hex_array(std::string_view h) {
  Bytes b = hex(h);
  std::array<uint8_t, N> a{};
  EXPECT_EQ(b.size(), N) << h;
  std::copy_n(b.begin(), std::min(b.size(), N), a.begin());
  return a;
}

template <class C>
std::string hex_of(const C& c) {
  return to_hex(c.data(), c.size());
}

Bytes iota_bytes(uint8_t first, uint8_t last_inclusive) {
  Bytes b;
  for (int v = first; v <= last_inclusive; ++v) b.push_back(static_cast<uint8_t>(v));
  return b;
}

Bytes pattern(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 131 + 7);
  return b;
}

std::string_view as_sv(const Bytes& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// ---------------------------------------------------------------------------
// SHA-256, HMAC, constant-time compare

TEST(Sha256, AbcMatchesFips180Vector) {
  const std::string m = "abc";
  auto d = sha256(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  EXPECT_EQ(hex_of(d), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, EmptyInputHasKnownDigest) {
  auto d = sha256(nullptr, 0);
  EXPECT_EQ(hex_of(d), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(HmacSha256, Rfc4231Case2) {
  const std::string key = "Jefe";
  const std::string data = "what do ya want for nothing?";
  auto mac = hmac_sha256(reinterpret_cast<const uint8_t*>(key.data()), key.size(),
                         reinterpret_cast<const uint8_t*>(data.data()), data.size());
  EXPECT_EQ(hex_of(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(HmacSha256, EmptyKeyAndMessageWork) {
  auto mac = hmac_sha256(nullptr, 0, nullptr, 0);
  EXPECT_EQ(hex_of(mac), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(CtEqual, ComparesContents) {
  const uint8_t a[] = {1, 2, 3, 4};
  const uint8_t b[] = {1, 2, 3, 4};
  const uint8_t c[] = {1, 2, 3, 5};
  EXPECT_TRUE(ct_equal(a, b, 4));
  EXPECT_FALSE(ct_equal(a, c, 4));
  EXPECT_TRUE(ct_equal(a, c, 3));
  EXPECT_TRUE(ct_equal(a, c, 0));
}

// ---------------------------------------------------------------------------
// HKDF (RFC 5869 appendix A, SHA-256 cases)

TEST(Hkdf, Rfc5869Case1) {
  Bytes ikm(22, 0x0b);
  Bytes salt = iota_bytes(0x00, 0x0c);
  Bytes info = iota_bytes(0xf0, 0xf9);
  auto okm = hkdf_sha256(ikm.data(), ikm.size(), salt.data(), salt.size(), as_sv(info), 42);
  ASSERT_TRUE(okm.ok()) << okm.error().str();
  EXPECT_EQ(hex_of(*okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887"
            "185865");
}

TEST(Hkdf, Rfc5869Case2LongInputs) {
  Bytes ikm = iota_bytes(0x00, 0x4f);
  Bytes salt = iota_bytes(0x60, 0xaf);
  Bytes info = iota_bytes(0xb0, 0xff);
  auto okm = hkdf_sha256(ikm.data(), ikm.size(), salt.data(), salt.size(), as_sv(info), 82);
  ASSERT_TRUE(okm.ok()) << okm.error().str();
  EXPECT_EQ(hex_of(*okm),
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac782"
            "7271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3"
            "434f1d87");
}

TEST(Hkdf, Rfc5869Case3EmptySaltAndInfo) {
  Bytes ikm(22, 0x0b);
  auto okm = hkdf_sha256(ikm.data(), ikm.size(), nullptr, 0, "", 42);
  ASSERT_TRUE(okm.ok()) << okm.error().str();
  EXPECT_EQ(hex_of(*okm),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b6"
            "1a96c8");
}

TEST(Hkdf, EmptyIkmIsAccepted) {
  // Cross-checked with python3 cryptography's HKDF.
  const std::string salt = "salt";
  auto okm = hkdf_sha256(nullptr, 0, reinterpret_cast<const uint8_t*>(salt.data()),
                         salt.size(), "info", 32);
  ASSERT_TRUE(okm.ok()) << okm.error().str();
  EXPECT_EQ(hex_of(*okm), "7aac7b8120501c2c8e1ee50e6cde135361e99ceb9d8d406ac528b9e9175614c0");
}

TEST(Hkdf, OutputLengthLimitsAreEnforced) {
  Bytes ikm(32, 1);
  auto zero = hkdf_sha256(ikm.data(), ikm.size(), nullptr, 0, "x", 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, Errc::invalid_argument);
  auto too_long = hkdf_sha256(ikm.data(), ikm.size(), nullptr, 0, "x", 255 * 32 + 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().code, Errc::invalid_argument);
  auto max = hkdf_sha256(ikm.data(), ikm.size(), nullptr, 0, "x", 255 * 32);
  ASSERT_TRUE(max.ok()) << max.error().str();
  EXPECT_EQ(max->size(), 255u * 32);
}

TEST(Hkdf, InfoSeparatesKeys) {
  Bytes ikm(32, 7);
  auto a = hkdf_sha256(ikm.data(), ikm.size(), nullptr, 0, "c2s", 32);
  auto b = hkdf_sha256(ikm.data(), ikm.size(), nullptr, 0, "s2c", 32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

// ---------------------------------------------------------------------------
// X25519 (RFC 7748 section 6.1)

const char* kAlicePriv = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
const char* kAlicePub = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";
const char* kBobPriv = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb";
const char* kBobPub = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";
const char* kShared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";

TEST(X25519, Rfc7748PublicKeys) {
  auto a = x25519_public(hex_array<32>(kAlicePriv));
  auto b = x25519_public(hex_array<32>(kBobPriv));
  ASSERT_TRUE(a.ok()) << a.error().str();
  ASSERT_TRUE(b.ok()) << b.error().str();
  EXPECT_EQ(hex_of(*a), kAlicePub);
  EXPECT_EQ(hex_of(*b), kBobPub);
}

TEST(X25519, Rfc7748SharedSecretFromBothSides) {
  auto ab = x25519_shared(hex_array<32>(kAlicePriv), hex_array<32>(kBobPub));
  auto ba = x25519_shared(hex_array<32>(kBobPriv), hex_array<32>(kAlicePub));
  ASSERT_TRUE(ab.ok()) << ab.error().str();
  ASSERT_TRUE(ba.ok()) << ba.error().str();
  EXPECT_EQ(hex_of(*ab), kShared);
  EXPECT_EQ(hex_of(*ba), kShared);
}

TEST(X25519, FreshPairsAgreeOnSharedSecret) {
  auto a = x25519_generate();
  auto b = x25519_generate();
  ASSERT_TRUE(a.ok()) << a.error().str();
  ASSERT_TRUE(b.ok()) << b.error().str();
  EXPECT_NE(a->priv, b->priv);
  EXPECT_NE(a->pub, b->pub);
  auto pa = x25519_public(a->priv);
  ASSERT_TRUE(pa.ok());
  EXPECT_EQ(*pa, a->pub);
  auto s1 = x25519_shared(a->priv, b->pub);
  auto s2 = x25519_shared(b->priv, a->pub);
  ASSERT_TRUE(s1.ok()) << s1.error().str();
  ASSERT_TRUE(s2.ok()) << s2.error().str();
  EXPECT_EQ(*s1, *s2);
  EXPECT_NE(*s1, Key256{});
}

TEST(X25519, AllZeroPeerKeyIsHandshakeFailure) {
  auto s = x25519_shared(hex_array<32>(kAlicePriv), Key256{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::handshake_failed) << s.error().str();
}

TEST(X25519, OrderFourPeerKeyIsHandshakeFailure) {
  Key256 one{};
  one[0] = 1;  // u = 1, a point of order 4: the clamped scalar maps it to zero
  auto s = x25519_shared(hex_array<32>(kBobPriv), one);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::handshake_failed) << s.error().str();
}

// ---------------------------------------------------------------------------
// Nonces

TEST(MakeNonce, CounterIsBigEndianInLastEightBytes) {
  Iv96 zero{};
  auto n = make_nonce(zero, 0x0102030405060708ULL);
  EXPECT_EQ(hex_of(n), "000000000102030405060708");
}

TEST(MakeNonce, CounterIsXoredIntoIv) {
  Iv96 iv = hex_array<12>("a0a1a2a3a4a5a6a7a8a9aaab");
  EXPECT_EQ(make_nonce(iv, 0), iv);
  EXPECT_EQ(hex_of(make_nonce(iv, 1)), "a0a1a2a3a4a5a6a7a8a9aaaa");
  EXPECT_EQ(hex_of(make_nonce(iv, 0xffffffffffffffffULL)), "a0a1a2a35b5a595857565554");
  EXPECT_EQ(hex_of(make_nonce(iv, 0x0100000000000000ULL)), "a0a1a2a3a5a5a6a7a8a9aaab");
}

// ---------------------------------------------------------------------------
// AES-256-GCM known answers (McGrew & Viega, "The Galois/Counter Mode of
// Operation", test cases 13-16, 256-bit key). counter 0 => nonce == iv.

struct GcmVector {
  const char* name;
  const char* key;
  const char* iv;
  const char* aad;
  const char* pt;
  const char* ct;
  const char* tag;
};

const GcmVector kGcmVectors[] = {
    {"case13_empty", "0000000000000000000000000000000000000000000000000000000000000000",
     "000000000000000000000000", "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"},
    {"case14_zero_block",
     "0000000000000000000000000000000000000000000000000000000000000000",
     "000000000000000000000000", "", "00000000000000000000000000000000",
     "cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919"},
    {"case15_four_blocks",
     "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
     "cafebabefacedbaddecaf888", "",
     "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e"
     "2449a6b525b16aedf5aa0de657ba637b391aafd255",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b"
     "1056828838c5f61e6393ba7a0abcc9f662898015ad",
     "b094dac5d93471bdec1a502270e3cc6c"},
    {"case16_with_aad",
     "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
     "cafebabefacedbaddecaf888", "feedfacedeadbeeffeedfacedeadbeefabaddad2",
     "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e"
     "2449a6b525b16aedf5aa0de657ba637b39",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b"
     "1056828838c5f61e6393ba7a0abcc9f662",
     "76fc6ece0f4e1768cddf8853bb2d551b"},
};

class GcmKnownAnswer : public ::testing::TestWithParam<GcmVector> {};

TEST_P(GcmKnownAnswer, SealProducesVector) {
  const auto& v = GetParam();
  AesGcm g;
  ASSERT_TRUE(g.set_key(hex_array<32>(v.key), hex_array<12>(v.iv)).ok());
  Bytes aad = hex(v.aad), pt = hex(v.pt);
  Bytes ct(pt.size());
  Tag128 tag{};
  auto st = g.seal(0, aad.data(), aad.size(), pt.data(), pt.size(), ct.data(), tag.data());
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(to_hex(ct.data(), ct.size()), v.ct);
  EXPECT_EQ(hex_of(tag), v.tag);
}

TEST_P(GcmKnownAnswer, OpenRecoversPlaintext) {
  const auto& v = GetParam();
  AesGcm g;
  ASSERT_TRUE(g.set_key(hex_array<32>(v.key), hex_array<12>(v.iv)).ok());
  Bytes aad = hex(v.aad), ct = hex(v.ct);
  Tag128 tag = hex_array<16>(v.tag);
  Bytes pt(ct.size());
  auto st = g.open(0, aad.data(), aad.size(), ct.data(), ct.size(), pt.data(), tag.data());
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(to_hex(pt.data(), pt.size()), v.pt);
}

INSTANTIATE_TEST_SUITE_P(McGrewViega, GcmKnownAnswer, ::testing::ValuesIn(kGcmVectors),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------
// AES-256-GCM behaviour

struct Sealed {
  Bytes ct;
  Tag128 tag{};
};

class Gcm : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = hex_array<32>("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
    iv_ = hex_array<12>("0c0b0a090807060504030201");
    ASSERT_TRUE(tx_.set_key(key_, iv_).ok());
    ASSERT_TRUE(rx_.set_key(key_, iv_).ok());
  }

  Sealed seal(uint64_t counter, const Bytes& aad, const Bytes& pt) {
    Sealed s;
    s.ct.resize(pt.size());
    auto st = tx_.seal(counter, aad.data(), aad.size(), pt.data(), pt.size(), s.ct.data(),
                       s.tag.data());
    EXPECT_TRUE(st.ok()) << st.error().str();
    return s;
  }

  Status open(AesGcm& g, uint64_t counter, const Bytes& aad, const Sealed& s, Bytes* pt) {
    pt->assign(s.ct.size(), 0);
    return g.open(counter, aad.data(), aad.size(), s.ct.data(), s.ct.size(), pt->data(),
                  s.tag.data());
  }

  Key256 key_{};
  Iv96 iv_{};
  AesGcm tx_, rx_;
};

TEST_F(Gcm, RoundTripsAllSizes) {
  const Bytes aad = {'h', 'd', 'r'};
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4096},
                   size_t{1} << 20}) {
    SCOPED_TRACE(n);
    Bytes pt = pattern(n);
    Sealed s = seal(42, aad, pt);
    if (n >= 16) {
      EXPECT_NE(s.ct, pt);
    }
    Bytes back;
    auto st = open(rx_, 42, aad, s, &back);
    ASSERT_TRUE(st.ok()) << st.error().str();
    EXPECT_EQ(back, pt);
  }
}

TEST_F(Gcm, RoundTripsWithoutAad) {
  Bytes pt = pattern(100);
  Sealed s = seal(3, {}, pt);
  Bytes back;
  ASSERT_TRUE(open(rx_, 3, {}, s, &back).ok());
  EXPECT_EQ(back, pt);
}

TEST_F(Gcm, EmptyPlaintextStillAuthenticatesAad) {
  const Bytes aad = {1, 2, 3};
  Sealed s = seal(9, aad, {});
  Bytes back;
  EXPECT_TRUE(open(rx_, 9, aad, s, &back).ok());
  auto st = open(rx_, 9, {1, 2, 4}, s, &back);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::auth_failed);
}

TEST_F(Gcm, InPlaceSealAndOpen) {
  const Bytes aad = {0xaa};
  const Bytes pt = pattern(1000);
  Sealed ref = seal(5, aad, pt);

  Bytes buf = pt;
  Tag128 tag{};
  ASSERT_TRUE(
      tx_.seal(5, aad.data(), aad.size(), buf.data(), buf.size(), buf.data(), tag.data()).ok());
  EXPECT_EQ(buf, ref.ct);
  EXPECT_EQ(tag, ref.tag);
  ASSERT_TRUE(
      rx_.open(5, aad.data(), aad.size(), buf.data(), buf.size(), buf.data(), tag.data()).ok());
  EXPECT_EQ(buf, pt);
}

TEST_F(Gcm, TamperedCiphertextIsRejected) {
  const Bytes aad = {1, 2, 3, 4};
  const Sealed s = seal(7, aad, pattern(64));
  for (size_t i = 0; i < s.ct.size(); ++i) {
    Sealed bad = s;
    bad.ct[i] ^= 0x01;
    Bytes out;
    auto st = open(rx_, 7, aad, bad, &out);
    ASSERT_FALSE(st.ok()) << "byte " << i;
    EXPECT_EQ(st.error().code, Errc::auth_failed) << "byte " << i;
  }
}

TEST_F(Gcm, TamperedTagIsRejected) {
  const Bytes aad = {1, 2, 3, 4};
  const Sealed s = seal(7, aad, pattern(64));
  for (size_t i = 0; i < kTagBytes; ++i) {
    Sealed bad = s;
    bad.tag[i] ^= 0x80;
    Bytes out;
    auto st = open(rx_, 7, aad, bad, &out);
    ASSERT_FALSE(st.ok()) << "tag byte " << i;
    EXPECT_EQ(st.error().code, Errc::auth_failed) << "tag byte " << i;
  }
}

TEST_F(Gcm, TamperedAadIsRejected) {
  const Bytes aad = pattern(40);
  const Sealed s = seal(7, aad, pattern(64));
  for (size_t i = 0; i < aad.size(); ++i) {
    Bytes bad = aad;
    bad[i] ^= 0x10;
    Bytes out;
    auto st = open(rx_, 7, bad, s, &out);
    ASSERT_FALSE(st.ok()) << "aad byte " << i;
    EXPECT_EQ(st.error().code, Errc::auth_failed) << "aad byte " << i;
  }
  Bytes shorter(aad.begin(), aad.end() - 1), out;
  auto st = open(rx_, 7, shorter, s, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::auth_failed);
}

TEST_F(Gcm, TruncatedCiphertextIsRejected) {
  const Sealed s = seal(7, {}, pattern(64));
  Sealed bad = s;
  bad.ct.pop_back();
  Bytes out;
  auto st = open(rx_, 7, {}, bad, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::auth_failed);
}

TEST_F(Gcm, WrongCounterIsRejected) {
  const Sealed s = seal(100, {}, pattern(32));
  Bytes out;
  for (uint64_t c : {uint64_t{0}, uint64_t{99}, uint64_t{101}, uint64_t{100} << 32}) {
    auto st = open(rx_, c, {}, s, &out);
    ASSERT_FALSE(st.ok()) << c;
    EXPECT_EQ(st.error().code, Errc::auth_failed) << c;
  }
  // The context stays usable after failures.
  EXPECT_TRUE(open(rx_, 100, {}, s, &out).ok());
  EXPECT_EQ(out, pattern(32));
}

TEST_F(Gcm, DifferentKeyIsRejected) {
  const Sealed s = seal(1, {}, pattern(32));
  Key256 other = key_;
  other[31] ^= 1;
  AesGcm g;
  ASSERT_TRUE(g.set_key(other, iv_).ok());
  Bytes out;
  auto st = open(g, 1, {}, s, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::auth_failed);
}

TEST_F(Gcm, DifferentIvIsRejected) {
  const Sealed s = seal(1, {}, pattern(32));
  Iv96 other = iv_;
  other[0] ^= 1;
  AesGcm g;
  ASSERT_TRUE(g.set_key(key_, other).ok());
  Bytes out;
  auto st = open(g, 1, {}, s, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::auth_failed);
}

TEST_F(Gcm, DistinctCountersGiveDistinctCiphertexts) {
  const Bytes pt = pattern(32);
  EXPECT_NE(seal(1, {}, pt).ct, seal(2, {}, pt).ct);
  EXPECT_EQ(seal(1, {}, pt).ct, seal(1, {}, pt).ct);
}

TEST_F(Gcm, RekeyingReplacesTheKey) {
  const Sealed s = seal(1, {}, pattern(32));
  Key256 other = key_;
  other[0] ^= 0xff;
  ASSERT_TRUE(rx_.set_key(other, iv_).ok());
  Bytes out;
  EXPECT_EQ(open(rx_, 1, {}, s, &out).error().code, Errc::auth_failed);
  ASSERT_TRUE(rx_.set_key(key_, iv_).ok());
  EXPECT_TRUE(open(rx_, 1, {}, s, &out).ok());
}

TEST_F(Gcm, MaxCounterIsRefusedNotWrapped) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  Bytes pt = pattern(16), ct(16);
  Tag128 tag{};
  auto st = tx_.seal(max, nullptr, 0, pt.data(), pt.size(), ct.data(), tag.data());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::invalid_argument);
  auto st2 = rx_.open(max, nullptr, 0, ct.data(), ct.size(), pt.data(), tag.data());
  ASSERT_FALSE(st2.ok());
  EXPECT_EQ(st2.error().code, Errc::invalid_argument);

  // The last usable counter still works.
  Sealed s = seal(max - 1, {}, pattern(16));
  Bytes out;
  EXPECT_TRUE(open(rx_, max - 1, {}, s, &out).ok());
}

TEST(GcmNoKey, SealAndOpenWithoutKeyAreBackendErrors) {
  AesGcm g;
  EXPECT_FALSE(g.has_key());
  uint8_t buf[16] = {};
  uint8_t tag[16] = {};
  auto st = g.seal(0, nullptr, 0, buf, sizeof buf, buf, tag);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::crypto_backend);
  EXPECT_NE(st.error().message.find("no key set"), std::string::npos);
  auto st2 = g.open(0, nullptr, 0, buf, sizeof buf, buf, tag);
  ASSERT_FALSE(st2.ok());
  EXPECT_EQ(st2.error().code, Errc::crypto_backend);
  EXPECT_NE(st2.error().message.find("no key set"), std::string::npos);
}

TEST(GcmMove, MovedFromHasNoKeyAndMovedToWorks) {
  AesGcm a;
  ASSERT_TRUE(a.set_key(Key256{}, Iv96{}).ok());
  EXPECT_TRUE(a.has_key());
  AesGcm b(std::move(a));
  EXPECT_TRUE(b.has_key());
  EXPECT_FALSE(a.has_key());  // NOLINT(bugprone-use-after-move): checked on purpose
  uint8_t tag[16];
  ASSERT_TRUE(b.seal(0, nullptr, 0, nullptr, 0, nullptr, tag).ok());
  EXPECT_EQ(to_hex(tag, 16), "530f8afbc74536b9a963b4f1c4cb738b");  // GCM case 13

  AesGcm c;
  c = std::move(b);
  EXPECT_TRUE(c.has_key());
  EXPECT_FALSE(b.has_key());  // NOLINT(bugprone-use-after-move)
  uint8_t buf[1] = {0};
  auto st = b.seal(0, nullptr, 0, buf, 1, buf, tag);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Errc::crypto_backend);
}

// ---------------------------------------------------------------------------
// Random and hex

TEST(RandomBytes, FillsAndDiffers) {
  EXPECT_TRUE(random_bytes(nullptr, 0).ok());
  std::array<uint8_t, 32> a{}, b{};
  ASSERT_TRUE(random_bytes(a.data(), a.size()).ok());
  ASSERT_TRUE(random_bytes(b.data(), b.size()).ok());
  EXPECT_NE(a, b);
  EXPECT_NE(a, (std::array<uint8_t, 32>{}));
}

TEST(Hex, RoundTripsLowercase) {
  const uint8_t data[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
  EXPECT_EQ(to_hex(data, sizeof data), "00017f80abff");
  auto back = from_hex("00017f80abff");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, Bytes(std::begin(data), std::end(data)));
  EXPECT_EQ(to_hex(nullptr, 0), "");
}

TEST(Hex, AcceptsUppercaseAndEmpty) {
  auto r = from_hex("ABcdEF");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (Bytes{0xab, 0xcd, 0xef}));
  auto e = from_hex("");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->empty());
}

TEST(Hex, OddLengthIsRejected) {
  auto r = from_hex("abc");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("odd"), std::string::npos) << r.error().message;
}

TEST(Hex, NonHexCharacterIsRejectedWithItsPosition) {
  auto r = from_hex("00g1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("position 2"), std::string::npos) << r.error().message;

  auto r2 = from_hex("0 ");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("position 1"), std::string::npos) << r2.error().message;

  auto r3 = from_hex(std::string_view("\x00" "0", 2));
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("position 0"), std::string::npos) << r3.error().message;
}

}  // namespace
}  // namespace tracr::protocol
