#include "core/count_above.h"

#include <algorithm>

#include "core/cpu_features.h"
#include "core/parallel.h"

namespace vlk {

namespace {

// The loops, written branch-free so that each ISA's copy below vectorizes (one compare and one add per score).
template <typename T>
VLK_INLINE int64_t count_row(const T* row, int64_t m, int64_t lim, T t) {
  int64_t c = 0;
  for (int64_t j = 0; j < lim; ++j) c += row[j] >= t;
  for (int64_t j = lim; j < m; ++j) c += row[j] > t;
  return c;
}

template <typename T>
using CountRowFn = int64_t (*)(const T*, int64_t, int64_t, T);

template <typename T>
int64_t count_row_base(const T* row, int64_t m, int64_t lim, T t) {
  return count_row(row, m, lim, t);
}

#if VLK_X86_MULTIVERSION
template <typename T>
VLK_TARGET("avx2") int64_t count_row_avx2(const T* row, int64_t m, int64_t lim, T t) {
  return count_row(row, m, lim, t);
}

template <typename T>
VLK_TARGET("avx512f") int64_t count_row_avx512(const T* row, int64_t m, int64_t lim, T t) {
  return count_row(row, m, lim, t);
}
#endif

// Chosen once per call, before the threads start (CPUID is asked once per process).
template <typename T>
CountRowFn<T> pick_count_row() {
#if VLK_X86_MULTIVERSION
  if (cpu_has_avx512f()) return count_row_avx512<T>;
  if (cpu_has_avx2()) return count_row_avx2<T>;
#endif
  return count_row_base<T>;
}

}  // namespace

template <typename T>
int64_t count_row_above(const T* row, int64_t m, int64_t lim, T t) {
  return pick_count_row<T>()(row, m, lim, t);
}

template <typename T>
void launch_count_above(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                        bool inclusive) {
  // Rows are independent; a grain of ~64k scores per thread keeps thread start-up below 5% of the work.
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(m, 1));
  const int64_t lim = inclusive ? m : 0;
  const CountRowFn<T> count = pick_count_row<T>();
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // ~every 64k scores: a long call stops promptly on Ctrl-C.
      if ((i - begin) % grain == 0) check_interrupt();
      out[i] += count(scores + i * stride_row, m, lim, thr[i]);
    }
  });
}

template <typename T>
void launch_count_above_csr(const T* scores, int64_t n, int64_t m, int64_t stride_row, int64_t col0,
                            const int64_t* row_ptr, const int64_t* limit, const T* thr, int64_t* out,
                            bool inclusive) {
  const int64_t base = inclusive ? m : 0;
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(m, 1));
  const CountRowFn<T> count = pick_count_row<T>();
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if ((i - begin) % grain == 0) check_interrupt();
      const T* row = scores + i * stride_row;
      for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; ++e) {
        // col0 >= 0 (checked by the binding), so limit - col0 is only formed when positive: no overflow.
        const int64_t lim = !limit ? base : limit[e] <= col0 ? 0 : std::min<int64_t>(limit[e] - col0, m);
        out[e] += count(row, m, lim, thr[e]);
      }
    }
  });
}

#define VLK_INSTANTIATE(T)                                                                                         \
  template int64_t count_row_above<T>(const T*, int64_t, int64_t, T);                                              \
  template void launch_count_above<T>(const T*, int64_t, int64_t, int64_t, const T*, int64_t*, bool);              \
  template void launch_count_above_csr<T>(const T*, int64_t, int64_t, int64_t, int64_t, const int64_t*,            \
                                          const int64_t*, const T*, int64_t*, bool);
VLK_INSTANTIATE(float)
VLK_INSTANTIATE(double)
#undef VLK_INSTANTIATE

}  // namespace vlk
