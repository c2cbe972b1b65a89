#include "agent/link_probe.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "agent/timing.hpp"
#include "protocol/stats.hpp"

namespace tracr::agent {

using namespace tracr::protocol;
using namespace tracr::wire;

namespace {

// One link probe over a session: the echo round trips, then bulk messages
// each way. Replies come back in order on the session; anything but the
// expected probe reply is an error naming what came instead.
class LinkProbe {
 public:
  LinkProbe(Client& c, const ProbeOptions& o) : c_(c), o_(o) {}

  Result<ProbeRecord> run() {
    ProbeRecord& r = r_;
    r.trigger = o_.trigger;
    r.cipher = std::string(cipher_name(c_.cipher()));
    r.duration_ms = o_.duration_ms;
    r.start_ns = ns_between(o_.run_start, Clock::now());
    TRACR_TRY(rtt());
    r.chunk_sizing = o_.chunk_bytes > 0 ? "fixed" : "auto";
    int window = o_.window;
    TRACR_TRY(size_for(true, &r.chunk_bytes, &r.sizing_up_mbps, &window));
    r.window = window;  // the up way's, whose rate planners use
    auto up = bulk(true, r.chunk_bytes, o_.duration_ms, window, &r.up_bytes, &r.up_ns);
    if (!up) return std::move(up.error());
    if (r.up_ns > 0) r.up_mbps = *up;
    window = o_.window;
    TRACR_TRY(size_for(false, &r.down_chunk_bytes, &r.sizing_down_mbps, &window));
    auto down = bulk(false, r.down_chunk_bytes, o_.duration_ms, window, &r.down_bytes, &r.down_ns);
    if (!down) return std::move(down.error());
    if (r.down_ns > 0) r.down_mbps = *down;
    return r;
  }

 private:
  Result<Frame> reply(const std::string& op) {
    auto f = c_.recv(o_.timeout_ms);
    if (!f) return make_error(f.error().code, "link probe (" + op + "): " + f.error().message);
    if (f->header.type == MsgType::error)
      return make_error(Errc::remote, "link probe (" + op + "): server: " +
                                          (f->header.error ? f->header.error->str() : std::string("error")));
    if (f->header.type != MsgType::probe_reply)
      return make_error(Errc::unexpected_message,
                        "link probe (" + op + "): got " + std::string(msg_type_name(f->header.type)));
    return f;
  }

  // RTT: small messages, one at a time.
  Status rtt() {
    std::vector<int64_t> rtts;
    for (int i = 0; i < o_.rtt_count; ++i) {
      const auto t0 = Clock::now();
      TRACR_TRY(c_.send(MsgType::probe, -1, {}, {{"op", std::string("echo")}, {"n", n_++}}));
      auto f = reply("echo");
      if (!f) return std::move(f.error());
      rtts.push_back(ns_between(t0, Clock::now()));
    }
    r_.rtt_n = static_cast<int64_t>(rtts.size());
    r_.rtt_min_ns = rtts.empty() ? 0 : *std::min_element(rtts.begin(), rtts.end());
    r_.rtt_median_ns = static_cast<int64_t>(median_of(rtts));
    r_.rtt_p95_ns = static_cast<int64_t>(p95_of(rtts));
    return {};
  }

  // Bulk one way (up: sink, else source), `window` messages of `chunk` in
  // flight for `ms`: wire bytes, first message to last reply less the
  // smallest RTT, and the rate in Mbit/s (0 when that span is not positive).
  Result<double> bulk(bool up, int64_t chunk, int ms, int window, int64_t* bytes, int64_t* span_ns) {
    const std::string op = up ? "sink" : "source";
    Bundle payload;
    if (up) {
      payload.push_back(Tensor::allocate("probe", DType::uint8, {chunk}));
      std::memset(payload.back().mutable_data(), 0x5a, static_cast<size_t>(chunk));
    }
    std::deque<uint64_t> sent_wire;
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::milliseconds(ms);
    auto t_last = t0;
    int64_t total = 0;
    auto take = [&]() -> Status {
      auto f = reply(op);
      if (!f) return std::move(f.error());
      t_last = Clock::now();
      total += static_cast<int64_t>(up ? sent_wire.front() : f->stats.wire_bytes);
      sent_wire.pop_front();
      return {};
    };
    while (Clock::now() < until) {
      while (static_cast<int>(sent_wire.size()) >= window) TRACR_TRY(take());
      FrameStats st;
      Meta meta{{"op", op}, {"n", n_++}};
      if (!up) meta["bytes"] = chunk;
      TRACR_TRY(c_.send(MsgType::probe, -1, payload, meta, &st));
      sent_wire.push_back(st.wire_bytes);
    }
    while (!sent_wire.empty()) TRACR_TRY(take());
    *bytes = total;
    *span_ns = ns_between(t0, t_last) - r_.rtt_min_ns;
    return *span_ns > 0 ? static_cast<double>(total) * 8e3 / static_cast<double>(*span_ns) : 0.0;
  }

