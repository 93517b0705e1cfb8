#include "registry.h"
#include "retrieval/rank_count.h"

namespace py = pybind11;
using vlk::bind::ptr;

namespace {
template <typename T>
void rank_count_rows(std::uintptr_t s, int64_t rows, int64_t cols, int64_t stride_row, int64_t c0,
                     std::uintptr_t row_ptr, std::uintptr_t pos, std::uintptr_t thr, std::uintptr_t out) {
  py::gil_scoped_release release;
  vlk::launch_rank_count_rows<T>(ptr<const T>(s), rows, cols, stride_row, c0, ptr<const int64_t>(row_ptr),
                                 ptr<const int64_t>(pos), ptr<const T>(thr), ptr<int64_t>(out));
}

template <typename T>
void rank_count_cols(std::uintptr_t s, int64_t rows, int64_t cols, int64_t stride_row, int64_t r0, int64_t slots,
                     std::uintptr_t pos, std::uintptr_t thr, std::uintptr_t out) {
  py::gil_scoped_release release;
  vlk::launch_rank_count_cols<T>(ptr<const T>(s), rows, cols, stride_row, r0, slots, ptr<const int64_t>(pos),
                                 ptr<const T>(thr), ptr<int64_t>(out));
}

template <typename T>
void topk_update(std::uintptr_t s, int64_t rows, int64_t cols, int64_t stride_row, int64_t c0,
                 std::uintptr_t cand_idx, int64_t k, std::uintptr_t vals, std::uintptr_t idx) {
  py::gil_scoped_release release;
  vlk::launch_topk_update<T>(ptr<const T>(s), rows, cols, stride_row, c0, ptr<const int64_t>(cand_idx), k,
                             ptr<T>(vals), ptr<int64_t>(idx));
}

template <typename T>
void topk_sort(std::uintptr_t vals, std::uintptr_t idx, int64_t rows, int64_t k) {
  py::gil_scoped_release release;
  vlk::launch_topk_sort<T>(ptr<T>(vals), ptr<int64_t>(idx), rows, k);
}
}  // namespace

VLK_BIND(retrieval) {
  m.def("rank_count_rows_f32", &rank_count_rows<float>);
  m.def("rank_count_rows_f64", &rank_count_rows<double>);
  m.def("rank_count_cols_f32", &rank_count_cols<float>);
  m.def("rank_count_cols_f64", &rank_count_cols<double>);
  m.def("topk_update_f32", &topk_update<float>);
  m.def("topk_update_f64", &topk_update<double>);
  m.def("topk_sort_f32", &topk_sort<float>);
  m.def("topk_sort_f64", &topk_sort<double>);
}
