// COCO run-length encoding, bit-compatible with pycocotools' maskApi.c: column-major runs alternating
// background/foreground starting with background, the compressed-string (LEB128-like, 6 bits per char, deltas
// against the run two back) format, encode, and the CPU launchers of area, bbox and IoU (iscrowd -> intersection /
// area(dt)): the one host engine, built on the per-element functions of rle_counts.h that the CUDA kernels share.
// RLE sets are flattened: counts[offsets[k] .. offsets[k+1]) are the runs of RLE k (int64, validated
// non-negative, < 2^32, summing to h*w by the Python layer or by rle_parse_strings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "boxes/rle_counts.h"

namespace vlk {

// n compressed strings back to back in buf, string k at [str_off[k], str_off[k + 1]). run_off [n + 1] receives the
// CSR offsets of their runs: one per character that ends a count, exact for every well-formed string.
void rle_string_run_offsets(const uint8_t* buf, const int64_t* str_off, int64_t n, int64_t* run_off);

// Decodes the strings into counts[run_off[k] .. run_off[k + 1]) (run_off from rle_string_run_offsets). Returns "" on
// success, else a message naming the string index and the defect (bad character, truncated count, count overflow,
// negative run, runs not summing to hw[k]); the caller raises it (no C++ exception crosses the module boundary).
// Never reads past a string's end nor writes outside its runs' slots.
std::string rle_parse_strings(const uint8_t* buf, const int64_t* str_off, int64_t n, const int64_t* hw,
                              const int64_t* run_off, int64_t* counts);

// Runs -> compressed strings (pycocotools rleToString).
std::vector<std::string> rle_to_strings(const int64_t* counts, const int64_t* offsets, int64_t n);

// n masks, pixel (y, x) of mask k at masks[k * sn + y * sy + x * sx] (MaskStrides, rle_counts.h), runs over the
// column-major order (as pycocotools); nonzero = foreground.
std::vector<std::string> rle_encode_strings(const uint8_t* masks, int64_t n, const MaskStrides& ms);

// The same masks -> runs in CSR, in two calls so that the caller allocates them: rle_encode_run_offsets fills
// run_off [n + 1] (boundaries counted, nothing written: popcounts of the packed bits for column- or row-contiguous
// masks), then rle_encode_runs writes mask k's runs to counts[run_off[k] .. run_off[k + 1]), one pass per mask with
// the SIMD encoder of rle_encode.h (or write_transitions for other strides). Returns false, leaving that mask's slots
// unwritten, where run_off does not match the masks. (The two-pass CUDA encoder's twin is launch_rle_count_chunks /
// launch_rle_write_ends.)
void rle_encode_run_offsets(const uint8_t* masks, int64_t n, const MaskStrides& ms, int64_t* run_off);
bool rle_encode_runs(const uint8_t* masks, int64_t n, const MaskStrides& ms, const int64_t* run_off, int64_t* counts);

// Decoding is launch_rle_decode_csum (rle_counts.h), shared with the counts path.

// out[k] = sum of the foreground (odd-index) runs. CPU twin of launch_rle_area_cuda.
// parts > 1 sums area_part over that many parts, as the CUDA warp's lanes do (tests replay the GPU split with 32).
void launch_rle_area(const int64_t* counts, const int64_t* offsets, int64_t n, int64_t* out, int64_t parts = 1);

// out: [n, 4] xywh doubles exactly as pycocotools rleToBbox (h, w per RLE). CPU twin of launch_rle_to_bbox_cuda.
void launch_rle_to_bbox(const int64_t* counts, const int64_t* offsets, int64_t n, const int64_t* h, const int64_t* w,
                        double* out);

// The RLE IoU (pycocotools rleIou, bbox prefilter included) of every (dt, gt) pair of two sets of one size h x w, on
// their run sums (rle_counts.h): out [nd, ng] float64; area [n] int64 and bbox [n, 4] float64 from launch_rle_area /
// launch_rle_to_bbox; iscrowd may be null. The CPU twin of launch_rle_iou_csum_cuda and the one CPU IoU: parts = 1
// intersects masks with at most 4 pieces per column by their column planes (vectorized) and the others with
// rle::inter_part; parts > 1 sums that many inter_part slices per pair, as the CUDA warp's lanes do (tests: 32).
void launch_rle_iou_csum(const int64_t* dt_csum, const int64_t* dt_offsets, const int64_t* dt_area,
                         const double* dt_bbox, int64_t nd, const int64_t* gt_csum, const int64_t* gt_offsets,
                         const int64_t* gt_area, const double* gt_bbox, int64_t ng, int64_t h, int64_t w,
                         const uint8_t* iscrowd, double* out, int64_t parts = 1);

// out: [nd, ng] float64, pycocotools bbIou on xywh float64 boxes.
void launch_coco_box_iou(const double* dt, int64_t nd, const double* gt, int64_t ng, const uint8_t* iscrowd,
                         double* out);

}  // namespace vlk
