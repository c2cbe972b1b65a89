// Handshake and key schedule (HELLO / WELCOME), independent of sockets.
// See protocol/PROTOCOL.md "Handshake" and "Key schedule".
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "protocol/crypto.hpp"
#include "protocol/header.hpp"

namespace tracr::protocol {

// Security settings of one end. Both ends must agree on `encrypt`; a WELCOME
// or HELLO that disagrees fails the handshake (no silent downgrade).
struct Security {
  bool encrypt = true;
  // Session secret (>= 16 bytes), in plain mode too: it authenticates HELLO
  // and WELCOME whatever the cipher.
  std::vector<uint8_t> secret;
  bool x25519 = true;           // add an ephemeral X25519 exchange (forward secrecy)
  // The clock HELLO timestamps are written and checked with (Unix ms;
  // PROTOCOL.md 6.3). Empty: this machine's system clock. An agent launched
  // by tracrctl runs on the controller's clock (anchored_clock), so a board
  // whose clock was never set still agrees with its peers.
  std::function<int64_t()> clock;
};

// Unix milliseconds on sec.clock, or on the system clock when it is empty.
int64_t hello_clock_ms(const Security& sec);
// A clock that read `unix_ms` at the moment of the call and runs on from
// there with this machine's monotonic clock (never jumps with NTP).
std::function<int64_t()> anchored_clock(int64_t unix_ms);

struct DirectionKey {
  Key256 key{};
  Iv96 iv{};
};
struct SessionKeys {
  uint64_t session = 0;
  Cipher cipher = Cipher::none;  // none: the keys seal control messages only
  DirectionKey c2s;  // participant (client) -> server
  DirectionKey s2c;  // server -> participant
};

// salt = SHA-256(nonce_c || nonce_s || pub_c || pub_s || be64(session))
// ikm  = secret || X25519(shared)   (shared omitted without x25519)
// c2s  = HKDF-SHA256(ikm, salt, "tracr/1 c2s", 44) -> key[0..32) iv[32..44)
// s2c  = HKDF-SHA256(ikm, salt, "tracr/1 s2c", 44)
Result<SessionKeys> derive_keys(const std::vector<uint8_t>& secret, const std::vector<uint8_t>& dh,
                                const std::vector<uint8_t>& nonce_c, const std::vector<uint8_t>& nonce_s,
                                const std::vector<uint8_t>& pub_c, const std::vector<uint8_t>& pub_s,
                                uint64_t session);

// HELLO and WELCOME authentication (PROTOCOL.md §6.3). Each carries one part
// after its header: a 32-byte HMAC-SHA256 under a key derived from the
// session secret alone, so a server checks a HELLO before it spends a key
// exchange or a session slot on it.
//   hk_c2s = HKDF-SHA256(S, salt = "", info = "tracr/1 hello c2s", 32)
//   hk_s2c = HKDF-SHA256(S, salt = "", info = "tracr/1 hello s2c", 32)
//   HELLO   mac = HMAC-SHA256(hk_c2s, HELLO header bytes)
//   WELCOME mac = HMAC-SHA256(hk_s2c, WELCOME header bytes || HELLO mac)
inline constexpr size_t kHelloMacBytes = 32;
struct HelloKeys {
  Key256 c2s{};
  Key256 s2c{};
};
// handshake_failed when the secret is shorter than 16 bytes.
Result<HelloKeys> derive_hello_keys(const std::vector<uint8_t>& secret);
std::array<uint8_t, kHelloMacBytes> hello_mac(const HelloKeys& k, const uint8_t* header, size_t n);
std::array<uint8_t, kHelloMacBytes> welcome_mac(const HelloKeys& k, const uint8_t* header, size_t n,
                                                const uint8_t* hello_mac);

class ClientHandshake {
 public:
  ClientHandshake(Security sec, std::string role, std::string agent, uint64_t max_frame_bytes);
  // The HELLO header prototype (type, hs) to send.
  Result<Header> hello();
  // Checks the WELCOME and derives keys. handshake_failed with the reason
  // (version, cipher disagreement, missing key material) otherwise.
  Result<SessionKeys> on_welcome(const Header& welcome);

 private:
  Security sec_;
  std::string role_, agent_;
  uint64_t max_frame_bytes_;
  std::vector<uint8_t> nonce_;
  X25519KeyPair kp_;
};

// Server side: checks a HELLO, picks the session id, returns the WELCOME
// prototype to send and the keys to install after sending it.
struct ServerAccept {
  Header welcome;
  SessionKeys keys;
};
Result<ServerAccept> server_accept(const Security& sec, const Header& hello, std::string agent,
                                   uint64_t max_frame_bytes);

}  // namespace tracr::protocol
