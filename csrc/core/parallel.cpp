#include "core/parallel.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>

#ifdef __linux__
#include <sched.h>
#endif

namespace vlk {
namespace {

int initial_threads() {
  if (const char* env = std::getenv("VLKERNELS_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
#ifdef __linux__
  // The CPUs this process may run on (taskset, cpusets), as torch counts them: hardware_concurrency() counts the
  // whole machine, and a pinned process would run more workers than it has cores.
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
#endif
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::atomic<int> g_threads{initial_threads()};
std::atomic<InterruptPoller> g_poller{nullptr};
// Test hook: the number of workers one call may create before creation fails as under a pids limit (-1: no limit).
std::atomic<int64_t> g_spawn_limit{-1};
thread_local int tl_budget = 0;
thread_local std::chrono::steady_clock::time_point tl_next_poll{};
// Python's signal handlers run within a few ms of the signal; 20 ms keeps the GIL round trips rare.
constexpr std::chrono::milliseconds kPollInterval{20};

}  // namespace

int get_num_threads() { return tl_budget > 0 ? tl_budget : g_threads.load(std::memory_order_relaxed); }

void set_num_threads(int n) { g_threads.store(n > 0 ? n : initial_threads(), std::memory_order_relaxed); }

int get_thread_budget() { return tl_budget; }

int set_thread_budget(int n) {
  const int prev = tl_budget;
  tl_budget = n > 0 ? n : 0;
  return prev;
}

int64_t set_spawn_limit_for_testing(int64_t limit) { return g_spawn_limit.exchange(limit); }

void set_interrupt_poller(InterruptPoller poller) { g_poller.store(poller); }

void check_interrupt() {
  detail::CallState* call = detail::current_call();
  if (call != nullptr && call->stop.load(std::memory_order_relaxed)) throw Interrupted();
  detail::poll_interrupt_if_due();
}

namespace detail {

CallState*& current_call() {
  thread_local CallState* call = nullptr;
  return call;
}

void poll_interrupt_if_due() {
  InterruptPoller poller = g_poller.load(std::memory_order_relaxed);
  if (poller == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < tl_next_poll) return;
  tl_next_poll = now + kPollInterval;
  poller();
}

std::thread spawn_worker(int64_t index, std::function<void()> body) {
  const int64_t limit = g_spawn_limit.load(std::memory_order_relaxed);
  if (limit >= 0 && index > limit) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "vlkernels test spawn limit");
  }
  return std::thread(std::move(body));
}

std::exception_ptr wait_polling(std::mutex& mu, std::condition_variable& cv, const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(mu);
  while (!cv.wait_for(lock, kPollInterval, done)) {
    lock.unlock();
    try {
      poll_interrupt_if_due();
    } catch (...) {
      return std::current_exception();
    }
    lock.lock();
  }
  return nullptr;
}

}  // namespace detail
}  // namespace vlk
