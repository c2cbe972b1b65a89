#include "protocol/session.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tracr::protocol {

namespace {
constexpr size_t kNonceBytes = 32;
constexpr std::string_view kCipherAes = "aes-256-gcm";

Error hs_err(std::string msg) { return make_error(Errc::handshake_failed, std::move(msg)); }

void split_key(const std::vector<uint8_t>& okm, DirectionKey& k) {
  std::memcpy(k.key.data(), okm.data(), 32);
  std::memcpy(k.iv.data(), okm.data() + 32, 12);
}
}  // namespace

int64_t hello_clock_ms(const Security& sec) {
  if (sec.clock) return sec.clock();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::function<int64_t()> anchored_clock(int64_t unix_ms) {
  const auto at = std::chrono::steady_clock::now();
  return [unix_ms, at] {
    return unix_ms +
           std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - at).count();
  };
}

Result<SessionKeys> derive_keys(const std::vector<uint8_t>& secret, const std::vector<uint8_t>& dh,
                                const std::vector<uint8_t>& nonce_c, const std::vector<uint8_t>& nonce_s,
                                const std::vector<uint8_t>& pub_c, const std::vector<uint8_t>& pub_s,
                                uint64_t session) {
  std::vector<uint8_t> t;
  t.insert(t.end(), nonce_c.begin(), nonce_c.end());
  t.insert(t.end(), nonce_s.begin(), nonce_s.end());
  t.insert(t.end(), pub_c.begin(), pub_c.end());
  t.insert(t.end(), pub_s.begin(), pub_s.end());
  for (int i = 7; i >= 0; --i) t.push_back(static_cast<uint8_t>(session >> (8 * i)));
  auto salt = sha256(t.data(), t.size());
  std::vector<uint8_t> ikm(secret);
  ikm.insert(ikm.end(), dh.begin(), dh.end());
  SessionKeys k;
  k.session = session;
  k.cipher = Cipher::aes256gcm;
  auto c2s = hkdf_sha256(ikm.data(), ikm.size(), salt.data(), salt.size(), "tracr/1 c2s", 44);
  if (!c2s) return std::move(c2s.error());
  auto s2c = hkdf_sha256(ikm.data(), ikm.size(), salt.data(), salt.size(), "tracr/1 s2c", 44);
  if (!s2c) return std::move(s2c.error());
  split_key(*c2s, k.c2s);
  split_key(*s2c, k.s2c);
  return k;
}

Result<HelloKeys> derive_hello_keys(const std::vector<uint8_t>& secret) {
  if (secret.size() < 16)
    return hs_err("the session secret is missing or shorter than 16 bytes (HELLO is authenticated with it, "
                  "with or without encryption)");
  HelloKeys k;
  auto c2s = hkdf_sha256(secret.data(), secret.size(), nullptr, 0, "tracr/1 hello c2s", 32);
  if (!c2s) return std::move(c2s.error());
  auto s2c = hkdf_sha256(secret.data(), secret.size(), nullptr, 0, "tracr/1 hello s2c", 32);
  if (!s2c) return std::move(s2c.error());
  std::memcpy(k.c2s.data(), c2s->data(), 32);
  std::memcpy(k.s2c.data(), s2c->data(), 32);
  return k;
}

std::array<uint8_t, kHelloMacBytes> hello_mac(const HelloKeys& k, const uint8_t* header, size_t n) {
  return hmac_sha256(k.c2s.data(), k.c2s.size(), header, n);
}

std::array<uint8_t, kHelloMacBytes> welcome_mac(const HelloKeys& k, const uint8_t* header, size_t n,
                                                const uint8_t* hello) {
  std::vector<uint8_t> msg(header, header + n);
  msg.insert(msg.end(), hello, hello + kHelloMacBytes);
  return hmac_sha256(k.s2c.data(), k.s2c.size(), msg.data(), msg.size());
}

ClientHandshake::ClientHandshake(Security sec, std::string role, std::string agent,
                                 uint64_t max_frame_bytes)
    : sec_(std::move(sec)), role_(std::move(role)), agent_(std::move(agent)),
      max_frame_bytes_(max_frame_bytes) {}

Result<Header> ClientHandshake::hello() {
  if (sec_.secret.size() < 16)
    return hs_err("the session secret is missing or shorter than 16 bytes (HELLO is authenticated with it, "
                  "with or without encryption)");
  nonce_.resize(kNonceBytes);
  TRACR_TRY(random_bytes(nonce_.data(), nonce_.size()));
  Header h;
  h.type = MsgType::hello;
  Handshake hs;
  hs.versions = {kVersion};
  hs.ciphers = {std::string(sec_.encrypt ? kCipherAes : "none")};
  if (sec_.encrypt && sec_.x25519) {
    auto kp = x25519_generate();
    if (!kp) return std::move(kp.error());
    kp_ = *kp;
    hs.kx = {"x25519"};
    hs.pub.assign(kp_.pub.begin(), kp_.pub.end());
  }
  hs.nonce = nonce_;
  hs.role = role_;
  hs.agent = agent_;
  hs.max_frame_bytes = max_frame_bytes_;
  const int64_t now = hello_clock_ms(sec_);
  if (now < 0) return hs_err("this end's clock reads before 1970; HELLO needs a Unix time (PROTOCOL.md 6.3)");
  hs.ts_ms = static_cast<uint64_t>(now);
  h.hs = std::move(hs);
  return h;
}

