// RLE masks for the evaluator: compressed strings -> the run layout the per-cell IoU reads (inclusive prefix sums
// over the whole set, rle_counts.h), areas and rleToBbox boxes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vlk {

// strings[k] (str[k], len[k] bytes) is a pycocotools compressed RLE of an h[k] x w[k] mask. Decoded straight from
// the caller's buffers in two multithreaded passes (count the runs, then decode into place), with the checks of
// rle_parse_strings (rle.h): characters in '0'..'o', no truncated or over-long count, runs in [0, 2^32), runs
// summing to h*w. need (may be null): masks with need[k] == 0 are validated the same way but stored as empty masks
// (no runs, area 0, box 0): detections that meet no ground truth. Returns "" or the message of the first bad
// string, with `bad` set to its index. csum: [offsets[n]] inclusive run sums, offsets: [n + 1], area: [n],
// bbox: [n, 4] xywh.
std::string det_masks_from_strings(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                                   const int64_t* w, const uint8_t* need, std::unique_ptr<int64_t[]>& csum,
                                   std::vector<int64_t>& offsets, std::vector<int64_t>& area, std::vector<double>& bbox,
                                   int64_t& bad);

}  // namespace vlk
