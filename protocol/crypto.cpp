// Cryptographic primitives over OpenSSL 3 EVP (see crypto.hpp).
//
// Only the EVP / provider APIs are used; no deprecated low-level calls.
// Algorithm objects (EVP_MD, EVP_MAC, EVP_KDF) are fetched once and kept for
// the life of the process: fetching is the expensive part of a small HKDF or
// HMAC, and the fetched objects are immutable and safe to share between
// threads. They are deliberately never freed (freeing at static destruction
// could race OpenSSL's own atexit cleanup).
#include "protocol/crypto.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/proverr.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <string>

namespace tracr::protocol {

namespace {

// Largest chunk handed to an OpenSSL call that takes an `int` length.
constexpr size_t kMaxChunk = size_t{1} << 30;

// Drains OpenSSL's thread-local error queue into one readable string.
std::string drain_openssl_errors() {
  std::string out;
  char buf[256];
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  if (out.empty()) out = "no OpenSSL error detail";
  return out;
}

Error backend_error(std::string_view what) {
  std::string msg(what);
  msg += " failed: ";
  msg += drain_openssl_errors();
  return make_error(Errc::crypto_backend, std::move(msg));
}

const EVP_MD* sha256_md() {
  static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

EVP_MAC* hmac_mac() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

EVP_KDF* hkdf_kdf() {
  static EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  return kdf;
}

const EVP_CIPHER* aes256gcm() {
  static const EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  return c;
}

Error counter_exhausted(uint64_t counter) {
  return make_error(Errc::invalid_argument,
                    "AES-GCM counter " + std::to_string(counter) +
                        " is reserved: the nonce space of this key is exhausted, rekey");
}

struct PkeyDeleter {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxDeleter {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct MacCtxDeleter {
  void operator()(EVP_MAC_CTX* p) const { EVP_MAC_CTX_free(p); }
};
struct KdfCtxDeleter {
  void operator()(EVP_KDF_CTX* p) const { EVP_KDF_CTX_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxDeleter>;
using MacCtxPtr = std::unique_ptr<EVP_MAC_CTX, MacCtxDeleter>;
using KdfCtxPtr = std::unique_ptr<EVP_KDF_CTX, KdfCtxDeleter>;

// Feeds `n` bytes through EVP_{En,De}cryptUpdate in int-sized chunks.
// out == nullptr means AAD.
template <class UpdateFn>
bool update_chunked(UpdateFn fn, EVP_CIPHER_CTX* ctx, const uint8_t* in, size_t n,
                    uint8_t* out) {
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min(n - done, kMaxChunk);
    int outl = 0;
    if (fn(ctx, out ? out + done : nullptr, &outl, in + done, static_cast<int>(chunk)) != 1)
      return false;
    // GCM is a stream mode: every input byte produces one output byte at once.
    if (out && static_cast<size_t>(outl) != chunk) return false;
    done += chunk;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// Nonces

Iv96 make_nonce(const Iv96& iv, uint64_t counter) {
  Iv96 nonce = iv;
  for (int i = 0; i < 8; ++i)
    nonce[4 + i] ^= static_cast<uint8_t>(counter >> (56 - 8 * i));
  return nonce;
}

// ---------------------------------------------------------------------------
// AesGcm

struct AesGcm::Ctx {
  EVP_CIPHER_CTX* c = nullptr;
  Ctx() : c(EVP_CIPHER_CTX_new()) {}
  ~Ctx() { EVP_CIPHER_CTX_free(c); }  // also cleanses the key schedule
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;
};

AesGcm::AesGcm() = default;
AesGcm::~AesGcm() { OPENSSL_cleanse(iv_.data(), iv_.size()); }

AesGcm::AesGcm(AesGcm&& o) noexcept
    : enc_(std::move(o.enc_)), dec_(std::move(o.dec_)), iv_(o.iv_), keyed_(o.keyed_) {
  OPENSSL_cleanse(o.iv_.data(), o.iv_.size());
  o.keyed_ = false;
}

AesGcm& AesGcm::operator=(AesGcm&& o) noexcept {
  if (this != &o) {
    enc_ = std::move(o.enc_);
    dec_ = std::move(o.dec_);
    iv_ = o.iv_;
    keyed_ = o.keyed_;
    OPENSSL_cleanse(o.iv_.data(), o.iv_.size());
    o.keyed_ = false;
  }
  return *this;
}

Status AesGcm::set_key(const Key256& key, const Iv96& iv) {
  keyed_ = false;
  const EVP_CIPHER* cipher = aes256gcm();
  if (!cipher) return backend_error("fetching AES-256-GCM");
  if (!enc_) enc_ = std::make_unique<Ctx>();
  if (!dec_) dec_ = std::make_unique<Ctx>();
  if (!enc_->c || !dec_->c) return backend_error("EVP_CIPHER_CTX_new");
  // Expand the key once per direction; the default GCM IV length is 12 bytes,
  // which is what make_nonce produces, so no SET_IVLEN is needed.
  if (EVP_EncryptInit_ex(enc_->c, cipher, nullptr, key.data(), nullptr) != 1)
    return backend_error("AES-256-GCM encrypt key setup");
  if (EVP_DecryptInit_ex(dec_->c, cipher, nullptr, key.data(), nullptr) != 1)
    return backend_error("AES-256-GCM decrypt key setup");
  iv_ = iv;
  keyed_ = true;
  return {};
}

Result<AesGcm> AesGcm::clone() const {
  if (!keyed_) return make_error(Errc::crypto_backend, "AES-GCM clone: no key set");
  AesGcm c;
  c.enc_ = std::make_unique<Ctx>();
  c.dec_ = std::make_unique<Ctx>();
  if (!c.enc_->c || !c.dec_->c) return backend_error("EVP_CIPHER_CTX_new");
  if (EVP_CIPHER_CTX_copy(c.enc_->c, enc_->c) != 1 || EVP_CIPHER_CTX_copy(c.dec_->c, dec_->c) != 1)
    return backend_error("AES-256-GCM context copy");
  c.iv_ = iv_;
  c.keyed_ = true;
  return c;
}

Status AesGcm::seal(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in,
                    size_t n, uint8_t* out, uint8_t* tag) {
  if (!keyed_) return make_error(Errc::crypto_backend, "AES-GCM seal: no key set");
  if (counter == std::numeric_limits<uint64_t>::max()) return counter_exhausted(counter);
  EVP_CIPHER_CTX* c = enc_->c;
  const Iv96 nonce = make_nonce(iv_, counter);
  if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) != 1)
    return backend_error("AES-GCM seal: setting nonce");
  if (aad_len > 0 && !update_chunked(EVP_EncryptUpdate, c, aad, aad_len, nullptr))
    return backend_error("AES-GCM seal: AAD");
  if (n > 0 && !update_chunked(EVP_EncryptUpdate, c, in, n, out))
    return backend_error("AES-GCM seal: encrypt");
  uint8_t scratch[16];
  int fin = 0;
  // GCM's Final writes no bytes; give it a valid pointer even when out is null.
  if (EVP_EncryptFinal_ex(c, n > 0 ? out + n : scratch, &fin) != 1 || fin != 0)
    return backend_error("AES-GCM seal: final");
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag) != 1)
    return backend_error("AES-GCM seal: reading tag");
  return {};
}

Status AesGcm::open(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in,
                    size_t n, uint8_t* out, const uint8_t* tag) {
  if (!keyed_) return make_error(Errc::crypto_backend, "AES-GCM open: no key set");
  if (counter == std::numeric_limits<uint64_t>::max()) return counter_exhausted(counter);
  EVP_CIPHER_CTX* c = dec_->c;
  const Iv96 nonce = make_nonce(iv_, counter);
  if (EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) != 1)
    return backend_error("AES-GCM open: setting nonce");
  Tag128 expected;
  std::memcpy(expected.data(), tag, kTagBytes);
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes),
                          expected.data()) != 1)
    return backend_error("AES-GCM open: setting tag");
  if (aad_len > 0 && !update_chunked(EVP_DecryptUpdate, c, aad, aad_len, nullptr))
    return backend_error("AES-GCM open: AAD");
  if (n > 0 && !update_chunked(EVP_DecryptUpdate, c, in, n, out))
    return backend_error("AES-GCM open: decrypt");
  uint8_t scratch[16];
  int fin = 0;
  if (EVP_DecryptFinal_ex(c, n > 0 ? out + n : scratch, &fin) != 1) {
    // For GCM a failing DecryptFinal means the tag did not verify. Do not hand
    // unauthenticated plaintext back to a caller that ignores the status.
    ERR_clear_error();
    if (n > 0) OPENSSL_cleanse(out, n);
    return make_error(Errc::auth_failed,
                      "AES-GCM tag mismatch (counter " + std::to_string(counter) + ", " +
                          std::to_string(n) + " bytes, " + std::to_string(aad_len) +
                          " bytes AAD)");
  }
  return {};
}

