#include "detection/det_masks.h"

#include "boxes/rle.h"
#include "boxes/rle_counts.h"
#include "core/parallel.h"

namespace vlk {

std::string det_masks_from_strings(const std::vector<std::string>& strings, const int64_t* h, const int64_t* w,
                                   std::vector<int64_t>& csum, std::vector<int64_t>& offsets,
                                   std::vector<int64_t>& area, std::vector<double>& bbox) {
  const int64_t n = static_cast<int64_t>(strings.size());
  std::vector<int64_t> hw(static_cast<size_t>(n)), base(static_cast<size_t>(n) + 1, 0);
  for (int64_t k = 0; k < n; ++k) {
    hw[k] = h[k] * w[k];
    base[k + 1] = base[k] + hw[k];
  }
  std::string error = rle_parse_strings(strings, hw.data(), csum, offsets);
  if (!error.empty()) return error;
  area.assign(static_cast<size_t>(n), 0);
  bbox.assign(static_cast<size_t>(4 * n), 0.0);
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t* c = csum.data() + offsets[k];
      const int64_t m = offsets[k + 1] - offsets[k];
      area[k] = rle::area_part(c, m, 0, 1);
      rle::bbox_one(c, m, h[k], w[k], bbox.data() + 4 * k);
      // Runs -> inclusive sums over the whole set (each mask's runs add up to its h * w).
      int64_t acc = base[k];
      for (int64_t j = 0; j < m; ++j) c[j] = acc += c[j];
    }
  });
  return {};
}

}  // namespace vlk
