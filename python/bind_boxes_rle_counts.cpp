// Bindings of COCO RLE on run counts in CSR form, on CPU or CUDA (RleCounts): the two-pass encoder, decode, area,
// bbox and IoU on run sums. Tensors only (vlk::TensorArg), checked here: shapes, dtypes, devices and strides always;
// on CPU also the CSR (and the runs where a kernel's arithmetic depends on them), so a wrong tensor is a ValueError.
// CUDA tensors' values are not read here (that would synchronize): the Python layer validated them. `stream` is the
// CUDA stream handle (ignored on CPU).
#include "boxes/launch_args.h"
#include "boxes/rle.h"
#include "boxes/rle_counts.h"
#include "registry.h"

namespace py = pybind11;
using vlk::TensorArg;
using vlk::boxes::csr_offsets;
using vlk::boxes::int64_vector;
using vlk::boxes::on_cuda;
using vlk::boxes::runs_vector;

namespace {

[[maybe_unused]] void* as_stream(std::uintptr_t s) { return reinterpret_cast<void*>(s); }

// vlk::launch_<op>(args...) on the CPU, vlk::launch_<op>_cuda(args..., stream) on CUDA: one argument list for both
// where the twins take the same arguments.
#ifdef VLK_WITH_CUDA
#define VLK_CPU_OR_CUDA(cuda, stream, op, ...) \
  ((cuda) ? vlk::op##_cuda(__VA_ARGS__, as_stream(stream)) : vlk::op(__VA_ARGS__))
#else
#define VLK_CPU_OR_CUDA(cuda, stream, op, ...) ((void)(cuda), vlk::op(__VA_ARGS__))
#endif

// The two-pass encoder (CUDA, and its CPU twin under test). chunk_cnt / chunk_base: int64 [N, ceil(H*W / chunk)].
TensorArg chunk_table(py::handle obj, const char* name, const TensorArg& masks) {
  const int64_t hw = masks.size(1) * masks.size(2);
  auto t = TensorArg::from(obj, name);
  t.ndim(2).dtype_is(vlk::kI64).same_device(masks).size(0, masks.size(0), "one row per mask");
  t.size(1, (hw + vlk::rle::kChunk - 1) / vlk::rle::kChunk, "one per chunk of rle_chunk pixels").contiguous();
  return t;
}

void rle_count_chunks(py::handle masks_obj, py::handle chunk_cnt_obj, [[maybe_unused]] std::uintptr_t stream) {
  auto masks = TensorArg::from(masks_obj, "masks");
  const vlk::MaskStrides ms = vlk::boxes::mask_strides(masks);
  auto cnt = chunk_table(chunk_cnt_obj, "chunk_cnt", masks);
  cnt.writable();
  const bool cuda = on_cuda(masks);
  if (cnt.numel() == 0) return;
  py::gil_scoped_release release;
  VLK_CPU_OR_CUDA(cuda, stream, launch_rle_count_chunks, masks.data<const uint8_t>(), masks.size(0), ms,
                  cnt.data<int64_t>());
}

void rle_write_ends(py::handle masks_obj, py::handle chunk_base_obj, py::handle offsets_obj, py::handle ends_obj,
                    [[maybe_unused]] std::uintptr_t stream) {
  auto masks = TensorArg::from(masks_obj, "masks");
  const vlk::MaskStrides ms = vlk::boxes::mask_strides(masks);
  auto base = chunk_table(chunk_base_obj, "chunk_base", masks);
  auto ends = runs_vector(ends_obj, "ends");
  ends.same_device(masks).writable();
  auto offsets = csr_offsets(offsets_obj, ends);
  offsets.size(0, masks.size(0) + 1, "N + 1");
  const bool cuda = on_cuda(masks);
  if (base.numel() == 0) return;
  bool fits = true;
  {
    py::gil_scoped_release release;
    if (!cuda) {
      fits = vlk::launch_rle_write_ends(masks.data<const uint8_t>(), masks.size(0), ms, base.data<const int64_t>(),
                                        offsets.data<const int64_t>(), ends.data<int64_t>());
    }
#ifdef VLK_WITH_CUDA
    else vlk::launch_rle_write_ends_cuda(masks.data<const uint8_t>(), masks.size(0), ms, base.data<const int64_t>(),
                                         offsets.data<const int64_t>(), ends.data<int64_t>(), as_stream(stream));
#endif
  }
  if (!fits) base.refuse("does not match the masks' boundary counts and offsets (a write would leave ends)");
}

void rle_runs_from_ends(py::handle ends_obj, py::handle offsets_obj, int64_t hw, py::handle counts_obj,
                        [[maybe_unused]] std::uintptr_t stream) {
  auto ends = runs_vector(ends_obj, "ends");
  auto offsets = csr_offsets(offsets_obj, ends);
  auto counts = runs_vector(counts_obj, "counts");
  counts.same_device(ends).size(0, ends.size(0), "one per run").writable();
  const bool cuda = on_cuda(ends);
  const int64_t n = offsets.size(0) - 1;
  if (n == 0) return;
  py::gil_scoped_release release;
  VLK_CPU_OR_CUDA(cuda, stream, launch_rle_runs_from_ends, ends.data<const int64_t>(), offsets.data<const int64_t>(),
                  n, hw, counts.data<int64_t>());
}

// csum: inclusive prefix sum of the runs; out: uint8 [N, W, H] (column-major masks), written whole.
void rle_decode_csum(py::handle csum_obj, py::handle offsets_obj, py::handle out_obj,
                     [[maybe_unused]] std::uintptr_t stream) {
  auto csum = runs_vector(csum_obj, "csum");
  auto offsets = csr_offsets(offsets_obj, csum);
  const int64_t n = offsets.size(0) - 1;
  auto out = TensorArg::from(out_obj, "out");
  out.ndim(3).dtype_is(vlk::kU8).same_device(csum).size(0, n, "one per mask").contiguous().writable();
  const bool cuda = on_cuda(csum);
  const int64_t hw = out.size(1) * out.size(2);
  if (out.numel() == 0) return;
  py::gil_scoped_release release;
  VLK_CPU_OR_CUDA(cuda, stream, launch_rle_decode_csum, csum.data<const int64_t>(), offsets.data<const int64_t>(), n,
                  hw, out.data<uint8_t>());
}

void check_parts(int64_t parts) {
  if (parts < 1) throw py::value_error("parts must be >= 1, got " + std::to_string(parts));
}

void rle_area(py::handle counts_obj, py::handle offsets_obj, py::handle out_obj, int64_t parts,
              [[maybe_unused]] std::uintptr_t stream) {
  check_parts(parts);
  auto counts = runs_vector(counts_obj, "counts");
  auto offsets = csr_offsets(offsets_obj, counts);
  const int64_t n = offsets.size(0) - 1;
  auto out = int64_vector(out_obj, "out", counts, n, "one per mask");
  out.writable();
  const bool cuda = on_cuda(counts);
  vlk::boxes::check_runs(counts, offsets, vlk::boxes::kMaxPixels);
  if (n == 0) return;
  py::gil_scoped_release release;
  if (!cuda) vlk::launch_rle_area(counts.data<const int64_t>(), offsets.data<const int64_t>(), n, out.data<int64_t>(),
                                  parts);
#ifdef VLK_WITH_CUDA
  else vlk::launch_rle_area_cuda(counts.data<const int64_t>(), offsets.data<const int64_t>(), n, out.data<int64_t>(),
                                 as_stream(stream));
#endif
}

// h, w: int64 [N] (sizes may differ per mask); out: float64 [N, 4] xywh.
void rle_to_bbox(py::handle counts_obj, py::handle offsets_obj, py::handle h_obj, py::handle w_obj,
                 py::handle out_obj, [[maybe_unused]] std::uintptr_t stream) {
  auto counts = runs_vector(counts_obj, "counts");
  auto offsets = csr_offsets(offsets_obj, counts);
  const int64_t n = offsets.size(0) - 1;
  auto h = int64_vector(h_obj, "h", counts, n, "one per mask");
  auto w = int64_vector(w_obj, "w", counts, n, "one per mask");
  auto out = TensorArg::from(out_obj, "out");
  out.ndim(2).dtype_is(vlk::kF64).same_device(counts).size(0, n, "one per mask").size(1, 4, "xywh").contiguous();
  out.writable();
  const bool cuda = on_cuda(counts);
  if (n == 0) return;
  py::gil_scoped_release release;
  VLK_CPU_OR_CUDA(cuda, stream, launch_rle_to_bbox, counts.data<const int64_t>(), offsets.data<const int64_t>(), n,
                  h.data<const int64_t>(), w.data<const int64_t>(), out.data<double>());
}

// One side of an IoU on run sums: csum [T], offsets [N + 1], area int64 [N], bbox float64 [N, 4].
struct CsumSide {
  TensorArg csum, offsets, area, bbox;
};

CsumSide csum_side(py::handle c, py::handle o, py::handle a, py::handle b, const char* side, const TensorArg* like) {
  const std::string p(side);
  auto csum = runs_vector(c, (p + "_csum").c_str());
  if (like != nullptr) csum.same_device(*like);
  auto offsets = csr_offsets(o, csum, (p + "_offsets").c_str());
  const int64_t n = offsets.size(0) - 1;
  auto area = int64_vector(a, (p + "_area").c_str(), csum, n, "one per mask");
  auto bbox = TensorArg::from(b, (p + "_bbox").c_str());
  bbox.ndim(2).dtype_is(vlk::kF64).same_device(csum).size(0, n, "one per mask").size(1, 4, "xywh").contiguous();
  return {std::move(csum), std::move(offsets), std::move(area), std::move(bbox)};
}

// h, w: the mask size (the CPU column planes index columns with it).
void rle_iou_csum(py::handle dc, py::handle doff, py::handle darea, py::handle dbox, py::handle gc, py::handle goff,
                  py::handle garea, py::handle gbox, int64_t h, int64_t w, py::handle crowd_obj, py::handle out_obj,
                  int64_t parts, [[maybe_unused]] std::uintptr_t stream) {
  check_parts(parts);
  if (h < 0 || w < 0 || (w > 0 && h > vlk::boxes::kMaxPixels / w)) {
    throw py::value_error("size (h, w) must be non-negative with h*w < 2**32, got (" + std::to_string(h) + ", " +
                          std::to_string(w) + ")");
  }
  CsumSide d = csum_side(dc, doff, darea, dbox, "dt", nullptr);
  CsumSide g = csum_side(gc, goff, garea, gbox, "gt", &d.csum);
  const int64_t nd = d.area.size(0), ng = g.area.size(0);
  auto crowd = TensorArg::from(crowd_obj, "iscrowd");
  crowd.ndim(1).dtype_is(vlk::kU8).same_device(d.csum).size(0, ng, "one per ground truth").contiguous();
  auto out = TensorArg::from(out_obj, "out");
  out.ndim(2).dtype_is(vlk::kF64).same_device(d.csum).size(0, nd).size(1, ng).contiguous().writable();
  const bool cuda = on_cuda(d.csum);
  if (out.numel() == 0) return;
  py::gil_scoped_release release;
  if (!cuda) {
    vlk::launch_rle_iou_csum(d.csum.data<const int64_t>(), d.offsets.data<const int64_t>(),
                             d.area.data<const int64_t>(), d.bbox.data<const double>(), nd,
                             g.csum.data<const int64_t>(), g.offsets.data<const int64_t>(),
                             g.area.data<const int64_t>(), g.bbox.data<const double>(), ng, h, w,
                             crowd.data<const uint8_t>(), out.data<double>(), parts);
  }
#ifdef VLK_WITH_CUDA
  else {
    vlk::launch_rle_iou_csum_cuda(d.csum.data<const int64_t>(), d.offsets.data<const int64_t>(),
                                  d.area.data<const int64_t>(), d.bbox.data<const double>(), nd,
                                  g.csum.data<const int64_t>(), g.offsets.data<const int64_t>(),
                                  g.area.data<const int64_t>(), g.bbox.data<const double>(), ng,
                                  crowd.data<const uint8_t>(), out.data<double>(), as_stream(stream));
  }
#endif
}

}  // namespace

VLK_BIND(boxes_rle_counts) {
  m.attr("rle_chunk") = vlk::rle::kChunk;
  m.def("rle_count_chunks", &rle_count_chunks, py::arg("masks"), py::arg("chunk_cnt"), py::arg("stream") = 0);
  m.def("rle_write_ends", &rle_write_ends, py::arg("masks"), py::arg("chunk_base"), py::arg("offsets"),
        py::arg("ends"), py::arg("stream") = 0);
  m.def("rle_runs_from_ends", &rle_runs_from_ends, py::arg("ends"), py::arg("offsets"), py::arg("hw"),
        py::arg("counts"), py::arg("stream") = 0);
  m.def("rle_decode_csum", &rle_decode_csum, py::arg("csum"), py::arg("offsets"), py::arg("out"),
        py::arg("stream") = 0);
  m.def("rle_area", &rle_area, py::arg("counts"), py::arg("offsets"), py::arg("out"), py::arg("parts") = 1,
        py::arg("stream") = 0);
  m.def("rle_to_bbox", &rle_to_bbox, py::arg("counts"), py::arg("offsets"), py::arg("h"), py::arg("w"),
        py::arg("out"), py::arg("stream") = 0);
  m.def("rle_iou_csum", &rle_iou_csum, py::arg("dt_csum"), py::arg("dt_offsets"), py::arg("dt_area"),
        py::arg("dt_bbox"), py::arg("gt_csum"), py::arg("gt_offsets"), py::arg("gt_area"), py::arg("gt_bbox"),
        py::arg("h"), py::arg("w"), py::arg("iscrowd"), py::arg("out"), py::arg("parts") = 1, py::arg("stream") = 0);
}
