#include "boxes/rle.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>

#include "core/cpu_features.h"
#include "boxes/rle_counts.h"
#include "boxes/rle_encode.h"
#include "core/parallel.h"

namespace vlk {
namespace {

constexpr int64_t kMaxRun = 0xFFFFFFFFLL;  // pycocotools stores runs as 32-bit unsigned

// Whether character c ends a count (no continuation bit): the runs of a well-formed string, one per such character.
inline bool ends_count(uint8_t c) { return ((static_cast<int>(c) - 48) & 0x20) == 0; }

// Parses one compressed string s[0, len) into out[0, cap); returns "" once exactly cap runs are read, else the
// defect. Never reads past the string's end nor writes past out[cap - 1].
std::string parse_one(const uint8_t* s, int64_t len, int64_t* out, int64_t cap) {
  int64_t p = 0, mi = 0;
  while (p < len) {
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= len) return "truncated count at end of string";
      const int c = static_cast<int>(s[p]) - 48;
      if (c < 0 || c > 63) return "invalid character at position " + std::to_string(p);
      // 7 chars carry 35 bits: more than any 32-bit run delta needs; longer groups are malformed.
      if (k >= 7) return "count longer than 7 characters at position " + std::to_string(p);
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10)) x |= static_cast<int64_t>(~uint64_t{0} << (5 * k));
    }
    if (mi > 2) x += out[mi - 2];
    if (x < 0 || x > kMaxRun) return "run " + std::to_string(mi) + " decodes to " + std::to_string(x);
    if (mi >= cap) return "more runs than count-ending characters";
    out[mi++] = x;
  }
  if (mi != cap) return "fewer runs than count-ending characters";
  return {};
}

void append_string(const int64_t* c, int64_t m, std::string& out) {
  for (int64_t i = 0; i < m; ++i) {
    int64_t x = c[i];
    if (i > 2) x -= c[i - 2];
    bool more = true;
    while (more) {
      int ch = static_cast<int>(x & 0x1f);
      x >>= 5;  // arithmetic shift: negative deltas end at -1
      more = (ch & 0x10) ? x != -1 : x != 0;
      if (more) ch |= 0x20;
      out.push_back(static_cast<char>(ch + 48));
    }
  }
}

// Column form of the masks with at most kMaxPlanes foreground pieces per column (object masks nearly always), a CPU
// layout for the IoU of rle::Intervals: plane q of mask r is an array over its columns [x0[r], x0[r] + ncol[r])
// holding each column's q-th piece [cs, ce) in rows (absent: 0, 0). Pieces of one mask are disjoint, so
// |a & b| = sum over plane pairs and shared columns of max(0, min(ends) - max(starts)): independent, vectorizable
// work instead of the dependent interval merge (rle::inter_part, which masks with more pieces per column use).
struct ColumnPlanes {
  std::vector<uint8_t> planes;  // 0: no column form (empty mask, too many pieces, or runs that are not a mask)
  std::vector<int64_t> x0, ncol, off;
  std::vector<int32_t> cs, ce;
};

constexpr int kMaxPlanes = 4;

// Calls fn(column, row_begin, row_end) for every per-column piece of the intervals (a run that wraps from the bottom
// of one column into the next is split there) until fn returns false; returns false then.
template <typename F>
bool for_each_piece(const rle::Intervals& A, int64_t h, F&& fn) {
  for (int64_t i = 0; i < A.n; ++i) {
    int64_t p = A.start(i);
    const int64_t e = A.end(i);
    while (p < e) {
      const int64_t c = p / h, pe = std::min(e, (c + 1) * h);
      if (!fn(c, p - c * h, pe - c * h)) return false;
      p = pe;
    }
  }
  return true;
}

