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
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/parallel.h"

// The per-score loops are compiled once portable and once for AVX2+FMA (csrc/core/cpu_features.h), chosen per call.
// FMA only where it cannot change a bit: a product of two fp32 values is exact in float64, so fma(x, y, acc) rounds
// exactly as x * y + acc does; fp64 inputs never take it.

namespace vlk {
namespace {

constexpr int kLanes = 8;
// Columns per block of the column-query pass: its thresholds, counts and bounds stay in L1 while every row passes.
constexpr int64_t kColBlock = 64;
// Relative slack of a threshold moved by a bound, t +/- b: covers the rounding of that sum and of the slack itself
// (each at most 2^-53 |t| + 2^-53 b), so a screened score beyond it is beyond the real t +/- b.
constexpr double kSlack = 0x1p-50;
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename TA, typename TB>
inline double exact_dot(const TA* a, const TB* b, int64_t dim) {
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(a[d + l]) * static_cast<double>(b[d + l]);
  for (int l = 0; d + l < dim; ++l) acc[l] += static_cast<double>(a[d + l]) * static_cast<double>(b[d + l]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <bool kFma>
VLK_INLINE double madd(double x, double y, double acc) {
  if constexpr (kFma) return __builtin_fma(x, y, acc);
  return x * y + acc;
}

// Exact scores of row x (already widened to float64: xd) against fp32 columns js[0..n), four columns at a time so
// that eight independent accumulator chains hide the addition latency; bit for bit exact_dot.
template <bool kFma>
VLK_INLINE void exact_dots_f32(const double* xd, const float* col_data, int64_t stride_c, int64_t dim,
                               const int64_t* js, int64_t n, double* out) {
  int64_t e = 0;
  for (; e + 4 <= n; e += 4) {
    const float* y0 = col_data + js[e] * stride_c;
    const float* y1 = col_data + js[e + 1] * stride_c;
    const float* y2 = col_data + js[e + 2] * stride_c;
    const float* y3 = col_data + js[e + 3] * stride_c;
    double a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= dim; d += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const double x = xd[d + l];
        a0[l] = madd<kFma>(x, static_cast<double>(y0[d + l]), a0[l]);
        a1[l] = madd<kFma>(x, static_cast<double>(y1[d + l]), a1[l]);
        a2[l] = madd<kFma>(x, static_cast<double>(y2[d + l]), a2[l]);
        a3[l] = madd<kFma>(x, static_cast<double>(y3[d + l]), a3[l]);
      }
    for (int l = 0; d + l < dim; ++l) {
      const double x = xd[d + l];
      a0[l] = madd<kFma>(x, static_cast<double>(y0[d + l]), a0[l]);
      a1[l] = madd<kFma>(x, static_cast<double>(y1[d + l]), a1[l]);
      a2[l] = madd<kFma>(x, static_cast<double>(y2[d + l]), a2[l]);
      a3[l] = madd<kFma>(x, static_cast<double>(y3[d + l]), a3[l]);
    }
    double* a[4] = {a0, a1, a2, a3};
    for (int p = 0; p < 4; ++p)
      out[e + p] = ((a[p][0] + a[p][1]) + (a[p][2] + a[p][3])) + ((a[p][4] + a[p][5]) + (a[p][6] + a[p][7]));
  }
  for (; e < n; ++e) out[e] = exact_dot(xd, col_data + js[e] * stride_c, dim);
}

// Exact scores of row x against columns js (any input dtype; the fast path for fp32).
template <typename T, bool kFma>
VLK_INLINE void exact_dots(const T* x, const T* col_data, int64_t stride_c, int64_t dim, const int64_t* js,
                           int64_t n, double* xd, double* out) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t d = 0; d < dim; ++d) xd[d] = static_cast<double>(x[d]);
    exact_dots_f32<kFma>(xd, col_data, stride_c, dim, js, n, out);
  } else {
    for (int64_t e = 0; e < n; ++e) out[e] = exact_dot(x, col_data + js[e] * stride_c, dim);
  }
}

