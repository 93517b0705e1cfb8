#include "core/count_above.h"

#include "core/parallel.h"

namespace vlk {

template <typename T>
void launch_count_above(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                        bool inclusive) {
  // Rows are independent; a grain of ~64k scores per thread keeps thread start-up below 5% of the work.
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(m, 1));
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // ~every 64k scores: a long call stops promptly on Ctrl-C.
      if ((i - begin) % grain == 0) check_interrupt();
      const T* row = scores + i * stride_row;
      const T t = thr[i];
      int64_t c = 0;
      // Branch-free accumulation so the compiler vectorizes the compare.
      if (inclusive) {
        for (int64_t j = 0; j < m; ++j) c += row[j] >= t;
      } else {
        for (int64_t j = 0; j < m; ++j) c += row[j] > t;
      }
      out[i] += c;
    }
  });
}

template void launch_count_above<float>(const float*, int64_t, int64_t, int64_t, const float*, int64_t*, bool);
template void launch_count_above<double>(const double*, int64_t, int64_t, int64_t, const double*, int64_t*, bool);

}  // namespace vlk
