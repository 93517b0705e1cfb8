// COCO RLE on uncompressed run counts in CSR form: the per-mask and per-pair logic of the one RLE engine, shared by
// the CPU launchers (rle.cpp, rle_counts.cpp) and the CUDA kernels (rle_counts.cu), so the CPU tests exercise exactly
// what the GPU runs. A set of N masks of one size h x w: counts[offsets[k] .. offsets[k + 1]) are mask k's runs over the
// column-major pixels, alternating background / foreground, starting with background (pycocotools' layout);
// csum is the inclusive prefix sum of counts over the whole set, so mask k's runs are local positions
// csum[offsets[k] + i] - base_k with base_k = csum[offsets[k] - 1] (0 for the first run of the set). The Python layer
// validates offsets (0, non-decreasing, ending at counts.numel()), runs in [0, h*w] and each mask's runs summing
// to h*w < 2^32 before a pointer gets here; the functions below never read outside [offsets[k], offsets[k + 1]).
#pragma once

#include <cstdint>
#include <string>

#include "core/hd.h"

namespace vlk {
namespace rle {

// Encode geometry: a chunk of kChunk pixels per block (CUDA) or per task (CPU), kItems consecutive pixels per
// thread; the CPU twin walks the same per-thread ranges in thread order, which is what the block scan computes.
constexpr int kThreads = 256;
constexpr int kItems = 16;
constexpr int64_t kChunk = static_cast<int64_t>(kThreads) * kItems;
// Decode: each thread (CUDA) or step (CPU) writes kDecodeItems consecutive column-major pixels.
constexpr int64_t kDecodeItems = 16;

VLK_HD int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
VLK_HD int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Pixel range [begin, end) of chunk c of a mask of hw pixels.
VLK_HD void chunk_range(int64_t c, int64_t hw, int64_t* begin, int64_t* end) {
  *begin = min64(hw, c * kChunk);
  *end = min64(hw, *begin + kChunk);
}

// Pixel range [begin, end) of thread t in chunk c (the threads' ranges are consecutive and cover the chunk) of a mask of hw pixels (empty when past the end).
VLK_HD void encode_range(int64_t c, int t, int64_t hw, int64_t* begin, int64_t* end) {
  const int64_t chunk_end = min64(hw, (c + 1) * kChunk);
  *begin = min64(chunk_end, c * kChunk + static_cast<int64_t>(t) * kItems);
  *end = min64(chunk_end, *begin + kItems);
}

// Calls emit(i, p) for the i-th run boundary in column-major pixels [b, e) of one mask and returns how many: a
// boundary is a pixel whose foreground bit differs from the previous pixel's (the pixel before the first counts as
// background, so a mask starting with foreground opens with a zero background run). Nonzero bytes are foreground.
// Pixel p = (y = p % h, x = p / h) is read at t[y * sy + x * sx] (any strides: row-major tensors need no
// transpose). Additive over adjacent ranges.
template <typename Emit>
VLK_HD int64_t scan_transitions(const uint8_t* t, int64_t h, int64_t sy, int64_t sx, int64_t b, int64_t e,
                                Emit emit) {
  if (b >= e) return 0;
  int64_t y = b % h, col = (b / h) * sx, n = 0;
  bool prev = false;
  if (b > 0) prev = (y > 0 ? t[col + (y - 1) * sy] : t[col - sx + (h - 1) * sy]) != 0;
  for (int64_t p = b; p < e; ++p) {
    const bool v = t[col + y * sy] != 0;
    if (v != prev) emit(n++, p);
    prev = v;
    if (++y == h) {
      y = 0;
      col += sx;
    }
  }
  return n;
}

struct CountOnly {
  VLK_HD void operator()(int64_t, int64_t) const {}
};
struct WriteTo {
  int64_t* out;
  VLK_HD void operator()(int64_t i, int64_t p) const { out[i] = p; }
};

VLK_HD int64_t count_transitions(const uint8_t* t, int64_t h, int64_t sy, int64_t sx, int64_t b, int64_t e) {
  return scan_transitions(t, h, sy, sx, b, e, CountOnly{});
}

// Writes the boundary positions in [b, e) to out[0..); returns how many (= count_transitions).
VLK_HD int64_t write_transitions(const uint8_t* t, int64_t h, int64_t sy, int64_t sx, int64_t b, int64_t e,
                                 int64_t* out) {
  return scan_transitions(t, h, sy, sx, b, e, WriteTo{out});
}

// Run i of a mask with m runs from its boundary positions ends[0 .. m - 1) (run i ends where boundary i is; the
// last run ends at hw).
VLK_HD int64_t run_from_ends(const int64_t* ends, int64_t m, int64_t i, int64_t hw) {
  const int64_t e = i == m - 1 ? hw : ends[i];
  return e - (i > 0 ? ends[i - 1] : 0);
}

// Offset subtracted from csum to get mask-local positions.
VLK_HD int64_t csum_base(const int64_t* csum, int64_t offset) { return offset > 0 ? csum[offset - 1] : 0; }

// Writes column-major pixels [p0, p1) of one mask (runs cs[0..m) as inclusive sums, minus base) to out[p0..p1):
// a binary search for the run holding p0, then a walk. Pixels past the last run (impossible for validated
// input) are written 0.
VLK_HD void decode_range(const int64_t* cs, int64_t m, int64_t base, int64_t p0, int64_t p1, uint8_t* out) {
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (cs[mid] - base <= p0) lo = mid + 1; else hi = mid;
  }
  int64_t i = lo;
  for (int64_t p = p0; p < p1;) {
    const int64_t e = i < m ? min64(p1, cs[i] - base) : p1;
    const uint8_t v = i < m ? static_cast<uint8_t>(i & 1) : 0;
    for (; p < e; ++p) out[p] = v;
    ++i;
  }
}

// Sum of the foreground (odd-index) runs j = 1 + 2 * (part + nparts * q); parts 0..nparts-1 together cover all.
VLK_HD int64_t area_part(const int64_t* c, int64_t m, int64_t part, int64_t nparts) {
  int64_t a = 0;
  for (int64_t j = 1 + 2 * part; j < m; j += 2 * nparts) a += c[j];
  return a;
}

// pycocotools rleToBbox (xywh doubles) as in current releases (2.0.11 tested): foreground runs only, zero-length
// ones skipped; a run spanning columns widens the box to the full height. 32-bit unsigned arithmetic as there, so
// a mask whose foreground runs are all empty gives the same wrapped box ([w, h, 1 - w, 1 - h] mod 2^32).
VLK_HD void bbox_one(const int64_t* cnts, int64_t m_in, int64_t hh, int64_t ww, double* bb) {
  const uint32_t h = static_cast<uint32_t>(hh), w = static_cast<uint32_t>(ww);
  const int64_t m = (m_in / 2) * 2;
  uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0;
  if (m == 0) {
    bb[0] = bb[1] = bb[2] = bb[3] = 0;
    return;
  }
  for (int64_t j = 0; j < m; ++j) {
    const uint32_t start = cc;
    cc += static_cast<uint32_t>(cnts[j]);
    // h == 0 admits no nonzero run (runs sum to h*w); the test only keeps the divisions defined.
    if (j % 2 == 0 || cnts[j] == 0 || h == 0) continue;
    const uint32_t y0 = start % h, x0 = (start - y0) / h;
    const uint32_t y1 = (cc - 1) % h, x1 = (cc - 1 - y1) / h;
    xs = xs < x0 ? xs : x0;
    xe = xe > x1 ? xe : x1;
    if (x0 < x1) {
      ys = 0;
      ye = h - 1;
    } else {
      ys = ys < y0 ? ys : y0;
      ye = ye > y1 ? ye : y1;
    }
  }
  bb[0] = xs;
  bb[2] = static_cast<double>(xe - xs + 1);
  bb[1] = ys;
  bb[3] = static_cast<double>(ye - ys + 1);
}

// pycocotools bbIou's overlap test on two xywh boxes, in the same double arithmetic. rleIou only merges pairs
// passing it; a pair failing it has disjoint foregrounds anyway (each box covers its mask), so it is a pure skip.
VLK_HD bool bbox_overlap(const double* D, const double* G) {
  const double w = (D[2] + D[0] < G[2] + G[0] ? D[2] + D[0] : G[2] + G[0]) - (D[0] > G[0] ? D[0] : G[0]);
  if (!(w > 0)) return false;
  const double h = (D[3] + D[1] < G[3] + G[1] ? D[3] + D[1] : G[3] + G[1]) - (D[1] > G[1] ? D[1] : G[1]);
  return h > 0;
}

// A mask's foreground intervals, read straight from its inclusive run sums: interval i is run 2i + 1, i.e.
// [cs[2i] - base, cs[2i + 1] - base). Starts and ends are non-decreasing (zero-length runs give empty intervals).
struct Intervals {
  const int64_t* cs;
  int64_t base, n;
  VLK_HD int64_t start(int64_t i) const { return cs[2 * i] - base; }
  VLK_HD int64_t end(int64_t i) const { return cs[2 * i + 1] - base; }
  // First interval whose end exceeds x (n if none).
  VLK_HD int64_t first_end_after(int64_t x) const {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (end(mid) <= x) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  // First interval whose start is at or past x (n if none).
  VLK_HD int64_t first_start_from(int64_t x) const {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (start(mid) < x) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
};

VLK_HD Intervals intervals_of(const int64_t* csum, const int64_t* offsets, int64_t k) {
  const int64_t o = offsets[k];
  return Intervals{csum + o, csum_base(csum, o), (offsets[k + 1] - o) / 2};
}

// Part `part` of nparts of |A ∩ B|: A's intervals that can meet B (those inside the common extent) are split
// into nparts contiguous slices; a slice binary-searches B once, then merges, adding each overlap of its own A
// intervals. A's intervals are disjoint, so the parts sum to the exact intersection (CPU: one part; CUDA: one
// part per lane of a warp).
VLK_HD int64_t inter_part(const Intervals& A, const Intervals& B, int64_t part, int64_t nparts) {
  if (A.n == 0 || B.n == 0) return 0;
  const int64_t lo = max64(A.start(0), B.start(0)), hi = min64(A.end(A.n - 1), B.end(B.n - 1));
  if (lo >= hi) return 0;
  const int64_t i0 = A.first_end_after(lo), span = A.first_start_from(hi) - i0;
  if (span <= 0) return 0;
  const int64_t ib = i0 + span * part / nparts, ie = i0 + span * (part + 1) / nparts;
  if (ib >= ie) return 0;
  int64_t j = B.first_end_after(A.start(ib)), acc = 0;
  for (int64_t i = ib; i < ie; ++i) {
    const int64_t as = A.start(i), ae = A.end(i);
    while (j < B.n && B.end(j) <= as) ++j;
    for (int64_t jj = j; jj < B.n && B.start(jj) < ae; ++jj) acc += max64(0, min64(ae, B.end(jj)) - max64(as, B.start(jj)));
  }
  return acc;
}

// pycocotools rleIou's value: 0 without intersection (so two empty masks give 0), else one float64 division by
// the union, or by area(dt) for a crowd ground truth.
VLK_HD double iou_value(int64_t inter, int64_t area_d, int64_t area_g, bool crowd) {
  if (inter <= 0) return 0.0;
  const int64_t u = crowd ? area_d : area_d + area_g - inter;
  return static_cast<double>(inter) / static_cast<double>(u);
}

}  // namespace rle

// CPU twins (rle_counts.cpp; area, bbox and IoU are launch_rle_area / launch_rle_to_bbox / launch_rle_iou_csum in
// rle.h). masks: n masks of h x w bytes, mask k's pixel (y, x) at masks[k * sn + y * sy + x * sx] (strides in
// bytes, non-negative). chunk_cnt / chunk_base: [n, nchunks] with nchunks = ceil(h * w / rle::kChunk). Both replay
// the CUDA block exactly: one call per thread range, in thread order, the block's exclusive scan as a running sum.
// (The CPU encoder of the public API is rle_encode_run_offsets / rle_encode_runs in rle.h; these twins serve the
// tests.)
struct MaskStrides {
  int64_t h, w, sn, sy, sx;
};
void launch_rle_count_chunks(const uint8_t* masks, int64_t n, MaskStrides ms, int64_t* chunk_cnt);
// "" when offsets[0 .. n] start at 0, never decrease and end at total (the number of runs), else what is wrong: the
// CPU entry points check this before reading counts[offsets[k] ..] (a bad CSR would read out of bounds).
std::string rle_check_csr(const int64_t* offsets, int64_t n, int64_t total);
// ends: [offsets[n]]; slot offsets[k] + r receives mask k's r-th boundary position (the last slot of each mask is
// left for rle_runs_from_ends, which never reads it). chunk_base[k, c]: boundaries in chunks before c of mask k.
// Returns false when chunk_base / offsets do not match the masks (a chunk's boundaries would leave the mask's
// slots): that chunk is not written.
bool launch_rle_write_ends(const uint8_t* masks, int64_t n, MaskStrides ms, const int64_t* chunk_base,
                           const int64_t* offsets, int64_t* ends);
void launch_rle_runs_from_ends(const int64_t* ends, const int64_t* offsets, int64_t n, int64_t hw, int64_t* counts);
// out: [n, hw] uint8 column-major.
void launch_rle_decode_csum(const int64_t* csum, const int64_t* offsets, int64_t n, int64_t hw, uint8_t* out);
// IoU: launch_rle_iou_csum (rle.h).

#ifdef VLK_WITH_CUDA
void launch_rle_count_chunks_cuda(const uint8_t* masks, int64_t n, MaskStrides ms, int64_t* chunk_cnt,
                                  void* stream);
void launch_rle_write_ends_cuda(const uint8_t* masks, int64_t n, MaskStrides ms, const int64_t* chunk_base,
                                const int64_t* offsets, int64_t* ends, void* stream);
void launch_rle_runs_from_ends_cuda(const int64_t* ends, const int64_t* offsets, int64_t n, int64_t hw,
                                    int64_t* counts, void* stream);
void launch_rle_decode_csum_cuda(const int64_t* csum, const int64_t* offsets, int64_t n, int64_t hw, uint8_t* out,
                                 void* stream);
void launch_rle_area_cuda(const int64_t* counts, const int64_t* offsets, int64_t n, int64_t* out, void* stream);
void launch_rle_to_bbox_cuda(const int64_t* counts, const int64_t* offsets, int64_t n, const int64_t* h,
                             const int64_t* w, double* out, void* stream);
void launch_rle_iou_csum_cuda(const int64_t* dt_csum, const int64_t* dt_offsets, const int64_t* dt_area,
                              const double* dt_bbox, int64_t nd, const int64_t* gt_csum, const int64_t* gt_offsets,
                              const int64_t* gt_area, const double* gt_bbox, int64_t ng, const uint8_t* iscrowd,
                              double* out, void* stream);
#endif

}  // namespace vlk
