// Dense binary-mask IoU by bit packing: each mask becomes ceil(P / 64) 64-bit words, intersections are popcounts
// of ANDed words, unions come from the areas. Exact integer counts; the ratio is one float64 division, so the
// result equals pycocotools' maskUtils.iou on the encoded masks bit for bit (two empty masks -> 0).
#pragma once

#include <cstdint>

namespace vlk {

inline int64_t mask_words(int64_t pixels) { return (pixels + 63) / 64; }

// masks: [k, pixels] uint8 (nonzero = foreground), contiguous. words: [k, mask_words(pixels)], area: [k].
void launch_mask_pack(const uint8_t* masks, int64_t k, int64_t pixels, uint64_t* words, int64_t* area);

// a: [batch, n, nw], b: [batch, m, nw] packed words; area_a [batch, n], area_b [batch, m].
// out: [batch, n, m] float64 IoU (or [batch, n] when aligned, m == n). inter (optional, same shape): int64 counts.
void launch_mask_iou(const uint64_t* a, const int64_t* area_a, const uint64_t* b, const int64_t* area_b,
                     int64_t batch, int64_t n, int64_t m, int64_t nw, bool aligned, double* out, int64_t* inter);

#ifdef VLK_WITH_CUDA
void launch_mask_pack_cuda(const uint8_t* masks, int64_t k, int64_t pixels, uint64_t* words, int64_t* area,
                           void* stream);
void launch_mask_iou_cuda(const uint64_t* a, const int64_t* area_a, const uint64_t* b, const int64_t* area_b,
                          int64_t batch, int64_t n, int64_t m, int64_t nw, bool aligned, double* out, int64_t* inter,
                          void* stream);
#endif

}  // namespace vlk