// The smallest S >= v and the largest S <= v (S = float or double; v not NaN).
template <typename S>
inline S round_up(double v) {
  if constexpr (std::is_same_v<S, double>) {
    return v;
  } else {
    if (v > static_cast<double>(std::numeric_limits<float>::max())) return std::numeric_limits<float>::infinity();
    if (v < -static_cast<double>(std::numeric_limits<float>::max())) return -std::numeric_limits<float>::max();
    float f = static_cast<float>(v);
    return static_cast<double>(f) < v ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
  }
}
template <typename S>
inline S round_down(double v) {
  return -round_up<S>(-v);
}
// Screened scores above hi(t, b) are certainly above t + b; below lo(t, b) certainly below t - b. Infinite t
// (padding, an empty floor) stays infinite.
template <typename S>
inline S upper(double t, double b) {
  return std::isinf(t) ? static_cast<S>(t) : round_up<S>(t + b + (std::fabs(t) + b) * kSlack);
}
template <typename S>
inline S lower(double t, double b) {
  return std::isinf(t) ? static_cast<S>(t) : round_down<S>(t - b - (std::fabs(t) + b) * kSlack);
}

// Largest value of each bound plane over n rows or columns (every term is >= 0).
struct Maxima {
  double m[4] = {0, 0, 0, 0};
  Maxima(const BoundTerms& bt, int64_t lo, int64_t hi) {
    for (int k = 0; k < 4; ++k)
      for (int64_t j = lo; j < hi; ++j) m[k] = std::max(m[k], bt.plane(k)[j]);
  }
};

template <typename S>
VLK_INLINE double abs_max(const S* s, int64_t n) {
  S m = 0;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, std::fabs(s[j]));  // NaN (exclusions) compare false: skipped
  return static_cast<double>(m);
}

// The bound of pair (i, j) (exact.h), the same arithmetic in every pass; the coarse bound of a row (column) is this
// with the other side's maxima, hence at least every pair's bound (rounding is monotone).
inline double pair_bound(const BoundTerms& rt, int64_t i, const BoundTerms& ct, int64_t j, double rel, double v) {
  return rt.plane(0)[i] * ct.plane(0)[j] + rt.plane(1)[i] * ct.plane(1)[j] + rt.plane(2)[i] * ct.plane(2)[j] +
         (rt.plane(3)[i] + ct.plane(3)[j]) + rel * std::fabs(v);
}
inline double row_coarse(const BoundTerms& rt, int64_t i, const Maxima& c, double rel, double vmax) {
  return rt.plane(0)[i] * c.m[0] + rt.plane(1)[i] * c.m[1] + rt.plane(2)[i] * c.m[2] + (rt.plane(3)[i] + c.m[3]) +
         rel * vmax;
}
inline double col_coarse(const Maxima& r, const BoundTerms& ct, int64_t j, double rel, double vmax) {
  return r.m[0] * ct.plane(0)[j] + r.m[1] * ct.plane(1)[j] + r.m[2] * ct.plane(2)[j] + (r.m[3] + ct.plane(3)[j]) +
         rel * vmax;
}

// #{j : s[j] > hi} and #{j : s[j] >= lo} (lo <= hi: the second includes the first).
template <typename S>
VLK_INLINE void count_band(const S* s, int64_t n, S hi, S lo, int64_t* above, int64_t* at_least_lo) {
  int64_t a = 0, b = 0;
  for (int64_t j0 = 0; j0 < n; j0 += 1 << 16) {
    const int64_t j1 = std::min<int64_t>(n, j0 + (1 << 16));
    int32_t a32 = 0, b32 = 0;
    for (int64_t j = j0; j < j1; ++j) {
      a32 += s[j] > hi;
      b32 += s[j] >= lo;
    }
    a += a32;
    b += b32;
  }
  *above = a;
  *at_least_lo = b;
}

// cnt[j] += s[j] > hi[j]; true when some s[j] lies in [lo[j], hi[j]] (undecided by the coarse bound).
template <typename S>
VLK_INLINE bool count_slot(const S* s, int64_t n, const S* hi, const S* lo, int32_t* cnt) {
  int32_t band = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int32_t a = s[j] > hi[j];
    cnt[j] += a;
    band |= static_cast<int32_t>(s[j] >= lo[j]) & (a ^ 1);
  }
  return band != 0;
}

// Ranks above a positive (index p, exact score t): a higher exact score, or an equal one at a lower index.
inline bool ranks_above(double x, int64_t index, double t, int64_t p) { return x > t || (x == t && index < p); }

template <typename S, typename T>
struct TileArgs {
  const S* s;
  int64_t rows, cols, stride_s;
  const T *row_data, *col_data;
  int64_t stride_r, stride_c, dim;
  BoundTerms rt, ct;
  double rel;
};

