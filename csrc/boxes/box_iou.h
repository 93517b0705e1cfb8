// Batched box IoU family (IoU, GIoU, DIoU, CIoU) and temporal segment IoU: [B, N, 4] x [B, M, 4] -> [B, N, M]
// (pairwise) or [B, N, 4] x [B, N, 4] -> [B, N] (aligned), with optional ragged valid counts per batch row.
#pragma once

#include <cstdint>

namespace vlk {

// boxes1: [batch, n, 4], boxes2: [batch, m, 4], contiguous. out: [batch, n, m] (or [batch, n] when aligned).
// valid1/valid2: per-batch counts (nullptr = all valid); pairs outside [0, valid1) x [0, valid2) are written 0.
// Counts are clamped to [0, n] / [0, m] so a bad count can never index out of bounds.
template <typename T>
void launch_box_iou(const T* boxes1, const T* boxes2, T* out, int64_t batch, int64_t n, int64_t m, int fmt, int kind,
                    bool aligned, T eps, const int64_t* valid1, const int64_t* valid2);

// seg1: [batch, n, 2], seg2: [batch, m, 2] (start, end). mode 0: I / (l1 + l2 - I); 1: I / hull (0 when hull == 0).
template <typename T>
void launch_segment_iou(const T* seg1, const T* seg2, T* out, int64_t batch, int64_t n, int64_t m, int mode,
                        bool aligned);

#ifdef VLK_WITH_CUDA
template <typename T>
void launch_box_iou_cuda(const T* boxes1, const T* boxes2, T* out, int64_t batch, int64_t n, int64_t m, int fmt,
                         int kind, bool aligned, T eps, const int64_t* valid1, const int64_t* valid2, void* stream);
template <typename T>
void launch_segment_iou_cuda(const T* seg1, const T* seg2, T* out, int64_t batch, int64_t n, int64_t m, int mode,
                             bool aligned, void* stream);
#endif

}  // namespace vlk