ColumnPlanes build_planes(const int64_t* csum, const int64_t* offsets, int64_t n, int64_t h, int64_t w) {
  ColumnPlanes cp;
  cp.planes.assign(static_cast<size_t>(n), 0);
  cp.x0.assign(static_cast<size_t>(n), 0);
  cp.ncol.assign(static_cast<size_t>(n), 0);
  cp.off.assign(static_cast<size_t>(n) + 1, 0);
  if (h <= 0 || h > INT32_MAX) return cp;
  // Pass 1: column range and the most pieces any column holds. Every column index is checked against [0, w), so
  // runs that are not a mask of this size leave the mask without a column form instead of indexing outside it.
  parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> cnt;
    for (int64_t r = begin; r < end; ++r) {
      const rle::Intervals A = rle::intervals_of(csum, offsets, r);
      int64_t i0 = 0, i1 = A.n;
      while (i0 < A.n && A.end(i0) <= A.start(i0)) ++i0;
      while (i1 > i0 && A.end(i1 - 1) <= A.start(i1 - 1)) --i1;
      if (i0 == i1) continue;
      const int64_t x0 = A.start(i0) / h, x1 = (A.end(i1 - 1) - 1) / h + 1;
      if (A.start(i0) < 0 || x1 > w || x1 <= x0) continue;
      cnt.assign(static_cast<size_t>(x1 - x0), 0);
      int most = 0;
      const bool ok = for_each_piece(A, h, [&](int64_t c, int64_t, int64_t) {
        if (c < x0 || c >= x1) return false;
        most = std::max<int>(most, ++cnt[c - x0]);
        return most <= kMaxPlanes;
      });
      if (!ok) continue;
      cp.x0[r] = x0;
      cp.ncol[r] = x1 - x0;
      cp.planes[r] = static_cast<uint8_t>(most);
    }
  });
  for (int64_t r = 0; r < n; ++r) cp.off[r + 1] = cp.off[r] + cp.planes[r] * cp.ncol[r];
  cp.cs.assign(static_cast<size_t>(cp.off[n]), 0);
  cp.ce.assign(static_cast<size_t>(cp.off[n]), 0);
  // Pass 2 (the same pieces, all inside [x0, x1) now): piece q of column c goes to entry q * ncol + c - x0.
  parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> cnt;
    for (int64_t r = begin; r < end; ++r) {
      if (cp.planes[r] == 0) continue;
      const int64_t x0 = cp.x0[r], nc = cp.ncol[r];
      int32_t* cs = cp.cs.data() + cp.off[r];
      int32_t* ce = cp.ce.data() + cp.off[r];
      cnt.assign(static_cast<size_t>(nc), 0);
      for_each_piece(rle::intervals_of(csum, offsets, r), h, [&](int64_t c, int64_t y0, int64_t y1) {
        const int64_t slot = cnt[c - x0]++ * nc + (c - x0);
        cs[slot] = static_cast<int32_t>(y0);
        ce[slot] = static_cast<int32_t>(y1);
        return true;
      });
    }
  });
  return cp;
}

// Sum over shared columns of max(0, min(ends) - max(starts)); the total is at most h*w < 2^32.
inline uint32_t column_inter(const int32_t* as, const int32_t* ae, const int32_t* bs, const int32_t* be, int64_t n) {
  uint32_t acc = 0;
  for (int64_t c = 0; c < n; ++c) {
    const int32_t lo = std::max(as[c], bs[c]), hi = std::min(ae[c], be[c]);
    acc += static_cast<uint32_t>(std::max(hi - lo, 0));
  }
  return acc;
}

VLK_TARGET("avx2") uint32_t column_inter_avx2(const int32_t* as, const int32_t* ae, const int32_t* bs,
                                               const int32_t* be, int64_t n) {
  return column_inter(as, ae, bs, be, n);
}

int64_t planes_inter(const ColumnPlanes& D, int64_t d, const ColumnPlanes& G, int64_t g, bool avx2) {
  const int pd = D.planes[d], pg = G.planes[g];
  const int64_t dx0 = D.x0[d], gx0 = G.x0[g], dn = D.ncol[d], gn = G.ncol[g];
  const int64_t c0 = std::max(dx0, gx0), c1 = std::min(dx0 + dn, gx0 + gn);
  if (c1 <= c0) return 0;
  int64_t inter = 0;
  for (int p = 0; p < pd; ++p) {
    for (int q = 0; q < pg; ++q) {
      const int64_t da = D.off[d] + p * dn + (c0 - dx0), ga = G.off[g] + q * gn + (c0 - gx0);
      const int32_t *as = D.cs.data() + da, *ae = D.ce.data() + da;
      const int32_t *bs = G.cs.data() + ga, *be = G.ce.data() + ga;
      inter += avx2 ? column_inter_avx2(as, ae, bs, be, c1 - c0) : column_inter(as, ae, bs, be, c1 - c0);
    }
  }
  return inter;
}

}  // namespace

