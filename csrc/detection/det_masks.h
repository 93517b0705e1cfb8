// RLE masks for the evaluator: compressed strings -> the run layout the per-cell IoU reads (inclusive prefix sums
// over the whole set, rle_counts.h), areas and rleToBbox boxes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlk {

// strings[k] (str[k], len[k] bytes) is a pycocotools compressed RLE of an h[k] x w[k] mask. Decoded straight from
// the caller's buffers in two multithreaded passes (count the runs, then decode into place), with the checks of
// rle_parse_strings (rle.h): characters in '0'..'o', no truncated or over-long count, runs in [0, 2^32), runs
// summing to h*w. Returns "" or a message naming the index. csum: [total runs], offsets: [n + 1], area: [n],
// bbox: [n, 4] xywh.
std::string det_masks_from_strings(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                                   const int64_t* w, std::vector<int64_t>& csum, std::vector<int64_t>& offsets,
                                   std::vector<int64_t>& area, std::vector<double>& bbox);

}  // namespace vlk
