// Minimal fork-join parallel_for shared by every CPU kernel (no OpenMP: the module must not pull a second
// OpenMP runtime into a process that already holds torch's).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace vlk {

// 0 means "hardware concurrency"; set from Python (vlkernels.set_num_threads) or VLKERNELS_NUM_THREADS.
int get_num_threads();
void set_num_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n). Work below `grain` items per thread runs inline.
// The first exception thrown by any chunk is rethrown on the calling thread after all chunks finish.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  int64_t threads = std::min<int64_t>(get_num_threads(), (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  const int64_t chunk = (n + threads - 1) / threads;
  auto run = [&](int64_t t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin >= end) return;
    try {
      fn(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace vlk
