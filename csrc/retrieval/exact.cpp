#include "retrieval/exact.h"

// The exact score's fp64 products must round before they are added (no fused multiply-add): this file is compiled
// without floating-point contraction whatever the build's flags. (fp32 products are exact in fp64, so for them a
// contraction could not change a bit anyway.)
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/parallel.h"

// The per-score loops in an AVX2 (and AVX-512) clone besides the portable one (no FMA in either target: see above).
#if VLK_X86_MULTIVERSION && !defined(__clang__)
#define VLK_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VLK_CLONES
#endif

namespace vlk {
namespace {

constexpr int kLanes = 8;
// Columns per block of the column-query pass: its thresholds, counts and bounds stay in L1 while every row passes.
constexpr int64_t kColBlock = 64;

template <typename TA, typename TB>
inline double exact_dot(const TA* a, const TB* b, int64_t dim) {
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(a[d + l]) * static_cast<double>(b[d + l]);
  for (int l = 0; d + l < dim; ++l) acc[l] += static_cast<double>(a[d + l]) * static_cast<double>(b[d + l]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// lo[j] = s_hat - B, hi[j] = s_hat + B for one tile row; NaN scores (excluded candidates) get -inf for both.
template <typename S>
VLK_CLONES void row_bounds(const S* srow, int64_t cols, int64_t i, const BoundTerms& rt, const BoundTerms& ct, double rel,
                double* lo, double* hi) {
  const double a0 = rt.plane(0)[i], a1 = rt.plane(1)[i], a2 = rt.plane(2)[i], ra = rt.plane(3)[i];
  const double *c0 = ct.plane(0), *c1 = ct.plane(1), *c2 = ct.plane(2), *ca = ct.plane(3);
  for (int64_t j = 0; j < cols; ++j) {
    const double v = static_cast<double>(srow[j]);
    const double b = a0 * c0[j] + a1 * c1[j] + a2 * c2[j] + (ra + ca[j]) + rel * std::fabs(v);
    lo[j] = v - b;
    hi[j] = v + b;
  }
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < cols; ++j)
    if (std::isnan(lo[j])) lo[j] = hi[j] = ninf;
}

// Certified count of one threshold over a row: lo > t counts; undecided candidates (lo <= t <= hi) are flagged.
VLK_CLONES int64_t certain_above(const double* lo, const double* hi, int64_t n, double t, int64_t* undecided) {
  int64_t above = 0, und = 0;
  for (int64_t j = 0; j < n; ++j) {
    const bool a = lo[j] > t;
    above += a;
    und += (hi[j] >= t) & !a;
  }
  *undecided = und;
  return above;
}

// cnt[j] += lo[j] > thr[j]; true when some candidate is undecided (lo <= thr <= hi).
VLK_CLONES bool count_slot(const double* lo, const double* hi, int64_t n, const double* thr, int64_t* cnt) {
  int64_t und = 0;
  for (int64_t j = 0; j < n; ++j) {
    const bool a = lo[j] > thr[j];
    cnt[j] += a;
    und |= (hi[j] >= thr[j]) & !a;
  }
  return und != 0;
}

// Ranks above a positive (index p, exact score t): a higher exact score, or an equal one at a lower index.
inline bool ranks_above(double x, int64_t index, double t, int64_t p) { return x > t || (x == t && index < p); }

}  // namespace

template <typename TQ, typename TG>
void launch_exact_pairs(const TQ* q, int64_t stride_q, const TG* g, int64_t stride_g, int64_t dim, const int64_t* qi,
                        const int64_t* gi, int64_t n, double* out) {
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(dim, 1));
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      if (((e - begin) & 1023) == 1023) check_interrupt();
      out[e] = exact_dot(q + qi[e] * stride_q, g + gi[e] * stride_g, dim);
    }
  });
}

template <typename S, typename T>
int64_t certified_tile(const S* s, int64_t rows, int64_t cols, int64_t stride_s, const T* row_data,
                       int64_t stride_r, const T* col_data, int64_t stride_c, int64_t dim, BoundTerms rt,
                       BoundTerms ct, double rel, const int64_t* row_ptr, const int64_t* row_pos,
                       const double* row_thr, int64_t* row_cnt, int64_t col0, int64_t slots, const int64_t* col_pos,
                       const double* col_thr, int64_t* col_cnt, int64_t row0) {
  std::vector<double> lo(static_cast<size_t>(cols)), hi(static_cast<size_t>(cols));
  int64_t rechecked = 0;
  for (int64_t i = 0; i < rows && row_ptr != nullptr; ++i) {
    if ((i & 15) == 0) check_interrupt();
    if (row_ptr[i] == row_ptr[i + 1]) continue;
    row_bounds(s + i * stride_s, cols, i, rt, ct, rel, lo.data(), hi.data());
    const T* x = row_data + i * stride_r;
    {
      for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; ++e) {
        const double t = row_thr[e];
        const int64_t p = row_pos[e];
        int64_t und = 0;
        int64_t above = certain_above(lo.data(), hi.data(), cols, t, &und);
        for (int64_t j = 0; und > 0 && j < cols; ++j) {
          if (!(hi[j] >= t && !(lo[j] > t))) continue;
          --und;
          if (col0 + j == p) continue;  // the positive itself never ranks above itself
          ++rechecked;
          above += ranks_above(exact_dot(x, col_data + j * stride_c, dim), col0 + j, t, p);
        }
        row_cnt[e] += above;
      }
    }
  }
  // Column queries: one block of columns at a time, every row streamed past its slot thresholds.
  for (int64_t j0 = 0; j0 < cols && slots > 0; j0 += kColBlock) {
    const int64_t w = std::min(kColBlock, cols - j0);
    for (int64_t i = 0; i < rows; ++i) {
      if ((i & 255) == 0) check_interrupt();
      const int64_t gi = row0 + i;
      const T* x = row_data + i * stride_r;
      const BoundTerms rti{rt.t + i, rt.n}, ctj{ct.t + j0, ct.n};
      row_bounds(s + i * stride_s + j0, w, 0, rti, ctj, rel, lo.data(), hi.data());
      for (int64_t k = 0; k < slots; ++k) {
        const double* tk = col_thr + k * cols + j0;
        int64_t* ck = col_cnt + k * cols + j0;
        if (!count_slot(lo.data(), hi.data(), w, tk, ck)) continue;
        for (int64_t j = 0; j < w; ++j) {
          if (!(hi[j] >= tk[j] && !(lo[j] > tk[j]))) continue;
          const int64_t p = col_pos[k * cols + j0 + j];
          if (p == gi || p < 0) continue;  // the positive itself; padding
          ++rechecked;
          ck[j] += ranks_above(exact_dot(x, col_data + (j0 + j) * stride_c, dim), gi, tk[j], p);
        }
      }
    }
  }
  return rechecked;
}

