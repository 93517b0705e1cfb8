#include "boxes/mask_iou.h"

#include <algorithm>

#include "core/cpu_features.h"
#include "core/parallel.h"

namespace vlk {
namespace {

// The loops below are built twice: with the popcnt instruction (x86-64 CPUs since 2008) and portable.
#define VLK_TARGET_POPCNT VLK_TARGET("popcnt")

inline double ratio(int64_t inter, int64_t uni) {
  return uni > 0 && inter > 0 ? static_cast<double>(inter) / static_cast<double>(uni) : 0.0;
}

// Four rows of a against one row of b per pass: each b word is loaded once for four popcounts.
template <int R>
inline void inter_rows(const uint64_t* const* ar, const uint64_t* __restrict__ br, int64_t nw, int64_t* acc) {
  int64_t s[R] = {};
  for (int64_t w = 0; w < nw; ++w) {
    const uint64_t bw = br[w];
    for (int r = 0; r < R; ++r) s[r] += __builtin_popcountll(ar[r][w] & bw);
  }
  for (int r = 0; r < R; ++r) acc[r] = s[r];
}

inline void pairwise_rows(const uint64_t* a, const int64_t* area_a, const uint64_t* b, const int64_t* area_b,
                          int64_t n, int64_t m, int64_t nw, int64_t b_idx, int64_t i0, int64_t i1, double* out,
                          int64_t* inter_out) {
  const uint64_t* A = a + b_idx * n * nw;
  const uint64_t* B = b + b_idx * m * nw;
  for (int64_t i = i0; i < i1; i += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, i1 - i));
    const uint64_t* ar[4];
    for (int r = 0; r < 4; ++r) ar[r] = A + (i + std::min(r, rows - 1)) * nw;
    for (int64_t j = 0; j < m; ++j) {
      int64_t acc[4];
      inter_rows<4>(ar, B + j * nw, nw, acc);
      for (int r = 0; r < rows; ++r) {
        const int64_t ii = i + r, o = (b_idx * n + ii) * m + j;
        const int64_t u = area_a[b_idx * n + ii] + area_b[b_idx * m + j] - acc[r];
        out[o] = ratio(acc[r], u);
        if (inter_out) inter_out[o] = acc[r];
      }
    }
  }
}

inline void aligned_rows(const uint64_t* a, const int64_t* area_a, const uint64_t* b, const int64_t* area_b,
                         int64_t nw, int64_t r0, int64_t r1, double* out, int64_t* inter_out) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint64_t* ar[1] = {a + r * nw};
    int64_t acc[1];
    inter_rows<1>(ar, b + r * nw, nw, acc);
    out[r] = ratio(acc[0], area_a[r] + area_b[r] - acc[0]);
    if (inter_out) inter_out[r] = acc[0];
  }
}

void pack_rows(const uint8_t* masks, int64_t pixels, int64_t nw, int64_t k0, int64_t k1, uint64_t* words,
               int64_t* area) {
  for (int64_t k = k0; k < k1; ++k) {
    const uint8_t* src = masks + k * pixels;
    uint64_t* dst = words + k * nw;
    int64_t cnt = 0;
    for (int64_t w = 0; w < nw; ++w) {
      const int64_t base = w * 64, lim = std::min<int64_t>(64, pixels - base);
      uint64_t word = 0;
      for (int64_t t = 0; t < lim; ++t) word |= static_cast<uint64_t>(src[base + t] != 0) << t;
      dst[w] = word;
      cnt += __builtin_popcountll(word);
    }
    area[k] = cnt;
  }
}

VLK_TARGET_POPCNT void pairwise_popcnt(const uint64_t* a, const int64_t* aa, const uint64_t* b, const int64_t* ab,
                                       int64_t n, int64_t m, int64_t nw, int64_t bi, int64_t i0, int64_t i1,
                                       double* out, int64_t* inter) {
  pairwise_rows(a, aa, b, ab, n, m, nw, bi, i0, i1, out, inter);
}
VLK_TARGET_POPCNT void aligned_popcnt(const uint64_t* a, const int64_t* aa, const uint64_t* b, const int64_t* ab,
                                      int64_t nw, int64_t r0, int64_t r1, double* out, int64_t* inter) {
  aligned_rows(a, aa, b, ab, nw, r0, r1, out, inter);
}
VLK_TARGET_POPCNT void pack_popcnt(const uint8_t* masks, int64_t pixels, int64_t nw, int64_t k0, int64_t k1,
                                   uint64_t* words, int64_t* area) {
  pack_rows(masks, pixels, nw, k0, k1, words, area);
}

}  // namespace

void launch_mask_pack(const uint8_t* masks, int64_t k, int64_t pixels, uint64_t* words, int64_t* area) {
  const int64_t nw = mask_words(pixels);
  const bool fast = cpu_has_popcnt();
  parallel_for(k, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(pixels, 1)), [&](int64_t k0, int64_t k1) {
    if (fast) pack_popcnt(masks, pixels, nw, k0, k1, words, area);
    else pack_rows(masks, pixels, nw, k0, k1, words, area);
  });
}

void launch_mask_iou(const uint64_t* a, const int64_t* area_a, const uint64_t* b, const int64_t* area_b,
                     int64_t batch, int64_t n, int64_t m, int64_t nw, bool aligned, double* out, int64_t* inter) {
  const bool fast = cpu_has_popcnt();
  if (aligned) {
    parallel_for(batch * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(nw, 1)), [&](int64_t r0, int64_t r1) {
      if (fast) aligned_popcnt(a, area_a, b, area_b, nw, r0, r1, out, inter);
      else aligned_rows(a, area_a, b, area_b, nw, r0, r1, out, inter);
    });
    return;
  }
  if (m == 0) return;
  // Tasks are blocks of 4 rows of one batch entry, so the 4-row micro-kernel never straddles batch entries.
  const int64_t blocks_per_batch = (n + 3) / 4;
  parallel_for(batch * blocks_per_batch, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / blocks_per_batch, i0 = (t % blocks_per_batch) * 4, i1 = std::min(n, i0 + 4);
      if (fast) pairwise_popcnt(a, area_a, b, area_b, n, m, nw, bi, i0, i1, out, inter);
      else pairwise_rows(a, area_a, b, area_b, n, m, nw, bi, i0, i1, out, inter);
    }
  });
}

}  // namespace vlk
