// Retrieval's C++ entry points: tensors in (vlk::TensorArg), every extent and stride the kernels index checked here,
// so a wrong tensor is a ValueError, never an out-of-bounds read: exact scores, the certified tile counting and
// top-k (retrieval/exact.h), and the top-k merge and sort (retrieval/rank_count.h).
#include <optional>
#include <string>

#include "core/parallel.h"
#include "core/tensor_arg.h"
#include "registry.h"
#include "retrieval/exact.h"
#include "retrieval/rank_count.h"

namespace py = pybind11;

namespace {

// A CPU score tile (rows, cols) of float32/float64, rows at any stride, columns adjacent.
vlk::TensorArg score_tile(py::handle obj, const char* name) {
  auto s = vlk::TensorArg::from(obj, name);
  s.ndim(2).dtype_in({vlk::kF32, vlk::kF64}).device(vlk::kCPU).inner_contiguous(1);
  return s;
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

// (n, D) embedding rows in fp32/fp64, contiguous along D.
vlk::TensorArg embedding_rows(py::handle obj, const char* name) {
  auto x = vlk::TensorArg::from(obj, name);
  x.ndim(2).dtype_in({vlk::kF32, vlk::kF64}).device(vlk::kCPU).inner_contiguous(1);
  return x;
}

// An int64 index vector whose every entry lies in [0, n).
vlk::TensorArg index_vector(py::handle obj, const char* name, int64_t n, const char* of) {
  auto a = vlk::TensorArg::from(obj, name);
  a.ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).contiguous();
  const int64_t* p = a.data<const int64_t>();
  for (int64_t e = 0; e < a.size(0); ++e)
    if (p[e] < 0 || p[e] >= n)
      a.refuse("holds " + std::to_string(p[e]) + " at " + std::to_string(e) + "; expected an index into the " +
               std::to_string(n) + " rows of " + of);
  return a;
}

// out[e] = exact score of (q[qi[e]], g[gi[e]]): float64 products in 8 lanes (see csrc/retrieval/exact.h).
void exact_pairs(py::handle q_obj, py::handle g_obj, py::handle qi_obj, py::handle gi_obj, py::handle out_obj,
                 int num_threads) {
  auto q = embedding_rows(q_obj, "q");
  auto g = embedding_rows(g_obj, "g");
  if (q.size(1) != g.size(1))
    throw py::value_error("q and g must have the same D, got " + std::to_string(q.size(1)) + " and " +
                          std::to_string(g.size(1)));
  auto qi = index_vector(qi_obj, "qi", q.size(0), "q");
  auto gi = index_vector(gi_obj, "gi", g.size(0), "g");
  const int64_t n = qi.size(0);
  gi.size(0, n, "one gallery index per query index");
  auto out = vlk::TensorArg::from(out_obj, "out");
  out.ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, n, "one score per pair").contiguous().writable();
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::dispatch_float(q, [&](auto qt) {
    using TQ = decltype(qt);
    vlk::dispatch_float(g, [&](auto gt) {
      using TG = decltype(gt);
      vlk::launch_exact_pairs<TQ, TG>(q.data<const TQ>(), q.stride(0), g.data<const TG>(), g.stride(0), q.size(1),
                                      qi.data<const int64_t>(), gi.data<const int64_t>(), n, out.data<double>());
    });
  });
}

// out = the exact scores of every (q row, g row) pair: q, g float64 (the inputs widened exactly; products_exact
// when they were fp32 or narrower), out (rows of q, rows of g) float64.
void exact_tile(py::handle q_obj, py::handle g_obj, py::handle out_obj, bool products_exact, int num_threads) {
  auto q = embedding_rows(q_obj, "q");
  auto g = embedding_rows(g_obj, "g");
  q.dtype_is(vlk::kF64);
  g.dtype_is(vlk::kF64).size(1, q.size(1), "D, as q");
  auto out = vlk::TensorArg::from(out_obj, "out");
  out.ndim(2).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, q.size(0), "one row per q row");
  out.size(1, g.size(0), "one column per g row").inner_contiguous(1).writable();
  vlk::ThreadBudget budget(num_threads);
  py::gil_scoped_release release;
  vlk::launch_exact_tile(q.data<const double>(), q.stride(0), q.size(0), g.data<const double>(), g.stride(0),
                         g.size(0), q.size(1), products_exact, out.data<double>(), out.stride(0));
}

