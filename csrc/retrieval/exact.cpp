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
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/parallel.h"
#include "retrieval/sampled_bound.h"

#if VLK_X86_MULTIVERSION
#include <immintrin.h>
#endif

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

// The definition's final sum of the eight lanes: ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)).
VLK_INLINE double lane_tree(const double* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

template <typename TA, typename TB>
VLK_INLINE double exact_dot(const TA* a, const TB* b, int64_t dim) {
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(a[d + l]) * static_cast<double>(b[d + l]);
  for (int l = 0; d + l < dim; ++l) acc[l] += static_cast<double>(a[d + l]) * static_cast<double>(b[d + l]);
  return lane_tree(acc);
}

template <bool kFma>
VLK_INLINE double madd(double x, double y, double acc) {
  if constexpr (kFma) return __builtin_fma(x, y, acc);
  return x * y + acc;
}

#if VLK_X86_MULTIVERSION
// exact_dots4 for fp32 columns with AVX2 + FMA, the same operations lane for lane. Written with intrinsics so that
// each four fp32 values widen straight from memory (vcvtps2pd ymm, m128): the compiler's form loads eight, splits
// them (vextractf128) and widens each half, and the widening is this loop's bottleneck (~95 against ~70 ns a pair
// with the columns in cache, D = 512, on a Zen 3 core).
VLK_TARGET("avx2,fma")
void exact_dots4_f32_avx2(const double* xd, const float* col_data, int64_t stride_c, int64_t dim, const int64_t* j,
                          const int64_t* next, double* out) {
  const float* y[4] = {col_data + j[0] * stride_c, col_data + j[1] * stride_c, col_data + j[2] * stride_c,
                       col_data + j[3] * stride_c};
  const float* p[4] = {col_data + next[0] * stride_c, col_data + next[1] * stride_c, col_data + next[2] * stride_c,
                       col_data + next[3] * stride_c};
  __m256d lo[4], hi[4];  // lanes 0-3 and 4-7 of each column's eight accumulators
  for (int c = 0; c < 4; ++c) lo[c] = hi[c] = _mm256_setzero_pd();
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    if (d % 16 == 0)
      for (int c = 0; c < 4; ++c) __builtin_prefetch(p[c] + d);
    const __m256d xl = _mm256_loadu_pd(xd + d), xh = _mm256_loadu_pd(xd + d + 4);
    for (int c = 0; c < 4; ++c) {
      lo[c] = _mm256_fmadd_pd(xl, _mm256_cvtps_pd(_mm_loadu_ps(y[c] + d)), lo[c]);
      hi[c] = _mm256_fmadd_pd(xh, _mm256_cvtps_pd(_mm_loadu_ps(y[c] + d + 4)), hi[c]);
    }
  }
  for (int c = 0; c < 4; ++c) {
    double a[kLanes];
    _mm256_storeu_pd(a, lo[c]);
    _mm256_storeu_pd(a + 4, hi[c]);
    for (int l = 0; d + l < dim; ++l)
      a[l] = __builtin_fma(xd[d + l], static_cast<double>(y[c][d + l]), a[l]);
    out[c] = lane_tree(a);
  }
}
#endif

