// CUDA twins of box_iou.cpp. Pairwise grid: x over the m columns (256 threads), y over the batch*n rows (row
// blocks beyond 65535 loop); each thread computes one output, the per-pair formula shared with the CPU
// (box_math.h). Aligned: a 1-D grid-stride loop over batch*n pairs.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "boxes/box_iou.h"
#include "boxes/box_math.h"

namespace vlk {
namespace {

__device__ __forceinline__ int64_t clamp_count(const int64_t* valid, int64_t b, int64_t limit) {
  if (valid == nullptr) return limit;
  const int64_t v = valid[b];
  return v < 0 ? 0 : (v > limit ? limit : v);
}

template <typename T, int KIND>
__device__ __forceinline__ T one_pair(const T* a, const T* b, int fmt, T eps) {
  const boxes::BoxTerms<T> A = boxes::box_terms(a, fmt, KIND);
  const boxes::BoxTerms<T> B = boxes::box_terms(b, fmt, KIND);
  return boxes::pair_iou<T, KIND>(A.x1, A.y1, A.x2, A.y2, A.area, A.cx, A.cy, A.atan_wh, B.x1, B.y1, B.x2, B.y2,
                                  B.area, B.cx, B.cy, B.atan_wh, eps);
}

template <typename T, int KIND>
__global__ void box_iou_kernel(const T* __restrict__ boxes1, const T* __restrict__ boxes2, T* __restrict__ out,
                               int64_t batch, int64_t n, int64_t m, int fmt, T eps, const int64_t* __restrict__ valid1,
                               const int64_t* __restrict__ valid2) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= m) return;
  for (int64_t r = blockIdx.y; r < batch * n; r += gridDim.y) {
    const int64_t b = r / n, i = r % n;
    const bool ok = i < clamp_count(valid1, b, n) && j < clamp_count(valid2, b, m);
    out[r * m + j] = ok ? one_pair<T, KIND>(boxes1 + 4 * r, boxes2 + 4 * (b * m + j), fmt, eps) : T(0);
  }
}

template <typename T, int KIND>
__global__ void box_iou_aligned_kernel(const T* __restrict__ boxes1, const T* __restrict__ boxes2, T* __restrict__ out,
                                       int64_t batch, int64_t n, int fmt, T eps, const int64_t* __restrict__ valid1,
                                       const int64_t* __restrict__ valid2) {
  const int64_t total = batch * n;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < total;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = r / n, i = r % n;
    const bool ok = i < clamp_count(valid1, b, n) && i < clamp_count(valid2, b, n);
    out[r] = ok ? one_pair<T, KIND>(boxes1 + 4 * r, boxes2 + 4 * r, fmt, eps) : T(0);
  }
}

template <typename T, int MODE>
__global__ void segment_iou_kernel(const T* __restrict__ seg1, const T* __restrict__ seg2, T* __restrict__ out,
                                   int64_t batch, int64_t n, int64_t m, bool aligned) {
  const int64_t total = aligned ? batch * n : batch * n * m;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = aligned ? t : t / m;
    const int64_t k = aligned ? t : (r / n) * m + t % m;
    out[t] = boxes::pair_segment_iou<T, MODE>(seg1[2 * r], seg1[2 * r + 1], seg2[2 * k], seg2[2 * k + 1]);
  }
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

unsigned grid_1d(int64_t total) { return static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535)); }

template <typename T, int KIND>
void dispatch(const T* boxes1, const T* boxes2, T* out, int64_t batch, int64_t n, int64_t m, int fmt, bool aligned,
              T eps, const int64_t* valid1, const int64_t* valid2, cudaStream_t stream) {
  if (aligned) {
    box_iou_aligned_kernel<T, KIND>
        <<<grid_1d(batch * n), 256, 0, stream>>>(boxes1, boxes2, out, batch, n, fmt, eps, valid1, valid2);
  } else {
    const dim3 grid(static_cast<unsigned>((m + 255) / 256), static_cast<unsigned>(std::min<int64_t>(batch * n, 65535)));
    box_iou_kernel<T, KIND><<<grid, 256, 0, stream>>>(boxes1, boxes2, out, batch, n, m, fmt, eps, valid1, valid2);
  }
  check_launch("box_iou_kernel");
}

}  // namespace

template <typename T>
void launch_box_iou_cuda(const T* boxes1, const T* boxes2, T* out, int64_t batch, int64_t n, int64_t m, int fmt,
                         int kind, bool aligned, T eps, const int64_t* valid1, const int64_t* valid2, void* stream) {
  if (batch == 0 || n == 0 || (!aligned && m == 0)) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (kind) {
    case boxes::kGIoU:
      return dispatch<T, boxes::kGIoU>(boxes1, boxes2, out, batch, n, m, fmt, aligned, eps, valid1, valid2, s);
    case boxes::kDIoU:
      return dispatch<T, boxes::kDIoU>(boxes1, boxes2, out, batch, n, m, fmt, aligned, eps, valid1, valid2, s);
    case boxes::kCIoU:
      return dispatch<T, boxes::kCIoU>(boxes1, boxes2, out, batch, n, m, fmt, aligned, eps, valid1, valid2, s);
    default:
      return dispatch<T, boxes::kIoU>(boxes1, boxes2, out, batch, n, m, fmt, aligned, eps, valid1, valid2, s);
  }
}

template <typename T>
void launch_segment_iou_cuda(const T* seg1, const T* seg2, T* out, int64_t batch, int64_t n, int64_t m, int mode,
                             bool aligned, void* stream) {
  const int64_t total = aligned ? batch * n : batch * n * m;
  if (total == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (mode == boxes::kSegHull) {
    segment_iou_kernel<T, boxes::kSegHull><<<grid_1d(total), 256, 0, s>>>(seg1, seg2, out, batch, n, m, aligned);
  } else {
    segment_iou_kernel<T, boxes::kSegSum><<<grid_1d(total), 256, 0, s>>>(seg1, seg2, out, batch, n, m, aligned);
  }
  check_launch("segment_iou_kernel");
}

template void launch_box_iou_cuda<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, int, int, bool,
                                         float, const int64_t*, const int64_t*, void*);
template void launch_box_iou_cuda<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, int, int,
                                          bool, double, const int64_t*, const int64_t*, void*);
template void launch_segment_iou_cuda<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, int, bool,
                                             void*);
template void launch_segment_iou_cuda<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, int,
                                              bool, void*);

}  // namespace vlk
