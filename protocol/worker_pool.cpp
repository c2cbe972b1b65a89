#include "protocol/worker_pool.hpp"

#include <map>

namespace tracr::protocol {

unsigned resolve_threads(unsigned threads) {
  if (threads != 0) return threads;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : hc;
}

WorkerPool::WorkerPool(unsigned n) {
  if (n == 0) n = 1;
  workers_.reserve(n);
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::future<void> WorkerPool::submit(std::function<void(unsigned)> fn) {
  std::packaged_task<void(unsigned)> task(std::move(fn));
  auto fut = task.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return fut;
}

void WorkerPool::loop(unsigned index) {
  for (;;) {
    std::packaged_task<void(unsigned)> task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(index);
  }
}

std::shared_ptr<WorkerPool> WorkerPool::shared(unsigned n) {
  static std::mutex mu;
  static std::map<unsigned, std::shared_ptr<WorkerPool>> pools;
  std::lock_guard<std::mutex> lk(mu);
  auto& p = pools[n];
  if (!p) p = std::make_shared<WorkerPool>(n);
  return p;
}

}  // namespace tracr::protocol
