#include "boxes/rle_encode.h"

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"

#if VLK_X86_MULTIVERSION
#include <immintrin.h>
#endif

namespace vlk {
namespace {

// Packs bytes [0, n) to bits (bit i of word i / 64 = byte i != 0); the last word's unused bits are 0.
using PackFn = void (*)(const uint8_t*, int64_t, uint64_t*);

inline uint64_t pack_tail(const uint8_t* p, int64_t n) {
  uint64_t w = 0;
  for (int64_t i = 0; i < n; ++i) w |= static_cast<uint64_t>(p[i] != 0) << i;
  return w;
}

void pack_portable(const uint8_t* p, int64_t n, uint64_t* out) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t w = 0;
    for (int b = 0; b < 64; ++b) w |= static_cast<uint64_t>(p[i + b] != 0) << b;
    out[i / 64] = w;
  }
  if (i < n) out[i / 64] = pack_tail(p + i, n - i);
}

#if VLK_X86_MULTIVERSION
VLK_TARGET("avx2") void pack_avx2(const uint8_t* p, int64_t n, uint64_t* out) {
  const __m256i zero = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32));
    const uint32_t za = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, zero)));
    const uint32_t zb = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, zero)));
    out[i / 64] = ~(static_cast<uint64_t>(zb) << 32 | za);
  }
  if (i < n) out[i / 64] = pack_tail(p + i, n - i);
}

VLK_TARGET("avx512f,avx512bw") void pack_avx512(const uint8_t* p, int64_t n, uint64_t* out) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(p + i);
    out[i / 64] = _mm512_test_epi8_mask(v, v);
  }
  if (i < n) out[i / 64] = pack_tail(p + i, n - i);
}
#endif

PackFn pick_pack() {
#if VLK_X86_MULTIVERSION
  if (cpu_has_avx512bw()) return pack_avx512;
  if (cpu_has_avx2()) return pack_avx2;
#endif
  return pack_portable;
}

inline int ctz64(uint64_t x) { return __builtin_ctzll(x); }

// Column-contiguous: the mask is one run of h*w bytes in COCO order; a boundary is a bit differing from the bit
// before it (the carry links words, pixel -1 is 0). Packed in blocks that stay in L1. on(t, first) gets each word
// of boundary bits, bit j standing for pixel first + j.
template <typename OnWord>
void column_major_boundaries(const uint8_t* m, int64_t hw, PackFn pack, std::vector<uint64_t>& words, OnWord on) {
  constexpr int64_t kBlock = 64 * 256;
  words.resize(kBlock / 64);
  uint64_t carry = 0;
  for (int64_t b0 = 0; b0 < hw; b0 += kBlock) {
    const int64_t nb = std::min(kBlock, hw - b0), nw = (nb + 63) / 64;
    pack(m + b0, nb, words.data());
    for (int64_t i = 0; i < nw; ++i) {
      const uint64_t w = words[i];
      uint64_t t = w ^ ((w << 1) | carry);
      carry = w >> 63;
      if (i == nw - 1 && (nb & 63)) t &= (uint64_t{1} << (nb & 63)) - 1;  // padding bits are not pixels
      on(t, b0 + i * 64);
    }
  }
}

void column_major(const uint8_t* m, int64_t hw, PackFn pack, std::vector<int64_t>& ends,
                  std::vector<uint64_t>& words) {
  column_major_boundaries(m, hw, pack, words, [&](uint64_t t, int64_t first) {
    for (; t; t &= t - 1) ends.push_back(first + ctz64(t));
  });
}

// How many boundaries column_major would append (the same bits, popcounted).
int64_t column_major_count(const uint8_t* m, int64_t hw, PackFn pack, std::vector<uint64_t>& words) {
  int64_t count = 0;
  column_major_boundaries(m, hw, pack, words, [&](uint64_t t, int64_t) { count += __builtin_popcountll(t); });
  return count;
}

