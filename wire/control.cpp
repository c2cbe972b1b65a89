#include "wire/control.hpp"

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "protocol/crypto.hpp"

namespace tracr::wire {

using protocol::hkdf_sha256;
using protocol::hmac_sha256;
using protocol::to_hex;

namespace {
constexpr size_t kMacBytes = 16;
}

Result<int64_t> ControlMsg::get_int(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) return make_error(Errc::missing_field, kind + " has no field '" + key + "'");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    return make_error(Errc::field_type, kind + " field '" + key + "' is not an integer: '" + it->second + "'");
  return static_cast<int64_t>(v);
}

Result<double> ControlMsg::get_double(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) return make_error(Errc::missing_field, kind + " has no field '" + key + "'");
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0')
    return make_error(Errc::field_type, kind + " field '" + key + "' is not a number: '" + it->second + "'");
  return v;
}

Result<std::string> ControlMsg::get_str(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) return make_error(Errc::missing_field, kind + " has no field '" + key + "'");
  return it->second;
}

std::string ControlMsg::get_or(const std::string& key, const std::string& dflt) const {
  auto it = fields.find(key);
  return it == fields.end() ? dflt : it->second;
}

std::string pct_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c <= 0x20 || c == '%' || c == '=' || c == '#' || c >= 0x7f) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

Result<std::string> pct_decode(const std::string& s) {
  auto hv = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return make_error(Errc::field_type, "truncated %-escape");
    int a = hv(s[i + 1]), b = hv(s[i + 2]);
    if (a < 0 || b < 0) return make_error(Errc::field_type, "bad %-escape");
    out += static_cast<char>(a * 16 + b);
    i += 2;
  }
  return out;
}

void Heartbeat::start(int period_ms, std::function<void()> beat) {
  if (th_.joinable()) return;
  stop_ = false;
  th_ = std::thread([this, period_ms, beat = std::move(beat)] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(period_ms), [this] { return stop_; })) {
      lock.unlock();
      beat();
      lock.lock();
    }
  });
}

void Heartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (th_.joinable()) th_.join();
}

namespace {

struct KindInfo {
  const char* name;
  bool a2c, c2a;
};
constexpr bool kA2c(const char* d) { return d[0] == 'a' || d[0] == 'b'; }
constexpr bool kC2a(const char* d) { return d[0] == 'c' || d[0] == 'b'; }
constexpr KindInfo kKinds[] = {
#define TRACR_CONTROL_KIND(name, dir, meaning) {#name, kA2c(#dir), kC2a(#dir)},
#include "wire/control_kinds.def"
#undef TRACR_CONTROL_KIND
};

bool listed(const KindInfo& k, ControlDir dir) { return dir == ControlDir::agent_to_controller ? k.a2c : k.c2a; }

// A peer's token for a message: at most 40 characters, non-printable ones as '?'.
std::string printable(const std::string& s) {
  std::string out = s.substr(0, 40);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s.size() > 40 ? out + "..." : out;
}

}  // namespace

bool control_kind_known(ControlDir dir, const std::string& kind) {
  for (const auto& k : kKinds)
    if (kind == k.name && listed(k, dir)) return true;
  return false;
}

std::string control_kinds(ControlDir dir) {
  std::string out;
  for (const auto& k : kKinds)
    if (listed(k, dir)) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

ControlCodec::ControlCodec(const std::vector<uint8_t>& secret, ControlDir dir) : dir_(dir) {
  const char* info = dir == ControlDir::agent_to_controller ? "tracr/1 control a2c" : "tracr/1 control c2a";
  auto k = hkdf_sha256(secret.data(), secret.size(), nullptr, 0, info, 32);
  key_ = k ? *k : std::vector<uint8_t>(32, 0);
}

std::string ControlCodec::encode(const std::string& kind, const std::map<std::string, std::string>& fields) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string body = std::to_string(next_send_++) + " " + kind;
  for (const auto& [k, v] : fields) body += " " + pct_encode(k) + "=" + pct_encode(v);
  auto mac = hmac_sha256(key_.data(), key_.size(), reinterpret_cast<const uint8_t*>(body.data()), body.size());
  return body + " #" + to_hex(mac.data(), kMacBytes) + "\n";
}

Result<ControlMsg> ControlCodec::decode(const std::string& line) {
  auto hash = line.rfind(" #");
  if (hash == std::string::npos || line.size() - hash - 2 != 2 * kMacBytes)
    return make_error(Errc::malformed_header, "control line without a MAC: '" + line.substr(0, 80) + "'");
  const std::string body = line.substr(0, hash);
  auto mac = hmac_sha256(key_.data(), key_.size(), reinterpret_cast<const uint8_t*>(body.data()), body.size());
  const std::string want = to_hex(mac.data(), kMacBytes);
  const std::string got = line.substr(hash + 2);
  if (!protocol::ct_equal(reinterpret_cast<const uint8_t*>(want.data()),
                          reinterpret_cast<const uint8_t*>(got.data()), want.size()))
    return make_error(Errc::auth_failed, "control line MAC does not verify (wrong session secret?)");
  std::istringstream in(body);
  ControlMsg m;
  std::string seq;
  if (!(in >> seq >> m.kind)) return make_error(Errc::malformed_header, "control line without seq and kind");
  char* end = nullptr;
  m.seq = std::strtoull(seq.c_str(), &end, 10);
  if (*end != '\0') return make_error(Errc::malformed_header, "control line seq is not a number");
  if (!control_kind_known(dir_, m.kind))
    return make_error(Errc::malformed_header,
                      "control line of unknown kind '" + printable(m.kind) + "' " +
                          (dir_ == ControlDir::agent_to_controller ? "from the agent" : "from the controller") +
                          "; expected one of " + control_kinds(dir_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (m.seq != next_recv_)
      return make_error(Errc::replay, "control line seq " + seq + ", expected " + std::to_string(next_recv_));
    next_recv_++;
  }
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq == std::string::npos) return make_error(Errc::malformed_header, "control field without '=': " + tok);
    auto k = pct_decode(tok.substr(0, eq));
    auto v = pct_decode(tok.substr(eq + 1));
    if (!k || !v) return make_error(Errc::malformed_header, "bad escape in control field " + tok);
    m.fields[*k] = *v;
  }
  return m;
}

}  // namespace tracr::wire
