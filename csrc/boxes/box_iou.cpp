#include "boxes/box_iou.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "boxes/box_math.h"
#include "core/parallel.h"

namespace vlk {
namespace {

using boxes::BoxTerms;

// Structure-of-arrays copy of one side's per-box terms, so the inner loop over the second box set reads
// unit-stride arrays and vectorizes.
template <typename T>
struct BoxSoA {
  std::vector<T> x1, y1, x2, y2, area, cx, cy, at;
  void resize(int64_t k) {
    for (auto* v : {&x1, &y1, &x2, &y2, &area, &cx, &cy, &at}) v->resize(static_cast<size_t>(k));
  }
  void set(int64_t i, const BoxTerms<T>& b) {
    x1[i] = b.x1;
    y1[i] = b.y1;
    x2[i] = b.x2;
    y2[i] = b.y2;
    area[i] = b.area;
    cx[i] = b.cx;
    cy[i] = b.cy;
    at[i] = b.atan_wh;
  }
};

template <typename T>
BoxSoA<T> to_soa(const T* boxes, int64_t count, int fmt, int kind) {
  BoxSoA<T> s;
  s.resize(count);
  parallel_for(count, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) s.set(i, boxes::box_terms(boxes + 4 * i, fmt, kind));
  });
  return s;
}

// Large outputs are freshly mmap-ed by the allocator, and faulting them in 4 KiB pages costs several times the
// IoU arithmetic. Asking for transparent huge pages over the 2 MiB-aligned interior is a hint only: a kernel
// without THP (or with it off) ignores it and nothing changes.
void advise_huge_pages(void* p, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  if (bytes < static_cast<int64_t>(4 * kHuge)) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

inline int64_t clamp_count(const int64_t* valid, int64_t b, int64_t limit) {
  if (valid == nullptr) return limit;
  return std::min<int64_t>(std::max<int64_t>(valid[b], 0), limit);
}

// One output row: box a against boxes [0, mv) of the second set, zeros for [mv, m).
template <typename T, int KIND>
void row_kernel(const BoxSoA<T>& A, int64_t ia, const BoxSoA<T>& Bs, int64_t jb, int64_t mv, int64_t m, T eps,
                T* __restrict__ out) {
  const T ax1 = A.x1[ia], ay1 = A.y1[ia], ax2 = A.x2[ia], ay2 = A.y2[ia], aa = A.area[ia];
  const T acx = A.cx[ia], acy = A.cy[ia], aat = A.at[ia];
  const T* __restrict__ bx1 = Bs.x1.data() + jb;
  const T* __restrict__ by1 = Bs.y1.data() + jb;
  const T* __restrict__ bx2 = Bs.x2.data() + jb;
  const T* __restrict__ by2 = Bs.y2.data() + jb;
  const T* __restrict__ ba = Bs.area.data() + jb;
  const T* __restrict__ bcx = Bs.cx.data() + jb;
  const T* __restrict__ bcy = Bs.cy.data() + jb;
  const T* __restrict__ bat = Bs.at.data() + jb;
  for (int64_t j = 0; j < mv; ++j) {
    out[j] = boxes::pair_iou<T, KIND>(ax1, ay1, ax2, ay2, aa, acx, acy, aat, bx1[j], by1[j], bx2[j], by2[j], ba[j],
                                      bcx[j], bcy[j], bat[j], eps);
  }
  for (int64_t j = mv; j < m; ++j) out[j] = T(0);
}

template <typename T, int KIND>
void box_iou_impl(const BoxSoA<T>& A, const BoxSoA<T>& Bs, T* out, int64_t batch, int64_t n, int64_t m, bool aligned,
                  T eps, const int64_t* valid1, const int64_t* valid2) {
  if (aligned) {
    parallel_for(batch * n, 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / n, i = r % n;
        const bool ok = i < clamp_count(valid1, b, n) && i < clamp_count(valid2, b, n);
        out[r] = ok ? boxes::pair_iou<T, KIND>(A.x1[r], A.y1[r], A.x2[r], A.y2[r], A.area[r], A.cx[r], A.cy[r],
                                               A.at[r], Bs.x1[r], Bs.y1[r], Bs.x2[r], Bs.y2[r], Bs.area[r],
                                               Bs.cx[r], Bs.cy[r], Bs.at[r], eps)
                    : T(0);
      }
    });
    return;
  }
  // One task per output row; ~16k pairs per task keeps thread start-up negligible.
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(m, 1));
  parallel_for(batch * n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / n, i = r % n;
      T* row = out + r * m;
      if (i >= clamp_count(valid1, b, n)) {
        std::fill(row, row + m, T(0));
        continue;
      }
      row_kernel<T, KIND>(A, r, Bs, b * m, clamp_count(valid2, b, m), m, eps, row);
    }
  });
}

