// Polygons and xywh boxes rasterized to COCO RLE runs exactly as pycocotools' rleFrPoly / rleFrBbox (2.0.11):
// vertices scaled by 5 and rounded with (int)(5 * v + .5), each edge walked in unit steps along its longer axis
// with its own rounding, and a column's boundary recorded where the walk crosses that column's centre line
// (upsampled x = 5c + 2 -> 5c + 3). Boundaries that fall on one pixel cancel in pairs. The walk is not replayed
// step by step: for each column an edge spans, the crossing step is located directly (the rounded coordinate is
// monotone along an edge), so the cost is O(vertices + columns crossed + boundaries * log), not O(perimeter * 5).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlk {

// Coordinates beyond this (pixels) are refused: pycocotools' int32 arithmetic on 5x-upsampled coordinates and
// their differences overflows past ~2.1e8.
constexpr double kMaxPolyCoord = 1e8;

// A set of polygons in CSR form: polygon p has the (x, y) vertices xy[2 * off[p] .. 2 * off[p + 1]).
// runs / run_off receive the RLE runs of each polygon on an h x w image (h * w < 2^32), in CSR form.
// Returns "" or an error naming the polygon and the defect (non-finite or too large coordinate).
std::string rle_from_polygons(const double* xy, const int64_t* off, int64_t n, int64_t h, int64_t w,
                              std::vector<int64_t>& runs, std::vector<int64_t>& run_off);

// n boxes [x, y, bw, bh] (float64) -> their RLE runs as rleFrBbox: the polygon (x, y), (x, y + bh),
// (x + bw, y + bh), (x + bw, y) rasterized as above.
std::string rle_from_bboxes(const double* boxes, int64_t n, int64_t h, int64_t w, std::vector<int64_t>& runs,
                            std::vector<int64_t>& run_off);

}  // namespace vlk
