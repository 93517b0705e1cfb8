// Union or intersection of COCO RLEs of one size, with pycocotools' rleMerge output (2.0.11) run for run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlk {

// n >= 1 RLEs in CSR form (counts[offsets[k] .. offsets[k + 1]), runs alternating background / foreground) that
// must each sum to the same total -> out: their union (intersect = false) or intersection, folded left to right
// as rleMerge does. Returns "" or a message (bad offsets, a negative run, totals that differ).
std::string rle_merge_runs(const int64_t* counts, int64_t ncounts, const int64_t* offsets, int64_t n, bool intersect,
                           std::vector<int64_t>& out);

}  // namespace vlk