// Exact scores of row x (already widened to float64: xd) against the four columns j[0..4), with columns
// next[0..4) requested from memory meanwhile; eight independent accumulator chains hide the addition latency; bit for
// bit exact_dot.
template <bool kFma, typename Y>
VLK_INLINE void exact_dots4(const double* xd, const Y* col_data, int64_t stride_c, int64_t dim, const int64_t* j,
                            const int64_t* next, double* out) {
#if VLK_X86_MULTIVERSION
  if constexpr (kFma && std::is_same_v<Y, float>) {
    return exact_dots4_f32_avx2(xd, col_data, stride_c, dim, j, next, out);
  }
#endif
  const Y* y0 = col_data + j[0] * stride_c;
  const Y* y1 = col_data + j[1] * stride_c;
  const Y* y2 = col_data + j[2] * stride_c;
  const Y* y3 = col_data + j[3] * stride_c;
  const Y* p0 = col_data + next[0] * stride_c;
  const Y* p1 = col_data + next[1] * stride_c;
  const Y* p2 = col_data + next[2] * stride_c;
  const Y* p3 = col_data + next[3] * stride_c;
  double a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    if ((d * static_cast<int64_t>(sizeof(Y))) % 64 == 0) {
      __builtin_prefetch(p0 + d);
      __builtin_prefetch(p1 + d);
      __builtin_prefetch(p2 + d);
      __builtin_prefetch(p3 + d);
    }
    for (int l = 0; l < kLanes; ++l) {
      const double x = xd[d + l];
      a0[l] = madd<kFma>(x, static_cast<double>(y0[d + l]), a0[l]);
      a1[l] = madd<kFma>(x, static_cast<double>(y1[d + l]), a1[l]);
      a2[l] = madd<kFma>(x, static_cast<double>(y2[d + l]), a2[l]);
      a3[l] = madd<kFma>(x, static_cast<double>(y3[d + l]), a3[l]);
    }
  }
  for (int l = 0; d + l < dim; ++l) {
    const double x = xd[d + l];
    a0[l] = madd<kFma>(x, static_cast<double>(y0[d + l]), a0[l]);
    a1[l] = madd<kFma>(x, static_cast<double>(y1[d + l]), a1[l]);
    a2[l] = madd<kFma>(x, static_cast<double>(y2[d + l]), a2[l]);
    a3[l] = madd<kFma>(x, static_cast<double>(y3[d + l]), a3[l]);
  }
  out[0] = lane_tree(a0);
  out[1] = lane_tree(a1);
  out[2] = lane_tree(a2);
  out[3] = lane_tree(a3);
}

// Exact scores of row x against columns js[0..n) of fp32 data, four columns at a time (the next four requested
// while these are summed: scattered columns would otherwise wait on memory); the last 1-3 columns through the same
// four-column pass, the last one repeated.
template <bool kFma>
VLK_INLINE void exact_dots_f32(const double* xd, const float* col_data, int64_t stride_c, int64_t dim,
                               const int64_t* js, int64_t n, double* out) {
  int64_t e = 0;
  for (; e + 4 <= n; e += 4) {
    const int64_t nx = std::min(e + 4, n - 1);
    const int64_t next[4] = {js[nx], js[std::min(nx + 1, n - 1)], js[std::min(nx + 2, n - 1)],
                             js[std::min(nx + 3, n - 1)]};
    exact_dots4<kFma>(xd, col_data, stride_c, dim, js + e, next, out + e);
  }
  if (e < n) {
    int64_t pad[4];
    double res[4];
    for (int p = 0; p < 4; ++p) pad[p] = js[std::min<int64_t>(e + p, n - 1)];
    exact_dots4<kFma>(xd, col_data, stride_c, dim, pad, pad, res);
    for (int p = 0; e + p < n; ++p) out[e + p] = res[p];
  }
}

// out[e] for e in [begin, end): the exact scores of pairs (q[qi[e]], g[gi[e]]).
template <typename TQ, typename TG>
VLK_INLINE void exact_pairs_impl(const TQ* q, int64_t stride_q, const TG* g, int64_t stride_g, int64_t dim,
                                 const int64_t* qi, const int64_t* gi, int64_t begin, int64_t end, double* out) {
  for (int64_t e = begin; e < end; ++e) {
    if (((e - begin) & 1023) == 1023) check_interrupt();
    out[e] = exact_dot(q + qi[e] * stride_q, g + gi[e] * stride_g, dim);
  }
}

// A dense exact tile is walked one block of kDenseCols columns at a time (48 columns of D = 512 float64: 192 KiB,
// held in L2), each block against every row of the thread's share, kDenseRows rows at a time. Rows outside and
// column blocks inside made each 32-row block stream the whole gallery from memory: at 5,000 columns (20 MiB) this
// order measured 29 against 35 ns a pair on one Zen 2 core.
constexpr int64_t kDenseRows = 32;
constexpr int64_t kDenseCols = 48;

