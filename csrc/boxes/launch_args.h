// Checks shared by the boxes bindings (python/bind_boxes*.cpp) on top of vlk::TensorArg: where a kernel runs, the
// CSR of an RLE set, and the byte geometry of a mask batch. Each throws a ValueError naming the argument, so a
// binding called directly with a wrong tensor raises instead of reading out of bounds. Needs the GIL (TensorArg).
#pragma once

#include <cstdint>
#include <string>

#include "boxes/rle_counts.h"
#include "core/tensor_arg.h"

namespace vlk::boxes {

// True for CUDA, false for CPU; anything else (or CUDA in a CPU-only build) is refused.
inline bool on_cuda(const TensorArg& t) {
  if (t.device_type() == kCUDA) {
#ifndef VLK_WITH_CUDA
    t.refuse("is on CUDA but this build of vlkernels._C has no CUDA kernels");
#endif
    return true;
  }
  if (t.device_type() != kCPU) {
    t.refuse("is on device type " + std::to_string(t.device_type()) + " (DLPack numbering); expected cpu or cuda");
  }
  return false;
}

// A 1-D contiguous int64 tensor on `like`'s device, of `n` entries (n < 0: any).
inline TensorArg int64_vector(pybind11::handle obj, const char* name, const TensorArg& like, int64_t n = -1,
                              const char* what = nullptr) {
  auto t = TensorArg::from(obj, name);
  t.ndim(1).dtype_is(kI64).same_device(like).contiguous();
  if (n >= 0) t.size(0, n, what);
  return t;
}

// A 1-D contiguous int64 tensor of runs (counts, their prefix sums, boundary positions) on any device.
inline TensorArg runs_vector(pybind11::handle obj, const char* name) {
  auto t = TensorArg::from(obj, name);
  t.ndim(1).dtype_is(kI64).contiguous();
  return t;
}

// offsets of an RLE set: 1-D int64 with N + 1 >= 1 entries on counts' device. On CPU its values are read too:
// 0 first, non-decreasing, ending at counts.numel() (what keeps counts[offsets[k] ..] in bounds). CUDA values stay
// on the device, unread (the Python layer validated them when it built the RleCounts).
inline TensorArg csr_offsets(pybind11::handle obj, const TensorArg& counts, const char* name = "offsets") {
  auto off = int64_vector(obj, name, counts);
  if (off.size(0) < 1) off.refuse("must hold N + 1 >= 1 entries");
  if (counts.device_type() == kCPU) {
    const std::string error = rle_check_csr(off.data<const int64_t>(), off.size(0) - 1, counts.numel());
    if (!error.empty()) off.refuse("is not a valid CSR: " + error);
  }
  return off;
}

// CPU run lengths: each in [0, max_run]; when hw >= 0, mask k's runs must also sum to hw (the masks the index
// builders and string codecs walk).
inline void check_runs(const TensorArg& counts, const TensorArg& offsets, int64_t max_run, int64_t hw = -1) {
  if (counts.device_type() != kCPU) return;
  const int64_t* c = counts.data<const int64_t>();
  const int64_t* o = offsets.data<const int64_t>();
  const uint64_t limit = static_cast<uint64_t>(max_run);
  for (int64_t k = 0; k + 1 < offsets.size(0); ++k) {
    // Branch-free (vectorizes): an unsigned compare catches negative runs too, and the unsigned sum wraps instead
    // of overflowing on bad input (it is only compared once every run is known to lie in range); the culprit is
    // searched only on failure.
    uint64_t bad = 0, sum = 0;
    for (int64_t j = o[k]; j < o[k + 1]; ++j) {
      bad |= static_cast<uint64_t>(static_cast<uint64_t>(c[j]) > limit);
      sum += static_cast<uint64_t>(c[j]);
    }
    if (bad) {
      int64_t j = o[k];
      while (static_cast<uint64_t>(c[j]) <= limit) ++j;
      counts.refuse("holds " + std::to_string(c[j]) + " at index " + std::to_string(j) +
                    ": run lengths must lie in [0, " + std::to_string(max_run) + "]");
    }
    if (hw >= 0 && sum != static_cast<uint64_t>(hw)) {
      counts.refuse("of mask " + std::to_string(k) + " sum to " + std::to_string(sum) + " but the size h*w is " +
                    std::to_string(hw));
    }
  }
}

// Compressed strings back to back: buf 1-D uint8 CPU, str_off int64 [N + 1] whose values are a CSR over buf (string
// k is buf[str_off[k] .. str_off[k + 1])).
struct StringsArg {
  TensorArg buf, off;
  int64_t n() const { return off.size(0) - 1; }
};
inline StringsArg strings_arg(pybind11::handle buf_obj, pybind11::handle off_obj) {
  auto buf = TensorArg::from(buf_obj, "strings");
  buf.ndim(1).dtype_is(kU8).device(kCPU).contiguous();
  auto off = int64_vector(off_obj, "string_offsets", buf);
  if (off.size(0) < 1) off.refuse("must hold N + 1 >= 1 entries");
  const std::string error = rle_check_csr(off.data<const int64_t>(), off.size(0) - 1, buf.numel());
  if (!error.empty()) off.refuse("is not a valid CSR over strings: " + error);
  return {std::move(buf), std::move(off)};
}

constexpr int64_t kMaxPixels = (int64_t{1} << 32) - 1;  // COCO RLE keeps sizes and runs in 32-bit unsigned ints

// masks: (N, H, W) uint8 (nonzero = foreground) with any non-negative strides (bytes = elements) -> the kernels'
// addressing, pixel (y, x) of mask k at data[k * sn + y * sy + x * sx]. At most 2^32 - 1 pixels per mask.
inline MaskStrides mask_strides(TensorArg& masks) {
  masks.ndim(3).dtype_is(kU8).inner_contiguous(0);
  if (masks.size(1) * masks.size(2) > kMaxPixels) masks.refuse("has more than 2^32 - 1 pixels per mask");
  return MaskStrides{masks.size(1), masks.size(2), masks.stride(0), masks.stride(1), masks.stride(2)};
}

}  // namespace vlk::boxes
