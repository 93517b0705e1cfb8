// CUDA twin of count_above.cpp. Grid: one block per row (grid-stride over rows past 2^31 - 1 blocks is not
// needed: n fits in gridDim.x); each thread strides over the row's columns, then a warp-shuffle reduction.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "core/count_above.h"

namespace vlk {
namespace {

template <typename T>
__global__ void count_above_kernel(const T* __restrict__ scores, int64_t m, int64_t stride_row,
                                   const T* __restrict__ thr, int64_t* __restrict__ out, bool inclusive) {
  const int64_t row = blockIdx.x;
  const T* r = scores + row * stride_row;
  const T t = thr[row];
  unsigned long long c = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const T v = r[j];
    c += inclusive ? (v >= t) : (v > t);
  }
  for (int offset = 16; offset > 0; offset >>= 1) c += __shfl_down_sync(0xffffffffu, c, offset);
  __shared__ unsigned long long warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = c;
  __syncthreads();
  if (warp == 0) {
    c = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0;
    for (int offset = 16; offset > 0; offset >>= 1) c += __shfl_down_sync(0xffffffffu, c, offset);
    if (lane == 0) out[row] += static_cast<int64_t>(c);
  }
}

}  // namespace

template <typename T>
void launch_count_above_cuda(const T* scores, int64_t n, int64_t m, int64_t stride_row, const T* thr, int64_t* out,
                             bool inclusive, void* stream) {
  if (n == 0) return;
  count_above_kernel<T><<<static_cast<unsigned>(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      scores, m, stride_row, thr, out, inclusive);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("count_above_kernel: ") + cudaGetErrorString(err));
}

template void launch_count_above_cuda<float>(const float*, int64_t, int64_t, int64_t, const float*, int64_t*, bool,
                                             void*);
template void launch_count_above_cuda<double>(const double*, int64_t, int64_t, int64_t, const double*, int64_t*,
                                              bool, void*);

}  // namespace vlk