// The pairs of row blocks [b0, b1) of a tile, R rows by C columns at a time through Kern::run(x, y, dim, r) (r[C a +
// c] = s(x[a], y[c])); a short last group repeats its last row or column, whose pair is then written twice, the same
// bits.
template <int R, int C, typename Kern>
VLK_INLINE void exact_tile_groups(const double* q, int64_t stride_q, int64_t rows, const double* g, int64_t stride_g,
                                  int64_t cols, int64_t dim, double* out, int64_t stride_out, int64_t b0, int64_t b1) {
  double r[R * C];
  for (int64_t j0 = 0; j0 < cols; j0 += kDenseCols) {
    check_interrupt();
    const int64_t j1 = std::min(cols, j0 + kDenseCols);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kDenseRows, i1 = std::min(rows, i0 + kDenseRows);
      for (int64_t i = i0; i < i1; i += R) {
        int64_t is[R];
        const double* x[R];
        for (int a = 0; a < R; ++a) x[a] = q + (is[a] = std::min(i + a, i1 - 1)) * stride_q;
        for (int64_t j = j0; j < j1; j += C) {
          int64_t js[C];
          const double* y[C];
          for (int c = 0; c < C; ++c) y[c] = g + (js[c] = std::min(j + c, j1 - 1)) * stride_g;
          Kern::run(x, y, dim, r);
          for (int a = 0; a < R; ++a)
            for (int c = 0; c < C; ++c) out[is[a] * stride_out + js[c]] = r[C * a + c];
        }
      }
    }
  }
}

// Exact scores of two rows against two columns (float64: the inputs widened exactly), four pairs of eight
// accumulator lanes, products and sums rounded apart, bit for bit exact_dot: any input without AVX2 + FMA.
// r = {s(x0, y0), s(x0, y1), s(x1, y0), s(x1, y1)}.
struct Dots2x2 {
  static VLK_INLINE void run(const double* const* x, const double* const* y, int64_t dim, double* r) {
    double a[4][kLanes] = {};
    for (int64_t d = 0; d < dim; d += kLanes)
      for (int l = 0; l < kLanes && d + l < dim; ++l)
        for (int p = 0; p < 4; ++p) a[p][l] = madd<false>(x[p / 2][d + l], y[p % 2][d + l], a[p][l]);
    for (int p = 0; p < 4; ++p) r[p] = lane_tree(a[p]);
  }
};

#if VLK_X86_MULTIVERSION
// Exact scores of four rows against three columns (float64: the inputs widened exactly) with AVX2, bit for bit
// exact_dot. kFma (fp32 inputs): every product is exact, so a fused multiply-add rounds as the product and the sum do;
// else (fp64 inputs) the product is rounded first, as the definition does. The eight lanes are summed in two passes,
// lanes 0-3 then lanes 4-7, so that twelve pairs fit the sixteen registers (twelve accumulators, three column values
// and a row value or a product): each column load serves four rows, and the pipes stay busy through their latency.
// The passes end in the two halves of lane_tree, ((a0 + a1) + (a2 + a3)) and ((a4 + a5) + (a6 + a7)), and their sum.
// out[3 r + c] = s(x[r], y[c]).
template <bool kFma>
VLK_TARGET("avx2,fma")
void exact_dots4x3_avx2(const double* const* x, const double* const* y, int64_t dim, double* out) {
  double half[2][12];
  const int64_t full = dim / kLanes * kLanes;
  for (int h = 0; h < 2; ++h) {
    __m256d acc[4][3];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) acc[r][c] = _mm256_setzero_pd();
    for (int64_t d = 4 * h; d < full; d += kLanes) {
      const __m256d y0 = _mm256_loadu_pd(y[0] + d), y1 = _mm256_loadu_pd(y[1] + d), y2 = _mm256_loadu_pd(y[2] + d);
      for (int r = 0; r < 4; ++r) {
        if constexpr (kFma) {
          __m256d xv = _mm256_loadu_pd(x[r] + d);
          __asm__("" : "+x"(xv));  // one load for three FMAs (the compiler would fold it into each)
          acc[r][0] = _mm256_fmadd_pd(xv, y0, acc[r][0]);
          acc[r][1] = _mm256_fmadd_pd(xv, y1, acc[r][1]);
          acc[r][2] = _mm256_fmadd_pd(xv, y2, acc[r][2]);
        } else {  // the row value read by each product (no register is left for it beside the product)
          acc[r][0] = _mm256_add_pd(acc[r][0], _mm256_mul_pd(y0, _mm256_loadu_pd(x[r] + d)));
          acc[r][1] = _mm256_add_pd(acc[r][1], _mm256_mul_pd(y1, _mm256_loadu_pd(x[r] + d)));
          acc[r][2] = _mm256_add_pd(acc[r][2], _mm256_mul_pd(y2, _mm256_loadu_pd(x[r] + d)));
        }
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) {
        double a[4];
        _mm256_storeu_pd(a, acc[r][c]);
        for (int l = 0; full + 4 * h + l < dim && l < 4; ++l)
          a[l] = madd<kFma>(x[r][full + 4 * h + l], y[c][full + 4 * h + l], a[l]);
        half[h][3 * r + c] = (a[0] + a[1]) + (a[2] + a[3]);
      }
  }
  for (int p = 0; p < 12; ++p) out[p] = half[0][p] + half[1][p];
}