// ---------------------------------------------------------------------------
// Hashes, MAC, KDF

Result<std::vector<uint8_t>> hkdf_sha256(const uint8_t* ikm, size_t ikm_len,
                                         const uint8_t* salt, size_t salt_len,
                                         std::string_view info, size_t len) {
  if (len == 0 || len > 255 * 32)
    return make_error(Errc::invalid_argument,
                      "hkdf_sha256: output length " + std::to_string(len) +
                          " outside 1.." + std::to_string(255 * 32));
  EVP_KDF* kdf = hkdf_kdf();
  if (!kdf) return backend_error("fetching HKDF");
  KdfCtxPtr kctx(EVP_KDF_CTX_new(kdf));
  if (!kctx) return backend_error("EVP_KDF_CTX_new(HKDF)");

  // OSSL_PARAM wants non-const pointers; OpenSSL only reads them.
  static const uint8_t kEmpty = 0;
  char digest[] = "SHA256";
  OSSL_PARAM params[5];
  int i = 0;
  params[i++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[i++] = OSSL_PARAM_construct_octet_string(
      OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(ikm_len ? ikm : &kEmpty), ikm_len);
  // No salt parameter means RFC 5869's default: HashLen zero bytes.
  if (salt_len > 0)
    params[i++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                    const_cast<uint8_t*>(salt), salt_len);
  if (!info.empty())
    params[i++] = OSSL_PARAM_construct_octet_string(
        OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size());
  params[i] = OSSL_PARAM_construct_end();

  std::vector<uint8_t> out(len);
  if (EVP_KDF_derive(kctx.get(), out.data(), out.size(), params) != 1) {
    OPENSSL_cleanse(out.data(), out.size());
    return backend_error("HKDF-SHA256 derive");
  }
  return out;
}

std::array<uint8_t, 32> sha256(const uint8_t* data, size_t n) {
  static const uint8_t kEmpty = 0;
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  const EVP_MD* md = sha256_md();
  if (!md || EVP_Digest(n ? data : &kEmpty, n, out.data(), &len, md, nullptr) != 1 ||
      len != out.size())
    throw Fatal(backend_error("SHA-256"));
  return out;
}

std::array<uint8_t, 32> hmac_sha256(const uint8_t* key, size_t key_len, const uint8_t* data,
                                    size_t n) {
  static const uint8_t kEmpty = 0;
  std::array<uint8_t, 32> out{};
  EVP_MAC* mac = hmac_mac();
  if (!mac) throw Fatal(backend_error("fetching HMAC"));
  MacCtxPtr mctx(EVP_MAC_CTX_new(mac));
  if (!mctx) throw Fatal(backend_error("EVP_MAC_CTX_new(HMAC)"));
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end(),
  };
  size_t outl = 0;
  // A non-null key pointer is required even for an empty key.
  if (EVP_MAC_init(mctx.get(), key_len ? key : &kEmpty, key_len, params) != 1 ||
      (n > 0 && EVP_MAC_update(mctx.get(), data, n) != 1) ||
      EVP_MAC_final(mctx.get(), out.data(), &outl, out.size()) != 1 || outl != out.size())
    throw Fatal(backend_error("HMAC-SHA256"));
  return out;
}

