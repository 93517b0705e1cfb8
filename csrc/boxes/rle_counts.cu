// CUDA kernels of the COCO RLE counts path; every per-thread step is a function of rle_counts.h that the CPU
// twins (rle_counts.cpp, rle.cpp) call too.
// Encode, two passes over [n, hw] column-major masks: rle_count_kernel (block per chunk of kChunk pixels, thread per
// kItems pixels, block reduce) -> the caller scans the chunk counts into offsets and chunk bases -> rle_write_kernel
// (recount, block exclusive scan, each thread writes its boundary positions) -> rle_runs_kernel (runs = differences
// of boundaries). Decode: thread per kDecodeItems pixels (binary search, then walk). Area: warp per mask. Bbox:
// thread per mask (rleToBbox is a sequential scan). IoU: warp per (dt, gt) pair, lanes splitting dt's intervals.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <stdexcept>
#include <string>

#include "boxes/rle_counts.h"

namespace vlk {
namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;
constexpr int64_t kMaxGrid = 65535 * 16;

unsigned grid_for(int64_t work, int per_block) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((work + per_block - 1) / per_block, kMaxGrid)));
}

__global__ void __launch_bounds__(rle::kThreads) rle_count_kernel(const uint8_t* __restrict__ masks, int64_t n,
                                                                  MaskStrides ms, int64_t nchunks,
                                                                  int64_t* __restrict__ chunk_cnt) {
  using Reduce = cub::BlockReduce<int, rle::kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  // The loop bound is uniform over the block, so every thread reaches each collective.
  for (int64_t blk = blockIdx.x; blk < n * nchunks; blk += gridDim.x) {
    const int64_t k = blk / nchunks, c = blk % nchunks;
    int64_t b, e;
    rle::encode_range(c, threadIdx.x, ms.h * ms.w, &b, &e);
    const int cnt = static_cast<int>(rle::count_transitions(masks + k * ms.sn, ms.h, ms.sy, ms.sx, b, e));
    const int total = Reduce(tmp).Sum(cnt);
    if (threadIdx.x == 0) chunk_cnt[blk] = total;
    __syncthreads();
  }
}

__global__ void __launch_bounds__(rle::kThreads) rle_write_kernel(const uint8_t* __restrict__ masks, int64_t n,
                                                                  MaskStrides ms, int64_t nchunks,
                                                                  const int64_t* __restrict__ chunk_base,
                                                                  const int64_t* __restrict__ offsets,
                                                                  int64_t* __restrict__ ends) {
  using Scan = cub::BlockScan<int, rle::kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (int64_t blk = blockIdx.x; blk < n * nchunks; blk += gridDim.x) {
    const int64_t k = blk / nchunks, c = blk % nchunks;
    const uint8_t* t = masks + k * ms.sn;
    int64_t b, e;
    rle::encode_range(c, threadIdx.x, ms.h * ms.w, &b, &e);
    const int cnt = static_cast<int>(rle::count_transitions(t, ms.h, ms.sy, ms.sx, b, e));
    int prefix;
    Scan(tmp).ExclusiveSum(cnt, prefix);
    if (cnt > 0) rle::write_transitions(t, ms.h, ms.sy, ms.sx, b, e, ends + offsets[k] + chunk_base[blk] + prefix);
    __syncthreads();
  }
}

__global__ void rle_runs_kernel(const int64_t* __restrict__ ends, const int64_t* __restrict__ offsets, int64_t n,
                                int64_t hw, int64_t* __restrict__ counts) {
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const int64_t o = offsets[k], m = offsets[k + 1] - o;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) counts[o + i] = rle::run_from_ends(ends + o, m, i, hw);
  }
}

__global__ void rle_decode_kernel(const int64_t* __restrict__ csum, const int64_t* __restrict__ offsets, int64_t n,
                                  int64_t hw, int64_t items, uint8_t* __restrict__ out) {
  const int64_t total = n * items;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = t / items, p0 = (t % items) * rle::kDecodeItems;
    const int64_t o = offsets[k];
    rle::decode_range(csum + o, offsets[k + 1] - o, rle::csum_base(csum, o), p0, rle::min64(hw, p0 + rle::kDecodeItems),
                      out + k * hw);
  }
}

__global__ void rle_area_kernel(const int64_t* __restrict__ counts, const int64_t* __restrict__ offsets, int64_t n,
                                int64_t* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t k = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; k < n; k += warps) {
    const int64_t o = offsets[k];
    long long a = rle::area_part(counts + o, offsets[k + 1] - o, lane, kWarp);
    for (int off = kWarp / 2; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off);
    if (lane == 0) out[k] = a;
  }
}

__global__ void rle_bbox_kernel(const int64_t* __restrict__ counts, const int64_t* __restrict__ offsets, int64_t n,
                                const int64_t* __restrict__ h, const int64_t* __restrict__ w,
                                double* __restrict__ out) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rle::bbox_one(counts + offsets[k], offsets[k + 1] - offsets[k], h[k], w[k], out + 4 * k);
}

