// Streaming rank counting for retrieval metrics. One score tile S (rows x cols, row-major) is visited once and
// every (query, positive) pair whose query lies in the tile gets the number of tile candidates ranked above its
// positive. Tie policy (the same in the Triton kernels): candidates are ordered by (score descending, gallery index
// ascending), so a candidate j ranks above positive p when s_j > s_p, or s_j == s_p and j < p. Counts add over tiles.
// Row queries are counted by the core primitive itself (core/count_above.h: launch_count_above_csr, reached through
// the count_above binding); this file holds the column-query planner built on its column form, and the top-k.
#pragma once

#include <cstdint>

namespace vlk {

// Queries are the tile's columns, the gallery its rows (global row index = r0 + i). Pairs are laid out in
// `slots` planes of `cols` entries: plane k holds, for each column j, its k-th positive's global row pos[k*cols+j]
// (-1 for padding) and score thr[k*cols+j] (+inf for padding, which never counts); out[k*cols+j] += count.
template <typename T>
void launch_rank_count_cols(const T* s, int64_t rows, int64_t cols, int64_t stride_row, int64_t r0, int64_t slots,
                            const int64_t* pos, const T* thr, int64_t* out);

// Running top-k per row, merged with one tile of candidates. vals/idx (rows x k) hold the current selection in any
// order with its worst entry last (idx -1 = empty). Candidate (i, j) has score s[i*stride_row + j] and gallery index
// cand_idx[i*cols + j] when cand_idx is given, else c0 + j. NaN scores are skipped (how exclusions are marked).
// Order: score descending, then index ascending: deterministic whatever the tiling.
template <typename T>
void launch_topk_update(const T* s, int64_t rows, int64_t cols, int64_t stride_row, int64_t c0,
                        const int64_t* cand_idx, int64_t k, T* vals, int64_t* idx);

// Sorts each row of (vals, idx) (rows x k) in place: score descending, then index ascending, empty slots last.
template <typename T>
void launch_topk_sort(T* vals, int64_t* idx, int64_t rows, int64_t k);

}  // namespace vlk