void rle_string_run_offsets(const uint8_t* buf, const int64_t* str_off, int64_t n, int64_t* run_off) {
  run_off[0] = 0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t m = 0;
    for (int64_t p = str_off[k]; p < str_off[k + 1]; ++p) m += ends_count(buf[p]);
    run_off[k + 1] = run_off[k] + m;
  }
}

std::string rle_parse_strings(const uint8_t* buf, const int64_t* str_off, int64_t n, const int64_t* hw,
                              const int64_t* run_off, int64_t* counts) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t* out = counts + run_off[k];
      const int64_t m = run_off[k + 1] - run_off[k];
      errors[k] = parse_one(buf + str_off[k], str_off[k + 1] - str_off[k], out, m);
      if (!errors[k].empty()) continue;
      int64_t total = 0;
      for (int64_t i = 0; i < m; ++i) total += out[i];
      if (total != hw[k])
        errors[k] = "runs sum to " + std::to_string(total) + " but the size h*w is " + std::to_string(hw[k]);
    }
  });
  for (int64_t k = 0; k < n; ++k)
    if (!errors[k].empty()) return "malformed RLE string at index " + std::to_string(k) + ": " + errors[k];
  return {};
}

std::vector<std::string> rle_to_strings(const int64_t* counts, const int64_t* offsets, int64_t n) {
  std::vector<std::string> out(static_cast<size_t>(n));
  parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) append_string(counts + offsets[k], offsets[k + 1] - offsets[k], out[k]);
  });
  return out;
}

namespace {

// Mask k's run boundaries (column-major positions): the SIMD bit-packing encoder for column- or row-contiguous
// masks (rle_encode.h), else one pass chunk by chunk (a chunk holds at most kChunk boundaries), so the scratch grows
// with the runs, not with the pixels.
void mask_ends(const uint8_t* mask, const MaskStrides& ms, std::vector<int64_t>& ends, std::vector<int64_t>& buf,
               std::vector<uint64_t>& scratch) {
  ends.clear();
  if (rle_mask_boundaries(mask, ms, ends, scratch)) return;
  const int64_t hw = ms.h * ms.w;
  buf.resize(static_cast<size_t>(rle::kChunk));
  for (int64_t c = 0; c * rle::kChunk < hw; ++c) {
    int64_t b, e;
    rle::chunk_range(c, hw, &b, &e);
    const int64_t got = rle::write_transitions(mask, ms.h, ms.sy, ms.sx, b, e, buf.data());
    ends.insert(ends.end(), buf.begin(), buf.begin() + got);
  }
}

}  // namespace

void rle_encode_run_offsets(const uint8_t* masks, int64_t n, const MaskStrides& ms, int64_t* run_off) {
  const int64_t hw = ms.h * ms.w;
  std::vector<int64_t> nruns(static_cast<size_t>(n));
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> scratch;
    for (int64_t k = begin; k < end; ++k) {
      const uint8_t* mask = masks + k * ms.sn;
      int64_t b = rle_mask_boundary_count(mask, ms, scratch);
      if (b < 0) b = rle::count_transitions(mask, ms.h, ms.sy, ms.sx, 0, hw);
      nruns[k] = b + 1;
    }
  });
  run_off[0] = 0;
  for (int64_t k = 0; k < n; ++k) run_off[k + 1] = run_off[k] + nruns[k];
}

bool rle_encode_runs(const uint8_t* masks, int64_t n, const MaskStrides& ms, const int64_t* run_off,
                     int64_t* counts) {
  const int64_t hw = ms.h * ms.w;
  std::atomic<bool> fits{true};
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> buf, ends;
    std::vector<uint64_t> scratch;
    for (int64_t k = begin; k < end; ++k) {
      mask_ends(masks + k * ms.sn, ms, ends, buf, scratch);
      const int64_t m = static_cast<int64_t>(ends.size()) + 1;
      if (m != run_off[k + 1] - run_off[k]) {
        fits.store(false, std::memory_order_relaxed);
        continue;
      }
      int64_t* out = counts + run_off[k];
      for (int64_t i = 0; i < m; ++i) out[i] = rle::run_from_ends(ends.data(), m, i, hw);
    }
  });
  return fits.load();
}