template <typename T>
void seg_row(const T* a, const T* bsegs, int64_t m, int mode, T* out) {
  const T s1 = a[0], e1 = a[1];
  if (mode == boxes::kSegSum) {
    for (int64_t j = 0; j < m; ++j) out[j] = boxes::pair_segment_iou<T, boxes::kSegSum>(s1, e1, bsegs[2 * j], bsegs[2 * j + 1]);
  } else {
    for (int64_t j = 0; j < m; ++j) out[j] = boxes::pair_segment_iou<T, boxes::kSegHull>(s1, e1, bsegs[2 * j], bsegs[2 * j + 1]);
  }
}

}  // namespace

template <typename T>
void launch_box_iou(const T* boxes1, const T* boxes2, T* out, int64_t batch, int64_t n, int64_t m, int fmt, int kind,
                    bool aligned, T eps, const int64_t* valid1, const int64_t* valid2) {
  if (batch == 0 || n == 0 || (!aligned && m == 0)) return;
  const int64_t m2 = aligned ? n : m;
  advise_huge_pages(out, batch * n * (aligned ? 1 : m) * static_cast<int64_t>(sizeof(T)));
  const BoxSoA<T> A = to_soa(boxes1, batch * n, fmt, kind);
  const BoxSoA<T> Bs = to_soa(boxes2, batch * m2, fmt, kind);
  switch (kind) {
    case boxes::kGIoU:
      return box_iou_impl<T, boxes::kGIoU>(A, Bs, out, batch, n, m, aligned, eps, valid1, valid2);
    case boxes::kDIoU:
      return box_iou_impl<T, boxes::kDIoU>(A, Bs, out, batch, n, m, aligned, eps, valid1, valid2);
    case boxes::kCIoU:
      return box_iou_impl<T, boxes::kCIoU>(A, Bs, out, batch, n, m, aligned, eps, valid1, valid2);
    default:
      return box_iou_impl<T, boxes::kIoU>(A, Bs, out, batch, n, m, aligned, eps, valid1, valid2);
  }
}

template <typename T>
void launch_segment_iou(const T* seg1, const T* seg2, T* out, int64_t batch, int64_t n, int64_t m, int mode,
                        bool aligned) {
  if (batch == 0 || n == 0 || (!aligned && m == 0)) return;
  if (aligned) {
    parallel_for(batch * n, 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) seg_row(seg1 + 2 * r, seg2 + 2 * r, 1, mode, out + r);
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(m, 1));
  parallel_for(batch * n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) seg_row(seg1 + 2 * r, seg2 + 2 * (r / n) * m, m, mode, out + r * m);
  });
}

template void launch_box_iou<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, int, int, bool,
                                    float, const int64_t*, const int64_t*);
template void launch_box_iou<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, int, int, bool,
                                     double, const int64_t*, const int64_t*);
template void launch_segment_iou<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, int, bool);
template void launch_segment_iou<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, int, bool);

}  // namespace vlk
