// RLE masks for the evaluator: compressed strings -> the run layout the per-cell IoU reads (inclusive prefix sums
// over the whole set, rle_counts.h), areas and rleToBbox boxes, in one multithreaded pass after the shared decoder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlk {

// strings[k] is a pycocotools compressed RLE of an h[k] x w[k] mask. Returns "" or the decoder's message naming
// the index. csum: [total runs], offsets: [n + 1], area: [n], bbox: [n, 4] xywh.
std::string det_masks_from_strings(const std::vector<std::string>& strings, const int64_t* h, const int64_t* w,
                                   std::vector<int64_t>& csum, std::vector<int64_t>& offsets,
                                   std::vector<int64_t>& area, std::vector<double>& bbox);

}  // namespace vlk
