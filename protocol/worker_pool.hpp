// A small fixed pool of worker threads for encoding and decoding a frame's
// parts in parallel (FrameWriter / FrameReader with threads > 1). Pools are
// shared per size within a process and live until it exits: frames never
// start threads of their own.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tracr::protocol {

// The thread count a `threads` setting stands for: 0 is the machine's
// hardware concurrency (at least 1); anything else is itself.
unsigned resolve_threads(unsigned threads);

class WorkerPool {
 public:
  // Starts n >= 1 worker threads.
  explicit WorkerPool(unsigned n);
  // Runs every task already submitted, then joins the workers.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }
  // Queues fn; a worker calls fn(its index in [0, size())). The future is
  // ready when fn has returned (and carries what it threw, if anything).
  // Tasks run in submission order of their start; they must not wait on
  // other tasks of the same pool.
  std::future<void> submit(std::function<void(unsigned worker)> fn);

  // The process-wide pool of n threads (created on first use, kept).
  static std::shared_ptr<WorkerPool> shared(unsigned n);

 private:
  void loop(unsigned index);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void(unsigned)>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tracr::protocol
