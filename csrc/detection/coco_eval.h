// COCO / LVIS detection evaluation (pycocotools COCOeval.evaluateImg + accumulate, lvis-api LVISEval), in the same
// double arithmetic and the same order, so every value is bit-identical to the Python anchors.
// Annotations arrive flattened by "cell" (one image x category, or one image when categories are not used): the
// ground truths of cell c are gt[gt_off[c] .. gt_off[c + 1]) in the anchor's list order, its detections
// dt[dt_off[c] .. dt_off[c + 1]) already sorted by descending score (stable) and cut to the largest maxDet. The
// Python layer validates every array (finite boxes with non-negative sizes, finite scores, masks of the image size).
#pragma once

#include <cstdint>

namespace vlk {

struct DetGeometry {
  // kind 0: xywh boxes (pycocotools bbIou); kind 1: RLE masks (rleIou) given as run counts in CSR with their
  // inclusive prefix sum over the whole set (rle_counts.h layout), areas and rleToBbox boxes.
  int kind;
  const double* gt_box;
  const double* dt_box;
  const int64_t* gt_csum;
  const int64_t* gt_roff;
  const int64_t* gt_rarea;
  const int64_t* dt_csum;
  const int64_t* dt_roff;
  const int64_t* dt_rarea;
};

struct DetEvalInputs {
  int64_t n_cells, n_gt, n_dt;
  const int64_t* gt_off;
  const int64_t* dt_off;
  DetGeometry geo;
  const uint8_t* gt_crowd;      // crowd: IoU is intersection / area(dt), and the gt may match several detections
  const uint8_t* gt_ignore;     // base ignore flag (COCO: iscrowd; LVIS: the "ignore" field)
  const double* gt_area;
  const double* dt_area;
  const uint8_t* gt_id_nonzero; // a match counts (dtMatches != 0) only when the gt id is nonzero
  const uint8_t* dt_id_pos;     // gtMatches > 0 blocks a gt only when the detection id is positive
  const uint8_t* dt_extra_ignore;  // LVIS: category not exhaustively annotated in the image (may be null)
  int64_t n_area;
  const double* area_rng;  // [n_area, 2]
  int64_t n_thr;
  const double* thr;       // already min(t, 1 - 1e-10)
};

// status[a, t, d]: 0 false positive, 1 true positive, 2 ignored. npig[a, c]: non-ignored ground truths.
// Full outputs (may be null; for evalImgs): dt_match[a, t, d] / gt_match[a, t, g] the matched global gt / dt index
// or -1; gt_ign[a, g] the per-range ignore flag.
void launch_det_evaluate(const DetEvalInputs& in, uint8_t* status, int64_t* npig, int64_t* dt_match, int64_t* gt_match,
                         uint8_t* gt_ign);

// pycocotools' accumulate: output slot k gathers the cells whose cell_group is k (in cell order, which is image
// order), output slot a reads evaluated area range area_src[a], slot m keeps each cell's first max_dets[m]
// detections. The output holds out_k x out_a x out_m slots (the caller's params), of which the first n_groups,
// n_area_src and n_max are filled (pycocotools' k_list / a_list / m_list).
struct DetAccumInputs {
  int64_t n_cells, n_dt;
  const int64_t* dt_off;
  const int64_t* cell_group;  // [n_cells]: output category slot, or -1 when the cell is not accumulated
  int64_t n_groups;
  const uint8_t* status;      // [n_area_eval, n_thr, n_dt] from launch_det_evaluate
  const int64_t* npig;        // [n_area_eval, n_cells]
  const double* score;        // [n_dt]
  int64_t n_area_eval;
  int64_t n_area_src;
  const int64_t* area_src;    // [n_area_src], each in [0, n_area_eval)
  int64_t n_thr, n_rec;
  const double* rec_thr;      // [n_rec]
  int64_t n_max;
  const int64_t* max_dets;    // [n_max]
  int64_t out_k, out_a, out_m;
};

// precision, scores: [T, R, out_k, out_a, out_m]; recall: [T, out_k, out_a, out_m]; pre-filled with -1 by the
// caller (scores may be null: LVIS has none).
void launch_det_accumulate(const DetAccumInputs& in, double* precision, double* recall, double* scores);

}  // namespace vlk
