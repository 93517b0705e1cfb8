#include "retrieval/rank_count.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/parallel.h"
#include "retrieval/order_key.h"
#include "retrieval/sampled_bound.h"

namespace vlk {
namespace {

template <typename T>
struct Cand {
  T v;
  int64_t i;
};

// Better = higher score, then lower gallery index; empty slots (index -1) lose to every real candidate.
template <typename T>
inline bool better(const Cand<T>& a, const Cand<T>& b) {
  if (a.v != b.v) return a.v > b.v;
  const uint64_t ai = static_cast<uint64_t>(a.i), bi = static_cast<uint64_t>(b.i);  // -1 maps to the largest
  return ai < bi;
}

}  // namespace

// Rows at least this long sort by radix: a comparison sort of random scores mispredicts about every other branch.
constexpr int64_t kRadixMin = 256;

// The top 32 bits of the order key of a score, complemented so that it ascends as the score descends (-0 keyed as
// +0, since the two are equal scores). Distinct keys order their scores; equal keys (equal scores, or float64 scores
// alike in their top 32 bits) are left to the full comparison.
template <typename T>
VLK_INLINE uint32_t sort_key(T v) {
  using U = std::make_unsigned_t<OrderKey<T>>;
  constexpr U kSign = U{1} << (8 * sizeof(U) - 1);
  const U ascending = static_cast<U>(order_key<T>(v + T(0))) ^ kSign;
  return ~static_cast<uint32_t>(ascending >> (8 * (sizeof(U) - 4)));
}

// The order of n candidates (better first) as positions into c: an LSD radix sort of (key << 32 | position), one key
// byte a pass (a pass whose byte is the same in every key is skipped), then each run of equal keys by the full
// comparison. Items of 8 bytes: a pass moves a third of what moving the candidates would.
template <typename T>
void radix_order(const Cand<T>* c, int64_t n, std::vector<uint64_t>& a, std::vector<uint64_t>& b) {
  a.resize(static_cast<size_t>(n));
  b.resize(static_cast<size_t>(n));
  int64_t count[4][256] = {};
  for (int64_t t = 0; t < n; ++t) {
    const uint32_t key = sort_key(c[t].v);
    a[t] = (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(t);
    for (int p = 0; p < 4; ++p) ++count[p][(key >> (8 * p)) & 0xff];
  }
  for (int p = 0; p < 4; ++p) {
    const int shift = 32 + 8 * p;
    if (count[p][(a[0] >> shift) & 0xff] == n) continue;
    int64_t at = 0;
    for (int d = 0; d < 256; ++d) std::swap(at, count[p][d]), at += count[p][d];
    for (int64_t t = 0; t < n; ++t) b[count[p][(a[t] >> shift) & 0xff]++] = a[t];
    a.swap(b);
  }
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && (a[e] >> 32) == (a[t] >> 32)) ++e;
    if (e - t > 1)
      std::sort(a.begin() + t, a.begin() + e,
                [c](uint64_t x, uint64_t y) { return better(c[x & 0xffffffffu], c[y & 0xffffffffu]); });
    t = e;
  }
}

// Sorts c[0..n) in place, better first: by radix where n is large (through the positions' order and a copy), else
// by comparison.
template <typename T>
void sort_candidates(Cand<T>* c, int64_t n, std::vector<uint64_t>& a, std::vector<uint64_t>& b,
                     std::vector<Cand<T>>& tmp) {
  if (n >= kRadixMin && n <= std::numeric_limits<uint32_t>::max()) {
    radix_order(c, n, a, b);
    tmp.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) tmp[t] = c[a[t] & 0xffffffffu];
    std::copy(tmp.begin(), tmp.end(), c);
    return;
  }
  // A lambda, so that the comparison inlines (a function pointer is called per comparison).
  std::sort(c, c + n, [](const Cand<T>& x, const Cand<T>& y) { return better(x, y); });
}

// Cuts c[0..n) (n > k) to a subset that holds its best k: the candidates at or above sampled_kth_bound (usually
// between k and ~1.15 k of them), so the sort after the cut handles those rather than all n. Returns the number kept
// (n when the sample gives no bound).
template <typename T>
int64_t cut_to_best(Cand<T>* c, int64_t n, int64_t k, std::vector<T>& sample) {
  T thr;
  if (!sampled_kth_bound<T>(n, k, [c](int64_t t) { return c[t].v; }, sample, thr)) return n;
  int64_t at = 0;
  for (int64_t t = 0; t < n; ++t) {
    c[at] = c[t];  // kept in place: at <= t
    at += c[t].v >= thr;
  }
  return at;
}

