// Bindings of the pairwise IoU kernels (boxes, temporal segments, packed dense masks, COCO xywh boxes). Every
// argument is a tensor (vlk::TensorArg) checked here for everything the kernel indexes, and the device (CPU / CUDA)
// and float dtype are dispatched here, so torch.ops.vlkernels.* called directly with a wrong tensor raises a
// ValueError. `stream` is the CUDA stream handle (ignored on CPU).
#include <optional>

#include "boxes/box_iou.h"
#include "boxes/launch_args.h"
#include "boxes/mask_iou.h"
#include "boxes/rle.h"
#include "registry.h"

namespace py = pybind11;
using vlk::TensorArg;

namespace {

// x1 [B, N, d] and x2 [B, M, d] (aligned: M == N) of one float dtype and device, contiguous; out [B, N, M] (aligned:
// [B, N]) of their dtype.
struct PairArgs {
  TensorArg x1, x2, out;
  bool cuda;
};

PairArgs pair_args(py::handle x1_obj, py::handle x2_obj, py::handle out_obj, const char* n1, const char* n2,
                   int64_t d, bool aligned) {
  auto x1 = TensorArg::from(x1_obj, n1);
  x1.ndim(3).size(2, d, "coordinates").dtype_in({vlk::kF32, vlk::kF64}).contiguous();
  auto x2 = TensorArg::from(x2_obj, n2);
  x2.ndim(3).size(2, d, "coordinates").dtype_is(x1.dtype()).same_device(x1).size(0, x1.size(0), "batch");
  x2.contiguous();
  if (aligned) x2.size(1, x1.size(1), "aligned: one per item of the first set");
  auto out = TensorArg::from(out_obj, "out");
  out.ndim(aligned ? 2 : 3).dtype_is(x1.dtype()).same_device(x1).size(0, x1.size(0)).size(1, x1.size(1));
  if (!aligned) out.size(2, x2.size(1));
  out.contiguous().writable();
  const bool cuda = vlk::boxes::on_cuda(x1);
  return {std::move(x1), std::move(x2), std::move(out), cuda};
}

void check_enum(int value, int count, const char* what) {
  if (value < 0 || value >= count) {
    throw py::value_error(std::string(what) + " must lie in [0, " + std::to_string(count - 1) + "], got " +
                          std::to_string(value));
  }
}

// Optional per-batch valid counts: None, or int64 [B] on the boxes' device (the kernels clamp the values).
std::optional<TensorArg> valid_arg(py::handle obj, const char* name, const TensorArg& boxes) {
  if (obj.is_none()) return std::nullopt;
  return vlk::boxes::int64_vector(obj, name, boxes, boxes.size(0), "one per batch row");
}

void box_iou(py::handle b1, py::handle b2, py::handle out, int fmt, int kind, bool aligned, double eps,
             py::handle valid1, py::handle valid2, [[maybe_unused]] std::uintptr_t stream) {
  check_enum(fmt, 3, "fmt");
  check_enum(kind, 4, "kind");
  PairArgs a = pair_args(b1, b2, out, "boxes1", "boxes2", 4, aligned);
  const auto v1 = valid_arg(valid1, "valid1", a.x1), v2 = valid_arg(valid2, "valid2", a.x1);
  const int64_t batch = a.x1.size(0), n = a.x1.size(1), m = a.x2.size(1);
  if (a.out.numel() == 0) return;
  const int64_t* p1 = v1 ? v1->data<const int64_t>() : nullptr;
  const int64_t* p2 = v2 ? v2->data<const int64_t>() : nullptr;
  py::gil_scoped_release release;
  vlk::dispatch_float(a.x1, [&](auto tag) {
    using T = decltype(tag);
    const T* x1 = a.x1.data<const T>();
    const T* x2 = a.x2.data<const T>();
    if (!a.cuda) {
      vlk::launch_box_iou<T>(x1, x2, a.out.data<T>(), batch, n, m, fmt, kind, aligned, static_cast<T>(eps), p1, p2);
    }
#ifdef VLK_WITH_CUDA
    else {
      vlk::launch_box_iou_cuda<T>(x1, x2, a.out.data<T>(), batch, n, m, fmt, kind, aligned, static_cast<T>(eps), p1,
                                  p2, reinterpret_cast<void*>(stream));
    }
#endif
  });
}

void segment_iou(py::handle s1, py::handle s2, py::handle out, int mode, bool aligned, [[maybe_unused]] std::uintptr_t stream) {
  check_enum(mode, 2, "mode");
  PairArgs a = pair_args(s1, s2, out, "seg1", "seg2", 2, aligned);
  const int64_t batch = a.x1.size(0), n = a.x1.size(1), m = a.x2.size(1);
  if (a.out.numel() == 0) return;
  py::gil_scoped_release release;
  vlk::dispatch_float(a.x1, [&](auto tag) {
    using T = decltype(tag);
    if (!a.cuda) {
      vlk::launch_segment_iou<T>(a.x1.data<const T>(), a.x2.data<const T>(), a.out.data<T>(), batch, n, m, mode,
                                 aligned);
    }
#ifdef VLK_WITH_CUDA
    else {
      vlk::launch_segment_iou_cuda<T>(a.x1.data<const T>(), a.x2.data<const T>(), a.out.data<T>(), batch, n, m, mode,
                                      aligned, reinterpret_cast<void*>(stream));
    }
#endif
  });
}

// masks [K, P] uint8 -> words [K, ceil(P / 64)] int64 (the bits; read as uint64 by the kernels), area [K] int64.
void mask_pack(py::handle masks_obj, py::handle words_obj, py::handle area_obj, [[maybe_unused]] std::uintptr_t stream) {
  auto masks = TensorArg::from(masks_obj, "masks");
  masks.ndim(2).dtype_is(vlk::kU8).contiguous();
  const int64_t k = masks.size(0), pixels = masks.size(1);
  auto words = TensorArg::from(words_obj, "words");
  words.ndim(2).dtype_is(vlk::kI64).same_device(masks).size(0, k).size(1, vlk::mask_words(pixels), "64-bit words");
  words.contiguous().writable();
  auto area = vlk::boxes::int64_vector(area_obj, "area", masks, k, "one per mask");
  area.writable();
  const bool cuda = vlk::boxes::on_cuda(masks);
  if (k == 0) return;
  auto* w = reinterpret_cast<uint64_t*>(words.data<int64_t>());
  py::gil_scoped_release release;
  if (!cuda) vlk::launch_mask_pack(masks.data<const uint8_t>(), k, pixels, w, area.data<int64_t>());
#ifdef VLK_WITH_CUDA
  else vlk::launch_mask_pack_cuda(masks.data<const uint8_t>(), k, pixels, w, area.data<int64_t>(),
                                  reinterpret_cast<void*>(stream));
#endif
}

// Packed words a [B, N, nw], b [B, M, nw] int64 with areas [B, N] / [B, M] -> out float64 and inter int64,
// [B, N, M] (aligned: [B, N]).
void mask_iou(py::handle a_obj, py::handle area_a_obj, py::handle b_obj, py::handle area_b_obj, bool aligned,
              py::handle out_obj, py::handle inter_obj, [[maybe_unused]] std::uintptr_t stream) {
  auto a = TensorArg::from(a_obj, "words1");
  a.ndim(3).dtype_is(vlk::kI64).contiguous();
  const int64_t batch = a.size(0), n = a.size(1), nw = a.size(2);
  auto b = TensorArg::from(b_obj, "words2");
  b.ndim(3).dtype_is(vlk::kI64).same_device(a).size(0, batch, "batch").size(2, nw, "words per mask").contiguous();
  const int64_t m = b.size(1);
  if (aligned) b.size(1, n, "aligned: one per mask of words1");
  auto area_a = TensorArg::from(area_a_obj, "area1");
  area_a.ndim(2).dtype_is(vlk::kI64).same_device(a).size(0, batch).size(1, n).contiguous();
  auto area_b = TensorArg::from(area_b_obj, "area2");
  area_b.ndim(2).dtype_is(vlk::kI64).same_device(a).size(0, batch).size(1, m).contiguous();
  auto out = TensorArg::from(out_obj, "out");
  auto inter = TensorArg::from(inter_obj, "inter");
  out.dtype_is(vlk::kF64);
  inter.dtype_is(vlk::kI64);
  for (TensorArg* t : {&out, &inter}) {
    t->ndim(aligned ? 2 : 3).same_device(a).size(0, batch).size(1, n);
    if (!aligned) t->size(2, m);
    t->contiguous().writable();
  }
  const bool cuda = vlk::boxes::on_cuda(a);
  if (out.numel() == 0) return;
  const auto* wa = reinterpret_cast<const uint64_t*>(a.data<const int64_t>());
  const auto* wb = reinterpret_cast<const uint64_t*>(b.data<const int64_t>());
  py::gil_scoped_release release;
  if (!cuda) {
    vlk::launch_mask_iou(wa, area_a.data<const int64_t>(), wb, area_b.data<const int64_t>(), batch, n, m, nw, aligned,
                         out.data<double>(), inter.data<int64_t>());
  }
#ifdef VLK_WITH_CUDA
  else {
    vlk::launch_mask_iou_cuda(wa, area_a.data<const int64_t>(), wb, area_b.data<const int64_t>(), batch, n, m, nw,
                              aligned, out.data<double>(), inter.data<int64_t>(), reinterpret_cast<void*>(stream));
  }
#endif
}

// pycocotools bbIou: xywh float64 dt [D, 4], gt [G, 4], iscrowd uint8 [G] -> out float64 [D, G] (CPU).
void coco_box_iou(py::handle dt_obj, py::handle gt_obj, py::handle crowd_obj, py::handle out_obj) {
  auto dt = TensorArg::from(dt_obj, "dt");
  dt.ndim(2).size(1, 4, "xywh").dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  auto gt = TensorArg::from(gt_obj, "gt");
  gt.ndim(2).size(1, 4, "xywh").dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  auto crowd = TensorArg::from(crowd_obj, "iscrowd");
  crowd.ndim(1).dtype_is(vlk::kU8).device(vlk::kCPU).size(0, gt.size(0), "one per ground truth").contiguous();
  auto out = TensorArg::from(out_obj, "out");
  out.ndim(2).dtype_is(vlk::kF64).device(vlk::kCPU).size(0, dt.size(0)).size(1, gt.size(0)).contiguous().writable();
  py::gil_scoped_release release;
  vlk::launch_coco_box_iou(dt.data<const double>(), dt.size(0), gt.data<const double>(), gt.size(0),
                           crowd.data<const uint8_t>(), out.data<double>());
}

}  // namespace

VLK_BIND(boxes) {
  m.def("box_iou", &box_iou, py::arg("boxes1"), py::arg("boxes2"), py::arg("out"), py::arg("fmt"), py::arg("kind"),
        py::arg("aligned"), py::arg("eps"), py::arg("valid1") = py::none(), py::arg("valid2") = py::none(),
        py::arg("stream") = 0);
  m.def("segment_iou", &segment_iou, py::arg("seg1"), py::arg("seg2"), py::arg("out"), py::arg("mode"),
        py::arg("aligned"), py::arg("stream") = 0);
  m.def("mask_pack", &mask_pack, py::arg("masks"), py::arg("words"), py::arg("area"), py::arg("stream") = 0);
  m.def("mask_iou", &mask_iou, py::arg("words1"), py::arg("area1"), py::arg("words2"), py::arg("area2"),
        py::arg("aligned"), py::arg("out"), py::arg("inter"), py::arg("stream") = 0);
  m.def("coco_box_iou", &coco_box_iou, py::arg("dt"), py::arg("gt"), py::arg("iscrowd"), py::arg("out"));
}