std::vector<std::string> rle_encode_strings(const uint8_t* masks, int64_t n, const MaskStrides& ms) {
  const int64_t hw = ms.h * ms.w;
  std::vector<std::string> out(static_cast<size_t>(n));
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> buf, ends, runs;
    std::vector<uint64_t> scratch;
    for (int64_t k = begin; k < end; ++k) {
      mask_ends(masks + k * ms.sn, ms, ends, buf, scratch);
      const int64_t m = static_cast<int64_t>(ends.size()) + 1;
      runs.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) runs[i] = rle::run_from_ends(ends.data(), m, i, hw);
      append_string(runs.data(), m, out[k]);
    }
  });
  return out;
}

void launch_rle_area(const int64_t* counts, const int64_t* offsets, int64_t n, int64_t* out, int64_t parts) {
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t a = 0;
      for (int64_t p = 0; p < parts; ++p) a += rle::area_part(counts + offsets[k], offsets[k + 1] - offsets[k], p, parts);
      out[k] = a;
    }
  });
}

void launch_rle_to_bbox(const int64_t* counts, const int64_t* offsets, int64_t n, const int64_t* h, const int64_t* w,
                        double* out) {
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k)
      rle::bbox_one(counts + offsets[k], offsets[k + 1] - offsets[k], h[k], w[k], out + 4 * k);
  });
}

void launch_rle_iou_csum(const int64_t* dt_csum, const int64_t* dt_offsets, const int64_t* dt_area,
                         const double* dt_bbox, int64_t nd, const int64_t* gt_csum, const int64_t* gt_offsets,
                         const int64_t* gt_area, const double* gt_bbox, int64_t ng, int64_t h, int64_t w,
                         const uint8_t* iscrowd, double* out, int64_t parts) {
  if (nd == 0 || ng == 0) return;
  // One slice per pair: the column planes where both masks have them. A lane split (parts > 1) replays the CUDA
  // kernel exactly: rle::inter_part only.
  ColumnPlanes D, G;
  if (parts == 1) {
    D = build_planes(dt_csum, dt_offsets, nd, h, w);
    G = build_planes(gt_csum, gt_offsets, ng, h, w);
  }
  const bool avx2 = cpu_has_avx2();
  parallel_for(nd, 1, [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      const rle::Intervals A = rle::intervals_of(dt_csum, dt_offsets, d);
      const bool d_planes = parts == 1 && D.planes[d] > 0;
      for (int64_t g = 0; g < ng; ++g) {
        double o = 0.0;
        if (rle::bbox_overlap(dt_bbox + 4 * d, gt_bbox + 4 * g)) {
          int64_t inter = 0;
          if (d_planes && G.planes[g] > 0) {
            inter = planes_inter(D, d, G, g, avx2);
          } else {
            const rle::Intervals B = rle::intervals_of(gt_csum, gt_offsets, g);
            for (int64_t p = 0; p < parts; ++p) inter += rle::inter_part(A, B, p, parts);
          }
          o = rle::iou_value(inter, dt_area[d], gt_area[g], iscrowd != nullptr && iscrowd[g]);
        }
        out[d * ng + g] = o;
      }
    }
  });
}

void launch_coco_box_iou(const double* dt, int64_t nd, const double* gt, int64_t ng, const uint8_t* iscrowd,
                         double* out) {
  parallel_for(nd, std::max<int64_t>(1, 4096 / std::max<int64_t>(ng, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      const double* D = dt + 4 * d;
      const double da = D[2] * D[3];
      for (int64_t g = 0; g < ng; ++g) {
        const double* G = gt + 4 * g;
        double o = 0.0;
        const double w = std::fmin(D[2] + D[0], G[2] + G[0]) - std::fmax(D[0], G[0]);
        const double h = std::fmin(D[3] + D[1], G[3] + G[1]) - std::fmax(D[1], G[1]);
        if (w > 0 && h > 0) {
          const double i = w * h;
          const double u = (iscrowd != nullptr && iscrowd[g]) ? da : da + G[2] * G[3] - i;
          o = i / u;
        }
        out[d * ng + g] = o;
      }
    }
  });
}

}  // namespace vlk
