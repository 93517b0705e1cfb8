// Row-wise count of scores above a threshold: the one rank-counting primitive (rank of a ground truth = 1 + number
// of candidates that beat it), behind the public op vlkernels.ops.count_above. Counts add across column chunks.
#pragma once

#include <cstdint>

namespace vlk {

// #{ j < lim : row[j] >= t } + #{ lim <= j < m : row[j] > t }: candidates before column `lim` (a positive's own
// column) win ties, later ones need a strictly higher score. lim = 0: strictly above; lim = m: at or above.
// NaN scores never count. Vectorized, one copy per x86 ISA level chosen at run time (core/cpu_features.h); the
// copies give identical counts (integer compares, no rounding).
template <typename T>
int64_t count_row_above(const T* row, int64_t m, int64_t lim, T t);

// out[i] += #{ j < m : scores[i * stride_row + j] > thr[i] }   (>= when inclusive).
template <typename T>
void launch_count_above(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                        bool inclusive);

// Several thresholds per row (CSR): for row i and e in [row_ptr[i], row_ptr[i+1]),
// out[e] += count_row_above(row i, m, clamp(limit[e] - col0, 0, m), thr[e]), i.e. column j (global index col0 + j)
// ties with thr[e] count when col0 + j < limit[e] (col0 >= 0). limit null: every column counts ties when
// inclusive, none otherwise. row_ptr must be non-decreasing and within thr/out.
template <typename T>
void launch_count_above_csr(const T* scores, int64_t n, int64_t m, int64_t stride_row, int64_t col0,
                            const int64_t* row_ptr, const int64_t* limit, const T* thr, int64_t* out, bool inclusive);

#ifdef VLK_WITH_CUDA
template <typename T>
void launch_count_above_cuda(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                             bool inclusive, void* stream);
#endif

}  // namespace vlk
