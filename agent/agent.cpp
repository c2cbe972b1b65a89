#include "agent/agent.hpp"

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "protocol/channel.hpp"

namespace tracr::agent {

using namespace tracr::protocol;

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

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

bool stdin_closed() {
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char buf[256];
  ssize_t n = ::read(0, buf, sizeof buf);
  return n == 0;
}

}  // namespace

int run_server(const ServerOptions& opt, std::atomic<bool>* stop_flag, bool watch_stdin) {
  std::atomic<bool> local_stop{false};
  std::atomic<bool>& stop = stop_flag ? *stop_flag : local_stop;
  zmq::context_t ctx(1);
  ChannelOptions co;
  co.role = "SERVER";
  co.security.encrypt = opt.encrypt;
  co.security.x25519 = opt.x25519;
  if (opt.encrypt) {
    auto s = from_hex(opt.secret_hex);
    if (!s || s->size() < 16) {
      std::fprintf(stderr, "tracr-agent: encryption is on but no valid session secret was given on stdin "
                           "(expected at least 32 hex characters)\n");
      return 2;
    }
    co.security.secret = *s;
  }
  auto server = Server::bind(ctx, opt.bind, co);
  if (!server) {
    std::fprintf(stderr, "tracr-agent: %s\n", server.error().str().c_str());
    return 1;
  }
  zmq::socket_t raw(ctx, zmq::socket_type::router);
  std::thread raw_thread;
  std::string raw_ep;
  if (!opt.raw_bind.empty()) {
    raw.set(zmq::sockopt::linger, 0);
    try {
      raw.bind(opt.raw_bind);
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "tracr-agent: bind %s: %s\n", opt.raw_bind.c_str(), e.what());
      return 1;
    }
    raw_ep = raw.get(zmq::sockopt::last_endpoint);
    raw_thread = std::thread([&] { raw_ack_loop(raw, stop); });
  }
  std::printf("READY %s%s%s\n", (*server)->endpoint().c_str(), raw_ep.empty() ? "" : " raw ",
              raw_ep.c_str());
  std::fflush(stdout);

  int rc = 0;
  auto last_traffic = std::chrono::steady_clock::now();
  while (!stop.load()) {
    if (watch_stdin && stdin_closed()) break;
    auto in = (*server)->recv(200);
    if (!in) {
      if (in.error().code == Errc::timeout) {
        if (opt.idle_exit_ms > 0 &&
            std::chrono::steady_clock::now() - last_traffic > std::chrono::milliseconds(opt.idle_exit_ms))
          break;
        continue;
      }
      std::fprintf(stderr, "tracr-agent: rejected: %s\n", in.error().str().c_str());
      continue;
    }
    last_traffic = std::chrono::steady_clock::now();
    Frame& f = in->frame;
    if (f.header.type == MsgType::shutdown) break;
    if (f.header.type != MsgType::infer_request) {
      (void)(*server)->send_error(in->peer,
                                  make_error(Errc::unexpected_message,
                                             fmt::format("SERVER does not handle {} yet",
                                                         msg_type_name(f.header.type))),
                                  f.header.split);
      continue;
    }
    Meta meta;
    meta["srv_raw_bytes"] = static_cast<int64_t>(f.stats.raw_bytes);
    meta["srv_wire_bytes"] = static_cast<int64_t>(f.stats.wire_bytes);
    meta["srv_decode_ns"] = f.stats.total_ns;
    meta["srv_codec_ns"] = f.stats.codec_ns;
    meta["srv_crypto_ns"] = f.stats.crypto_ns;
    auto echo = f.header.meta.find("echo");
    auto verify = f.header.meta.find("verify");
    if (verify != f.header.meta.end()) {
      uint64_t h = 1469598103934665603ull;
      for (const auto& t : f.tensors) h = fnv1a(t.data, t.nbytes, h);
      meta["fnv1a"] = static_cast<int64_t>(h);
    }
    const bool do_echo = echo != f.header.meta.end();
    auto st = (*server)->send(in->peer, MsgType::infer_result, f.header.split,
                              do_echo ? f.tensors : Bundle{}, meta);
    if (!st) std::fprintf(stderr, "tracr-agent: reply failed: %s\n", st.error().str().c_str());
  }
  stop = true;
  if (raw_thread.joinable()) raw_thread.join();
  return rc;
}

namespace {
void usage() {
  std::puts(
      "usage: tracr-agent --role SERVER [--bind ENDPOINT] [--raw-bind ENDPOINT]\n"
      "                   [--no-encrypt] [--no-x25519] [--idle-exit-ms N]\n"
      "The session secret (hex) is read from the first line of standard input,\n"
      "never from the command line. The agent exits when standard input closes.");
}
}  // namespace

int agent_main(int argc, char** argv) {
  try {
    ServerOptions opt;
    std::string role;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&](const char* what) -> std::string {
        if (i + 1 >= argc) throw Fatal(make_error(Errc::invalid_argument, std::string(what) + " needs a value"));
        return argv[++i];
      };
      if (a == "--role") role = next("--role");
      else if (a == "--bind") opt.bind = next("--bind");
      else if (a == "--raw-bind") opt.raw_bind = next("--raw-bind");
      else if (a == "--no-encrypt") opt.encrypt = false;
      else if (a == "--no-x25519") opt.x25519 = false;
      else if (a == "--idle-exit-ms") opt.idle_exit_ms = std::stoi(next("--idle-exit-ms"));
      else if (a == "--help" || a == "-h") { usage(); return 0; }
      else if (a == "--version") { std::puts("tracr-agent 0.1.0 protocol 1"); return 0; }
      else throw Fatal(make_error(Errc::invalid_argument, "unknown option '" + a + "'"));
    }
    if (role != "SERVER") {
      std::fprintf(stderr, "tracr-agent: --role must be SERVER (PARTICIPANT arrives with issue #4); got '%s'\n",
                   role.c_str());
      usage();
      return 2;
    }
    if (opt.encrypt) {
      std::string line;
      if (!std::getline(std::cin, line)) {
        std::fprintf(stderr, "tracr-agent: expected the session secret on standard input\n");
        return 2;
      }
      opt.secret_hex = line;
    }
    return run_server(opt, nullptr, true);
  } catch (const Fatal& f) {
    std::fprintf(stderr, "tracr-agent: %s\n", f.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tracr-agent: internal error: %s\n", e.what());
    return 3;
  }
}

}  // namespace tracr::agent
