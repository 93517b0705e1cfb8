// pycocotools COCOeval.evaluateImg / accumulate and lvis-api LVISEval in C++ (see coco_eval.h). Every comparison
// and every floating-point operation is the anchor's, in its order (no fused multiply-add: the build targets
// baseline x86-64 and nothing here is compiled with a wider target), so the outputs are bit-identical.
#include "detection/coco_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "boxes/rle_counts.h"
#include "core/parallel.h"

namespace vlk {
namespace {

// pycocotools bbIou for one pair (xywh doubles): 0 unless the boxes overlap with positive width and height.
inline double box_pair_iou(const double* D, const double* G, bool crowd) {
  const double w = std::fmin(D[2] + D[0], G[2] + G[0]) - std::fmax(D[0], G[0]);
  if (w <= 0) return 0.0;
  const double h = std::fmin(D[3] + D[1], G[3] + G[1]) - std::fmax(D[1], G[1]);
  if (h <= 0) return 0.0;
  const double i = w * h;
  const double da = D[2] * D[3];
  const double u = crowd ? da : da + G[2] * G[3] - i;
  return i / u;
}

// IoU of the cell's detections (rows) against its ground truths (columns, in list order): out[d * ng + g].
void cell_ious(const DetEvalInputs& in, int64_t d0, int64_t nd, int64_t g0, int64_t ng, double* out) {
  const DetGeometry& geo = in.geo;
  for (int64_t d = 0; d < nd; ++d) {
    for (int64_t g = 0; g < ng; ++g) {
      const bool crowd = in.gt_crowd[g0 + g] != 0;
      double o;
      if (geo.kind == 0) {
        o = box_pair_iou(geo.dt_box + 4 * (d0 + d), geo.gt_box + 4 * (g0 + g), crowd);
      } else {
        // rleIou: the rleToBbox boxes prefilter the pair, then the exact intersection of the foreground runs.
        o = 0.0;
        if (rle::bbox_overlap(geo.dt_box + 4 * (d0 + d), geo.gt_box + 4 * (g0 + g))) {
          const rle::Intervals A = rle::intervals_of(geo.dt_csum, geo.dt_roff, d0 + d);
          const rle::Intervals B = rle::intervals_of(geo.gt_csum, geo.gt_roff, g0 + g);
          const int64_t inter = rle::inter_part(A, B, 0, 1);
          o = rle::iou_value(inter, geo.dt_rarea[d0 + d], geo.gt_rarea[g0 + g], crowd);
        }
      }
      out[d * ng + g] = o;
    }
  }
}

inline bool outside(double area, const double* rng) { return area < rng[0] || area > rng[1]; }

}  // namespace

void launch_det_evaluate(const DetEvalInputs& in, uint8_t* status, int64_t* npig, int64_t* dt_match, int64_t* gt_match,
                         uint8_t* gt_ign_out) {
  const int64_t A = in.n_area, T = in.n_thr, ND = in.n_dt, NG = in.n_gt, NC = in.n_cells;
  parallel_for(NC, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> iou;
    std::vector<int64_t> perm, gtm;
    std::vector<uint8_t> gig, gtm_pos, dt_ig, dt_hit;
    std::vector<int64_t> dtm;
    for (int64_t c = begin; c < end; ++c) {
      check_interrupt();  // a cell is at most D x G IoUs and A x T greedy passes: well under a poll interval
      const int64_t g0 = in.gt_off[c], G = in.gt_off[c + 1] - g0;
      const int64_t d0 = in.dt_off[c], D = in.dt_off[c + 1] - d0;
      iou.resize(static_cast<size_t>(D * G));
      cell_ious(in, d0, D, g0, G, iou.data());
      perm.resize(static_cast<size_t>(G));
      gig.resize(static_cast<size_t>(G));
      gtm.resize(static_cast<size_t>(G));
      gtm_pos.resize(static_cast<size_t>(G));
      dtm.resize(static_cast<size_t>(D));
      dt_ig.resize(static_cast<size_t>(D));
      dt_hit.resize(static_cast<size_t>(D));
      for (int64_t a = 0; a < A; ++a) {
        const double* rng = in.area_rng + 2 * a;
        int64_t valid = 0;
        for (int64_t g = 0; g < G; ++g) {
          gig[g] = (in.gt_ignore[g0 + g] || outside(in.gt_area[g0 + g], rng)) ? 1 : 0;
          valid += gig[g] == 0;
          if (gt_ign_out) gt_ign_out[a * NG + g0 + g] = gig[g];
        }
        npig[a * NC + c] = valid;
        // Ground truths sorted by the ignore flag, stable (np.argsort kind="mergesort"): regular ones first.
        int64_t p = 0;
        for (int64_t g = 0; g < G; ++g)
          if (!gig[g]) perm[p++] = g;
        for (int64_t g = 0; g < G; ++g)
          if (gig[g]) perm[p++] = g;
        for (int64_t t = 0; t < T; ++t) {
          const double thr = in.thr[t];
          std::fill(gtm.begin(), gtm.end(), -1);
          std::fill(gtm_pos.begin(), gtm_pos.end(), 0);
          for (int64_t d = 0; d < D; ++d) {
            const double* row = iou.data() + d * G;
            double best = thr;
            int64_t m = -1;  // position in the sorted ground truths
            // G > 0 here means pycocotools' ious is non-empty (it is [] only when a side is empty).
            for (int64_t s = 0; s < G; ++s) {
              const int64_t g = perm[s];
              // A ground truth already matched by a detection with a positive id stays taken, unless crowd.
              if (gtm_pos[s] && !in.gt_crowd[g0 + g]) continue;
              // Matched to a regular ground truth and reached the ignored ones: stop.
              if (m > -1 && gig[perm[m]] == 0 && gig[g] == 1) break;
              if (row[g] < best) continue;
              best = row[g];
              m = s;
            }
            if (m == -1) {
              dtm[d] = -1;
              dt_ig[d] = 0;
              dt_hit[d] = 0;
              continue;
            }
            const int64_t g = perm[m];
            dt_ig[d] = gig[g];
            dtm[d] = g;
            dt_hit[d] = in.gt_id_nonzero[g0 + g];
            gtm[m] = d;
            gtm_pos[m] = in.dt_id_pos[d0 + d];
          }
          for (int64_t d = 0; d < D; ++d) {
            // Unmatched (dtMatches == 0) detections outside the area range, or (LVIS) of a category that is not
            // exhaustively annotated, are ignored.
            bool ig = dt_ig[d] != 0;
            if (!dt_hit[d] && (outside(in.dt_area[d0 + d], rng) || (in.dt_extra_ignore && in.dt_extra_ignore[d0 + d])))
              ig = true;
            status[(a * T + t) * ND + d0 + d] = ig ? 2 : (dt_hit[d] ? 1 : 0);
            if (dt_match) dt_match[(a * T + t) * ND + d0 + d] = dtm[d] < 0 ? -1 : g0 + dtm[d];
          }
          if (gt_match)
            for (int64_t s = 0; s < G; ++s) gt_match[(a * T + t) * NG + g0 + perm[s]] = gtm[s] < 0 ? -1 : d0 + gtm[s];
        }
      }
    }
  });
}