  // auto: a short pass of small messages gives a rough rate (a floor where
  // the sender's per-message cost bounds it), and the messages are sized so
  // that about kAutoMessages of them fill duration_ms at that rate: large
  // enough not to measure a slow CPU, small enough that a slow link drains
  // the last window soon after duration_ms.
  //
  // The window is sized to the round trip: the bytes in flight must cover
  // the link's rate x its smallest round trip, or the probe reads window /
  // RTT instead of the link (4 x 24 KiB per 40 ms read 17.6 Mbit/s on a
  // 50 Mbit/s WAN). While the pass's rate could be the window's (its bytes
  // in flight at most twice the rate x RTT) and still rose by a tenth, it
  // is repeated with four times the window (at most kProbeMaxWindow); the
  // bulk pass then keeps at least twice the rate x RTT in flight (at most
  // kProbeMaxInFlight bytes). A fixed chunk_bytes keeps `window` as given.
  Status size_for(bool up, int64_t* chunk, std::optional<double>* sizing_mbps, int* window) {
    if (o_.chunk_bytes > 0) {
      *chunk = o_.chunk_bytes;
      return {};
    }
    const double rtt_s = static_cast<double>(r_.rtt_min_ns) / 1e9;
    auto in_flight = [&](double mbps) { return mbps * 1e6 / 8.0 * rtt_s; };  // bytes: rate x RTT
    int w = std::max(1, *window);
    double rate = 0;
    for (;;) {
      int64_t b = 0, ns = 0;
      auto pass = bulk(up, kProbeSizingBytes, std::max(50, o_.duration_ms / 5), w, &b, &ns);
      if (!pass) return std::move(pass.error());
      const double before = rate;
      rate = *pass;
      const bool window_bound = static_cast<double>(w * kProbeSizingBytes) <= 2.0 * in_flight(rate);
      if (!window_bound || w >= kProbeMaxWindow || (before > 0 && rate < before * 1.1)) break;
      w = std::min(w * 4, kProbeMaxWindow);
    }
    *sizing_mbps = rate;
    *chunk = auto_probe_chunk(rate, o_.duration_ms);
    const auto need = static_cast<int64_t>(std::ceil(2.0 * in_flight(rate) / static_cast<double>(*chunk)));
    const int64_t most = std::max<int64_t>(1, kProbeMaxInFlight / *chunk);
    *window = static_cast<int>(std::clamp<int64_t>(need, *window, std::max<int64_t>(most, *window)));
    return {};
  }

  static constexpr int kProbeMaxWindow = 64;
  static constexpr int64_t kProbeMaxInFlight = 64LL << 20;

  Client& c_;
  const ProbeOptions& o_;
  ProbeRecord r_;
  int64_t n_ = 0;
};

}  // namespace

Status keep_alive(Client& client, int timeout_ms) {
  TRACR_TRY(client.send(MsgType::probe, -1, {}, {{"op", std::string("echo")}, {"n", int64_t{0}}}));
  auto f = client.recv(timeout_ms);
  if (!f) return make_error(f.error().code, "keep-alive echo: " + f.error().message);
  if (f->header.type != MsgType::probe_reply)
    return make_error(Errc::unexpected_message,
                      "keep-alive echo: got " + std::string(msg_type_name(f->header.type)) +
                          (f->header.error ? ": " + f->header.error->str() : std::string()));
  return {};
}

Result<ProbeRecord> probe_link(Client& c, const ProbeOptions& o) { return LinkProbe(c, o).run(); }

}  // namespace tracr::agent