// How many boundaries row_major would append: row 0 against the last row shifted one column, then each row against
// the one above, popcounted.
int64_t row_major_count(const uint8_t* m, int64_t h, int64_t w, int64_t sy, PackFn pack,
                        std::vector<uint64_t>& scratch) {
  const int64_t nw = (w + 63) / 64;
  scratch.assign(static_cast<size_t>(3 * nw), 0);
  uint64_t* prev = scratch.data();
  uint64_t* cur = prev + nw;
  uint64_t* last = cur + nw;
  const uint64_t tail = (w & 63) ? (uint64_t{1} << (w & 63)) - 1 : ~uint64_t{0};
  int64_t count = 0;
  pack(m + (h - 1) * sy, w, last);
  pack(m, w, prev);
  for (int64_t i = 0; i < nw; ++i) {
    uint64_t d = prev[i] ^ ((last[i] << 1) | (i > 0 ? last[i - 1] >> 63 : 0));
    if (i == nw - 1) d &= tail;
    count += __builtin_popcountll(d);
  }
  for (int64_t y = 1; y < h; ++y) {
    pack(m + y * sy, w, cur);
    for (int64_t i = 0; i < nw; ++i) count += __builtin_popcountll(cur[i] ^ prev[i]);
    std::swap(prev, cur);
  }
  return count;
}

// Row-contiguous (rows of w bytes, sy apart): pixel (y, x) starts a run when it differs from (y - 1, x), or for
// y = 0 from (h - 1, x - 1), the previous pixel in column order. Boundaries come out row by row; a counting sort
// over columns (stable, so rows stay increasing) puts them in column order.
void row_major(const uint8_t* m, int64_t h, int64_t w, int64_t sy, PackFn pack, std::vector<int64_t>& ends,
               std::vector<uint64_t>& scratch) {
  const int64_t nw = (w + 63) / 64;
  scratch.assign(static_cast<size_t>(3 * nw + w + 1), 0);
  uint64_t* prev = scratch.data();
  uint64_t* cur = prev + nw;
  uint64_t* last = cur + nw;
  // Column counts, reused as the scatter cursors (uint64 storage, int64 values).
  int64_t* col = reinterpret_cast<int64_t*>(last + nw);
  std::vector<int64_t> found;  // x * h + y in row order
  auto emit_row = [&](const uint64_t* diff, int64_t y) {
    for (int64_t i = 0; i < nw; ++i) {
      uint64_t t = diff[i];
      while (t) {
        const int64_t x = i * 64 + ctz64(t);
        found.push_back(x * h + y);
        ++col[x + 1];
        t &= t - 1;
      }
    }
  };
  // y = 0: row 0 against the last row shifted one column right (pixel (h - 1, x - 1)), 0 before column 0.
  pack(m + (h - 1) * sy, w, last);
  pack(m, w, cur);
  for (int64_t i = 0; i < nw; ++i) {
    const uint64_t shifted = (last[i] << 1) | (i > 0 ? last[i - 1] >> 63 : 0);
    prev[i] = cur[i] ^ shifted;
  }
  if (w & 63) prev[nw - 1] &= (uint64_t{1} << (w & 63)) - 1;
  emit_row(prev, 0);
  std::swap(prev, cur);  // prev = row 0's bits
  for (int64_t y = 1; y < h; ++y) {
    pack(m + y * sy, w, cur);
    for (int64_t i = 0; i < nw; ++i) last[i] = cur[i] ^ prev[i];
    emit_row(last, y);
    std::swap(prev, cur);
  }
  for (int64_t x = 0; x < w; ++x) col[x + 1] += col[x];
  const size_t base = ends.size();
  ends.resize(base + found.size());
  for (const int64_t p : found) ends[base + col[p / h]++] = p;
}

}  // namespace

int64_t rle_mask_boundary_count(const uint8_t* mask, const MaskStrides& ms, std::vector<uint64_t>& scratch) {
  static const PackFn pack = pick_pack();
  const int64_t h = ms.h, w = ms.w;
  if (h <= 0 || w <= 0) return 0;
  if (ms.sy == 1 && (ms.sx == h || w == 1)) return column_major_count(mask, h * w, pack, scratch);
  if (ms.sx == 1) return row_major_count(mask, h, w, ms.sy, pack, scratch);
  return -1;
}

bool rle_mask_boundaries(const uint8_t* mask, const MaskStrides& ms, std::vector<int64_t>& ends,
                         std::vector<uint64_t>& scratch) {
  static const PackFn pack = pick_pack();
  const int64_t h = ms.h, w = ms.w;
  if (h <= 0 || w <= 0) return true;  // no pixels, no boundaries
  if (ms.sy == 1 && (ms.sx == h || w == 1)) {
    column_major(mask, h * w, pack, ends, scratch);
    return true;
  }
  if (ms.sx == 1) {
    row_major(mask, h, w, ms.sy, pack, ends, scratch);
    return true;
  }
  return false;
}

}  // namespace vlk
