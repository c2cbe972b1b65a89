#include "agent/delay_relay.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

namespace tracr::agent {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxQueued = size_t{64} << 20;
constexpr size_t kReadSize = 64 * 1024;

void set_nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One direction of one connection: bytes read at t, released at t + delay.
struct Pipe {
  struct Chunk {
    Clock::time_point due;
    std::vector<uint8_t> data;
    size_t off = 0;
  };
  std::deque<Chunk> q;
  size_t queued = 0;
  bool eof = false;       // the source closed
  bool shut = false;      // EOF passed on to the destination
  Clock::time_point last_due{};
};

struct Conn {
  int down = -1;  // the participant's side (accepted)
  int up = -1;    // the SERVER's side
  Pipe to_up, to_down;
  bool down_hup = false, up_hup = false;  // that socket is closed both ways: nothing more to write to it
  bool dead = false;
};

}  // namespace

Result<std::unique_ptr<DelayRelay>> DelayRelay::start(const std::string& upstream, double delay_ms, double jitter_ms,
                                                      uint64_t seed) {
  const std::string pre = "tcp://";
  if (upstream.rfind(pre, 0) != 0)
    return make_error(Errc::invalid_argument, "delay relay: expected a tcp://HOST:PORT endpoint, got '" + upstream + "'");
  std::string hp = upstream.substr(pre.size());
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos || colon + 1 >= hp.size())
    return make_error(Errc::invalid_argument, "delay relay: endpoint '" + upstream + "' has no port");
  auto r = std::unique_ptr<DelayRelay>(new DelayRelay());
  r->host_ = hp.substr(0, colon);
  r->port_ = hp.substr(colon + 1);
  if (r->host_.size() >= 2 && r->host_.front() == '[' && r->host_.back() == ']')
    r->host_ = r->host_.substr(1, r->host_.size() - 2);
  r->delay_ms_ = delay_ms;
  r->jitter_ms_ = jitter_ms;
  r->seed_ = seed;
  r->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (r->listen_fd_ < 0 || ::bind(r->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(r->listen_fd_, 16) != 0 || ::getsockname(r->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return make_error(Errc::io, std::string("delay relay: cannot listen on loopback: ") + std::strerror(errno));
  set_nonblock(r->listen_fd_);
  if (::pipe2(r->wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return make_error(Errc::io, std::string("delay relay: pipe: ") + std::strerror(errno));
  r->endpoint_ = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  r->thread_ = std::thread([p = r.get()] { p->loop(); });
  return r;
}

DelayRelay::~DelayRelay() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void DelayRelay::loop() {
  std::mt19937_64 rng(seed_);
  std::uniform_real_distribution<double> jit(-jitter_ms_, jitter_ms_);
  std::vector<std::unique_ptr<Conn>> conns;
  auto due_after = [&](Pipe& p, Clock::time_point now) {
    double ms = delay_ms_ + (jitter_ms_ > 0 ? jit(rng) : 0.0);
    if (ms < 0) ms = 0;
    auto due = now + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
    // Bytes keep their order, as on a TCP connection.
    if (due < p.last_due) due = p.last_due;
    p.last_due = due;
    return due;
  };
  auto connect_up = [&]() -> int {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(host_.c_str(), port_.c_str(), &hints, &res) != 0 || !res) return -1;
    int fd = -1;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      timeval tv{5, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
      ::close(fd);
      fd = -1;
    }
    ::freeaddrinfo(res);
    if (fd >= 0) {
      set_nonblock(fd);
      no_delay(fd);
    }
    return fd;
  };
  // Reads what src has into p; false on error.
  auto pull = [&](int src, Pipe& p, std::atomic<uint64_t>& counter) {
    while (!p.eof && p.queued < kMaxQueued) {
      std::vector<uint8_t> buf(kReadSize);
      const ssize_t n = ::recv(src, buf.data(), buf.size(), 0);
      if (n > 0) {
        buf.resize(static_cast<size_t>(n));
        p.queued += buf.size();
        counter += buf.size();
        p.q.push_back({due_after(p, Clock::now()), std::move(buf), 0});
        continue;
      }
      if (n == 0) {
        p.eof = true;
        return true;
      }
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    return true;
  };
  // Writes what is due to dst; false on error.
  auto push = [&](int dst, Pipe& p) {
    const auto now = Clock::now();
    while (!p.q.empty() && p.q.front().due <= now) {
      auto& c = p.q.front();
      const ssize_t n = ::send(dst, c.data.data() + c.off, c.data.size() - c.off, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.off += static_cast<size_t>(n);
      p.queued -= static_cast<size_t>(n);
      if (c.off < c.data.size()) return true;
      p.q.pop_front();
    }
    if (p.q.empty() && p.eof && !p.shut) {
      ::shutdown(dst, SHUT_WR);
      p.shut = true;
    }
    return true;
  };

  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const auto now = Clock::now();
    Clock::time_point next = now + std::chrono::milliseconds(200);
    for (auto& c : conns) {
      short ev_down = 0, ev_up = 0;
      if (!c->to_up.eof && c->to_up.queued < kMaxQueued) ev_down |= POLLIN;
      if (!c->to_down.eof && c->to_down.queued < kMaxQueued) ev_up |= POLLIN;
      auto want_out = [&](Pipe& p, short& ev) {
        if (p.q.empty()) return;
        if (p.q.front().due <= now) ev |= POLLOUT;
        else next = std::min(next, p.q.front().due);
      };
      want_out(c->to_up, ev_up);
      want_out(c->to_down, ev_down);
      fds.push_back({c->down_hup ? -1 : c->down, ev_down, 0});
      fds.push_back({c->up_hup ? -1 : c->up, ev_up, 0});
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait_ms + 1)));
    if (stop_) break;
    if (fds[0].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        no_delay(fd);
        const int up = connect_up();
        if (up < 0) {
          ::close(fd);  // the participant sees the SERVER unreachable, as without the relay
          continue;
        }
        auto c = std::make_unique<Conn>();
        c->down = fd;
        c->up = up;
        conns.push_back(std::move(c));
      }
    }
    for (size_t i = 0; i < conns.size() && 2 + 2 * i + 1 < fds.size(); ++i) {
      Conn& c = *conns[i];
      const short rd = fds[2 + 2 * i].revents, ru = fds[2 + 2 * i + 1].revents;
      bool ok = true;
      if (rd & (POLLIN | POLLHUP | POLLERR)) ok = ok && pull(c.down, c.to_up, up_);
      if (ru & (POLLIN | POLLHUP | POLLERR)) ok = ok && pull(c.up, c.to_down, down_);
      // A side closed both ways still gets what it sent delivered to the other.
      if (rd & (POLLHUP | POLLERR)) c.down_hup = true;
      if (ru & (POLLHUP | POLLERR)) c.up_hup = true;
      if (!c.up_hup) ok = ok && push(c.up, c.to_up);
      if (!c.down_hup) ok = ok && push(c.down, c.to_down);
      const bool up_done = c.to_up.shut || c.up_hup, down_done = c.to_down.shut || c.down_hup;
      if (!ok || (up_done && down_done) || (c.down_hup && c.to_up.q.empty() && c.to_up.eof) ||
          (c.up_hup && c.to_down.q.empty() && c.to_down.eof))
        c.dead = true;
    }
    for (auto& c : conns)
      if (c->dead) {
        ::close(c->down);
        ::close(c->up);
      }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const auto& c) { return c->dead; }), conns.end());
  }
  for (auto& c : conns) {
    ::close(c->down);
    ::close(c->up);
  }
}

}  // namespace tracr::agent
