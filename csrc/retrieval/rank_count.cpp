#include "retrieval/rank_count.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/parallel.h"

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

template <typename T>
void launch_topk_update(const T* s, int64_t rows, int64_t cols, int64_t stride_row, int64_t c0,
                        const int64_t* cand_idx, int64_t k, T* vals, int64_t* idx) {
  if (k <= 0) return;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(cols + k, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<Cand<T>> buf;
    buf.reserve(static_cast<size_t>(k + cols));
    for (int64_t i = begin; i < end; ++i) {
      T* rv = vals + i * k;
      int64_t* ri = idx + i * k;
      // The running set without its empty slots (index -1): the first tile of a large k then selects among its own
      // entries only. Its worst member is at position k - 1 (every write below keeps it there).
      buf.clear();
      for (int64_t t = 0; t < k; ++t)
        if (ri[t] >= 0) buf.push_back({rv[t], ri[t]});
      // The running worst only tightens: candidates are collected until the buffer holds 2k (or 64), then cut back
      // to the best k, so most of a tile is rejected by one comparison. Until k are held every candidate enters.
      const Cand<T> none{-std::numeric_limits<T>::infinity(), -1};
      Cand<T> worst = static_cast<int64_t>(buf.size()) == k ? buf.back() : none;
      const size_t cap = static_cast<size_t>(std::max<int64_t>(2 * k, 64));
      bool changed = false;
      const T* row = s + i * stride_row;
      for (int64_t j = 0; j < cols; ++j) {
        const T v = row[j];
        if (std::isnan(v)) continue;
        const Cand<T> c{v, cand_idx ? cand_idx[i * cols + j] : c0 + j};
        if (!better(c, worst)) continue;
        buf.push_back(c);
        changed = true;
        if (buf.size() >= cap) {
          std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), better<T>);
          buf.resize(static_cast<size_t>(k));
          worst = buf.back();
        }
      }
      if (!changed) continue;
      const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(buf.size()));
      std::nth_element(buf.begin(), buf.begin() + (m - 1), buf.end(), better<T>);
      for (int64_t t = 0; t < k; ++t) {
        rv[t] = t < m ? buf[t].v : none.v;
        ri[t] = t < m ? buf[t].i : none.i;
      }
    }
  });
}

template <typename T>
void launch_topk_sort(T* vals, int64_t* idx, int64_t rows, int64_t k) {
  if (k <= 1) return;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / k);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<Cand<T>> buf(static_cast<size_t>(k));
    for (int64_t i = begin; i < end; ++i) {
      T* rv = vals + i * k;
      int64_t* ri = idx + i * k;
      for (int64_t t = 0; t < k; ++t) buf[t] = {rv[t], ri[t]};
      std::sort(buf.begin(), buf.end(), better<T>);
      for (int64_t t = 0; t < k; ++t) {
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