template <bool kFma>
struct Dots4x3Avx2 {
  static void run(const double* const* x, const double* const* y, int64_t dim, double* r) {
    exact_dots4x3_avx2<kFma>(x, y, dim, r);
  }
};

// A tile with AVX2, four rows by three columns; kFma for fp32 inputs.
template <bool kFma>
VLK_TARGET("avx2,fma")
void exact_tile_avx2(const double* q, int64_t stride_q, int64_t rows, const double* g, int64_t stride_g, int64_t cols,
                     int64_t dim, double* out, int64_t stride_out, int64_t b0, int64_t b1) {
  exact_tile_groups<4, 3, Dots4x3Avx2<kFma>>(q, stride_q, rows, g, stride_g, cols, dim, out, stride_out, b0, b1);
}
#endif

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

// Largest |s[j]| (NaN, the exclusions, compare false: skipped). Element-wise maxima over 16 lanes, which the compiler
// vectorises; one running maximum would be a chain of scalar comparisons.
template <typename S>
VLK_INLINE double abs_max(const S* s, int64_t n) {
  S m[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) m[l] = std::fabs(s[j + l]) > m[l] ? std::fabs(s[j + l]) : m[l];
  for (int l = 0; j + l < n; ++l) m[l] = std::fabs(s[j + l]) > m[l] ? std::fabs(s[j + l]) : m[l];
  S r = 0;
  for (int l = 0; l < 16; ++l) r = std::max(r, m[l]);
  return static_cast<double>(r);
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
template <typename S, typename T>
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

// The j in [begin, n) with s[j] >= t (NaN never), in increasing order, written to out; returns how many.
template <typename S>
VLK_INLINE int64_t indices_at_least(const S* s, int64_t begin, int64_t n, S t, int64_t* out) {
  int64_t m = 0;
  for (int64_t j0 = begin; j0 < n; j0 += kColBlock) {
    const int64_t j1 = std::min(n, j0 + kColBlock);
    int32_t c = 0;
    for (int64_t j = j0; j < j1; ++j) c += s[j] >= t;  // vectorised: most blocks hold none
    if (c == 0) continue;
    for (int64_t j = j0; j < j1; ++j) {
      out[m] = j;
      m += s[j] >= t;
    }
  }
  return m;
}

#if VLK_X86_MULTIVERSION
// indices_at_least with AVX2: 32 comparisons make one bit mask, and only its set bits are visited (a candidate
// costs a few cycles, an empty stretch of 32 scores about two).
VLK_TARGET("avx2,fma")
int64_t indices_at_least_avx2(const float* s, int64_t n, float t, int64_t* out) {
  const __m256 tv = _mm256_set1_ps(t);
  int64_t m = 0, j0 = 0;
  for (; j0 + 32 <= n; j0 += 32) {
    uint32_t bits = 0;
    for (int q = 0; q < 4; ++q)  // (a lambda would not be compiled for AVX2)
      bits |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(s + j0 + 8 * q), tv, _CMP_GE_OQ)))
              << (8 * q);
    for (; bits != 0; bits &= bits - 1) out[m++] = j0 + __builtin_ctz(bits);
  }
  return m + indices_at_least(s, j0, n, t, out + m);
}
#endif

