// RLE masks for the evaluator: compressed strings -> the run layout the per-cell IoU reads (inclusive prefix sums
// over the whole set, rle_counts.h), areas and rleToBbox boxes.
#pragma once

#include <cstdint>
#include <string>

namespace vlk {

// strings[k] (str[k], len[k] bytes) is a pycocotools compressed RLE of an h[k] x w[k] mask, decoded straight from
// the caller's buffers in two multithreaded passes, so that the caller can allocate the outputs between them:
// det_mask_run_offsets counts the runs, det_masks_decode decodes into place. Checks (rle_parse_strings, rle.h):
// characters in '0'..'o', no truncated or over-long count, runs in [0, 2^32), runs summing to h*w, h*w < 2^32.
// need (may be null): masks with need[k] == 0 are validated the same way but stored as empty masks (no runs,
// area 0, box 0): detections that meet no ground truth. Each returns "" or the message of the first bad string,
// with `bad` set to its index.

// offsets: [n + 1], offsets[k + 1] - offsets[k] = the runs of mask k (0 where need[k] == 0).
std::string det_mask_run_offsets(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                                 const int64_t* w, const uint8_t* need, int64_t* offsets, int64_t& bad);

// offsets as det_mask_run_offsets gave them (non-decreasing from 0; a string whose runs differ from its offsets is
// an error, nothing is written outside [offsets[k], offsets[k + 1])). csum: [offsets[n]] inclusive run sums over the
// whole set, area: [n], bbox: [n, 4] xywh.
std::string det_masks_decode(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                             const int64_t* w, const uint8_t* need, const int64_t* offsets, int64_t* csum,
                             int64_t* area, double* bbox, int64_t& bad);

}  // namespace vlk
