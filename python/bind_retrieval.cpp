// Retrieval's C++ entry points: tensors in (vlk::TensorArg), every extent and stride the kernels index checked here,
// so a wrong tensor is a ValueError, never an out-of-bounds read. Row queries are counted by core's count_above
// binding (its CSR form); these are the column-query planner and the running top-k.
#include <optional>
#include <string>

#include "core/parallel.h"
#include "core/tensor_arg.h"
#include "registry.h"
#include "retrieval/rank_count.h"

namespace py = pybind11;

namespace {

// A CPU score tile (rows, cols) of float32/float64, rows at any stride, columns adjacent.
vlk::TensorArg score_tile(py::handle obj, const char* name) {
  auto s = vlk::TensorArg::from(obj, name);
  s.ndim(2).dtype_in({vlk::kF32, vlk::kF64}).device(vlk::kCPU).inner_contiguous(1);
  return s;
}

// out[k, j] += candidates among the tile's rows (global row r0 + i) ranked above column j's k-th positive
// (pos[k, j], threshold thr[k, j]; pos -1 / thr +inf is padding).
void rank_count_cols(py::handle s_obj, int64_t r0, py::handle pos_obj, py::handle thr_obj, py::handle out_obj,
                     int num_threads) {
  auto s = score_tile(s_obj, "scores");
  const int64_t rows = s.size(0), cols = s.size(1);
  auto pos = vlk::TensorArg::from(pos_obj, "positives");
  pos.ndim(2).dtype_is(vlk::kI64).same_device(s).size(1, cols, "one plane entry per score column").contiguous();
  const int64_t slots = pos.size(0);
  auto thr = vlk::TensorArg::from(thr_obj, "thresholds");
  thr.ndim(2).dtype_is(s.dtype()).same_device(s).size(0, slots, "one plane per slot of positives");
  thr.size(1, cols, "one plane entry per score column").contiguous();
  auto out = vlk::TensorArg::from(out_obj, "out");
  out.ndim(2).dtype_is(vlk::kI64).same_device(s).size(0, slots, "one plane per slot of positives");
  out.size(1, cols, "one plane entry per score column").contiguous().writable();
  if (r0 < 0) throw py::value_error("r0 (global index of the tile's first row) must be >= 0, got " + std::to_string(r0));
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::dispatch_float(s, [&](auto tag) {
    using T = decltype(tag);
    vlk::launch_rank_count_cols<T>(s.data<const T>(), rows, cols, s.stride(0), r0, slots, pos.data<const int64_t>(),
                                   thr.data<const T>(), out.data<int64_t>());
  });
}

// Merges one tile of candidates (row i: scores[i, :], gallery index c0 + j or cand_idx[i, j]) into the running
// top-k (vals, idx), both (rows, k); NaN scores are skipped.
void topk_update(py::handle s_obj, int64_t c0, py::object cand_obj, py::handle vals_obj, py::handle idx_obj,
                 int num_threads) {
  auto s = score_tile(s_obj, "scores");
  const int64_t rows = s.size(0), cols = s.size(1);
  auto vals = vlk::TensorArg::from(vals_obj, "vals");
  vals.ndim(2).dtype_is(s.dtype()).same_device(s).size(0, rows, "one row per score row").contiguous().writable();
  const int64_t k = vals.size(1);
  auto idx = vlk::TensorArg::from(idx_obj, "idx");
  idx.ndim(2).dtype_is(vlk::kI64).same_device(s).size(0, rows, "one row per score row").size(1, k, "k, as vals");
  idx.contiguous().writable();
  const bool has_cand = !cand_obj.is_none();
  std::optional<vlk::TensorArg> cand;
  if (has_cand) {
    cand = vlk::TensorArg::from(cand_obj, "cand_idx");
    cand->ndim(2).dtype_is(vlk::kI64).same_device(s).size(0, rows, "as scores").size(1, cols, "as scores");
    cand->contiguous();
  }
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::dispatch_float(s, [&](auto tag) {
    using T = decltype(tag);
    vlk::launch_topk_update<T>(s.data<const T>(), rows, cols, s.stride(0), c0,
                               cand ? cand->data<const int64_t>() : nullptr, k, vals.data<T>(),
                               idx.data<int64_t>());
  });
}

// Sorts each row of (vals, idx), both (rows, k), in place: score descending, then index ascending, empty last.
void topk_sort(py::handle vals_obj, py::handle idx_obj, int num_threads) {
  auto vals = vlk::TensorArg::from(vals_obj, "vals");
  vals.ndim(2).dtype_in({vlk::kF32, vlk::kF64}).device(vlk::kCPU).contiguous().writable();
  const int64_t rows = vals.size(0), k = vals.size(1);
  auto idx = vlk::TensorArg::from(idx_obj, "idx");
  idx.ndim(2).dtype_is(vlk::kI64).same_device(vals).size(0, rows, "as vals").size(1, k, "as vals");
  idx.contiguous().writable();
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::dispatch_float(vals, [&](auto tag) {
    using T = decltype(tag);
    vlk::launch_topk_sort<T>(vals.data<T>(), idx.data<int64_t>(), rows, k);
  });
}

}  // namespace

VLK_BIND(retrieval) {
  m.def("rank_count_cols", &rank_count_cols, py::arg("scores"), py::arg("r0"), py::arg("positives"),
        py::arg("thresholds"), py::arg("out"), py::arg("num_threads") = 0);
  m.def("topk_update", &topk_update, py::arg("scores"), py::arg("c0"), py::arg("cand_idx"), py::arg("vals"),
        py::arg("idx"), py::arg("num_threads") = 0);
  m.def("topk_sort", &topk_sort, py::arg("vals"), py::arg("idx"), py::arg("num_threads") = 0);
}