// The scan of a top-k row: AVX2 for fp32 screens where the caller runs the AVX2 copy, else the portable loop.
template <bool kAvx2, typename S>
VLK_INLINE int64_t candidates_at_least(const S* s, int64_t n, S t, int64_t* out) {
#if VLK_X86_MULTIVERSION
  if constexpr (kAvx2 && std::is_same_v<S, float>) return indices_at_least_avx2(s, n, t, out);
#endif
  return indices_at_least(s, int64_t{0}, n, t, out);
}

// A lower bound of the k-th largest of s[0..n) (NaN skipped; -inf when fewer than k numbers): the k-th largest of
// the maxima of w >= 2k disjoint sets (the j with the same j mod w), as k distinct entries are at least that large.
// Element-wise maxima over consecutive stretches of w, which the compiler vectorises, in place of a heap of the k best
// updated entry by entry. Where k is 1/16 of the row or more and w past the sample's size, the sampled bound is as
// tight (both land near the 1.2 k-th largest) and selects among 512 values rather than w: at k = 1,000 of 5,000 the
// selection over 2,000 maxima was ~7 % of a top-k (csrc/retrieval/sampled_bound.h).
template <typename S>
VLK_INLINE S kth_lower_bound(const S* s, int64_t n, int64_t k, std::vector<S>& maxima) {
  constexpr S kNone = -std::numeric_limits<S>::infinity();
  if (k <= 0 || n < k) return kNone;
  const int64_t w = std::min(n, std::max<int64_t>(kColBlock, (2 * k + 7) / 8 * 8));
  S bound;
  if (w > kBoundSample && 16 * k >= n && sampled_kth_bound<S>(n, k, [s](int64_t j) { return s[j]; }, maxima, bound))
    return bound;
  maxima.assign(static_cast<size_t>(w), kNone);
  S* m = maxima.data();
  int64_t j0 = 0;
  for (; j0 + w <= n; j0 += w)
    for (int64_t c = 0; c < w; ++c) m[c] = s[j0 + c] > m[c] ? s[j0 + c] : m[c];  // NaN compares false: skipped
  for (int64_t c = 0; j0 + c < n; ++c) m[c] = s[j0 + c] > m[c] ? s[j0 + c] : m[c];
  std::nth_element(m, m + (k - 1), m + w, std::greater<S>());
  return m[k - 1];
}

// Rows of a top-k tile handled together: their candidates' exact scores are computed one block of columns at a
// time, so the block's data stays in cache while every row of the group reads it (k in the thousands re-checks
// nearly every pair). The block is as wide as gives each row about kTopkPerBlock candidates in it (at least
// kTopkCols columns): narrower, a row's few candidates per block would be padded to the four-column pass and its
// columns reloaded block after block (at k = 100 that cost more than the scores themselves). The fp32 columns are
// widened pair by pair in registers: a float64 copy of each block, made once for the group, measured slower at every
// density (k = 600-2,000 of 5,000: the copy and its reads from beyond L2 cost more than the conversions it saves).
constexpr int64_t kTopkRows = 64;
constexpr int64_t kTopkCols = 64;
constexpr int64_t kTopkPerBlock = 16;

