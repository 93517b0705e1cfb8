#include <pybind11/stl.h>

#include <chrono>

#include "core/count_above.h"
#include "core/parallel.h"
#include "core/tensor_arg.h"
#include "registry.h"

namespace py = pybind11;

namespace {

unsigned long g_main_thread = 0;

// Runs Python's pending signal handlers from inside a C++ call: only the main thread runs them, so other threads
// return at once (no GIL round trip). A handler that raises (SIGINT -> KeyboardInterrupt) stops the call.
void poll_python_signals() {
  if (PyThread_get_thread_ident() != g_main_thread || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// out[i] += #{j : scores[i, j] > thresholds[i]} (>= when inclusive); every argument checked here, so the op is
// safe to call directly (torch.ops.vlkernels.count_above reaches it unchanged).
void count_above(py::handle scores_obj, py::handle thr_obj, py::handle out_obj, bool inclusive, int num_threads,
                 std::uintptr_t stream) {
  auto scores = vlk::TensorArg::from(scores_obj, "scores");
  scores.ndim(2).dtype_in({vlk::kF32, vlk::kF64}).inner_contiguous(1);
  auto thr = vlk::TensorArg::from(thr_obj, "thresholds");
  thr.ndim(1).dtype_is(scores.dtype()).same_device(scores).size(0, scores.size(0), "one per row of scores");
  thr.contiguous();
  auto out = vlk::TensorArg::from(out_obj, "out");
  out.ndim(1).dtype_is(vlk::kI64).same_device(scores).size(0, scores.size(0), "one per row of scores");
  out.contiguous().writable();
  if (scores.device_type() != vlk::kCPU && scores.device_type() != vlk::kCUDA) scores.device(vlk::kCPU);
  const int64_t n = scores.size(0), m = scores.size(1);
  if (n == 0 || m == 0) return;
  const bool cuda = scores.device_type() == vlk::kCUDA;
#ifndef VLK_WITH_CUDA
  if (cuda) scores.refuse("is on CUDA but this build of vlkernels._C has no CUDA kernels");
#endif
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::dispatch_float(scores, [&](auto tag) {
    using T = decltype(tag);
    if (!cuda) {
      vlk::launch_count_above<T>(scores.data<const T>(), n, m, scores.stride(0), thr.data<const T>(),
                                 out.data<int64_t>(), inclusive);
    }
#ifdef VLK_WITH_CUDA
    else {
      vlk::launch_count_above_cuda<T>(scores.data<const T>(), n, m, scores.stride(0), thr.data<const T>(),
                                      out.data<int64_t>(), inclusive, reinterpret_cast<void*>(stream));
    }
#endif
  });
}

// Test entry: a C++ loop of `seconds` that only stops through check_interrupt (the interrupt test's long call,
// independent of any kernel's speed).
int64_t spin_interruptible(double seconds, int num_threads) {
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<int64_t> spins{0};
  vlk::parallel_for(vlk::get_num_threads(), 1, [&](int64_t, int64_t) {
    while (std::chrono::steady_clock::now() < end) {
      vlk::check_interrupt();
      spins.fetch_add(1, std::memory_order_relaxed);
    }
  });
  return spins.load();
}

// Test entry: sums 0..n-1 through parallel_for with the given budget, reporting the number of distinct threads
// that ran blocks (the thread-count and spawn-failure tests).
std::pair<int64_t, int64_t> parallel_sum(int64_t n, int64_t grain, int num_threads) {
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  std::atomic<int64_t> total{0};
  std::mutex mu;
  std::vector<std::thread::id> ids;
  vlk::parallel_for(n, grain, [&](int64_t b, int64_t e) {
    int64_t s = 0;
    for (int64_t i = b; i < e; ++i) s += i;
    total.fetch_add(s);
    const std::thread::id me = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mu);
    if (std::find(ids.begin(), ids.end(), me) == ids.end()) ids.push_back(me);
  });
  return {total.load(), static_cast<int64_t>(ids.size())};
}

}  // namespace

VLK_BIND(core) {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  vlk::set_interrupt_poller(&poll_python_signals);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const vlk::Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });
  m.def("get_num_threads", &vlk::get_num_threads, "Threads the calling thread's next C++ call may use.");
  m.def("set_num_threads", &vlk::set_num_threads, py::arg("n"), "Process default (n <= 0: the initial default).");
  m.def("set_thread_budget", &vlk::set_thread_budget, py::arg("n"),
        "Per-thread limit for calls made by this Python thread (0: none); returns the previous one.");
  m.def("count_above", &count_above, py::arg("scores"), py::arg("thresholds"), py::arg("out"), py::arg("inclusive"),
        py::arg("num_threads") = 0, py::arg("stream") = 0);
  m.def("_test_spin_interruptible", &spin_interruptible, py::arg("seconds"), py::arg("num_threads") = 0);
  m.def("_test_parallel_sum", &parallel_sum, py::arg("n"), py::arg("grain"), py::arg("num_threads") = 0);
  m.def("_test_set_spawn_limit", &vlk::set_spawn_limit_for_testing, py::arg("limit"));
}
