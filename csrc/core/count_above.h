// Row-wise count of scores above a per-row threshold: the rank-counting primitive of streaming retrieval
// (rank of a ground truth = 1 + number of candidates that beat it). Counts add across column chunks.
#pragma once

#include <cstdint>

namespace vlk {

// out[i] += #{ j < m : scores[i * stride_row + j] > thr[i] }   (>= when inclusive). NaN scores never count.
template <typename T>
void launch_count_above(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                        bool inclusive);

#ifdef VLK_WITH_CUDA
template <typename T>
void launch_count_above_cuda(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                             bool inclusive, void* stream);
#endif

}  // namespace vlk