// certified_topk_update. Per row: the screened scores pass a threshold, the floor or a lower bound of the k-th best
// screened score (kth_lower_bound) minus twice the row's coarse bound, so only a buffer of plausible candidates is
// kept (their columns, in increasing order); the buffer's k-th best screened score raises the threshold; the
// survivors get their own bounds, the floor rises to the k-th best lower bound, and the ones whose upper bound reaches
// it get their exact score. kFma: the AVX2 + FMA copy.
template <typename S, typename T, bool kFma>
VLK_INLINE int64_t certified_topk_impl(const TileArgs<S, T>& a, int64_t c0, int64_t k, double* vals, int64_t* idx,
                                       double* floor) {
  if (k <= 0 || a.rows == 0) return 0;
  struct Cand {
    double v;
    int64_t i;
  };
  // Better = higher exact score, then lower gallery index.
  auto better = [](const Cand& x, const Cand& y) { return x.v != y.v ? x.v > y.v : x.i < y.i; };
  const Maxima cm(a.ct, 0, a.cols);
  const size_t k_sz = static_cast<size_t>(k);
  std::vector<int64_t> buf(static_cast<size_t>(a.cols));  // the kept candidates' columns
  std::vector<S> buf_v;  // their screened scores, for the k-th best
  std::vector<S> maxima;
  std::vector<double> low;
  std::vector<Cand> cand;
  std::vector<std::vector<int64_t>> js(kTopkRows);
  std::vector<std::vector<double>> ex(kTopkRows);
  std::vector<double> fls(kTopkRows), xd(static_cast<size_t>(kTopkRows * a.dim));
  std::vector<size_t> at(kTopkRows);
  int64_t rechecked = 0;
  for (int64_t r0 = 0; r0 < a.rows; r0 += kTopkRows) {
    check_interrupt();
    const int64_t nr = std::min(kTopkRows, a.rows - r0);
    int64_t group_cands = 0;
    for (int64_t g = 0; g < nr; ++g) {
      const int64_t i = r0 + g;
      const S* srow = a.s + i * a.stride_s;
      const double* rv = vals + i * k;
      const int64_t* ri = idx + i * k;
      double fl = floor[i];
      const double bmax = row_coarse(a.rt, i, cm, a.rel, a.rel > 0 ? abs_max(srow, a.cols) : 0.0);
      // A screened score below thr has an upper bound below the floor (or below k candidates' lower bounds).
      S thr = lower<S>(lower<double>(fl, bmax), 0.0);
      // k candidates score at least kth - bmax (kth: at most the k-th best screened score), so one whose screened
      // score is below kth - 2 bmax cannot enter.
      auto raise = [&](S kth) {
        if (kth > -std::numeric_limits<S>::infinity())
          thr = std::max(thr, lower<S>(lower<double>(static_cast<double>(kth), bmax), bmax));
      };
      // The buffer's first nb candidates cut to those at or above thr (in column order); NaN (excluded) compares
      // false throughout.
      auto keep_at_threshold = [&](int64_t nb) {
        int64_t kept = 0;
        for (int64_t e = 0; e < nb; ++e) {
          buf[kept] = buf[e];
          kept += srow[buf[e]] >= thr;
        }
        return kept;
      };
      int64_t nb = 0;
      if (fl == -kInf) {
        raise(kth_lower_bound(srow, a.cols, k, maxima));
        nb = candidates_at_least<kFma>(srow, a.cols, thr, buf.data());
      } else {
        // A row with a floor (k members from earlier tiles) is scanned at it first: later in a stream few scores
        // reach it, and the maxima pass is taken only when many do.
        nb = candidates_at_least<kFma>(srow, a.cols, thr, buf.data());
        if (nb > std::max<int64_t>(4 * k, a.cols / 16)) {
          raise(kth_lower_bound(srow, a.cols, k, maxima));
          nb = keep_at_threshold(nb);
        }
      }
      const bool kept_any = std::any_of(ri, ri + k, [](int64_t j) { return j >= 0; });
      if (nb >= k) {
        buf_v.resize(static_cast<size_t>(nb));
        for (int64_t e = 0; e < nb; ++e) buf_v[e] = srow[buf[e]];
        std::nth_element(buf_v.begin(), buf_v.begin() + (k - 1), buf_v.end(), std::greater<S>());
        raise(buf_v[k_sz - 1]);
        // With nothing kept yet the floor is k candidates' coarse lower bound (kth - bmax): the per-pair bounds
        // below would raise it by a fraction of the bound's spread, not worth a second selection.
        if (!kept_any) fl = std::max(fl, lower<double>(static_cast<double>(buf_v[k_sz - 1]), bmax));
        nb = keep_at_threshold(nb);
      }
      // The floor rises to the k-th largest of the kept exact scores and the candidates' own lower bounds: k
      // distinct candidates score at least that much, so anything whose upper bound is below it cannot enter.
      if (kept_any) {
        low.clear();
        for (int64_t t = 0; t < k; ++t)
          if (ri[t] >= 0) low.push_back(rv[t]);
        for (int64_t e = 0; e < nb; ++e) {
          const double v = static_cast<double>(srow[buf[e]]), lb = v - pair_bound(a.rt, i, a.ct, buf[e], a.rel, v);
          if (lb > fl) low.push_back(lb);
        }
        if (low.size() >= k_sz) {
          std::nth_element(low.begin(), low.begin() + (k - 1), low.end(), std::greater<double>());
          fl = std::max(fl, low[k_sz - 1]);
        }
      }
      fls[g] = fl;
      // The re-checked candidates, in column order as the buffer (the exact pass walks the columns block by block).
      std::vector<int64_t>& rj = js[g];
      rj.clear();
      for (int64_t e = 0; e < nb; ++e) {
        const double v = static_cast<double>(srow[buf[e]]);
        if (v + pair_bound(a.rt, i, a.ct, buf[e], a.rel, v) >= fl) rj.push_back(buf[e]);
      }
      ex[g].resize(rj.size());
      group_cands += static_cast<int64_t>(rj.size());
      if (!rj.empty()) {
        const T* x = a.row_data + i * a.stride_r;
        for (int64_t d = 0; d < a.dim; ++d) xd[g * a.dim + d] = static_cast<double>(x[d]);
      }
    }
    rechecked += group_cands;
    // Exact scores, one block of columns at a time for the whole group.
    std::fill(at.begin(), at.end(), 0);
    const int64_t width =
        group_cands == 0 ? a.cols
                         : std::clamp((kTopkPerBlock * a.cols * nr / group_cands + kTopkCols - 1) / kTopkCols *
                                          kTopkCols,
                                      kTopkCols, std::max(a.cols, kTopkCols));
    for (int64_t b0 = 0; group_cands > 0 && b0 < a.cols; b0 += width) {
      const int64_t b1 = std::min(a.cols, b0 + width);
      size_t in_block = 0;
      for (int64_t g = 0; g < nr; ++g) {
        size_t e = at[g];
        while (e < js[g].size() && js[g][e] < b1) ++e;
        in_block += e - at[g];
      }
      if (in_block == 0) continue;
      for (int64_t g = 0; g < nr; ++g) {
        const std::vector<int64_t>& rj = js[g];
        const size_t e0 = at[g];
        size_t e1 = e0;
        while (e1 < rj.size() && rj[e1] < b1) ++e1;
        at[g] = e1;
        if (e1 == e0) continue;
        const int64_t n = static_cast<int64_t>(e1 - e0);
        double* out = ex[g].data() + e0;
        if constexpr (std::is_same_v<T, float>) {
          exact_dots_f32<kFma>(xd.data() + g * a.dim, a.col_data, a.stride_c, a.dim, rj.data() + e0, n, out);
        } else {
          const T* x = a.row_data + (r0 + g) * a.stride_r;
          for (int64_t e = 0; e < n; ++e) out[e] = exact_dot(x, a.col_data + rj[e0 + e] * a.stride_c, a.dim);
        }
      }
    }
    // Merge: the best k of the kept and the re-checked candidates by exact score.
    for (int64_t g = 0; g < nr; ++g) {
      const int64_t i = r0 + g;
      double* rv = vals + i * k;
      int64_t* ri = idx + i * k;
      const std::vector<int64_t>& rj = js[g];
      if (rj.empty()) {
        floor[i] = fls[g];
        continue;
      }
      cand.clear();
      for (int64_t t = 0; t < k; ++t)
        if (ri[t] >= 0) cand.push_back({rv[t], ri[t]});
      for (size_t e = 0; e < rj.size(); ++e) cand.push_back({ex[g][e], c0 + rj[e]});
      const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(cand.size()));
      if (static_cast<int64_t>(cand.size()) > k)  // else every candidate stays (a row's first tile, mostly)
        std::nth_element(cand.begin(), cand.begin() + (k - 1), cand.end(), better);
      double worst = kInf;
      for (int64_t t = 0; t < k; ++t) {
        rv[t] = t < m ? cand[t].v : -kInf;
        ri[t] = t < m ? cand[t].i : -1;
        if (t < m) worst = std::min(worst, cand[t].v);
      }
      floor[i] = m == k ? std::max(fls[g], worst) : fls[g];
    }
  }
  return rechecked;
}