Result<SessionKeys> ClientHandshake::on_welcome(const Header& w) {
  if (w.type == MsgType::error && w.error)
    return hs_err("server refused the handshake: " + w.error->str());
  if (w.type != MsgType::welcome || !w.hs) return hs_err("expected WELCOME, got " + std::string(msg_type_name(w.type)));
  const Handshake& hs = *w.hs;
  if (hs.versions.size() != 1 || hs.versions[0] != kVersion)
    return hs_err("server chose an unsupported protocol version");
  if (w.session == 0) return hs_err("server assigned session id 0");
  const std::string want(sec_.encrypt ? kCipherAes : "none");
  if (hs.ciphers.size() != 1 || hs.ciphers[0] != want)
    return hs_err("server chose cipher '" + (hs.ciphers.empty() ? std::string() : hs.ciphers[0]) +
                  "' but this end requires '" + want + "' (both ends must agree on encryption)");
  if (hs.nonce.size() != kNonceBytes) return hs_err("server nonce is not 32 bytes");
  if (!sec_.encrypt) {
    // Plain session: the same schedule, without a key exchange, keys the
    // seals of control messages (PROTOCOL.md 5.1).
    auto keys = derive_keys(sec_.secret, {}, nonce_, hs.nonce, {}, {}, w.session);
    if (keys) keys->cipher = Cipher::none;
    return keys;
  }
  std::vector<uint8_t> dh, pub_c, pub_s;
  const bool kx = sec_.x25519;
  const bool peer_kx = hs.kx.size() == 1 && hs.kx[0] == "x25519";
  if (kx != peer_kx) return hs_err("key exchange disagreement (x25519 offered but not chosen)");
  if (kx) {
    if (hs.pub.size() != 32) return hs_err("server X25519 public key is not 32 bytes");
    Key256 peer{};
    std::memcpy(peer.data(), hs.pub.data(), 32);
    auto sh = x25519_shared(kp_.priv, peer);
    if (!sh) return hs_err("X25519: " + sh.error().message);
    dh.assign(sh->begin(), sh->end());
    pub_c.assign(kp_.pub.begin(), kp_.pub.end());
    pub_s = hs.pub;
  }
  return derive_keys(sec_.secret, dh, nonce_, hs.nonce, pub_c, pub_s, w.session);
}

Result<ServerAccept> server_accept(const Security& sec, const Header& hello, std::string agent,
                                   uint64_t max_frame_bytes) {
  if (hello.type != MsgType::hello || !hello.hs) return hs_err("expected HELLO");
  const Handshake& hs = *hello.hs;
  if (std::find(hs.versions.begin(), hs.versions.end(), kVersion) == hs.versions.end())
    return hs_err("peer speaks no protocol version this server supports (1)");
  const std::string want(sec.encrypt ? kCipherAes : "none");
  if (std::find(hs.ciphers.begin(), hs.ciphers.end(), want) == hs.ciphers.end())
    return hs_err("peer offered cipher(s) that do not include '" + want +
                  "' (both ends must agree on encryption)");
  if (hs.nonce.size() != kNonceBytes) return hs_err("peer nonce is not 32 bytes");
  if (sec.secret.size() < 16) return hs_err("server has no session secret");
  ServerAccept acc;
  uint64_t sid = 0;
  while (sid == 0) TRACR_TRY(random_bytes(reinterpret_cast<uint8_t*>(&sid), sizeof sid));
  Handshake out;
  out.versions = {kVersion};
  out.ciphers = {want};
  out.nonce.resize(kNonceBytes);
  TRACR_TRY(random_bytes(out.nonce.data(), out.nonce.size()));
  out.role = "SERVER";
  out.agent = std::move(agent);
  out.max_frame_bytes = max_frame_bytes;
  acc.keys.session = sid;
  if (sec.encrypt) {
    std::vector<uint8_t> dh, pub_c, pub_s;
    const bool peer_kx = std::find(hs.kx.begin(), hs.kx.end(), "x25519") != hs.kx.end();
    if (sec.x25519 != peer_kx)
      return hs_err(std::string("key exchange disagreement: this server ") +
                    (sec.x25519 ? "requires" : "does not use") + " x25519");
    if (sec.x25519) {
      if (hs.pub.size() != 32) return hs_err("peer X25519 public key is not 32 bytes");
      auto kp = x25519_generate();
      if (!kp) return std::move(kp.error());
      Key256 peer{};
      std::memcpy(peer.data(), hs.pub.data(), 32);
      auto sh = x25519_shared(kp->priv, peer);
      if (!sh) return hs_err("X25519: " + sh.error().message);
      dh.assign(sh->begin(), sh->end());
      pub_c = hs.pub;
      pub_s.assign(kp->pub.begin(), kp->pub.end());
      out.kx = {"x25519"};
      out.pub = pub_s;
    }
    auto keys = derive_keys(sec.secret, dh, hs.nonce, out.nonce, pub_c, pub_s, sid);
    if (!keys) return std::move(keys.error());
    acc.keys = *keys;
  } else {
    auto keys = derive_keys(sec.secret, {}, hs.nonce, out.nonce, {}, {}, sid);
    if (!keys) return std::move(keys.error());
    acc.keys = *keys;
    acc.keys.cipher = Cipher::none;
  }
  acc.welcome.type = MsgType::welcome;
  acc.welcome.hs = std::move(out);
  return acc;
}

}  // namespace tracr::protocol