// One candidate of a screened tile against an exact threshold t, decided with its own bound: +1 certainly above, 0
// certainly not, -1 undecided (re-check).
inline int decide(double v, double b, double t) {
  if (v - b > t) return 1;
  return v + b >= t ? -1 : 0;
}

// certified_tile: each threshold first meets a coarse bound (one per row or column, from the other side's maxima)
// in the tile's own dtype, so nearly every candidate is decided by one vectorised comparison; the few within the
// coarse band get their own bound, and the few within that their exact score.
template <typename S, typename T, bool kFma>
VLK_INLINE int64_t certified_tile_impl(const TileArgs<S, T>& a, const int64_t* row_ptr, const int64_t* row_pos,
                                       const double* row_thr, int64_t* row_cnt, int64_t col0, int64_t slots,
                                       const int64_t* col_pos, const double* col_thr, int64_t* col_cnt,
                                       int64_t row0) {
  int64_t rechecked = 0;
  if (a.rows == 0 || a.cols == 0) return 0;
  if (row_ptr != nullptr) {
    const Maxima cm(a.ct, 0, a.cols);
    for (int64_t i = 0; i < a.rows; ++i) {
      if ((i & 15) == 0) check_interrupt();
      if (row_ptr[i] == row_ptr[i + 1]) continue;
      const S* srow = a.s + i * a.stride_s;
      const T* x = a.row_data + i * a.stride_r;
      const double bmax = row_coarse(a.rt, i, cm, a.rel, a.rel > 0 ? abs_max(srow, a.cols) : 0.0);
      for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; ++e) {
        const double t = row_thr[e];
        const int64_t p = row_pos[e];
        const S hi = upper<S>(t, bmax), lo = lower<S>(t, bmax);
        int64_t above = 0, band = 0;
        count_band(srow, a.cols, hi, lo, &above, &band);
        band -= above;
        for (int64_t j = 0; band > 0 && j < a.cols; ++j) {
          const S v = srow[j];
          if (!(v >= lo && !(v > hi))) continue;
          --band;
          const int d = decide(static_cast<double>(v), pair_bound(a.rt, i, a.ct, j, a.rel, v), t);
          if (d >= 0) {
            above += d;
          } else if (col0 + j != p) {  // the positive itself never ranks above itself
            ++rechecked;
            above += ranks_above(exact_dot(x, a.col_data + j * a.stride_c, a.dim), col0 + j, t, p);
          }
        }
        row_cnt[e] += above;
      }
    }
  }
  if (slots <= 0) return rechecked;
  // Column queries: one block of columns at a time, every row streamed past the slots' coarse thresholds.
  const Maxima rm(a.rt, 0, a.rows);
  std::vector<S> hi(static_cast<size_t>(slots * kColBlock)), lo(hi.size());
  std::vector<int32_t> cnt(hi.size());
  std::vector<double> vmax(kColBlock);
  for (int64_t j0 = 0; j0 < a.cols; j0 += kColBlock) {
    const int64_t w = std::min(kColBlock, a.cols - j0);
    std::fill(vmax.begin(), vmax.end(), 0.0);
    if (a.rel > 0)
      for (int64_t i = 0; i < a.rows; ++i)
        for (int64_t j = 0; j < w; ++j)
          vmax[j] = std::max(vmax[j], static_cast<double>(std::fabs(a.s[i * a.stride_s + j0 + j])));
    for (int64_t j = 0; j < w; ++j) {
      const double b = col_coarse(rm, a.ct, j0 + j, a.rel, vmax[j]);
      for (int64_t k = 0; k < slots; ++k) {
        const double t = col_thr[k * a.cols + j0 + j];
        hi[k * kColBlock + j] = upper<S>(t, b);
        lo[k * kColBlock + j] = lower<S>(t, b);
      }
    }
    std::fill(cnt.begin(), cnt.end(), 0);
    for (int64_t i = 0; i < a.rows; ++i) {
      if ((i & 255) == 0) check_interrupt();
      const S* srow = a.s + i * a.stride_s + j0;
      for (int64_t k = 0; k < slots; ++k) {
        const S* hk = hi.data() + k * kColBlock;
        const S* lk = lo.data() + k * kColBlock;
        if (!count_slot(srow, w, hk, lk, cnt.data() + k * kColBlock)) continue;
        const int64_t gi = row0 + i;
        for (int64_t j = 0; j < w; ++j) {
          const S v = srow[j];
          if (!(v >= lk[j] && !(v > hk[j]))) continue;
          const int64_t p = col_pos[k * a.cols + j0 + j];
          if (p == gi || p < 0) continue;  // the positive itself; padding
          const double t = col_thr[k * a.cols + j0 + j];
          int64_t* ck = col_cnt + k * a.cols + j0 + j;
          const int d = decide(static_cast<double>(v), pair_bound(a.rt, i, a.ct, j0 + j, a.rel, v), t);
          if (d >= 0) {
            *ck += d;
          } else {
            ++rechecked;
            *ck += ranks_above(exact_dot(a.row_data + i * a.stride_r, a.col_data + (j0 + j) * a.stride_c, a.dim),
                               gi, t, p);
          }
        }
      }
    }
    for (int64_t k = 0; k < slots; ++k)
      for (int64_t j = 0; j < w; ++j) col_cnt[k * a.cols + j0 + j] += cnt[k * kColBlock + j];
  }
  return rechecked;
}