template <typename S, typename T>
int64_t certified_tile_base(const TileArgs<S, T>& a, const int64_t* rp, const int64_t* rpos, const double* rthr,
                            int64_t* rcnt, int64_t col0, int64_t slots, const int64_t* cpos, const double* cthr,
                            int64_t* ccnt, int64_t row0) {
  return certified_tile_impl<S, T>(a, rp, rpos, rthr, rcnt, col0, slots, cpos, cthr, ccnt, row0);
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
  return certified_tile_impl<S, T>(a, rp, rpos, rthr, rcnt, col0, slots, cpos, cthr, ccnt, row0);
}
template <typename S, typename T>
VLK_TARGET("avx2,fma")
int64_t certified_topk_avx2(const TileArgs<S, T>& a, int64_t c0, int64_t k, double* vals, int64_t* idx,
                            double* floor) {
  return certified_topk_impl<S, T, true>(a, c0, k, vals, idx, floor);
}
// (The parallel_for lambdas are compiled for the base ISA, so each worker calls into these wrappers.)
template <typename TQ, typename TG>
VLK_TARGET("avx2,fma")
void exact_pairs_avx2(const TQ* q, int64_t stride_q, const TG* g, int64_t stride_g, int64_t dim, const int64_t* qi,
                      const int64_t* gi, int64_t begin, int64_t end, double* out) {
  exact_pairs_impl(q, stride_q, g, stride_g, dim, qi, gi, begin, end, out);
}
inline bool use_avx2_fma() { return cpu_has_avx2() && __builtin_cpu_supports("fma"); }
#endif

}  // namespace

