// Fast CPU encoding of one binary mask into its column-major run boundaries (COCO RLE order) for the two layouts
// users hold: column-contiguous (numpy Fortran (H, W, N), pycocotools' own; torch views of it) and row-contiguous
// (torch (N, H, W) C order). Bytes are packed to bits with SIMD (AVX-512BW / AVX2 / portable, picked at run time),
// then boundaries come from XORs of bit words: adjacent bits for column-contiguous masks, the row above for
// row-contiguous ones (sorted into column order by a counting sort over columns). Other strides use the generic
// scan of rle_counts.h.
#pragma once

#include <cstdint>
#include <vector>

#include "boxes/rle_counts.h"

namespace vlk {

// Appends to ends the column-major positions p (y = p % h, x = p / h) where mask pixel p differs in foreground
// (nonzero byte) from pixel p - 1 (pixel -1 counts as background): exactly rle::write_transitions over [0, h*w).
// mask + y * ms.sy + x * ms.sx addresses pixel (y, x). Returns false (nothing appended) for layouts it does not
// take (then use the generic scan).
bool rle_mask_boundaries(const uint8_t* mask, const MaskStrides& ms, std::vector<int64_t>& ends,
                         std::vector<uint64_t>& scratch);

// How many positions rle_mask_boundaries appends for the same mask (bits popcounted, nothing written), or -1 for
// layouts it does not take.
int64_t rle_mask_boundary_count(const uint8_t* mask, const MaskStrides& ms, std::vector<uint64_t>& scratch);

}  // namespace vlk