void launch_det_accumulate(const DetAccumInputs& in, double* precision, double* recall, double* scores) {
  const int64_t T = in.n_thr, R = in.n_rec, K = in.out_k, A = in.out_a, M = in.out_m, ND = in.n_dt;
  // Cells of each output category, in cell (= image) order.
  std::vector<int64_t> group_off(static_cast<size_t>(in.n_groups) + 1, 0), group_cells;
  for (int64_t c = 0; c < in.n_cells; ++c)
    if (in.cell_group[c] >= 0) ++group_off[in.cell_group[c] + 1];
  for (int64_t k = 0; k < in.n_groups; ++k) group_off[k + 1] += group_off[k];
  group_cells.resize(static_cast<size_t>(group_off[in.n_groups]));
  {
    std::vector<int64_t> fill(group_off.begin(), group_off.end() - 1);
    for (int64_t c = 0; c < in.n_cells; ++c)
      if (in.cell_group[c] >= 0) group_cells[fill[in.cell_group[c]]++] = c;
  }
  // Rank of each detection inside its cell (maxDet keeps ranks below it).
  std::vector<int64_t> rank(static_cast<size_t>(ND));
  for (int64_t c = 0; c < in.n_cells; ++c)
    for (int64_t d = in.dt_off[c]; d < in.dt_off[c + 1]; ++d) rank[d] = d - in.dt_off[c];
  // Per group, the concatenation over images of each cell's detections (already by descending score), then a
  // stable sort by descending score: pycocotools' np.argsort(-dtScores, kind="mergesort"). Cutting each cell to
  // maxDet first and sorting afterwards keeps the same relative order, so one sort serves every maxDet.
  std::vector<int64_t> sorted_off(static_cast<size_t>(in.n_groups) + 1, 0);
  for (int64_t k = 0; k < in.n_groups; ++k) {
    int64_t cnt = 0;
    for (int64_t q = group_off[k]; q < group_off[k + 1]; ++q) cnt += in.dt_off[group_cells[q] + 1] - in.dt_off[group_cells[q]];
    sorted_off[k + 1] = sorted_off[k] + cnt;
  }
  std::vector<int64_t> sorted(static_cast<size_t>(sorted_off[in.n_groups]));
  parallel_for(in.n_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      check_interrupt();
      int64_t* o = sorted.data() + sorted_off[k];
      int64_t n = 0;
      for (int64_t q = group_off[k]; q < group_off[k + 1]; ++q) {
        const int64_t c = group_cells[q];
        for (int64_t d = in.dt_off[c]; d < in.dt_off[c + 1]; ++d) o[n++] = d;
      }
      // One category of a large set holds up to millions of detections: sorted in chunks (each a poll apart), then
      // merged pairwise (stable: equal scores keep the earlier chunk's, i.e. list, order).
      constexpr int64_t kChunk = int64_t{1} << 16;
      auto by_score = [&](int64_t x, int64_t y) { return in.score[x] > in.score[y]; };
      for (int64_t b = 0; b < n; b += kChunk) {
        check_interrupt();
        std::stable_sort(o + b, o + std::min(n, b + kChunk), by_score);
      }
      for (int64_t w = kChunk; w < n; w *= 2) {
        for (int64_t b = 0; b + w < n; b += 2 * w) {
          check_interrupt();
          std::inplace_merge(o + b, o + b + w, o + std::min(n, b + 2 * w), by_score);
        }
      }
    }
  });
  const double eps = std::nextafter(1.0, 2.0) - 1.0;  // np.spacing(1)
  // Tasks are (group, area) pairs, dealt round-robin so that a few large categories do not land on one thread.
  const int64_t n_tasks = in.n_groups * in.n_area_src;
  const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), n_tasks));
  parallel_for(n_threads, 1, [&](int64_t tb, int64_t te) {
    std::vector<int64_t> idx, tps;
    std::vector<uint8_t> st;
    std::vector<double> pr;
    for (int64_t th = tb; th < te; ++th) {
      for (int64_t task = th; task < n_tasks; task += n_threads) {
        check_interrupt();
        const int64_t k = task / in.n_area_src, a = task % in.n_area_src, ae = in.area_src[a];
        int64_t np_ = 0;
        for (int64_t q = group_off[k]; q < group_off[k + 1]; ++q) np_ += in.npig[ae * in.n_cells + group_cells[q]];
        if (np_ == 0) continue;
        const double npig = static_cast<double>(np_);
        const int64_t* o = sorted.data() + sorted_off[k];
        const int64_t n_all = sorted_off[k + 1] - sorted_off[k];
        for (int64_t mi = 0; mi < in.n_max; ++mi) {
          check_interrupt();
          const int64_t max_det = in.max_dets[mi];
          idx.clear();
          for (int64_t i = 0; i < n_all; ++i)
            if (rank[o[i]] < max_det) idx.push_back(o[i]);
          const int64_t nd = static_cast<int64_t>(idx.size());
          tps.resize(static_cast<size_t>(nd));
          pr.resize(static_cast<size_t>(nd));
          for (int64_t t = 0; t < T; ++t) {
            if (nd > (int64_t{1} << 16)) check_interrupt();
            const uint8_t* status = in.status + (ae * T + t) * ND;
            int64_t tp = 0, fp = 0;
            for (int64_t i = 0; i < nd; ++i) {
              const uint8_t s = status[idx[i]];
              tp += s == 1;
              fp += s == 0;
              tps[i] = tp;
              const double tpd = static_cast<double>(tp);
              pr[i] = tpd / (static_cast<double>(fp) + tpd + eps);
            }
            // rc[i] = tp_i / npig, formed where it is read (the same double as pycocotools' array).
            recall[((t * K + k) * A + a) * M + mi] = nd ? static_cast<double>(tps[nd - 1]) / npig : 0.0;
            for (int64_t i = nd - 1; i > 0; --i)
              if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
            // np.searchsorted(rc, recThrs, side="left"); the first index past the end stops the fill (pycocotools'
            // try/except), leaving zeros from there on.
            bool stopped = false;
            for (int64_t r = 0; r < R; ++r) {
              double q = 0.0, sc = 0.0;
              if (!stopped) {
                const double thr = in.rec_thr[r];
                int64_t lo = 0, hi = nd;
                while (lo < hi) {
                  const int64_t mid = lo + (hi - lo) / 2;
                  if (static_cast<double>(tps[mid]) / npig < thr) lo = mid + 1; else hi = mid;
                }
                if (lo >= nd) {
                  stopped = true;
                } else {
                  q = pr[lo];
                  sc = in.score[idx[lo]];
                }
              }
              const int64_t out = (((t * R + r) * K + k) * A + a) * M + mi;
              precision[out] = q;
              if (scores) scores[out] = sc;
            }
          }
        }
      }
    }
  });
}

}  // namespace vlk
