#include "agent/forward.hpp"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/timing.hpp"
#include "protocol/meta_keys.hpp"
#include "wire/placement.hpp"

namespace tracr::agent {

using namespace tracr::protocol;

namespace {

std::optional<int64_t> meta_at(const Meta& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return std::nullopt;
}

// a - b - ..., NULL when any term is.
std::optional<int64_t> minus(std::optional<int64_t> a, std::initializer_list<std::optional<int64_t>> bs) {
  for (const auto& b : bs) {
    if (!a || !b) return std::nullopt;
    *a -= *b;
  }
  return a;
}

}  // namespace

std::vector<wire::HopRecord> hops_of_reply(const Meta& reply, const wire::FrameRecord& r, const std::vector<int>& cuts,
                                           int n) {
  std::vector<wire::HopRecord> out;
  std::string prefix;  // device h's keys: "d." repeated h - 1 times
  for (size_t h = 1; h <= cuts.size(); ++h, prefix += meta_key::kDownPrefix) {
    auto at = [&](const char* k) { return meta_at(reply, prefix + k); };
    wire::HopRecord x;
    x.hop = static_cast<int64_t>(h);
    x.first_layer = cuts[h - 1];
    x.end_layer = h < cuts.size() ? cuts[h] : n;
    x.decode_ns = at(meta_key::kSrvDecodeNs);
    x.compute_ns = at(meta_key::kSrvTailNs);
    x.server_ns = at(meta_key::kSrvNs);
    if (h < cuts.size()) x.forward_ns = at(meta_key::kFwdRttNs);
    if (h == 1) {
      x.in_raw_bytes = r.raw_bytes;
      x.in_wire_bytes = r.wire_bytes;
      x.reply_bytes = r.reply_bytes;
      x.send_encode_ns = r.encode_ns;
      x.network_ns = r.network_ns;
      x.reply_decode_ns = r.return_ns;
      x.server_ns = r.server_ns;  // the participant's figure is the reply's srv_ns
    } else {
      const std::string before = prefix.substr(std::string(meta_key::kDownPrefix).size());
      auto prev = [&](const char* k) { return meta_at(reply, before + k); };
      x.in_raw_bytes = prev(meta_key::kFwdRawBytes);
      x.in_wire_bytes = prev(meta_key::kFwdWireBytes);
      x.reply_bytes = prev(meta_key::kFwdReplyBytes);
      x.send_encode_ns = prev(meta_key::kFwdEncodeNs);
      x.reply_decode_ns = prev(meta_key::kFwdDecodeNs);
      x.network_ns = minus(prev(meta_key::kFwdRttNs), {x.send_encode_ns, x.server_ns, x.reply_decode_ns});
    }
    x.other_ns = minus(x.server_ns, {x.compute_ns, h < cuts.size() ? x.forward_ns : std::optional<int64_t>(0)});
    out.push_back(std::move(x));
  }
  return out;
}

Result<std::optional<Meta>> forward_meta(const Frame& request) {
  const Meta& m = request.header.meta;
  const auto then_it = m.find(meta_key::kThen);
  if (then_it == m.end()) return std::optional<Meta>{};
  const auto* then = std::get_if<std::string>(&then_it->second);
  if (!then)
    return make_error(Errc::field_type, "meta.then must be a string: the cut points after meta.last joined by '|' "
                                        "(\"\" when the next device runs to the end)");
  const auto last_it = m.find(meta_key::kLast);
  const int64_t* last = last_it == m.end() ? nullptr : std::get_if<int64_t>(&last_it->second);
  if (!last)
    return make_error(Errc::invalid_argument,
                      "meta.then needs meta.last (an integer: where this device's segment ends and the next begins)");
  Meta down;
  if (auto fp = m.find(meta_key::kModelFp); fp != m.end()) down[meta_key::kModelFp] = fp->second;
  if (then->empty()) return std::optional<Meta>{std::move(down)};
  auto p = wire::parse_placement(*then);
  if (!p) return make_error(Errc::invalid_argument, "meta.then: " + p.error().message);
  int64_t prev = *last;
  for (int c : p->cuts) {
    if (c < prev)
      return make_error(Errc::invalid_argument,
                        fmt::format("meta.then '{}': cut {} comes before {}; expected cut points from meta.last {} on, "
                                    "non-decreasing",
                                    *then, c, prev, *last));
    prev = c;
  }
  down[meta_key::kLast] = static_cast<int64_t>(p->cuts.front());
  p->cuts.erase(p->cuts.begin());
  down[meta_key::kThen] = p->text();
  return std::optional<Meta>{std::move(down)};
}

Result<std::unique_ptr<Forwarder>> Forwarder::connect(zmq::context_t& ctx, const std::string& endpoint,
                                                      ChannelOptions co, int timeout_ms) {
  auto c = Client::connect(ctx, endpoint, std::move(co));
  if (!c)
    return make_error(c.error().code,
                      fmt::format("downstream {}: cannot open a session: {}", endpoint, c.error().message));
  std::unique_ptr<Forwarder> f(new Forwarder());
  f->endpoint_ = endpoint;
  f->timeout_ms_ = timeout_ms;
  f->client_ = std::move(*c);
  return f;
}

Status Forwarder::forward(const std::string& peer, const Frame& request, const Bundle& out, Meta seg_meta,
                          Meta down_meta) {
  const auto last_it = request.header.meta.find(meta_key::kLast);
  const int32_t split = static_cast<int32_t>(std::get<int64_t>(last_it->second));  // forward_meta checked it
  FrameStats st;
  const auto t0 = Clock::now();
  auto sent = client_->send(MsgType::infer_request, split, out, down_meta, &st);
  if (!sent)
    return make_error(sent.error().code, fmt::format("downstream {}: the forwarded request could not be sent: {}",
                                                     endpoint_, sent.error().message));
  Pending p;
  p.peer = peer;
  p.up_seq = request.header.seq;
  p.up_split = request.header.split;
  p.arrived_ns = request.stats.last_segment_at_ns;
  p.sent_at = t0;
  p.meta = std::move(seg_meta);
  p.meta[meta_key::kFwdEncodeNs] = st.total_ns;
  p.meta[meta_key::kFwdRawBytes] = static_cast<int64_t>(st.raw_bytes);
  p.meta[meta_key::kFwdWireBytes] = static_cast<int64_t>(st.wire_bytes);
  pending_[st.seq] = std::move(p);
  order_[peer].push_back(Slot{st.seq, std::nullopt});
  return {};
}

void Forwarder::send_up(Server& up, const std::string& peer, UpAnswer& a, std::vector<Error>& failures) {
  if (!a.error) {
    auto st = a.so ? up.send_with(peer, *a.so, a.type, a.split, a.tensors, a.meta)
                   : up.send(peer, a.type, a.split, a.tensors, a.meta);
    if (st) return;
    // The requester waits for an answer: it gets the reason, not silence.
    failures.push_back(make_error(st.error().code, "reply: " + st.error().message));
    a.error = make_error(st.error().code, "the reply could not be encoded: " + st.error().message);
  }
  Error e = *a.error;
  e.frame_seq = a.up_seq;
  if (auto st = up.send_error(peer, e, a.split); !st)
    failures.push_back(make_error(st.error().code, "reply: " + st.error().message));
}

void Forwarder::answer(Server& up, const std::string& peer, UpAnswer a, std::vector<Error>& failures) {
  auto it = order_.find(peer);
  if (it == order_.end() || it->second.empty()) {
    send_up(up, peer, a, failures);
    return;
  }
  it->second.push_back(Slot{0, std::move(a)});
}

void Forwarder::settle(Server& up, const std::string& peer, uint64_t down_seq, UpAnswer a,
                       std::vector<Error>& failures) {
  auto it = order_.find(peer);
  if (it == order_.end()) return;
  for (auto& slot : it->second)
    if (slot.down_seq == down_seq && !slot.ready) {
      slot.ready = std::move(a);
      break;
    }
  auto& q = it->second;
  while (!q.empty() && q.front().ready) {
    send_up(up, peer, *q.front().ready, failures);
    q.pop_front();
  }
  if (q.empty()) order_.erase(it);
}

UpAnswer Forwarder::reply_of(Pending& p, const Frame& reply, std::vector<Error>& failures) {
  UpAnswer a;
  a.up_seq = p.up_seq;
  a.split = p.up_split;
  if (reply.header.type == MsgType::error) {
    const Error down = reply.header.error ? *reply.header.error : make_error(Errc::remote, "error");
    a.error = make_error(down.code, fmt::format("downstream {}: {}", endpoint_, down.message));
    failures.push_back(*a.error);
    return a;
  }
  if (reply.header.type != MsgType::infer_result) {
    a.error = make_error(Errc::unexpected_message, fmt::format("downstream {}: answered with {}, expected INFER_RESULT",
                                                               endpoint_, msg_type_name(reply.header.type)));
    failures.push_back(*a.error);
    return a;
  }
  a.tensors = reply.tensors;
  a.meta = std::move(p.meta);
  for (const auto& [k, v] : reply.header.meta)
    if (k != meta_key::kReqSeq) a.meta[std::string(meta_key::kDownPrefix) + k] = v;
  a.meta[meta_key::kFwdRttNs] =
      ns_between(p.sent_at, Clock::time_point(std::chrono::nanoseconds(reply.stats.completed_at_ns)));
  a.meta[meta_key::kFwdDecodeNs] = reply.stats.total_ns;
  a.meta[meta_key::kFwdReplyBytes] = static_cast<int64_t>(reply.stats.wire_bytes);
  a.meta[meta_key::kReqSeq] = static_cast<int64_t>(p.up_seq);
  // From the request's last segment here to just before the reply is encoded.
  a.meta[meta_key::kSrvNs] = ns_since(p.arrived_ns);
  // Every device nests the next one's keys: a chain long enough passes the
  // receiver's meta limit, and the requester gets the reason, not a reply it must refuse.
  if (a.meta.size() > Limits{}.max_meta) {
    a.error = make_error(Errc::limit_exceeded,
                         fmt::format("the reply's meta would hold {} entries with the next devices' nested under "
                                     "'d.' (at most {}): the chain is too long for one reply's meta",
                                     a.meta.size(), Limits{}.max_meta));
    failures.push_back(*a.error);
    a.tensors.clear();
    a.meta.clear();
  }
  return a;
}

std::vector<Error> Forwarder::pump(Server& up) {
  std::vector<Error> failures;
  while (true) {
    auto r = client_->recv(0);
    if (!r) {
      if (r.error().code != Errc::timeout)
        failures.push_back(make_error(r.error().code, fmt::format("downstream {}: {}", endpoint_, r.error().message)));
      break;
    }
    const auto seq_it = r->header.meta.find(meta_key::kReqSeq);
    const int64_t* seq = seq_it == r->header.meta.end() ? nullptr : std::get_if<int64_t>(&seq_it->second);
    auto it = seq ? pending_.find(static_cast<uint64_t>(*seq)) : pending_.end();
    if (it == pending_.end()) {
      failures.push_back(make_error(Errc::unexpected_message,
                                    fmt::format("downstream {}: a {} that answers no forwarded request{}", endpoint_,
                                                msg_type_name(r->header.type),
                                                seq ? fmt::format(" (req_seq {})", *seq) : std::string(" (no req_seq)"))));
      continue;
    }
    const std::string peer = it->second.peer;
    UpAnswer a = reply_of(it->second, *r, failures);
    const uint64_t down_seq = it->first;
    pending_.erase(it);
    settle(up, peer, down_seq, std::move(a), failures);
  }
  const auto now = Clock::now();
  std::vector<std::pair<uint64_t, Pending>> late;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.sent_at < std::chrono::milliseconds(timeout_ms_)) {
      ++it;
      continue;
    }
    late.emplace_back(it->first, std::move(it->second));
    it = pending_.erase(it);
  }
  for (auto& [down_seq, p] : late) {
    UpAnswer a;
    a.up_seq = p.up_seq;
    a.split = p.up_split;
    a.error = make_error(Errc::timeout, fmt::format("downstream {}: no answer to the forwarded request within {} ms",
                                                    endpoint_, timeout_ms_));
    failures.push_back(*a.error);
    settle(up, p.peer, down_seq, std::move(a), failures);
  }
  return failures;
}

}  // namespace tracr::agent
