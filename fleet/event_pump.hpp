// The control lines of several agents, read each on its own thread into
// one queue (tracrctl run and tracrctl train).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "wire/control.hpp"
#include "fleet/launcher.hpp"

namespace tracr::fleet {

// Reads control lines of every agent on its own thread into one queue.
struct Event {
  size_t agent = 0;
  Result<wire::ControlMsg> msg = make_error(Errc::internal, "");
  bool closed = false;
};

class EventPump {
 public:
  explicit EventPump(std::vector<std::unique_ptr<AgentConn>>& agents) : agents_(agents) {}
  ~EventPump() { stop(); }
  // Starts reading agents [started_, n).
  void start() {
    // Each thread gets its agent, not the vector: the main thread appends
    // agents while earlier ones are being read.
    for (size_t i = started_; i < agents_.size(); ++i)
      threads_.emplace_back([this, i, a = agents_[i].get()] {
        while (!stop_) {
          auto line = a->proc().read_line(300);
          if (!line) {
            if (line.error().code == Errc::timeout) continue;
            push(Event{i, std::move(line.error()), true});
            return;
          }
          push(Event{i, a->decode(*line), false});
        }
      });
    started_ = agents_.size();
  }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }
  std::optional<Event> pop(int timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty(); })) return std::nullopt;
    Event e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  void push(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(e));
    cv_.notify_one();
  }
  std::vector<std::unique_ptr<AgentConn>>& agents_;
  std::vector<std::thread> threads_;
  size_t started_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

}  // namespace tracr::fleet
