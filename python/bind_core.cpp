#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <string>

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
// CSR form (row_ptr given; CPU): thresholds and out hold one entry per (row, threshold) pair, row i's pairs being
// row_ptr[i]..row_ptr[i+1]; with `limit`, column j ties count for pair e when col0 + j < limit[e] (a positive's own
// index: candidates before it win ties). Retrieval's row queries are counted this way.
void count_above(py::handle scores_obj, py::handle thr_obj, py::handle out_obj, bool inclusive, int num_threads,
                 std::uintptr_t stream, py::object row_ptr_obj, py::object limit_obj, int64_t col0) {
  auto scores = vlk::TensorArg::from(scores_obj, "scores");
  scores.ndim(2).dtype_in({vlk::kF32, vlk::kF64}).inner_contiguous(1);
  const int64_t n = scores.size(0), m = scores.size(1);
  const bool csr = !row_ptr_obj.is_none();
  if (!csr && !limit_obj.is_none()) throw py::value_error("count_above: limit needs row_ptr (the CSR form)");
  auto thr = vlk::TensorArg::from(thr_obj, "thresholds");
  thr.ndim(1).dtype_is(scores.dtype()).same_device(scores);
  if (!csr) thr.size(0, n, "one per row of scores");
  thr.contiguous();
  const int64_t pairs = thr.size(0);
  auto out = vlk::TensorArg::from(out_obj, "out");
  out.ndim(1).dtype_is(vlk::kI64).same_device(scores).size(0, pairs, "one per threshold");
  out.contiguous().writable();
  if (scores.device_type() != vlk::kCPU && scores.device_type() != vlk::kCUDA) scores.device(vlk::kCPU);
  std::optional<vlk::TensorArg> row_ptr, limit;
  if (csr) {
    scores.device(vlk::kCPU);  // the CSR form has no CUDA kernel
    row_ptr = vlk::TensorArg::from(row_ptr_obj, "row_ptr");
    row_ptr->ndim(1).dtype_is(vlk::kI64).same_device(scores).size(0, n + 1, "rows of scores + 1").contiguous();
    // Every pair range the kernel walks must lie inside thresholds/out.
    const int64_t* p = row_ptr->data<const int64_t>();
    if (p[0] < 0 || p[n] > pairs) {
      row_ptr->refuse("must lie in [0, " + std::to_string(pairs) + "] (the thresholds), got " + std::to_string(p[0]) +
                      ".." + std::to_string(p[n]));
    }
    for (int64_t i = 0; i < n; ++i)
      if (p[i + 1] < p[i]) row_ptr->refuse("must be non-decreasing (decreases at row " + std::to_string(i) + ")");
    if (!limit_obj.is_none()) {
      limit = vlk::TensorArg::from(limit_obj, "limit");
      limit->ndim(1).dtype_is(vlk::kI64).same_device(scores).size(0, pairs, "one per threshold").contiguous();
    }
    if (col0 < 0) throw py::value_error("count_above: col0 must be >= 0, got " + std::to_string(col0));
  }
  if (n == 0 || m == 0) return;
  const bool cuda = scores.device_type() == vlk::kCUDA;
#ifndef VLK_WITH_CUDA
  if (cuda) scores.refuse("is on CUDA but this build of vlkernels._C has no CUDA kernels");
#endif
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::dispatch_float(scores, [&](auto tag) {
    using T = decltype(tag);
    if (csr) {
      vlk::launch_count_above_csr<T>(scores.data<const T>(), n, m, scores.stride(0), col0,
                                     row_ptr->data<const int64_t>(), limit ? limit->data<const int64_t>() : nullptr,
                                     thr.data<const T>(), out.data<int64_t>(), inclusive);
    } else if (!cuda) {
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
        py::arg("num_threads") = 0, py::arg("stream") = 0, py::arg("row_ptr") = py::none(), py::arg("limit") = py::none(),
        py::arg("col0") = 0);
  m.def("_test_spin_interruptible", &spin_interruptible, py::arg("seconds"), py::arg("num_threads") = 0);
  m.def("_test_parallel_sum", &parallel_sum, py::arg("n"), py::arg("grain"), py::arg("num_threads") = 0);
  m.def("_test_set_spawn_limit", &vlk::set_spawn_limit_for_testing, py::arg("limit"));
}