bool ct_equal(const uint8_t* a, const uint8_t* b, size_t n) {
  return n == 0 || CRYPTO_memcmp(a, b, n) == 0;
}

// ---------------------------------------------------------------------------
// X25519

Result<X25519KeyPair> x25519_generate() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
  if (!key) return backend_error("X25519 keygen");
  X25519KeyPair kp;
  size_t plen = kp.priv.size(), qlen = kp.pub.size();
  if (EVP_PKEY_get_raw_private_key(key.get(), kp.priv.data(), &plen) != 1 ||
      plen != kp.priv.size() ||
      EVP_PKEY_get_raw_public_key(key.get(), kp.pub.data(), &qlen) != 1 ||
      qlen != kp.pub.size()) {
    OPENSSL_cleanse(kp.priv.data(), kp.priv.size());
    return backend_error("X25519 exporting generated key");
  }
  return kp;
}

Result<Key256> x25519_public(const Key256& priv) {
  PkeyPtr key(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, priv.data(), priv.size()));
  if (!key) return backend_error("X25519 loading private key");
  Key256 pub{};
  size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &len) != 1 || len != pub.size())
    return backend_error("X25519 computing public key");
  return pub;
}

Result<Key256> x25519_shared(const Key256& priv, const Key256& peer_pub) {
  PkeyPtr key(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, priv.data(), priv.size()));
  if (!key) return backend_error("X25519 loading private key");
  PkeyPtr peer(
      EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_pub.data(), peer_pub.size()));
  if (!peer) return backend_error("X25519 loading peer public key");
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
  if (!ctx) return backend_error("X25519 EVP_PKEY_CTX_new_from_pkey");
  if (EVP_PKEY_derive_init(ctx.get()) != 1) return backend_error("X25519 derive init");
  if (EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1)
    return backend_error("X25519 setting peer key");

  Key256 shared{};
  size_t len = shared.size();
  if (EVP_PKEY_derive(ctx.get(), shared.data(), &len) != 1) {
    // OpenSSL itself refuses an all-zero X25519 result (RFC 7748 section 6.1)
    // and reports it as a failed derivation.
    const unsigned long e = ERR_peek_last_error();
    if (ERR_GET_LIB(e) == ERR_LIB_PROV &&
        ERR_GET_REASON(e) == PROV_R_FAILED_DURING_DERIVATION) {
      ERR_clear_error();
      return make_error(Errc::handshake_failed,
                        "X25519: peer public key is a low-order point (all-zero shared "
                        "secret)");
    }
    return backend_error("X25519 derive");
  }
  if (len != shared.size()) return backend_error("X25519 derive (short output)");
  static const Key256 kZero{};
  if (CRYPTO_memcmp(shared.data(), kZero.data(), shared.size()) == 0)
    return make_error(Errc::handshake_failed,
                      "X25519: peer public key is a low-order point (all-zero shared secret)");
  return shared;
}

// ---------------------------------------------------------------------------
// Random and hex

Status random_bytes(uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min(n - done, kMaxChunk);
    if (RAND_bytes(out + done, static_cast<int>(chunk)) != 1)
      return backend_error("RAND_bytes");
    done += chunk;
  }
  return {};
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 0x0f];
  }
  return s;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Result<std::vector<uint8_t>> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0)
    return make_error(Errc::invalid_argument,
                      "from_hex: odd length " + std::to_string(hex.size()) +
                          ", expected an even number of hex digits");
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); ++i) {
    const int v = hex_value(hex[i]);
    if (v < 0) {
      const auto uc = static_cast<unsigned char>(hex[i]);
      std::string shown = (uc >= 0x20 && uc < 0x7f)
                              ? std::string("'") + hex[i] + "'"
                              : "byte 0x" + to_hex(&uc, 1);
      return make_error(Errc::invalid_argument, "from_hex: " + shown + " at position " +
                                                    std::to_string(i) +
                                                    " is not a hex digit");
    }
    if (i % 2 == 0)
      out[i / 2] = static_cast<uint8_t>(v << 4);
    else
      out[i / 2] |= static_cast<uint8_t>(v);
  }
  return out;
}

}  // namespace tracr::protocol