template <typename TQ, typename TG>
void launch_exact_pairs(const TQ* q, int64_t stride_q, const TG* g, int64_t stride_g, int64_t dim, const int64_t* qi,
                        const int64_t* gi, int64_t n, double* out) {
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(dim, 1));
#if VLK_X86_MULTIVERSION
  const bool avx2 = use_avx2_fma();
#endif
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
#if VLK_X86_MULTIVERSION
    if (avx2) return exact_pairs_avx2(q, stride_q, g, stride_g, dim, qi, gi, begin, end, out);
#endif
    exact_pairs_impl(q, stride_q, g, stride_g, dim, qi, gi, begin, end, out);
  });
}

void launch_exact_tile(const double* q, int64_t stride_q, int64_t rows, const double* g, int64_t stride_g,
                       int64_t cols, int64_t dim, bool products_exact, double* out, int64_t stride_out) {
  const int64_t blocks = (rows + kDenseRows - 1) / kDenseRows;
  // One share of rows a thread, so each thread walks the gallery once (shares of a quarter, handed out four a
  // thread, walked it four times: 30 against 27 ns a pair at 256 x 5,000 on one Zen 2 core).
  const int64_t threads = std::max<int64_t>(1, get_num_threads());
#if VLK_X86_MULTIVERSION
  const bool avx2 = use_avx2_fma();
#endif
  parallel_for(blocks, (blocks + threads - 1) / threads, [&](int64_t b0, int64_t b1) {
#if VLK_X86_MULTIVERSION
    if (avx2 && products_exact)
      return exact_tile_avx2<true>(q, stride_q, rows, g, stride_g, cols, dim, out, stride_out, b0, b1);
    if (avx2) return exact_tile_avx2<false>(q, stride_q, rows, g, stride_g, cols, dim, out, stride_out, b0, b1);
#endif
    // Without AVX2 + FMA: no fused multiply-add (fp64 products must round; for fp32 it could not change a bit).
    exact_tile_groups<2, 2, Dots2x2>(q, stride_q, rows, g, stride_g, cols, dim, out, stride_out, b0, b1);
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
