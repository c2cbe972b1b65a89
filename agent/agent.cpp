#include "agent/agent.hpp"
#include "agent/energy.hpp"
#include "agent/delay_relay.hpp"
#include "agent/forward.hpp"
#include "agent/link_probe.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "wire/control.hpp"
#include "agent/cpu_limits.hpp"
#include "wire/record.hpp"
#include "agent/reject_log.hpp"
#include "agent/roles.hpp"
#include "agent/timing.hpp"
#include "protocol/channel.hpp"
#include "protocol/meta_keys.hpp"

namespace tracr::agent {

using namespace tracr::wire;

using namespace tracr::protocol;

// ---- ControlOut -------------------------------------------------------------

namespace {
std::atomic<bool> g_signalled{false};
void on_term(int) { g_signalled = true; }
}  // namespace

ControlOut::ControlOut(const std::vector<uint8_t>& secret, bool watch_stdin, int silence_ms, int stall_ms)
    : codec_(secret, ControlDir::agent_to_controller),
      in_(secret, ControlDir::controller_to_agent),
      watch_stdin_(watch_stdin),
      silence_ms_(watch_stdin ? silence_ms : 0),
      stall_ms_(stall_ms > 0 ? stall_ms : std::max(silence_ms_, kMinStallMs)) {
  std::signal(SIGTERM, on_term);
  std::signal(SIGINT, on_term);
  if (watch_stdin_) reader_ = std::thread([this] { read_loop(); });
}

ControlOut::~ControlOut() {
  stop_heartbeat();
  reader_stop_ = true;
  if (reader_.joinable()) reader_.join();
}

void ControlOut::send(const std::string& kind, const std::map<std::string, std::string>& fields) {
  // One lock over numbering and writing: lines leave in sequence order.
  std::lock_guard<std::mutex> lock(out_mu_);
  std::string line = codec_.encode(kind, fields);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

void ControlOut::start_heartbeat(int period_ms) {
  hb_.start(period_ms, [this] { send("HEARTBEAT", heartbeat_fields()); });
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t process_cpu_ns() {
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

void ControlOut::note_progress() {
  ++loop_turns_;
  loop_turn_cpu_ns_ = process_cpu_ns();
  loop_turn_at_ns_ = steady_ns();
}

std::map<std::string, std::string> ControlOut::heartbeat_fields() const {
  const int64_t at = loop_turn_at_ns_;
  if (at == 0) return {};
  std::map<std::string, std::string> f{{"loop", std::to_string(loop_turns_.load())}};
  const int64_t now = steady_ns(), cpu = process_cpu_ns();
  const int64_t idle_ms = (now - at) / 1000000;
  // The process's CPU time over the last stall_ms: from the newest sample at
  // least that old, else from the loop's last turn (#46: a frame computing
  // for minutes is work, not a stall; a loop blocked with the process idle
  // is a hang).
  std::lock_guard<std::mutex> lock(cpu_mu_);
  cpu_samples_.push_back({now, cpu});
  const int64_t window_ns = static_cast<int64_t>(stall_ms_) * 1000000;
  while (cpu_samples_.size() >= 2 && cpu_samples_[1].first <= now - window_ns) cpu_samples_.pop_front();
  std::pair<int64_t, int64_t> base{at, loop_turn_cpu_ns_.load()};
  if (const auto& front = cpu_samples_.front(); front.first <= now - window_ns && front.first > base.first) base = front;
  if (idle_ms < stall_ms_) return f;
  const int64_t span_ms = std::max<int64_t>(1, (now - base.first) / 1000000);
  const int64_t cpu_ms = (cpu - base.second) / 1000000;
  if (cpu_ms * 100 >= span_ms * kMinBusyCpuPct) {
    f["computing_ms"] = std::to_string(idle_ms);  // no turn yet, but the process works: one long frame
    f["cpu_ms"] = std::to_string(cpu_ms);
    f["window_ms"] = std::to_string(span_ms);
    return f;
  }
  f["stalled_ms"] = std::to_string(idle_ms);
  f["cpu_ms"] = std::to_string(cpu_ms);
  f["window_ms"] = std::to_string(span_ms);
  f["stall_limit_ms"] = std::to_string(stall_ms_);
  return f;
}

void ControlOut::stop_heartbeat() { hb_.stop(); }

bool ControlOut::stop_requested() {
  if (g_signalled) stopped_ = true;
  return stopped_;
}

std::vector<ControlMsg> ControlOut::take_commands() {
  std::lock_guard<std::mutex> lock(in_mu_);
  std::vector<ControlMsg> out;
  out.swap(commands_);
  return out;
}

Result<std::string> ControlOut::wait_config(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(in_mu_);
      if (config_) return *config_;
      // A line that failed authentication before CONFIG arrived is why it did not.
      if (!last_rejected_.empty())
        return make_error(Errc::auth_failed, "the controller's CONFIG line was rejected: " + last_rejected_);
    }
    if (silenced_) return make_error(Errc::timeout, "the controller went silent before sending CONFIG");
    if (stop_requested())
      return make_error(Errc::peer_closed, "the controller closed stdin before sending CONFIG");
    if (std::chrono::steady_clock::now() > deadline)
      return make_error(Errc::timeout, "no CONFIG line from the controller within " + std::to_string(timeout_ms) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string ControlOut::profiles_known() {
  std::lock_guard<std::mutex> lock(in_mu_);
  return profiles_known_;
}

// The stdin reader: runs for the agent's life, so lines (and the
// controller's heartbeats) are read while the main thread loads a model,
// profiles or waits on a frame.
void ControlOut::read_loop() {
  using Clock = std::chrono::steady_clock;
  auto last_heard = Clock::now();
  std::optional<Clock::time_point> exit_at;  // set when the controller went silent
  std::string pending;
  bool eof = false;
  while (!reader_stop_) {
    const auto now = Clock::now();
    if (silence_ms_ > 0 && !exit_at && now - last_heard > std::chrono::milliseconds(silence_ms_)) {
      std::fprintf(stderr,
                   "tracr-agent: no control line from the controller for %d ms (it sends a HEARTBEAT every second): "
                   "stopping\n",
                   silence_ms_);
      silenced_ = true;
      stopped_ = true;
      exit_at = now + std::chrono::milliseconds(silence_ms_);
    }
    if (exit_at && now > *exit_at) {
      // The main thread could not wind down (blocked on a write to a dead
      // channel, or in a long step): nobody can stop this agent but itself.
      std::fprintf(stderr, "tracr-agent: still running %d ms after %s: exiting now\n",
                   eof ? std::max(silence_ms_, kStdinGraceMs) : silence_ms_,
                   eof ? "its stdin closed" : "the controller went silent");
      std::fflush(stderr);
      std::_Exit(kOrphanExitStatus);
    }
    if (eof) {
      if (!exit_at) exit_at = now + std::chrono::milliseconds(std::max(silence_ms_, kStdinGraceMs));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    pollfd p{0, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) {
      eof = stopped_ = true;
      continue;
    }
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      eof = stopped_ = true;
      continue;
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      auto m = in_.decode(line);
      std::lock_guard<std::mutex> lock(in_mu_);
      if (!m) {
        std::fprintf(stderr, "tracr-agent: rejected control line: %s\n", m.error().str().c_str());
        last_rejected_ = m.error().str();
        continue;
      }
      last_heard = Clock::now();  // only authenticated lines keep the agent alive
      if (m->kind == "STOP") stopped_ = true;
      else if (m->kind == "CMD") commands_.push_back(std::move(*m));
      else if (m->kind == "CONFIG") {
        config_ = m->get_or("yaml", "");
        profiles_known_ = m->get_or("profiles_known", "");
      }
      else if (m->kind != "HEARTBEAT")
        std::fprintf(stderr, "tracr-agent: ignored control line of kind %s\n", m->kind.c_str());
    }
    // A controller never sends lines this long; do not buffer without bound.
    if (pending.size() > (64u << 20)) pending.clear();
  }
}

// ---- echo SERVER (protocol demo and benchmarks) -----------------------------

namespace {

// Raw ZeroMQ baseline: ROUTER that answers every message with 8 bytes.
void raw_ack_loop(zmq::socket_t& sock, std::atomic<bool>& stop) {
  while (!stop.load()) {
    zmq::pollitem_t it{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&it, 1, std::chrono::milliseconds(100)) <= 0) continue;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(sock, std::back_inserter(parts), zmq::recv_flags::dontwait)) continue;
    if (parts.size() < 2) continue;
    uint64_t n = 0;
    for (size_t i = 1; i < parts.size(); ++i) n += parts[i].size();
    sock.send(parts[0], zmq::send_flags::sndmore);
    sock.send(zmq::buffer(&n, sizeof n), zmq::send_flags::none);
  }
}

// Link probe (PROTOCOL.md, message types 32/33): echo answers at once
// (RTT), sink acknowledges the bytes it received (uplink), source sends the
// requested number of bytes back (downlink). The reply names the op and the
// probe's sequence number n.
Status answer_probe(Server& server, const std::string& peer, const Frame& f) {
  auto get = [&](const char* k) -> std::optional<MetaValue> {
    auto it = f.header.meta.find(k);
    if (it == f.header.meta.end()) return std::nullopt;
    return it->second;
  };
  const auto op = get("op");
  const std::string* ops = op ? std::get_if<std::string>(&*op) : nullptr;
  if (!ops || (*ops != "echo" && *ops != "sink" && *ops != "source"))
    return server.send_error(peer, make_error(Errc::invalid_argument, "probe: meta 'op' must be echo, sink or source"),
                             f.header.split);
  Meta meta{{"op", *ops}};
  if (auto n = get("n")) meta["n"] = *n;
  Bundle out;
  if (*ops == "sink") {
    meta["bytes"] = static_cast<int64_t>(f.stats.raw_bytes);
  } else if (*ops == "source") {
    const auto b = get("bytes");
    const int64_t* want = b ? std::get_if<int64_t>(&*b) : nullptr;
    constexpr int64_t kMaxSource = int64_t{64} << 20;  // a peer cannot make the server allocate more
    if (!want || *want < 0 || *want > kMaxSource)
      return server.send_error(
          peer, make_error(Errc::invalid_argument, fmt::format("probe source: meta 'bytes' must be 0..{}", kMaxSource)),
          f.header.split);
    out.push_back(Tensor::allocate("probe", DType::uint8, {*want}));
    std::memset(out.back().mutable_data(), 0, static_cast<size_t>(*want));
  }
  return server.send(peer, MsgType::probe_reply, f.header.split, out, meta);
}

}  // namespace

Status bind_available(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind(scheme, 0) != 0 || colon == std::string::npos || colon < scheme.size()) return {};
  std::string host = endpoint.substr(scheme.size(), colon - scheme.size());
  const std::string port = endpoint.substr(colon + 1);
  if (port == "0" || port == "*" || port.empty()) return {};
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = host.find(':') == std::string::npos ? AF_INET : AF_INET6;  // as ZeroMQ binds by default
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;                // no name lookup before a model loads
  addrinfo* res = nullptr;
  if (getaddrinfo(host == "*" ? nullptr : host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
    return {};  // not a numeric address (an interface or host name): the real bind judges it
  int err = 0;
  const int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as ZeroMQ binds: TIME_WAIT does not count
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) err = errno;
    ::close(fd);
  }
  freeaddrinfo(res);
  if (err == EADDRINUSE)
    return make_error(Errc::transport, fmt::format("bind {}: port {} is already in use on this device (checked before "
                                                   "loading the model); set another port in the devices file, or "
                                                   "port: 0 for any free one",
                                                   endpoint, port));
  return {};  // any other failure is the real bind's to report
}

int serve(const AgentOptions& opt, ControlOut& ctl, const std::unique_ptr<TailHandler>& tail) {
  zmq::context_t ctx(1);
  ChannelOptions co = agent_channel_options(opt, AgentRole::server);
  if (tail)
    if (auto so = tail->reply_send()) co.send = *so;
  if (opt.experiment) {  // the experiment's codec_threads at this end too
    co.read.threads = static_cast<unsigned>(opt.experiment->codec_threads);
    co.send.threads = static_cast<unsigned>(opt.experiment->codec_threads);
  }
  auto server = Server::bind(ctx, opt.bind, co);
  if (!server) {
    ctl.send("FAIL", {{"error", server.error().str()}});
    return 1;
  }
  std::atomic<bool> stop{false};
  zmq::socket_t raw(ctx, zmq::socket_type::router);
  std::thread raw_thread;
  std::string raw_ep;
  if (!opt.raw_bind.empty()) {
    raw.set(zmq::sockopt::linger, 0);
    try {
      raw.bind(opt.raw_bind);
    } catch (const zmq::error_t& e) {
      ctl.send("FAIL", {{"error", "bind " + opt.raw_bind + ": " + e.what()}});
      return 1;
    }
    raw_ep = raw.get(zmq::sockopt::last_endpoint);
    raw_thread = std::thread([&] { raw_ack_loop(raw, stop); });
  }
  std::map<std::string, std::string> ready{{"role", std::string(role_name(AgentRole::server))}, {"endpoint", (*server)->endpoint()},
                                           {"cipher", opt.encrypt ? "aes-256-gcm" : "none"}};
  if (!raw_ep.empty()) ready["raw"] = raw_ep;
  if (tail) {
    ready["model"] = tail->describe();
    for (auto& [k, v] : tail->ready_fields()) ready[k] = v;
  } else {
    for (auto& [k, v] : to_control(agent_hw_identity(opt))) ready[k] = v;
  }
  // A chain's middle tier: its own session to the next device, opened
  // before READY (the controller starts the chain from its end).
  // With --link-delay-ms (link_delay: agent on the hop to the next device)
  // the session runs through a relay that holds each byte for the delay.
  std::unique_ptr<DelayRelay> relay;  // outlives the forwarder that uses it
  std::unique_ptr<Forwarder> fwd;
  if (!opt.downstream.empty()) {
    ChannelOptions dco = agent_channel_options(opt, AgentRole::participant);
    dco.send = co.send;
    dco.read = co.read;
    if (opt.experiment && opt.experiment->compression != "auto") dco.send.codec = opt.experiment->codec;
    std::string endpoint = opt.downstream;
    if (opt.link_delay_ms > 0 || opt.link_jitter_ms > 0) {
      auto r = DelayRelay::start(opt.downstream, opt.link_delay_ms, opt.link_jitter_ms,
                                 opt.experiment ? static_cast<uint64_t>(opt.experiment->seed) : 0);
      if (!r) {
        ctl.send("FAIL", {{"error", "downstream " + opt.downstream + ": link delay relay: " + r.error().str()}});
        stop = true;
        if (raw_thread.joinable()) raw_thread.join();
        return 1;
      }
      relay = std::move(*r);
      endpoint = relay->endpoint();
    }
    auto f = Forwarder::connect(ctx, endpoint, dco, co.partial_frame_timeout_ms);
    if (!f) {
      ctl.send("FAIL", {{"error", f.error().str()}});
      stop = true;
      if (raw_thread.joinable()) raw_thread.join();
      return 1;
    }
    fwd = std::move(*f);
    ready["downstream"] = relay ? fmt::format("{} via a delay relay ({} ms, jitter {} ms)", opt.downstream,
                                              opt.link_delay_ms, opt.link_jitter_ms)
                                : opt.downstream;
  }
  // The hop to the next device probed once, before any frame, over the
  // session the frames will use (its shaping and relay included): a PROBE
  // line of this device (#43: link probes per hop; the split: plan planner
  // reads it). Before READY: the devices before it start after the probe.
  if (fwd && opt.experiment && opt.experiment->probe.enabled) {
    ProbeOptions po;
    po.rtt_count = opt.experiment->probe.rtt_count;
    po.duration_ms = opt.experiment->probe.duration_ms;
    po.chunk_bytes = opt.experiment->probe.chunk_bytes;
    po.trigger = "startup";
    auto pr = probe_link(fwd->client(), po);
    if (!pr) {
      ctl.send("FAIL", {{"error", "downstream " + opt.downstream + ": link probe: " + pr.error().str()}});
      stop = true;
      if (raw_thread.joinable()) raw_thread.join();
      return 1;
    }
    ctl.send("PROBE", to_control(*pr));
  }
  ctl.send("READY", ready);

  int rc = 0;
  // Junk from peers is summarised, at most one LOG line per second.
  // So are frames the tail fails on and replies that cannot be sent (a
  // plain session's INFER frames are not authenticated).
  RejectionLog rejections, failures("frame(s) not served");
  auto report = [&](const char* level, std::optional<std::string> line) {
    if (line) ctl.send("LOG", {{"level", level}, {"msg", *line}});
  };
  // SERVER batching (server.batch): INFER_REQUESTs for one segment held
  // until `batch_max` are here or `batch_wait` has passed since the first;
  // after that only requests already queued join. Anything else that
  // arrives first sends the held batch on, so each session's answers keep
  // request order.
  const int batch_max = tail && opt.experiment ? opt.experiment->server_batch.max : 1;
  const auto batch_wait = std::chrono::milliseconds(opt.experiment ? opt.experiment->server_batch.max_wait_ms : 0);
  struct Held {
    Server::Incoming in;
    std::chrono::steady_clock::time_point ready;
    std::optional<Meta> down;  // meta.then's request for the next device
  };
  std::vector<Held> held;
  std::chrono::steady_clock::time_point held_until;
  // Every answer names the frame it answers (PROTOCOL.md 3.4, req_seq).
  auto answer_error = [&](const std::string& peer, const Frame& f, Error e) {
    e.frame_seq = f.header.seq;
    if (fwd) {  // behind this session's requests still waiting on the next device
      UpAnswer a;
      a.up_seq = f.header.seq;
      a.split = f.header.split;
      a.error = std::move(e);
      std::vector<Error> fails;
      fwd->answer(**server, peer, std::move(a), fails);
      for (auto& x : fails) failures.note(x);
      return;
    }
    (void)(*server)->send_error(peer, e, f.header.split);
  };
  // A request's segment has run (or failed): its answer goes back, or on to
  // the next device.
  auto deliver = [&](const std::string& peer, const Frame& f, Result<std::pair<Bundle, Meta>> r,
                     std::optional<Meta> down) {
    if (!r) {
      answer_error(peer, f, r.error());
      failures.note(r.error());
      return;
    }
    Bundle out = std::move(r->first);
    Meta meta = std::move(r->second);
    if (down) {  // a middle tier: the segment's output goes on; the answer comes back through pump()
      if (auto st = fwd->forward(peer, f, out, std::move(meta), std::move(*down)); !st) {
        answer_error(peer, f, st.error());
        failures.note(st.error());
      }
      return;
    }
    meta[protocol::meta_key::kReqSeq] = static_cast<int64_t>(f.header.seq);
    // The server's own time runs to here, just before its reply is handed
    // on: a held set's later frames ran, and earlier replies were encoded,
    // after this frame's segment (server.batch).
    meta[protocol::meta_key::kSrvNs] = ns_since(f.stats.last_segment_at_ns);
    const MsgType reply = tail->reply_type(f.header.type);
    const auto so = tail->reply_send_for(f);
    if (fwd) {  // a middle tier answering itself (no meta.then): in its session's order
      UpAnswer a{f.header.seq, f.header.split, reply, std::move(out), std::move(meta), so, std::nullopt};
      std::vector<Error> fails;
      fwd->answer(**server, peer, std::move(a), fails);
      for (auto& x : fails) failures.note(x);
      return;
    }
    auto st = so ? (*server)->send_with(peer, *so, reply, f.header.split, out, meta)
                 : (*server)->send(peer, reply, f.header.split, out, meta);
    if (!st) {
      // The peer waits for an answer: it gets the reason, not silence.
      failures.note(make_error(st.error().code, "reply: " + st.error().message));
      answer_error(peer, f, make_error(st.error().code, "the reply could not be encoded: " + st.error().message));
    }
  };
  auto run_held = [&] {
    if (held.empty()) return;
    std::vector<TailHandler::Request> reqs;
    reqs.reserve(held.size());
    for (const auto& h : held) reqs.push_back({&h.in.frame, h.ready});
    auto results = tail->handle_batch(reqs);
    for (size_t i = 0; i < held.size(); ++i)
      deliver(held[i].in.peer, held[i].in.frame, std::move(results[i]), std::move(held[i].down));
    held.clear();
    for (auto& n : tail->take_notes()) report("warn", n);
  };
  auto same_segment = [](const Frame& a, const Frame& b) {
    auto last = [](const Frame& f) -> std::optional<int64_t> {
      auto it = f.header.meta.find(protocol::meta_key::kLast);
      if (it == f.header.meta.end()) return std::nullopt;
      if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
      return int64_t{-1};
    };
    return a.header.split == b.header.split && last(a) == last(b) &&
           a.header.meta.count(protocol::meta_key::kThen) == b.header.meta.count(protocol::meta_key::kThen);
  };
  bool busy = false;  // a frame came last turn: more may be buffered, do not wait on the sockets
  while (!ctl.stop_requested()) {
    ctl.note_progress();
    // A held batch waits at most until its deadline (then only for what is queued).
    int wait_ms = fwd ? 20 : 200;
    if (!held.empty()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(held_until - std::chrono::steady_clock::now());
      wait_ms = std::max<int>(0, std::min<int>(wait_ms, static_cast<int>(left.count())));
    }
    Result<Server::Incoming> in = make_error(Errc::timeout, "");
    if (fwd) {
      // Both sessions at once: upstream requests and the next device's answers.
      zmq::pollitem_t items[] = {{static_cast<void*>((*server)->socket()), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(fwd->socket()), 0, ZMQ_POLLIN, 0}};
      if (!busy && wait_ms > 0) {
        try {
          zmq::poll(items, 2, std::chrono::milliseconds(wait_ms));
        } catch (const zmq::error_t& e) {
          if (e.num() != EINTR) throw;  // a signal: the loop's stop check comes next
        }
      }
      for (auto& e : fwd->pump(**server)) failures.note(e);
      in = (*server)->recv(0);
      busy = in.ok();
    } else {
      in = (*server)->recv(wait_ms);
    }
    const auto now = std::chrono::steady_clock::now();
    report("warn", rejections.due(now));
    report("error", failures.due(now));
    if (!in) {
      if (in.error().code != Errc::timeout) rejections.note(in.error());
      if (!held.empty() && now >= held_until) run_held();
      continue;
    }
    Frame& f = in->frame;
    if (f.header.type == MsgType::shutdown) break;  // from the controlling session, acknowledged
    if (f.header.type == MsgType::probe) {
      run_held();
      auto st = answer_probe(**server, in->peer, f);
      if (!st) failures.note(make_error(st.error().code, "probe: " + st.error().message));
      continue;
    }
    if (tail ? !tail->serves(f.header.type) : f.header.type != MsgType::infer_request) {
      run_held();
      answer_error(in->peer, f,
                   make_error(Errc::unexpected_message,
                              fmt::format("SERVER does not handle {}", msg_type_name(f.header.type))));
      continue;
    }
    // A request for a middle tier (meta.then) is checked before its segment runs.
    auto down = forward_meta(f);
    if (!down) {
      run_held();
      answer_error(in->peer, f, down.error());
      failures.note(down.error());
      continue;
    }
    if (*down && !fwd) {
      run_held();
      answer_error(in->peer, f,
                   make_error(Errc::invalid_argument,
                              "meta.then asks this SERVER to forward, but it has no next device (it was started "
                              "without --downstream: the chain's last device)"));
      continue;
    }
    if (tail && batch_max > 1 && f.header.type == MsgType::infer_request) {
      if (!held.empty() && !same_segment(held.front().in.frame, f)) run_held();
      if (held.empty()) held_until = now + batch_wait;
      held.push_back({std::move(*in), now, std::move(*down)});
      if (static_cast<int>(held.size()) >= batch_max) run_held();
      continue;
    }
    run_held();
    if (tail) {
      deliver(in->peer, f, tail->handle(f), std::move(*down));
      continue;
    }
    // Echo server: the demo verifies what was decoded.
    Bundle out;
    Meta meta;
    meta[protocol::meta_key::kSrvDecodeNs] = f.stats.total_ns;
    meta[protocol::meta_key::kSrvNs] = ns_since(f.stats.last_segment_at_ns);
    meta[protocol::meta_key::kSrvRawBytes] = static_cast<int64_t>(f.stats.raw_bytes);
    meta[protocol::meta_key::kSrvWireBytes] = static_cast<int64_t>(f.stats.wire_bytes);
    if (f.header.meta.count("echo")) out = f.tensors;
    meta[protocol::meta_key::kReqSeq] = static_cast<int64_t>(f.header.seq);
    if (fwd) {
      UpAnswer a{f.header.seq, f.header.split, MsgType::infer_result, std::move(out), std::move(meta), std::nullopt,
                 std::nullopt};
      std::vector<Error> fails;
      fwd->answer(**server, in->peer, std::move(a), fails);
      for (auto& x : fails) failures.note(x);
      continue;
    }
    auto st = (*server)->send(in->peer, MsgType::infer_result, f.header.split, out, meta);
    if (!st) {
      failures.note(make_error(st.error().code, "reply: " + st.error().message));
      answer_error(in->peer, f, make_error(st.error().code, "the reply could not be encoded: " + st.error().message));
    }
  }
  // Held requests are answered before the loop ends.
  run_held();
  report("warn", rejections.flush(std::chrono::steady_clock::now()));
  report("error", failures.flush(std::chrono::steady_clock::now()));
  stop = true;
  if (raw_thread.joinable()) raw_thread.join();
  return rc;
}

namespace {

// Usage goes to stderr on errors: stdout is the control channel.
// The first stdin line, read byte by byte so nothing after it is buffered
// away from the control channel.
bool read_first_line(std::string& line) {
  char c;
  while (true) {
    ssize_t n = ::read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return !line.empty();
    if (c == '\n') return true;
    line += c;
    if (line.size() > 4096) return false;
  }
}

// "HEX" or "HEX clock_ms=N": the session secret, then the controller's
// clock (Unix ms) when it handed the line over, which HELLO timestamps then
// run on (PROTOCOL.md 6.3).
Status parse_secret_line(const std::string& line, AgentOptions& opt) {
  const auto sp = line.find(' ');
  auto secret = from_hex(line.substr(0, sp));
  if (!secret || secret->size() < 16)
    return make_error(Errc::invalid_argument,
                      "the first stdin line (or --secret-file) must be the session secret, at least 32 hex digits");
  opt.secret = *secret;
  if (sp == std::string::npos) return {};
  const std::string rest = line.substr(sp + 1);
  constexpr std::string_view key = "clock_ms=";
  char* end = nullptr;
  const long long ms = rest.rfind(key, 0) == 0 ? std::strtoll(rest.c_str() + key.size(), &end, 10) : -1;
  if (ms <= 0 || end == nullptr || *end != '\0')
    return make_error(Errc::invalid_argument, "after the session secret, expected 'clock_ms=N' (the controller's "
                                              "Unix time in ms), got '" + rest.substr(0, 40) + "'");
  opt.clock = protocol::anchored_clock(ms);
  return {};
}

}  // namespace

int agent_main(int argc, char** argv) {
  // A controller that went away is seen as an error on write, not a signal.
  std::signal(SIGPIPE, SIG_IGN);
  AgentOptions opt;
  if (const int rc = parse_agent_command_line(argc, argv, opt); rc >= 0) return rc;
  if (opt.list_meters) {
    // What `tracrctl devices check` shows: every energy meter seen here.
    auto em = EnergyMeter::open(agent_power_model(opt));
    for (const auto& l : em->describe()) std::printf("meter %s\n", l.c_str());
    if (!em->any()) std::printf("meter none: no energy meter and no power_model; no energy is recorded here\n");
    return 0;
  }
  std::string line;
  if (!opt.secret_file.empty()) {
    // A detached agent: the secret sits in a file only its owner can read.
    struct stat st {};
    if (::stat(opt.secret_file.c_str(), &st) != 0 || (st.st_mode & 077) != 0) {
      std::fprintf(stderr, "tracr-agent: --secret-file %s must exist and be readable by its owner only (chmod 600)\n",
                   opt.secret_file.c_str());
      return 2;
    }
    std::ifstream f(opt.secret_file);
    std::getline(f, line);
  } else if (!read_first_line(line)) {
    std::fprintf(stderr, "tracr-agent: expected the session secret (hex) on the first line of stdin\n");
    return 2;
  }
  if (auto st = parse_secret_line(line, opt); !st) {
    std::fprintf(stderr, "tracr-agent: %s\n", st.error().message.c_str());
    return 2;
  }
  ControlOut ctl(opt.secret, opt.secret_file.empty(), opt.heartbeat_timeout_ms);
  // An emulated slower device limits itself before any thread starts.
  std::string cgroup;
  if ((opt.cpu_quota > 0 && !opt.cpu_quota_external) || opt.cpu_cores > 0 || !opt.cpus.empty()) {
    const char* env = std::getenv("TRACR_CGROUP_ROOT");
    const std::string root = env && *env ? env : "/sys/fs/cgroup";
    // A local launcher already put this process in its quota group (from the
    // host's cgroup tree, which `ip netns exec` hides): only affinity here.
    auto applied =
        apply_cpu_limits({opt.cpu_quota_external ? 0 : opt.cpu_quota, opt.cpu_cores, opt.cpus}, root, &cgroup);
    if (!applied) {
      ctl.send("FAIL", {{"error", applied.error().str()}});
      return 2;
    }
    std::fprintf(stderr, "tracr-agent: CPU limited: %s\n", applied->c_str());
  }
  struct Release {
    const std::string& g;
    ~Release() { release_cpu_limits(g); }
  } release{cgroup};
  ctl.start_heartbeat(1000);
  // The experiment: parsed with the controller's own parser (no environment
  // overrides here: the controller already applied its own).
  if (opt.config_from_stdin || !opt.experiment_file.empty()) {
    Result<settings::ExperimentConfig> cfg = make_error(Errc::internal, "");
    if (opt.config_from_stdin) {
      auto yaml = ctl.wait_config(60000);
      if (!yaml) {
        ctl.send("FAIL", {{"error", yaml.error().str()}});
        ctl.stop_heartbeat();
        return 2;
      }
      cfg = settings::parse_experiment(*yaml, "CONFIG from the controller", false);
      opt.profiles_known = ctl.profiles_known();
    } else {
      std::ifstream f(opt.experiment_file);
      if (!f) {
        ctl.send("FAIL", {{"error", "cannot read --experiment " + opt.experiment_file}});
        ctl.stop_heartbeat();
        return 2;
      }
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      cfg = settings::parse_experiment(text, opt.experiment_file, false);
    }
    if (!cfg) {
      ctl.send("FAIL", {{"error", cfg.error().str()}});
      ctl.stop_heartbeat();
      return 2;
    }
    opt.experiment = std::move(*cfg);
  }
  int rc = 0;
  try {
    rc = run_role(opt, ctl);
  } catch (const std::exception& e) {
    ctl.send("FAIL", {{"error", "internal: " + without_backtrace(e.what())}});
    rc = 3;
  }
  ctl.stop_heartbeat();
  if (ctl.silenced()) {
    std::fprintf(stderr, "tracr-agent: exiting: the controller went silent\n");
    return ControlOut::kOrphanExitStatus;
  }
  return rc;
}

}  // namespace tracr::agent