// certified_topk_update, one row at a time: the tile's screened scores pass a threshold that rises with the k-th
// best screened score seen (minus twice the row's coarse bound) and with the floor, so only a buffer of plausible
// candidates is kept; those get their own bounds, the floor rises to the k-th best lower bound, and the ones whose
// upper bound reaches it get their exact score (four at a time, the row widened once).
template <typename S, typename T, bool kFma>
VLK_INLINE int64_t certified_topk_impl(const TileArgs<S, T>& a, int64_t c0, int64_t k, double* vals, int64_t* idx,
                                       double* floor) {
  if (k <= 0 || a.rows == 0) return 0;
  struct Cand {
    double v;
    int64_t i;
  };
  struct Screened {
    S v;
    int64_t j;
  };
  // Better = higher exact score, then lower gallery index.
  auto better = [](const Cand& x, const Cand& y) { return x.v != y.v ? x.v > y.v : x.i < y.i; };
  auto higher = [](const Screened& x, const Screened& y) { return x.v > y.v; };
  const Maxima cm(a.ct, 0, a.cols);
  std::vector<Screened> buf;
  std::vector<double> low, ex, xd(static_cast<size_t>(a.dim));
  std::vector<int64_t> js;
  std::vector<Cand> cand;
  int64_t rechecked = 0;
  const size_t k_sz = static_cast<size_t>(k);
  for (int64_t i = 0; i < a.rows; ++i) {
    if ((i & 15) == 0) check_interrupt();
    const S* srow = a.s + i * a.stride_s;
    double* rv = vals + i * k;
    int64_t* ri = idx + i * k;
    double fl = floor[i];
    const double bmax = row_coarse(a.rt, i, cm, a.rel, a.rel > 0 ? abs_max(srow, a.cols) : 0.0);
    // A screened score below thr has an upper bound below the floor (or below k candidates' lower bounds).
    S thr = lower<S>(lower<double>(fl, bmax), 0.0);
    size_t cap = std::max<size_t>(2 * k_sz, 256);
    buf.clear();
    for (int64_t j = 0; j < a.cols; ++j) {
      const S v = srow[j];
      if (!(v >= thr)) continue;  // below the threshold, or excluded (NaN)
      buf.push_back({v, j});
      if (buf.size() >= cap) {
        std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), higher);
        // k candidates score at least kth - bmax, so one whose screened score is below kth - 2 bmax cannot enter.
        const double kth_low = lower<double>(static_cast<double>(buf[k_sz - 1].v), bmax);
        thr = std::max(thr, lower<S>(kth_low, bmax));
        buf.erase(std::remove_if(buf.begin(), buf.end(), [&](const Screened& c) { return !(c.v >= thr); }),
                  buf.end());
        if (2 * buf.size() >= cap) cap *= 2;  // many near-ties: fewer, larger selections
      }
    }
    // The floor rises to the k-th largest of the kept exact scores and the candidates' own lower bounds: k distinct
    // candidates score at least that much, so anything whose upper bound is below it cannot enter the top k.
    low.clear();
    for (int64_t t = 0; t < k; ++t)
      if (ri[t] >= 0) low.push_back(rv[t]);
    for (const Screened& c : buf) {
      const double v = static_cast<double>(c.v), lb = v - pair_bound(a.rt, i, a.ct, c.j, a.rel, v);
      if (lb > fl) low.push_back(lb);
    }
    if (low.size() >= k_sz) {
      std::nth_element(low.begin(), low.begin() + (k - 1), low.end(), std::greater<double>());
      fl = std::max(fl, low[k_sz - 1]);
    }
    js.clear();
    for (const Screened& c : buf) {
      const double v = static_cast<double>(c.v);
      if (v + pair_bound(a.rt, i, a.ct, c.j, a.rel, v) >= fl) js.push_back(c.j);
    }
    if (js.empty()) {
      floor[i] = fl;
      continue;
    }
    rechecked += static_cast<int64_t>(js.size());
    ex.resize(js.size());
    exact_dots<T, kFma>(a.row_data + i * a.stride_r, a.col_data, a.stride_c, a.dim, js.data(),
                        static_cast<int64_t>(js.size()), xd.data(), ex.data());
    cand.clear();
    for (int64_t t = 0; t < k; ++t)
      if (ri[t] >= 0) cand.push_back({rv[t], ri[t]});
    for (size_t e = 0; e < js.size(); ++e) cand.push_back({ex[e], c0 + js[e]});
    const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(cand.size()));
    std::nth_element(cand.begin(), cand.begin() + (m - 1), cand.end(), better);
    double worst = kInf;
    for (int64_t t = 0; t < k; ++t) {
      rv[t] = t < m ? cand[t].v : -kInf;
      ri[t] = t < m ? cand[t].i : -1;
      if (t < m) worst = std::min(worst, cand[t].v);
    }
    floor[i] = m == k ? std::max(fl, worst) : fl;
  }
  return rechecked;
}

