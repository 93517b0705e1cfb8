// Per-pair IoU formulas shared by the CPU kernels and their CUDA twins, so both compute the same arithmetic in
// the same order (torchvision's box_iou / generalized_box_iou / distance_box_iou / complete_box_iou, and
// Moment-DETR's temporal IoU). Header-only: VLK_HD marks them host+device under nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace vlk {
namespace boxes {

enum BoxFmt : int { kXYXY = 0, kXYWH = 1, kCXCYWH = 2 };
enum IouKind : int { kIoU = 0, kGIoU = 1, kDIoU = 2, kCIoU = 3 };
enum SegUnion : int { kSegSum = 0, kSegHull = 1 };

// max/min written as the comparison torch.maximum/clamp reduce to for finite inputs (inputs are validated finite).
template <typename T>
VLK_HD T fmax_(T a, T b) {
  return a > b ? a : b;
}
template <typename T>
VLK_HD T fmin_(T a, T b) {
  return a < b ? a : b;
}

// A box in xyxy plus the per-box terms every pair reuses: area, centre and (CIoU) atan(w / h).
template <typename T>
struct BoxTerms {
  T x1, y1, x2, y2, area, cx, cy, atan_wh;
};

template <typename T>
VLK_HD BoxTerms<T> box_terms(const T* p, int fmt, int kind) {
  BoxTerms<T> b;
  if (fmt == kXYWH) {
    b.x1 = p[0];
    b.y1 = p[1];
    b.x2 = p[0] + p[2];
    b.y2 = p[1] + p[3];
  } else if (fmt == kCXCYWH) {
    // torchvision's _box_cxcywh_to_xyxy: cx -/+ 0.5 * w.
    const T half = T(0.5);
    b.x1 = p[0] - half * p[2];
    b.y1 = p[1] - half * p[3];
    b.x2 = p[0] + half * p[2];
    b.y2 = p[1] + half * p[3];
  } else {
    b.x1 = p[0];
    b.y1 = p[1];
    b.x2 = p[2];
    b.y2 = p[3];
  }
  b.area = (b.x2 - b.x1) * (b.y2 - b.y1);
  b.cx = (b.x1 + b.x2) / T(2);
  b.cy = (b.y1 + b.y2) / T(2);
  b.atan_wh = T(0);
  if (kind == kCIoU) {
    // w / h first, then atan: 0/0 gives NaN and w/0 gives +-pi/2 exactly as torch.atan(w / h).
#ifdef __CUDA_ARCH__
    b.atan_wh = atan((b.x2 - b.x1) / (b.y2 - b.y1));
#else
    b.atan_wh = static_cast<T>(std::atan((b.x2 - b.x1) / (b.y2 - b.y1)));
#endif
  }
  return b;
}

// One pair. eps placement follows torchvision: none in box_iou/generalized_box_iou (ours adds it to the union and
// the enclosing area, so eps=0 is torchvision), and on the squared diagonal and CIoU's alpha denominator only.
template <typename T, int KIND>
VLK_HD T pair_iou(T ax1, T ay1, T ax2, T ay2, T aarea, T acx, T acy, T aatan, T bx1, T by1, T bx2, T by2, T barea,
                  T bcx, T bcy, T batan, T eps) {
  const T w = fmax_(fmin_(ax2, bx2) - fmax_(ax1, bx1), T(0));
  const T h = fmax_(fmin_(ay2, by2) - fmax_(ay1, by1), T(0));
  const T inter = w * h;
  const T uni = aarea + barea - inter;
  if (KIND == kIoU) return inter / (uni + eps);
  const T cw = fmax_(fmax_(ax2, bx2) - fmin_(ax1, bx1), T(0));
  const T ch = fmax_(fmax_(ay2, by2) - fmin_(ay1, by1), T(0));
  if (KIND == kGIoU) {
    const T encl = cw * ch;
    return inter / (uni + eps) - (encl - uni) / (encl + eps);
  }
  const T iou = inter / uni;
  const T diag = cw * cw + ch * ch + eps;
  const T dx = acx - bcx, dy = acy - bcy;
  const T diou = iou - (dx * dx + dy * dy) / diag;
  if (KIND == kDIoU) return diou;
  const T da = aatan - batan;
  const T v = T(0.40528473456935108578) * (da * da);  // 4 / pi^2
  const T alpha = v / (T(1) - iou + v + eps);
  return diou - alpha * v;
}

// Moment-DETR: compute_temporal_iou_batch_cross (sum: I / (l1 + l2 - I), NaN on 0/0) and
// compute_temporal_iou_batch_paired (hull: I / (max end - min start), 0 where the hull is 0).
template <typename T, int MODE>
VLK_HD T pair_segment_iou(T s1, T e1, T s2, T e2) {
  const T inter = fmax_(fmin_(e1, e2) - fmax_(s1, s2), T(0));
  if (MODE == kSegSum) {
    const T uni = (e1 - s1) + (e2 - s2) - inter;
    return inter / uni;
  }
  const T hull = fmax_(e1, e2) - fmin_(s1, s2);
  return hull != T(0) ? inter / hull : T(0);
}

}  // namespace boxes
}  // namespace vlk
