// The participant's delay relay (link_delay: agent) over real loopback TCP:
// bytes arrive intact and in order, each direction is held for the delay,
// and an end closing is passed on.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "agent/delay_relay.hpp"

using tracr::agent::DelayRelay;
using Clock = std::chrono::steady_clock;

namespace {

// A TCP echo server on loopback, one connection, until EOF.
struct Echo {
  int lfd = -1;
  int port = 0;
  std::thread t;
  Echo() {
    lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(lfd, 4);
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    t = std::thread([this] {
      const int c = ::accept(lfd, nullptr, nullptr);
      if (c < 0) return;
      char buf[65536];
      for (;;) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = ::send(c, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w <= 0) break;
          off += w;
        }
      }
      ::close(c);
    });
  }
  ~Echo() {
    ::shutdown(lfd, SHUT_RDWR);
    ::close(lfd);
    if (t.joinable()) t.join();
  }
};

int connect_to(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool read_exact(int fd, uint8_t* p, size_t n) {
  while (n) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

TEST(DelayRelay, HoldsEachDirectionForTheDelayAndKeepsBytesInOrder) {
  Echo echo;
  auto r = DelayRelay::start("tcp://127.0.0.1:" + std::to_string(echo.port), 25, 0, 1);
  ASSERT_TRUE(r.ok()) << r.error().str();
  const int fd = connect_to((*r)->endpoint());
  ASSERT_GE(fd, 0);
  // A small message: its round trip crosses the relay twice.
  uint8_t ping = 42, pong = 0;
  const auto t0 = Clock::now();
  ASSERT_EQ(::send(fd, &ping, 1, 0), 1);
  ASSERT_TRUE(read_exact(fd, &pong, 1));
  const double rtt_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(pong, 42);
  EXPECT_GE(rtt_ms, 50.0);  // 25 ms each way at least
  // 8 MiB of random bytes, sent while the echo comes back: identical, in order.
  std::vector<uint8_t> out(8u << 20), in(out.size());
  std::mt19937 rng(7);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::thread writer([&] {
    for (size_t off = 0; off < out.size();) {
      const ssize_t w = ::send(fd, out.data() + off, std::min<size_t>(65536, out.size() - off), MSG_NOSIGNAL);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
  });
  EXPECT_TRUE(read_exact(fd, in.data(), in.size()));
  writer.join();
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
  EXPECT_EQ((*r)->bytes_up(), out.size() + 1);
  EXPECT_EQ((*r)->bytes_down(), out.size() + 1);
  // Closing our side reaches the echo server, whose close comes back as EOF.
  ::shutdown(fd, SHUT_WR);
  uint8_t x;
  EXPECT_EQ(::recv(fd, &x, 1, 0), 0);
  ::close(fd);
}

TEST(DelayRelay, JitterKeepsOrderAndAnUnreachableServerClosesTheConnection) {
  Echo echo;
  auto r = DelayRelay::start("tcp://127.0.0.1:" + std::to_string(echo.port), 5, 5, 3);
  ASSERT_TRUE(r.ok());
  const int fd = connect_to((*r)->endpoint());
  ASSERT_GE(fd, 0);
  for (uint8_t i = 0; i < 100; ++i) ASSERT_EQ(::send(fd, &i, 1, 0), 1);
  for (uint8_t i = 0; i < 100; ++i) {
    uint8_t b = 0;
    ASSERT_TRUE(read_exact(fd, &b, 1));
    EXPECT_EQ(b, i);
  }
  ::close(fd);
  // No server behind the relay: the connection is closed, as a refused connect would be.
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a);  // a port nobody listens on
  ::getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len);
  auto r2 = DelayRelay::start("tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port)), 5, 0, 1);
  ASSERT_TRUE(r2.ok());
  const int fd2 = connect_to((*r2)->endpoint());
  ASSERT_GE(fd2, 0);
  uint8_t b;
  EXPECT_LE(::recv(fd2, &b, 1, 0), 0);
  ::close(fd2);
  ::close(probe);
}

TEST(DelayRelay, RefusesAnEndpointItCannotRelay) {
  auto r = DelayRelay::start("ipc:///tmp/x", 10, 0, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tcp://HOST:PORT"), std::string::npos);
  EXPECT_FALSE(DelayRelay::start("tcp://127.0.0.1", 10, 0, 1).ok());
}