template <typename S, typename T>
int64_t certified_tile_base(const TileArgs<S, T>& a, const int64_t* rp, const int64_t* rpos, const double* rthr,
                            int64_t* rcnt, int64_t col0, int64_t slots, const int64_t* cpos, const double* cthr,
                            int64_t* ccnt, int64_t row0) {
  return certified_tile_impl<S, T, false>(a, rp, rpos, rthr, rcnt, col0, slots, cpos, cthr, ccnt, row0);
}
template <typename S, typename T>
int64_t certified_topk_base(const TileArgs<S, T>& a, int64_t c0, int64_t k, double* vals, int64_t* idx,
                            double* floor) {
  return certified_topk_impl<S, T, false>(a, c0, k, vals, idx, floor);
}
#if VLK_X86_MULTIVERSION
template <typename S, typename T>
VLK_TARGET("avx2,fma")
int64_t certified_tile_avx2(const TileArgs<S, T>& a, const int64_t* rp, const int64_t* rpos, const double* rthr,
                            int64_t* rcnt, int64_t col0, int64_t slots, const int64_t* cpos, const double* cthr,
                            int64_t* ccnt, int64_t row0) {
  return certified_tile_impl<S, T, true>(a, rp, rpos, rthr, rcnt, col0, slots, cpos, cthr, ccnt, row0);
}
template <typename S, typename T>
VLK_TARGET("avx2,fma")
int64_t certified_topk_avx2(const TileArgs<S, T>& a, int64_t c0, int64_t k, double* vals, int64_t* idx,
                            double* floor) {
  return certified_topk_impl<S, T, true>(a, c0, k, vals, idx, floor);
}
inline bool use_avx2_fma() { return cpu_has_avx2() && __builtin_cpu_supports("fma"); }
#endif

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
  const TileArgs<S, T> a{s, rows, cols, stride_s, row_data, col_data, stride_r, stride_c, dim, rt, ct, rel};
#if VLK_X86_MULTIVERSION
  if (use_avx2_fma())
    return certified_tile_avx2(a, row_ptr, row_pos, row_thr, row_cnt, col0, slots, col_pos, col_thr, col_cnt, row0);
#endif
  return certified_tile_base(a, row_ptr, row_pos, row_thr, row_cnt, col0, slots, col_pos, col_thr, col_cnt, row0);
}

template <typename S, typename T>
int64_t certified_topk_update(const S* s, int64_t rows, int64_t cols, int64_t stride_s, const T* row_data,
                              int64_t stride_r, const T* col_data, int64_t stride_c, int64_t dim, BoundTerms rt,
                              BoundTerms ct, double rel, int64_t c0, int64_t k, double* vals, int64_t* idx,
                              double* floor) {
  const TileArgs<S, T> a{s, rows, cols, stride_s, row_data, col_data, stride_r, stride_c, dim, rt, ct, rel};
#if VLK_X86_MULTIVERSION
  if (use_avx2_fma()) return certified_topk_avx2(a, c0, k, vals, idx, floor);
#endif
  return certified_topk_base(a, c0, k, vals, idx, floor);
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
