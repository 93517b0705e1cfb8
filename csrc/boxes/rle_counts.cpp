// CPU twins of rle_counts.cu's encode and decode: the same per-range functions of rle_counts.h. The encode twins
// replay the CUDA block exactly (thread ranges in order, the block scan as a running sum); decode uses the GPU's
// 16-pixel steps. Area, bbox and IoU twins are in rle.cpp. Multithreaded over chunks or masks.
#include <algorithm>
#include <atomic>

#include "boxes/rle_counts.h"
#include "core/parallel.h"

namespace vlk {

std::string rle_check_csr(const int64_t* offsets, int64_t n, int64_t total) {
  if (n < 0) return "negative number of RLEs";
  if (offsets[0] != 0) return "offsets[0] must be 0, got " + std::to_string(offsets[0]);
  for (int64_t k = 0; k < n; ++k)
    if (offsets[k + 1] < offsets[k]) return "offsets must be non-decreasing (offsets[" + std::to_string(k + 1) + "])";
  if (offsets[n] != total)
    return "offsets must end at the number of runs " + std::to_string(total) + ", got " + std::to_string(offsets[n]);
  return {};
}

void launch_rle_count_chunks(const uint8_t* masks, int64_t n, MaskStrides ms, int64_t* chunk_cnt) {
  const int64_t hw = ms.h * ms.w;
  const int64_t nchunks = (hw + rle::kChunk - 1) / rle::kChunk;
  parallel_for(n * nchunks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t k = blk / nchunks, c = blk % nchunks;
      const uint8_t* t = masks + k * ms.sn;
      // Each thread's range, then the block reduction.
      int64_t b, e, total = 0;
      for (int th = 0; th < rle::kThreads; ++th) {
        rle::encode_range(c, th, hw, &b, &e);
        total += rle::count_transitions(t, ms.h, ms.sy, ms.sx, b, e);
      }
      chunk_cnt[blk] = total;
    }
  });
}

bool launch_rle_write_ends(const uint8_t* masks, int64_t n, MaskStrides ms, const int64_t* chunk_base,
                           const int64_t* offsets, int64_t* ends) {
  const int64_t hw = ms.h * ms.w;
  const int64_t nchunks = (hw + rle::kChunk - 1) / rle::kChunk;
  std::atomic<bool> fits{true};
  parallel_for(n * nchunks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t k = blk / nchunks, c = blk % nchunks;
      const uint8_t* t = masks + k * ms.sn;
      // Mask k's boundaries own slots [offsets[k], offsets[k + 1] - 1): a chunk_base that does not come from these
      // masks' counts would write outside them, so the chunk is counted first and skipped if it does not fit.
      const int64_t slots = offsets[k + 1] - offsets[k] - 1;
      int64_t b, e, total = 0;
      for (int th = 0; th < rle::kThreads; ++th) {
        rle::encode_range(c, th, hw, &b, &e);
        total += rle::count_transitions(t, ms.h, ms.sy, ms.sx, b, e);
      }
      if (chunk_base[blk] < 0 || chunk_base[blk] > slots - total) {
        fits.store(false, std::memory_order_relaxed);
        continue;
      }
      int64_t* out = ends + offsets[k] + chunk_base[blk];
      // Thread th writes at the exclusive scan of the counts of threads 0..th-1 (a running sum here), i.e. right
      // after what the earlier (consecutive) ranges wrote: exactly what one sequential pass over the chunk writes.
      int64_t prefix = 0;
      for (int th = 0; th < rle::kThreads; ++th) {
        rle::encode_range(c, th, hw, &b, &e);
        const int64_t cnt = rle::count_transitions(t, ms.h, ms.sy, ms.sx, b, e);
        if (cnt > 0) rle::write_transitions(t, ms.h, ms.sy, ms.sx, b, e, out + prefix);
        prefix += cnt;
      }
    }
  });
  return fits.load();
}

void launch_rle_runs_from_ends(const int64_t* ends, const int64_t* offsets, int64_t n, int64_t hw, int64_t* counts) {
  parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t o = offsets[k], m = offsets[k + 1] - o;
      for (int64_t i = 0; i < m; ++i) counts[o + i] = rle::run_from_ends(ends + o, m, i, hw);
    }
  });
}

void launch_rle_decode_csum(const int64_t* csum, const int64_t* offsets, int64_t n, int64_t hw, uint8_t* out) {
  const int64_t items = (hw + rle::kDecodeItems - 1) / rle::kDecodeItems;
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t o = offsets[k], m = offsets[k + 1] - o, base = rle::csum_base(csum, o);
      for (int64_t q = 0; q < items; ++q) {
        const int64_t p0 = q * rle::kDecodeItems;
        rle::decode_range(csum + o, m, base, p0, std::min(hw, p0 + rle::kDecodeItems), out + k * hw);
      }
    }
  });
}

}  // namespace vlk