// (4, n) float64 bound terms (r0, r1, r2, ra) of n rows or columns.
vlk::TensorArg bound_terms(py::handle obj, const char* name, int64_t n) {
  auto a = vlk::TensorArg::from(obj, name);
  a.ndim(2).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, 4, "four bound terms").size(1, n, "one per row");
  a.contiguous();
  return a;
}

// The screened tile, its rows' and columns' data (same dtype, same D) and their bound terms, checked together.
struct Screened {
  vlk::TensorArg s, rows, cols, rt, ct;
};

Screened screened(py::handle s_obj, py::handle rows_obj, py::handle cols_obj, py::handle rt_obj, py::handle ct_obj) {
  auto s = score_tile(s_obj, "scores");
  auto rows = embedding_rows(rows_obj, "row_data");
  auto cols = embedding_rows(cols_obj, "col_data");
  rows.size(0, s.size(0), "one data row per score row").dtype_is(s.dtype());
  cols.size(0, s.size(1), "one data row per score column").dtype_is(s.dtype()).size(1, rows.size(1), "D, as row_data");
  auto rt = bound_terms(rt_obj, "row_terms", s.size(0));
  auto ct = bound_terms(ct_obj, "col_terms", s.size(1));
  return {std::move(s), std::move(rows), std::move(cols), std::move(rt), std::move(ct)};
}

// Certified counts of one tile, both directions (see csrc/retrieval/exact.h); returns the re-checked pairs.
int64_t certified_tile(py::handle s_obj, py::handle rows_obj, py::handle cols_obj, py::handle rt_obj,
                       py::handle ct_obj, double rel, py::object ptr_obj, py::object rpos_obj, py::object rthr_obj,
                       py::object rcnt_obj, int64_t col0, py::object cpos_obj, py::object cthr_obj,
                       py::object ccnt_obj, int64_t row0) {
  auto t = screened(s_obj, rows_obj, cols_obj, rt_obj, ct_obj);
  const int64_t nr = t.s.size(0), nc = t.s.size(1);
  if (!(rel >= 0)) throw py::value_error("rel must be >= 0");
  std::optional<vlk::TensorArg> ptr, rpos, rthr, rcnt, cpos, cthr, ccnt;
  if (!ptr_obj.is_none()) {
    ptr = vlk::TensorArg::from(ptr_obj, "row_ptr");
    ptr->ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).size(0, nr + 1, "rows + 1").contiguous();
    rthr = vlk::TensorArg::from(rthr_obj, "row_thr");
    rthr->ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
    const int64_t np_ = rthr->size(0);
    rpos = vlk::TensorArg::from(rpos_obj, "row_pos");
    rpos->ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).size(0, np_, "one per pair").contiguous();
    rcnt = vlk::TensorArg::from(rcnt_obj, "row_cnt");
    rcnt->ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).size(0, np_, "one per pair").contiguous().writable();
    const int64_t* p = ptr->data<const int64_t>();
    for (int64_t i = 0; i < nr; ++i)
      if (p[i] < 0 || p[i] > p[i + 1] || p[i + 1] > np_)
        ptr->refuse("must be non-decreasing within [0, " + std::to_string(np_) + "], fails at " + std::to_string(i));
  }
  int64_t slots = 0;
  if (!cpos_obj.is_none()) {
    cpos = vlk::TensorArg::from(cpos_obj, "col_pos");
    cpos->ndim(2).dtype_is(vlk::kI64).device(vlk::kCPU).size(1, nc, "one entry per score column").contiguous();
    slots = cpos->size(0);
    cthr = vlk::TensorArg::from(cthr_obj, "col_thr");
    cthr->ndim(2).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, slots, "as col_pos").size(1, nc, "as col_pos");
    cthr->contiguous();
    ccnt = vlk::TensorArg::from(ccnt_obj, "col_cnt");
    ccnt->ndim(2).dtype_is(vlk::kI64).device(vlk::kCPU).size(0, slots, "as col_pos").size(1, nc, "as col_pos");
    ccnt->contiguous().writable();
  }
  py::gil_scoped_release release;
  return vlk::dispatch_float(t.s, [&](auto tag) {
    using T = decltype(tag);
    return vlk::certified_tile<T, T>(
        t.s.data<const T>(), nr, nc, t.s.stride(0), t.rows.data<const T>(), t.rows.stride(0), t.cols.data<const T>(),
        t.cols.stride(0), t.rows.size(1), {t.rt.data<const double>(), nr}, {t.ct.data<const double>(), nc}, rel,
        ptr ? ptr->data<const int64_t>() : nullptr, rpos ? rpos->data<const int64_t>() : nullptr,
        rthr ? rthr->data<const double>() : nullptr, rcnt ? rcnt->data<int64_t>() : nullptr, col0, slots,
        cpos ? cpos->data<const int64_t>() : nullptr, cthr ? cthr->data<const double>() : nullptr,
        ccnt ? ccnt->data<int64_t>() : nullptr, row0);
  });
}

