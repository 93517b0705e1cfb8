// Minimal fork-join parallel_for shared by every CPU kernel (no OpenMP: the module must not pull a second
// OpenMP runtime into a process that already holds torch's).
//
// Threads per call, not per process: a binding sets the calling thread's budget with a ThreadBudget guard (or
// Python with vlkernels.core.threads.limit), so concurrent calls never change each other's thread count.
// Threads are started per call (no persistent pool): nothing to repair after fork, nothing shared between the
// Python threads that call in concurrently. A thread that cannot be created (EAGAIN under a pids cgroup or
// ulimit -u) only means fewer workers: blocks are handed out dynamically, so whoever runs covers all of them.
// Interrupts: the calling thread polls the installed interrupt poller (Python's signal machinery) between blocks,
// while it waits for the workers and in check_interrupt(); a pending KeyboardInterrupt stops every worker at its
// next block (or check_interrupt()) and is rethrown on the calling thread once all workers have joined.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

namespace vlk {

// Threads the calling thread's next parallel_for may use: its ThreadBudget if one is active, else the process
// default (set_num_threads; VLKERNELS_NUM_THREADS; hardware concurrency). Inside a worker it is 1 (no nesting).
int get_num_threads();
// The process default; n <= 0 restores the initial default.
void set_num_threads(int n);
// The calling thread's budget (0 = none: use the process default).
int get_thread_budget();
// Sets the calling thread's budget and returns the previous one (for bindings that cannot use the guard).
int set_thread_budget(int n);

// Per-call thread count: parallel_for calls made by this thread while the guard lives use at most n threads
// (n <= 0: no change). Restores the previous budget on destruction.
class ThreadBudget {
 public:
  explicit ThreadBudget(int n) : prev_(get_thread_budget()), active_(n > 0) {
    if (active_) set_thread_budget(n);
  }
  ~ThreadBudget() {
    if (active_) set_thread_budget(prev_);
  }
  ThreadBudget(const ThreadBudget&) = delete;
  ThreadBudget& operator=(const ThreadBudget&) = delete;

 private:
  int prev_;
  bool active_;
};

// Thrown by check_interrupt() in a worker whose call is being stopped; the calling thread rethrows the cause
// (KeyboardInterrupt) instead, so this never reaches Python on its own.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("vlkernels: call interrupted") {}
};

// Installed once by the Python bindings. Called on the thread that entered C++ at most every ~20 ms; throws
// (the pending Python exception) when a signal handler raised, returns otherwise. Must be cheap to call from
// any thread (it returns at once on threads other than Python's main thread).
using InterruptPoller = void (*)();
void set_interrupt_poller(InterruptPoller poller);

// Test hook: each parallel_for may create at most `limit` workers, the next creation fails as under a pids
// cgroup (-1: no limit). Returns the previous limit.
int64_t set_spawn_limit_for_testing(int64_t limit);

// For long loops inside a parallel_for block or a plain binding: throws when the call should stop. Costs a
// thread-local read and an atomic load; call it every ~10–100 µs of work, not per element.
void check_interrupt();

namespace detail {

struct CallState {
  std::atomic<bool> stop{false};
};

// Current parallel_for of this thread (workers and the caller), for check_interrupt().
CallState*& current_call();
// Polls the interrupt poller when at least the poll interval has passed since this thread's last poll.
void poll_interrupt_if_due();
// Creates a worker thread; fails with EAGAIN (like a pids-limited std::thread) past the test spawn limit.
std::thread spawn_worker(int64_t index, std::function<void()> body);
// Waits on cv until done() holds, polling the interrupt poller between timed waits; returns the poller's
// exception (if any) instead of throwing, so the caller can stop the workers first.
std::exception_ptr wait_polling(std::mutex& mu, std::condition_variable& cv, const std::function<bool()>& done);

// Restores current_call() and the thread budget when a worker or the caller leaves a call.
class CallScope {
 public:
  CallScope(CallState* call, int budget) : prev_call_(current_call()), prev_budget_(get_thread_budget()) {
    current_call() = call;
    if (budget > 0) set_thread_budget(budget);
  }
  ~CallScope() {
    current_call() = prev_call_;
    set_thread_budget(prev_budget_);
  }

 private:
  CallState* prev_call_;
  int prev_budget_;
};

}  // namespace detail

// Calls fn(begin, end) on disjoint blocks covering [0, n). Work below `grain` items per thread runs inline; above
// it, min(threads, n / grain) threads take blocks (up to 4 per thread) in order from a shared counter. fn must
// accept any block boundaries. The first exception thrown by a block (or the interrupt) is rethrown on the
// calling thread after every started worker has joined; blocks not yet started are skipped once one fails.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t by_grain = n / grain + (n % grain != 0);
  const int64_t threads = std::min<int64_t>(get_num_threads(), by_grain);
  const int64_t nblocks = std::min<int64_t>(by_grain, std::max<int64_t>(threads, 1) * 4);
  const int64_t block = n / nblocks + (n % nblocks != 0);

  detail::CallState call;
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int64_t> next{0};
  int64_t running = 0;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = e;
    call.stop.store(true, std::memory_order_relaxed);
  };
  // Takes blocks until none is left or the call stops; on the caller, polls for interrupts between blocks.
  auto drain = [&](bool caller) {
    for (;;) {
      if (call.stop.load(std::memory_order_relaxed)) return;
      if (caller) {
        try {
          detail::poll_interrupt_if_due();
        } catch (...) {
          fail(std::current_exception());
          return;
        }
      }
      const int64_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= nblocks) return;
      const int64_t begin = b * block, end = std::min(n, begin + block);
      if (begin >= end) return;
      try {
        fn(begin, end);
      } catch (...) {
        fail(std::current_exception());
        return;
      }
    }
  };

  std::vector<std::thread> pool;
  if (threads > 1) {
    pool.reserve(static_cast<size_t>(threads - 1));
    for (int64_t t = 1; t < threads; ++t) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++running;
      }
      try {
        pool.push_back(detail::spawn_worker(t, [&] {
          {
            detail::CallScope scope(&call, 1);
            drain(false);
          }
          std::lock_guard<std::mutex> lock(mu);
          if (--running == 0) cv.notify_all();
        }));
      } catch (...) {
        // No more threads (EAGAIN from a pids limit, or no memory for a stack): the workers already running and
        // this thread take every block, so the result is the same, only slower.
        std::lock_guard<std::mutex> lock(mu);
        --running;
        break;
      }
    }
  }
  {
    detail::CallScope scope(&call, 1);
    drain(true);
  }
  if (!pool.empty()) {
    std::exception_ptr interrupt = detail::wait_polling(mu, cv, [&] { return running == 0; });
    if (interrupt) {
      fail(interrupt);
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return running == 0; });
    }
    for (auto& th : pool) th.join();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace vlk
