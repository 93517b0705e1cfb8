#include "core/parallel.h"

#include <cstdlib>

namespace vlk {
namespace {
int initial_threads() {
  if (const char* env = std::getenv("VLKERNELS_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}
std::atomic<int> g_threads{initial_threads()};
}  // namespace

int get_num_threads() { return g_threads.load(std::memory_order_relaxed); }

void set_num_threads(int n) { g_threads.store(n > 0 ? n : initial_threads(), std::memory_order_relaxed); }

}  // namespace vlk