// Certified running top-k (exact scores in vals, float64) merged with one screened tile; returns re-checked pairs.
int64_t certified_topk_update(py::handle s_obj, py::handle rows_obj, py::handle cols_obj, py::handle rt_obj,
                              py::handle ct_obj, double rel, int64_t c0, py::handle vals_obj, py::handle idx_obj,
                              py::handle floor_obj) {
  auto t = screened(s_obj, rows_obj, cols_obj, rt_obj, ct_obj);
  const int64_t nr = t.s.size(0), nc = t.s.size(1);
  if (!(rel >= 0)) throw py::value_error("rel must be >= 0");
  auto vals = vlk::TensorArg::from(vals_obj, "vals");
  vals.ndim(2).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, nr, "one row per score row").contiguous().writable();
  const int64_t k = vals.size(1);
  auto idx = vlk::TensorArg::from(idx_obj, "idx");
  idx.ndim(2).dtype_is(vlk::kI64).device(vlk::kCPU).size(0, nr, "as vals").size(1, k, "as vals").contiguous();
  idx.writable();
  auto fl = vlk::TensorArg::from(floor_obj, "floor");
  fl.ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, nr, "one per score row").contiguous().writable();
  py::gil_scoped_release release;
  return vlk::dispatch_float(t.s, [&](auto tag) {
    using T = decltype(tag);
    return vlk::certified_topk_update<T, T>(
        t.s.data<const T>(), nr, nc, t.s.stride(0), t.rows.data<const T>(), t.rows.stride(0), t.cols.data<const T>(),
        t.cols.stride(0), t.rows.size(1), {t.rt.data<const double>(), nr}, {t.ct.data<const double>(), nc}, rel, c0,
        k, vals.data<double>(), idx.data<int64_t>(), fl.data<double>());
  });
}

}  // namespace

VLK_BIND(retrieval) {
  m.def("exact_pairs", &exact_pairs, py::arg("q"), py::arg("g"), py::arg("qi"), py::arg("gi"), py::arg("out"),
        py::arg("num_threads") = 0);
  m.def("exact_tile", &exact_tile, py::arg("q"), py::arg("g"), py::arg("out"), py::arg("products_exact"),
        py::arg("num_threads") = 0);
  m.def("certified_tile", &certified_tile, py::arg("scores"), py::arg("row_data"), py::arg("col_data"),
        py::arg("row_terms"), py::arg("col_terms"), py::arg("rel"), py::arg("row_ptr"), py::arg("row_pos"),
        py::arg("row_thr"), py::arg("row_cnt"), py::arg("col0"), py::arg("col_pos"), py::arg("col_thr"),
        py::arg("col_cnt"), py::arg("row0"));
  m.def("certified_topk_update", &certified_topk_update, py::arg("scores"), py::arg("row_data"), py::arg("col_data"),
        py::arg("row_terms"), py::arg("col_terms"), py::arg("rel"), py::arg("c0"), py::arg("vals"), py::arg("idx"),
        py::arg("floor"));
  m.def("topk_update", &topk_update, py::arg("scores"), py::arg("c0"), py::arg("cand_idx"), py::arg("vals"),
        py::arg("idx"), py::arg("num_threads") = 0);
  m.def("topk_sort", &topk_sort, py::arg("vals"), py::arg("idx"), py::arg("num_threads") = 0);
}