template <typename S, typename T>
int64_t certified_topk_update(const S* s, int64_t rows, int64_t cols, int64_t stride_s, const T* row_data,
                              int64_t stride_r, const T* col_data, int64_t stride_c, int64_t dim, BoundTerms rt,
                              BoundTerms ct, double rel, int64_t c0, int64_t k, double* vals, int64_t* idx,
                              double* floor) {
  if (k <= 0) return 0;
  struct Cand {
    double v;
    int64_t i;
  };
  // Better = higher exact score, then lower gallery index.
  auto better = [](const Cand& a, const Cand& b) { return a.v != b.v ? a.v > b.v : a.i < b.i; };
  std::vector<double> lo(static_cast<size_t>(cols)), hi(static_cast<size_t>(cols)), low;
  std::vector<Cand> cand;
  int64_t rechecked = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if ((i & 15) == 0) check_interrupt();
    row_bounds(s + i * stride_s, cols, i, rt, ct, rel, lo.data(), hi.data());
    double* rv = vals + i * k;
    int64_t* ri = idx + i * k;
    double fl = floor[i];
    // The floor rises to the k-th largest of the kept exact scores and this tile's lower bounds: k distinct
    // candidates score at least that much, so anything whose upper bound is below it cannot enter the top k.
    low.clear();
    for (int64_t t = 0; t < k; ++t)
      if (ri[t] >= 0) low.push_back(rv[t]);
    for (int64_t j = 0; j < cols; ++j)
      if (lo[j] > fl) low.push_back(lo[j]);
    if (static_cast<int64_t>(low.size()) >= k) {
      std::nth_element(low.begin(), low.begin() + (k - 1), low.end(), std::greater<double>());
      fl = std::max(fl, low[k - 1]);
    }
    cand.clear();
    for (int64_t t = 0; t < k; ++t)
      if (ri[t] >= 0) cand.push_back({rv[t], ri[t]});
    const size_t kept = cand.size();
    const T* x = row_data + i * stride_r;
    for (int64_t j = 0; j < cols; ++j) {
      if (!(hi[j] >= fl) || std::isinf(hi[j])) continue;  // below the floor, or excluded (NaN: -inf bounds)
      ++rechecked;
      cand.push_back({exact_dot(x, col_data + j * stride_c, dim), c0 + j});
    }
    if (cand.size() == kept) {
      floor[i] = fl;
      continue;
    }
    const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(cand.size()));
    std::nth_element(cand.begin(), cand.begin() + (m - 1), cand.end(), better);
    double worst = std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < k; ++t) {
      rv[t] = t < m ? cand[t].v : -std::numeric_limits<double>::infinity();
      ri[t] = t < m ? cand[t].i : -1;
      if (t < m) worst = std::min(worst, cand[t].v);
    }
    floor[i] = m == k ? std::max(fl, worst) : fl;
  }
  return rechecked;
}

#define VLK_PAIRS(TQ, TG)                                                                                         \
  template void launch_exact_pairs<TQ, TG>(const TQ*, int64_t, const TG*, int64_t, int64_t, const int64_t*,     \
                                           const int64_t*, int64_t, double*);
VLK_PAIRS(float, float)
VLK_PAIRS(float, double)
VLK_PAIRS(double, float)
VLK_PAIRS(double, double)
#undef VLK_PAIRS

#define VLK_TILE(S, T)                                                                                             \
  template int64_t certified_tile<S, T>(const S*, int64_t, int64_t, int64_t, const T*, int64_t, const T*, int64_t, \
                                        int64_t, BoundTerms, BoundTerms, double, const int64_t*, const int64_t*,   \
                                        const double*, int64_t*, int64_t, int64_t, const int64_t*, const double*,  \
                                        int64_t*, int64_t);                                                         \
  template int64_t certified_topk_update<S, T>(const S*, int64_t, int64_t, int64_t, const T*, int64_t, const T*,   \
                                               int64_t, int64_t, BoundTerms, BoundTerms, double, int64_t, int64_t, \
                                               double*, int64_t*, double*);
VLK_TILE(float, float)
VLK_TILE(double, double)
#undef VLK_TILE

}  // namespace vlk
