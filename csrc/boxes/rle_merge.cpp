#include "boxes/rle_merge.h"

#include <algorithm>

namespace vlk {
namespace {

// One merge of runs a and b (equal totals): both are consumed in lockstep; a run closes where the combined value
// changes and at the end. This keeps rleMerge's output exactly, zero-length runs included, for every input where
// rleMerge's own loop reaches the end; it stops early when both inputs sit on zero-length runs at once (its
// remaining-length sum hits 0), where this loop goes on to the true end.
void merge_two(const int64_t* a, int64_t na, const int64_t* b, int64_t nb, bool intersect, std::vector<int64_t>& out) {
  out.clear();
  int64_t ia = std::min<int64_t>(1, na), ib = std::min<int64_t>(1, nb), ra = na > 0 ? a[0] : 0, rb = nb > 0 ? b[0] : 0, acc = 0;
  bool va = false, vb = false, v = false;
  for (;;) {
    const int64_t c = std::min(ra, rb);
    acc += c;
    ra -= c;
    rb -= c;
    if (ra == 0 && ia < na) {
      ra = a[ia++];
      va = !va;
    }
    if (rb == 0 && ib < nb) {
      rb = b[ib++];
      vb = !vb;
    }
    const bool done = ra == 0 && rb == 0 && ia == na && ib == nb;
    const bool vp = v;
    v = intersect ? (va && vb) : (va || vb);
    if (v != vp || done) {
      out.push_back(acc);
      acc = 0;
    }
    if (done) return;
  }
}

}  // namespace

std::string rle_merge_runs(const int64_t* counts, int64_t ncounts, const int64_t* offsets, int64_t n, bool intersect,
                           std::vector<int64_t>& out) {
  if (n < 1) return "rle_merge_runs needs at least one RLE";
  if (offsets[0] != 0 || offsets[n] != ncounts) return "offsets must start at 0 and end at the number of runs";
  int64_t total0 = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (offsets[k + 1] < offsets[k]) return "offsets must be non-decreasing";
    int64_t total = 0;
    for (int64_t j = offsets[k]; j < offsets[k + 1]; ++j) {
      if (counts[j] < 0 || counts[j] > 0xFFFFFFFFLL) return "run lengths must lie in [0, 2**32)";
      total += counts[j];
    }
    if (k == 0) total0 = total;
    // Equal totals are what makes the lockstep loop end.
    if (total != total0)
      return "RLE " + std::to_string(k) + " covers " + std::to_string(total) + " pixels but RLE 0 covers " +
             std::to_string(total0);
  }
  out.assign(counts, counts + offsets[1]);
  std::vector<int64_t> next;
  for (int64_t k = 1; k < n; ++k) {
    merge_two(out.data(), static_cast<int64_t>(out.size()), counts + offsets[k], offsets[k + 1] - offsets[k],
              intersect, next);
    out.swap(next);
  }
  return {};
}

}  // namespace vlk