template <typename T>
void launch_topk_update(const T* s, int64_t rows, int64_t cols, int64_t stride_row, int64_t c0,
                        const int64_t* cand_idx, int64_t k, T* vals, int64_t* idx) {
  if (k <= 0) return;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(cols + k, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    const Cand<T> none{-std::numeric_limits<T>::infinity(), -1};
    std::vector<Cand<T>> cand(static_cast<size_t>(cols)), tmp, merged(static_cast<size_t>(k));
    std::vector<T> sample;
    std::vector<uint64_t> a, b;
    for (int64_t i = begin; i < end; ++i) {
      T* rv = vals + i * k;
      int64_t* ri = idx + i * k;
      // The running set is sorted with its empty slots last; when full, a candidate must beat its last entry.
      int64_t held = k;
      while (held > 0 && ri[held - 1] < 0) --held;
      const Cand<T> bar = held == k ? Cand<T>{rv[k - 1], ri[k - 1]} : none;
      // Every candidate is written and the ones that beat the bar are counted (NaN never does): a branch would
      // mispredict for about every other score where the bar cuts through the tile. This is better() spelled out.
      const T* row = s + i * stride_row;
      const uint64_t bar_i = static_cast<uint64_t>(bar.i);
      int64_t n = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const Cand<T> c{row[j], cand_idx ? cand_idx[i * cols + j] : c0 + j};
        cand[n] = c;
        n += (c.v > bar.v) | ((c.v == bar.v) & (static_cast<uint64_t>(c.i) < bar_i));
      }
      if (n == 0) continue;
      // Cut only where it pays: it costs two passes over the candidates and saves sorting all but ~1.15 k (measured:
      // a loss at 1.2 k, a gain at 2 k).
      if (2 * n > 3 * k) n = cut_to_best(cand.data(), n, k, sample);
      // The candidates in order, then merged with the running set: the best k of both, sorted.
      sort_candidates(cand.data(), n, a, b, tmp);
      int64_t r = 0, e = 0, m = 0;
      for (; m < k && (r < held || e < n); ++m) {
        const bool take_run = e == n || (r < held && better(Cand<T>{rv[r], ri[r]}, cand[e]));
        merged[m] = take_run ? Cand<T>{rv[r], ri[r]} : cand[e];
        r += take_run;
        e += !take_run;
      }
      for (int64_t t = 0; t < k; ++t) {
        rv[t] = t < m ? merged[t].v : none.v;
        ri[t] = t < m ? merged[t].i : none.i;
      }
    }
  });
}

template <typename T>
void launch_topk_sort(T* vals, int64_t* idx, int64_t rows, int64_t k) {
  if (k <= 1) return;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / k);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<Cand<T>> buf(static_cast<size_t>(k)), tmp;
    std::vector<uint64_t> a, b;
    for (int64_t i = begin; i < end; ++i) {
      T* rv = vals + i * k;
      int64_t* ri = idx + i * k;
      int64_t t = 1;  // a row already in order (launch_topk_update leaves its rows so) is left as it is
      while (t < k && !better(Cand<T>{rv[t], ri[t]}, Cand<T>{rv[t - 1], ri[t - 1]})) ++t;
      if (t == k) continue;
      for (t = 0; t < k; ++t) buf[t] = {rv[t], ri[t]};
      sort_candidates(buf.data(), k, a, b, tmp);
      for (t = 0; t < k; ++t) {
        rv[t] = buf[t].v;
        ri[t] = buf[t].i;
      }
    }
  });
}

#define VLK_INSTANTIATE(T)                                                                                       \
  template void launch_topk_update<T>(const T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, int64_t, T*, \
                                      int64_t*);                                                                 \
  template void launch_topk_sort<T>(T*, int64_t*, int64_t, int64_t);
VLK_INSTANTIATE(float)
VLK_INSTANTIATE(double)
#undef VLK_INSTANTIATE

}  // namespace vlk