__global__ void rle_iou_kernel(const int64_t* __restrict__ dt_csum, const int64_t* __restrict__ dt_offsets,
                               const int64_t* __restrict__ dt_area, const double* __restrict__ dt_bbox, int64_t nd,
                               const int64_t* __restrict__ gt_csum, const int64_t* __restrict__ gt_offsets,
                               const int64_t* __restrict__ gt_area, const double* __restrict__ gt_bbox, int64_t ng,
                               const uint8_t* __restrict__ iscrowd, double* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  // Pairs are warp-uniform, so the early skip and the shuffle reduction never split a warp.
  for (int64_t pair = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; pair < nd * ng;
       pair += warps) {
    const int64_t d = pair / ng, g = pair % ng;
    if (!rle::bbox_overlap(dt_bbox + 4 * d, gt_bbox + 4 * g)) {
      if (lane == 0) out[pair] = 0.0;
      continue;
    }
    long long inter = rle::inter_part(rle::intervals_of(dt_csum, dt_offsets, d),
                                      rle::intervals_of(gt_csum, gt_offsets, g), lane, kWarp);
    for (int off = kWarp / 2; off > 0; off >>= 1) inter += __shfl_down_sync(0xffffffffu, inter, off);
    if (lane == 0) out[pair] = rle::iou_value(inter, dt_area[d], gt_area[g], iscrowd != nullptr && iscrowd[g]);
  }
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void launch_rle_count_chunks_cuda(const uint8_t* masks, int64_t n, MaskStrides ms, int64_t* chunk_cnt,
                                  void* stream) {
  const int64_t blocks = n * ((ms.h * ms.w + rle::kChunk - 1) / rle::kChunk);
  if (blocks == 0) return;
  rle_count_kernel<<<grid_for(blocks, 1), rle::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      masks, n, ms, blocks / n, chunk_cnt);
  check_launch("rle_count_kernel");
}

void launch_rle_write_ends_cuda(const uint8_t* masks, int64_t n, MaskStrides ms, const int64_t* chunk_base,
                                const int64_t* offsets, int64_t* ends, void* stream) {
  const int64_t blocks = n * ((ms.h * ms.w + rle::kChunk - 1) / rle::kChunk);
  if (blocks == 0) return;
  rle_write_kernel<<<grid_for(blocks, 1), rle::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      masks, n, ms, blocks / n, chunk_base, offsets, ends);
  check_launch("rle_write_kernel");
}

void launch_rle_runs_from_ends_cuda(const int64_t* ends, const int64_t* offsets, int64_t n, int64_t hw,
                                    int64_t* counts, void* stream) {
  if (n == 0) return;
  rle_runs_kernel<<<grid_for(n, 1), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(ends, offsets, n, hw, counts);
  check_launch("rle_runs_kernel");
}

void launch_rle_decode_csum_cuda(const int64_t* csum, const int64_t* offsets, int64_t n, int64_t hw, uint8_t* out,
                                 void* stream) {
  const int64_t items = (hw + rle::kDecodeItems - 1) / rle::kDecodeItems;
  if (n * items == 0) return;
  rle_decode_kernel<<<grid_for(n * items, kBlock), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      csum, offsets, n, hw, items, out);
  check_launch("rle_decode_kernel");
}

void launch_rle_area_cuda(const int64_t* counts, const int64_t* offsets, int64_t n, int64_t* out, void* stream) {
  if (n == 0) return;
  rle_area_kernel<<<grid_for(n, kBlock / kWarp), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(counts, offsets, n,
                                                                                                  out);
  check_launch("rle_area_kernel");
}

void launch_rle_to_bbox_cuda(const int64_t* counts, const int64_t* offsets, int64_t n, const int64_t* h,
                             const int64_t* w, double* out, void* stream) {
  if (n == 0) return;
  rle_bbox_kernel<<<grid_for(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(counts, offsets, n, h, w,
                                                                                          out);
  check_launch("rle_bbox_kernel");
}

void launch_rle_iou_csum_cuda(const int64_t* dt_csum, const int64_t* dt_offsets, const int64_t* dt_area,
                              const double* dt_bbox, int64_t nd, const int64_t* gt_csum, const int64_t* gt_offsets,
                              const int64_t* gt_area, const double* gt_bbox, int64_t ng, const uint8_t* iscrowd,
                              double* out, void* stream) {
  if (nd * ng == 0) return;
  rle_iou_kernel<<<grid_for(nd * ng, kBlock / kWarp), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      dt_csum, dt_offsets, dt_area, dt_bbox, nd, gt_csum, gt_offsets, gt_area, gt_bbox, ng, iscrowd, out);
  check_launch("rle_iou_kernel");
}

}  // namespace vlk
