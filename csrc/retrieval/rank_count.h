// Top-k selection helpers for retrieval: merging candidate lists with explicit indices (shards side by side) and
// sorting a selection. Order (the same in the Triton kernels): score descending, then gallery index ascending.
// The certified counting and top-k of the CPU engine are in retrieval/exact.h.
#pragma once

#include <cstdint>

namespace vlk {

// Running top-k per row, merged with one tile of candidates. vals/idx (rows x k) hold the current selection sorted,
// empty slots (idx -1) last, as this leaves it (a new selection: all empty). Candidate (i, j) has score
// s[i*stride_row + j] and gallery index cand_idx[i*cols + j] when cand_idx is given, else c0 + j. NaN scores are
// skipped (how exclusions are marked). Order: score descending, then index ascending: deterministic whatever the
// tiling. The tile's candidates are sorted (by radix when 256 or more) and merged with the selection, so the rows
// stay sorted and launch_topk_sort has nothing left to do for them.
template <typename T>
void launch_topk_update(const T* s, int64_t rows, int64_t cols, int64_t stride_row, int64_t c0,
                        const int64_t* cand_idx, int64_t k, T* vals, int64_t* idx);

// Sorts each row of (vals, idx) (rows x k) in place: score descending, then index ascending, empty slots last (a row
// already in that order is only read).
template <typename T>
void launch_topk_sort(T* vals, int64_t* idx, int64_t rows, int64_t k);

}  // namespace vlk
