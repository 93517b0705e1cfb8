// Exact retrieval scores and the certified decisions built on them.
//
// The exact score s(q, g) is the float64 sum of the products q_d * g_d in 8 lanes (lane l: d = l, l+8, ... in
// increasing d, every addition rounded to float64), then ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)): one value on every
// machine, thread count, tiling and shard layout (compiled without FMA contraction, so fp64 products round first).
//
// A screen (a fast GEMM) gives s_hat for a tile; every candidate carries a bound
//   B(i, j) = r0[i]c0[j] + r1[i]c1[j] + r2[i]c2[j] + ra[i] + ca[j] + rel * |s_hat(i, j)|  >=  |s_hat - s|
// (terms per screen: vlkernels/retrieval/README.md). A decision against an exact threshold t is certified when
// s_hat - B > t (above) or s_hat + B < t (below); every other candidate is re-checked with the exact score.
#pragma once

#include <cstdint>

namespace vlk {

// out[e] = s(q[qi[e]], g[gi[e]]) for e < n (indices checked by the caller).
template <typename TQ, typename TG>
void launch_exact_pairs(const TQ* q, int64_t stride_q, const TG* g, int64_t stride_g, int64_t dim, const int64_t* qi,
                        const int64_t* gi, int64_t n, double* out);

// out[i * stride_out + j] = s(q[i], g[j]) for every i < rows, j < cols: a whole tile of exact scores, from the
// inputs widened (exactly) to float64. products_exact: the inputs were fp32 or narrower, so every product is exact
// and the kernel may fuse it with its sum; false for fp64 inputs. Multithreaded over blocks of rows.
void launch_exact_tile(const double* q, int64_t stride_q, int64_t rows, const double* g, int64_t stride_g,
                       int64_t cols, int64_t dim, bool products_exact, double* out, int64_t stride_out);

// Bound terms of a tile's rows (or columns): four planes of `n` doubles (r0, r1, r2, ra), plane stride `n`.
struct BoundTerms {
  const double* t;
  int64_t n;
  const double* plane(int k) const { return t + k * n; }
};

// One screened tile S (rows x cols; element type S: float, double or bf16 bits) with its rows' and columns' data
// (T: float or double, `dim` wide) counted against exact thresholds, both directions at once:
//  * row pairs (CSR): for row i and e in [row_ptr[i], row_ptr[i+1]): row_cnt[e] += #{j : column col0 + j ranks
//    above row_pos[e] at threshold row_thr[e]}; row_ptr null: no row pairs.
//  * column slots: plane k of `slots` (k * cols + j): col_cnt += #{i : row row0 + i ranks above col_pos (global
//    row, -1 padding) at col_thr (+inf padding)}.
// "Ranks above" is EXACT.md's order: s > t, or s == t and a lower index. Returns the number of re-checked pairs.
template <typename S, typename T>
int64_t certified_tile(const S* s, int64_t rows, int64_t cols, int64_t stride_s, const T* row_data,
                       int64_t stride_r, const T* col_data, int64_t stride_c, int64_t dim, BoundTerms rt,
                       BoundTerms ct, double rel, const int64_t* row_ptr, const int64_t* row_pos,
                       const double* row_thr, int64_t* row_cnt, int64_t col0, int64_t slots, const int64_t* col_pos,
                       const double* col_thr, int64_t* col_cnt, int64_t row0);

// Certified running top-k of each row, merged with one screened tile. vals/idx (rows x k) hold the best k so far
// by exact score (idx -1 = empty), floor[i] the largest value known to be at most the k-th exact score of row i
// (-inf at start). Candidates with s_hat + B < floor are dropped uncomputed; the others get their exact score.
// NaN in the tile marks an excluded candidate; column j has gallery index c0 + j. Returns re-checked pairs.
template <typename S, typename T>
int64_t certified_topk_update(const S* s, int64_t rows, int64_t cols, int64_t stride_s, const T* row_data,
                              int64_t stride_r, const T* col_data, int64_t stride_c, int64_t dim, BoundTerms rt,
                              BoundTerms ct, double rel, int64_t c0, int64_t k, double* vals, int64_t* idx,
                              double* floor);

}  // namespace vlk
