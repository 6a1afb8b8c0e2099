#include "runtime/parallel.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "io/binary.hpp"

namespace entgraph {
namespace {

std::size_t default_threads() {
#if defined(__EMSCRIPTEN__)
  // Without pthreads there are no workers; with them, a thread can start only
  // on a Web Worker the module preallocated (its pool), so the JavaScript
  // wrapper sizes the pool and sets the count itself (wasm/entgraph.js).
  return 1;
#else
  if (const char* env = std::getenv("ENTGRAPH_NUM_THREADS")) {
    // Digits only: strtol alone would take " 4", "+4" or "4 ".
    const std::size_t len = std::strlen(env);
    const bool digits = len > 0 && len <= 4 && std::strspn(env, "0123456789") == len;
    const long v = digits ? std::strtol(env, nullptr, 10) : 0;
    if (v > 0 && v <= 4096) return static_cast<std::size_t>(v);
    throw Error("ENTGRAPH_NUM_THREADS: not a thread count (got '" + detail::printable(env, len) +
                "', expected 1..4096)");
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
#endif
}

// Workers sleep on a condition variable between jobs. A job is a shared
// counter of chunks; the caller takes chunks too, so a pool of N threads has
// N - 1 workers.
class ThreadPool {
 public:
  static ThreadPool& instance() {
    static ThreadPool pool;
    return pool;
  }

  std::size_t threads() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (wanted_ == 0) wanted_ = default_threads();
    return wanted_;
  }

  void set_threads(std::size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    wanted_ = n;  // 0: default, resolved lazily
  }

  void run(std::size_t chunks, const std::function<void(std::size_t)>& task) {
    const std::size_t helpers = std::min(threads(), chunks) - 1;
    std::unique_lock<std::mutex> job_lock(job_mutex_);  // one job at a time
    ensure_workers(helpers);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      chunks_ = chunks;
      next_ = 0;
      pending_ = chunks;
      active_helpers_ = helpers;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0 && busy_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  static thread_local bool in_worker_;

 public:
  static bool in_pool_task() { return in_worker_; }

 private:
  // A thread that cannot start (a process limit; in the threaded WebAssembly
  // build, more threads than the module's pool of Web Workers) is an
  // entgraph::Error, like every failure the library reports; the pool stays
  // usable.
  void ensure_workers(std::size_t n) {
    try {
      while (workers_.size() < n) workers_.emplace_back([this, id = workers_.size()] { loop(id); });
    } catch (const std::system_error& e) {
      throw Error(at_op("set_num_threads") + "could not start worker thread " + std::to_string(workers_.size() + 1) + " of " +
                  std::to_string(n) + " (" + e.what() + "); set_num_threads(1) runs on the caller's thread");
    }
  }

  // Takes chunks until none are left.
  void work() {
    const bool was = in_worker_;
    in_worker_ = true;
    for (;;) {
      std::size_t chunk;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (next_ >= chunks_) break;
        chunk = next_++;
        ++busy_;
      }
      std::exception_ptr err;
      try {
        (*task_)(chunk);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (err && !error_) error_ = err;
      --busy_;
      if (--pending_ == 0) done_.notify_all();
    }
    in_worker_ = was;
  }

  void loop(std::size_t id) {
    std::size_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && id < active_helpers_); });
        if (stop_) return;
        seen = generation_;
      }
      work();
    }
  }

  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::size_t)>* task_ = nullptr;
  std::size_t wanted_ = 0, chunks_ = 0, next_ = 0, pending_ = 0, busy_ = 0, active_helpers_ = 0, generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

thread_local bool ThreadPool::in_worker_ = false;

}  // namespace

std::size_t num_threads() { return ThreadPool::instance().threads(); }

void set_num_threads(std::size_t n) {
  if (n > 4096) throw Error(at_op("set_num_threads") + "n is absurd (got " + std::to_string(n) + ", expected 0..4096)");
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
  if (n > 1)
    throw Error(at_op("set_num_threads") + "this WebAssembly build has no threads (got " + std::to_string(n) +
                ", expected 0 or 1)");
#endif
  ThreadPool::instance().set_threads(n);
}

namespace detail {

void parallel_for(std::size_t count, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (count == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t max_chunks = (count + grain - 1) / grain;
  const std::size_t threads = ThreadPool::in_pool_task() ? 1 : std::min(num_threads(), max_chunks);
  if (threads <= 1) {
    fn(0, count);
    return;
  }
  // A few chunks per thread balance uneven rows without much overhead.
  const std::size_t chunks = std::min(max_chunks, threads * 4);
  const std::size_t per = (count + chunks - 1) / chunks;
  const std::size_t used = (count + per - 1) / per;
  ThreadPool::instance().run(used, [&](std::size_t c) {
    const std::size_t b = c * per;
    fn(b, std::min(count, b + per));
  });
}

}  // namespace detail
}  // namespace entgraph
