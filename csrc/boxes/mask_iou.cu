// CUDA twins of mask_iou.cpp. Pack: one thread per 64-bit word (grid-stride), __ballot-free: each thread reads its
// 64 bytes; areas by atomicAdd of the word popcounts. Pairwise: a 16x16 tile of (i, j) pairs per block, the
// words of the 16 a-rows and 16 b-rows staged through shared memory in chunks of 32, __popcll per AND.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "boxes/mask_iou.h"

namespace vlk {
namespace {

constexpr int kTile = 16;
constexpr int kChunk = 32;

__global__ void mask_pack_kernel(const uint8_t* __restrict__ masks, int64_t k, int64_t pixels, int64_t nw,
                                 uint64_t* __restrict__ words, unsigned long long* __restrict__ area) {
  const int64_t total = k * nw;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t mask = t / nw, w = t % nw;
    const uint8_t* src = masks + mask * pixels + w * 64;
    const int64_t lim = min(static_cast<int64_t>(64), pixels - w * 64);
    uint64_t word = 0;
    for (int64_t b = 0; b < lim; ++b) word |= static_cast<uint64_t>(src[b] != 0) << b;
    words[t] = word;
    atomicAdd(area + mask, static_cast<unsigned long long>(__popcll(word)));
  }
}

__device__ __forceinline__ double ratio(int64_t inter, int64_t uni) {
  return uni > 0 && inter > 0 ? static_cast<double>(inter) / static_cast<double>(uni) : 0.0;
}

__global__ void mask_iou_kernel(const uint64_t* __restrict__ a, const int64_t* __restrict__ area_a,
                                const uint64_t* __restrict__ b, const int64_t* __restrict__ area_b, int64_t n,
                                int64_t m, int64_t nw, double* __restrict__ out, int64_t* __restrict__ inter) {
  __shared__ uint64_t sa[kTile][kChunk + 1];
  __shared__ uint64_t sb[kTile][kChunk + 1];
  const int64_t bi = blockIdx.z;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const uint64_t* A = a + bi * n * nw;
  const uint64_t* B = b + bi * m * nw;
  const int64_t i_load = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t j_load = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.y;
  int64_t acc = 0;
  for (int64_t w0 = 0; w0 < nw; w0 += kChunk) {
    // Thread (x, y) stages words x and x + 16 of a-row y and b-row y of this tile.
    for (int c = threadIdx.x; c < kChunk; c += kTile) {
      const int64_t w = w0 + c;
      sa[threadIdx.y][c] = (i_load < n && w < nw) ? A[i_load * nw + w] : 0ull;
      sb[threadIdx.y][c] = (j_load < m && w < nw) ? B[j_load * nw + w] : 0ull;
    }
    __syncthreads();
    for (int c = 0; c < kChunk; ++c) acc += __popcll(sa[threadIdx.y][c] & sb[threadIdx.x][c]);
    __syncthreads();
  }
  if (i < n && j < m) {
    const int64_t o = (bi * n + i) * m + j;
    out[o] = ratio(acc, area_a[bi * n + i] + area_b[bi * m + j] - acc);
    if (inter) inter[o] = acc;
  }
}

__global__ void mask_iou_aligned_kernel(const uint64_t* __restrict__ a, const int64_t* __restrict__ area_a,
                                        const uint64_t* __restrict__ b, const int64_t* __restrict__ area_b,
                                        int64_t rows, int64_t nw, double* __restrict__ out,
                                        int64_t* __restrict__ inter) {
  // One warp per row: lanes stride over the words, then a shuffle reduction.
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= rows) return;
  long long acc = 0;
  for (int64_t w = lane; w < nw; w += 32) acc += __popcll(a[warp * nw + w] & b[warp * nw + w]);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    out[warp] = ratio(acc, area_a[warp] + area_b[warp] - acc);
    if (inter) inter[warp] = acc;
  }
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void launch_mask_pack_cuda(const uint8_t* masks, int64_t k, int64_t pixels, uint64_t* words, int64_t* area,
                           void* stream) {
  const int64_t nw = mask_words(pixels);
  if (k * nw == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  // area must arrive zeroed (the Python launcher allocates it with zeros); int64 and ull share a layout.
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((k * nw + 255) / 256, 65535));
  mask_pack_kernel<<<grid, 256, 0, s>>>(masks, k, pixels, nw, words, reinterpret_cast<unsigned long long*>(area));
  check_launch("mask_pack_kernel");
}

void launch_mask_iou_cuda(const uint64_t* a, const int64_t* area_a, const uint64_t* b, const int64_t* area_b,
                          int64_t batch, int64_t n, int64_t m, int64_t nw, bool aligned, double* out, int64_t* inter,
                          void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (aligned) {
    const int64_t rows = batch * n;
    if (rows == 0) return;
    mask_iou_aligned_kernel<<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, s>>>(a, area_a, b, area_b, rows,
                                                                                          nw, out, inter);
    check_launch("mask_iou_aligned_kernel");
    return;
  }
  if (batch == 0 || n == 0 || m == 0) return;
  const dim3 grid(static_cast<unsigned>((m + kTile - 1) / kTile), static_cast<unsigned>((n + kTile - 1) / kTile),
                  static_cast<unsigned>(batch));
  mask_iou_kernel<<<grid, dim3(kTile, kTile), 0, s>>>(a, area_a, b, area_b, n, m, nw, out, inter);
  check_launch("mask_iou_kernel");
}

}  // namespace vlk
