// Cryptographic primitives over OpenSSL 3 EVP: AES-256-GCM with counter
// nonces, HKDF-SHA256, HMAC-SHA256, SHA-256, X25519, secure random.
// Key schedule and nonce layout: protocol/PROTOCOL.md, "Security".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::protocol {

using Key256 = std::array<uint8_t, 32>;
using Iv96 = std::array<uint8_t, 12>;
using Tag128 = std::array<uint8_t, 16>;
inline constexpr size_t kTagBytes = 16;

// nonce = iv XOR (4 zero bytes || big-endian 64-bit counter)  (TLS 1.3 style)
Iv96 make_nonce(const Iv96& iv, uint64_t counter);

// One direction's AES-256-GCM state; the key is expanded once.
class AesGcm {
 public:
  AesGcm();
  ~AesGcm();
  AesGcm(AesGcm&&) noexcept;
  AesGcm& operator=(AesGcm&&) noexcept;
  AesGcm(const AesGcm&) = delete;
  AesGcm& operator=(const AesGcm&) = delete;

  Status set_key(const Key256& key, const Iv96& iv);
  bool has_key() const { return keyed_; }
  // A second state with the same key and IV (its own OpenSSL contexts), for
  // sealing or opening parts on another thread: one AesGcm is not safe to
  // use from two threads at once. Error crypto_backend if no key is set or
  // OpenSSL cannot copy the contexts.
  Result<AesGcm> clone() const;

  // Encrypts n bytes of `in` into `out` (may equal in) with the nonce for
  // `counter` and associated data `aad`; writes the 16-byte tag to `tag`.
  Status seal(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in,
              size_t n, uint8_t* out, uint8_t* tag);
  // Decrypts and verifies; auth_failed if the tag does not verify (out then
  // holds unspecified bytes and must not be used).
  Status open(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in,
              size_t n, uint8_t* out, const uint8_t* tag);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> enc_, dec_;
  Iv96 iv_{};
  bool keyed_ = false;
};

// RFC 5869 HKDF with SHA-256; `len` <= 255*32.
Result<std::vector<uint8_t>> hkdf_sha256(const uint8_t* ikm, size_t ikm_len,
                                         const uint8_t* salt, size_t salt_len,
                                         std::string_view info, size_t len);
std::array<uint8_t, 32> sha256(const uint8_t* data, size_t n);
std::array<uint8_t, 32> hmac_sha256(const uint8_t* key, size_t key_len, const uint8_t* data,
                                    size_t n);
// Constant-time comparison.
bool ct_equal(const uint8_t* a, const uint8_t* b, size_t n);

struct X25519KeyPair {
  Key256 priv{};
  Key256 pub{};
};
// Fresh key pair from the OS RNG.
Result<X25519KeyPair> x25519_generate();
// Public key for a given private key (RFC 7748 test vectors use this).
Result<Key256> x25519_public(const Key256& priv);
// Shared secret; handshake_failed for an all-zero result (low-order point).
Result<Key256> x25519_shared(const Key256& priv, const Key256& peer_pub);

// Fills n bytes from OpenSSL's CSPRNG.
Status random_bytes(uint8_t* out, size_t n);

// Hex helpers for secrets and test vectors; from_hex errors on bad input.
std::string to_hex(const uint8_t* p, size_t n);
Result<std::vector<uint8_t>> from_hex(std::string_view hex);

}  // namespace tracr::protocol
