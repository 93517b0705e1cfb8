#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>

#include "boxes/box_iou.h"
#include "boxes/mask_iou.h"
#include "boxes/rle.h"
#include "boxes/rle_counts.h"
#include "registry.h"

namespace py = pybind11;
using vlk::bind::ptr;

namespace {

template <typename T>
void box_iou(std::uintptr_t b1, std::uintptr_t b2, std::uintptr_t out, int64_t batch, int64_t n, int64_t m, int fmt,
             int kind, bool aligned, double eps, std::uintptr_t valid1, std::uintptr_t valid2) {
  py::gil_scoped_release release;
  vlk::launch_box_iou<T>(ptr<const T>(b1), ptr<const T>(b2), ptr<T>(out), batch, n, m, fmt, kind, aligned,
                         static_cast<T>(eps), ptr<const int64_t>(valid1), ptr<const int64_t>(valid2));
}

template <typename T>
void segment_iou(std::uintptr_t s1, std::uintptr_t s2, std::uintptr_t out, int64_t batch, int64_t n, int64_t m,
                 int mode, bool aligned) {
  py::gil_scoped_release release;
  vlk::launch_segment_iou<T>(ptr<const T>(s1), ptr<const T>(s2), ptr<T>(out), batch, n, m, mode, aligned);
}

// The CSR of an RLE set reaching a CPU entry point: a bad one comes back as a message (Python raises ValueError;
// no C++ exception crosses these bindings, as elsewhere in this file), never an out-of-bounds read.
std::string check_csr(std::uintptr_t offsets, int64_t n, int64_t total) {
  return vlk::rle_check_csr(ptr<const int64_t>(offsets), n, total);
}

py::array_t<int64_t> to_array(std::vector<int64_t>&& v) {
  auto* heap = new std::vector<int64_t>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  return py::array_t<int64_t>({static_cast<py::ssize_t>(heap->size())}, {sizeof(int64_t)}, heap->data(), owner);
}

py::list to_bytes_list(const std::vector<std::string>& strings) {
  py::list out(strings.size());
  for (size_t k = 0; k < strings.size(); ++k) out[k] = py::bytes(strings[k]);
  return out;
}

py::tuple rle_parse(const std::vector<std::string>& strings, std::uintptr_t hw) {
  std::vector<int64_t> counts, offsets;
  std::string error;
  {
    py::gil_scoped_release release;
    error = vlk::rle_parse_strings(strings, ptr<const int64_t>(hw), counts, offsets);
  }
  // The error travels as a value and Python raises it: C++ exceptions are avoided on this path.
  return py::make_tuple(to_array(std::move(counts)), to_array(std::move(offsets)), error);
}

py::list rle_to_strings(std::uintptr_t counts, std::uintptr_t offsets, int64_t n) {
  std::vector<std::string> s;
  {
    py::gil_scoped_release release;
    s = vlk::rle_to_strings(ptr<const int64_t>(counts), ptr<const int64_t>(offsets), n);
  }
  return to_bytes_list(s);
}

// (h, w, sn, sy, sx) from Python: the mask geometry in bytes.
using Geometry = std::array<int64_t, 5>;
vlk::MaskStrides strides_of(const Geometry& g) { return vlk::MaskStrides{g[0], g[1], g[2], g[3], g[4]}; }

py::list rle_encode(std::uintptr_t masks, int64_t n, const Geometry& geo) {
  std::vector<std::string> s;
  {
    py::gil_scoped_release release;
    s = vlk::rle_encode_strings(ptr<const uint8_t>(masks), n, strides_of(geo));
  }
  return to_bytes_list(s);
}

#ifdef VLK_WITH_CUDA
void* stream_of(std::uintptr_t s) { return reinterpret_cast<void*>(s); }

template <typename T>
void box_iou_cuda(std::uintptr_t b1, std::uintptr_t b2, std::uintptr_t out, int64_t batch, int64_t n, int64_t m,
                  int fmt, int kind, bool aligned, double eps, std::uintptr_t valid1, std::uintptr_t valid2,
                  std::uintptr_t stream) {
  py::gil_scoped_release release;
  vlk::launch_box_iou_cuda<T>(ptr<const T>(b1), ptr<const T>(b2), ptr<T>(out), batch, n, m, fmt, kind, aligned,
                              static_cast<T>(eps), ptr<const int64_t>(valid1), ptr<const int64_t>(valid2),
                              reinterpret_cast<void*>(stream));
}
template <typename T>
void segment_iou_cuda(std::uintptr_t s1, std::uintptr_t s2, std::uintptr_t out, int64_t batch, int64_t n, int64_t m,
                      int mode, bool aligned, std::uintptr_t stream) {
  py::gil_scoped_release release;
  vlk::launch_segment_iou_cuda<T>(ptr<const T>(s1), ptr<const T>(s2), ptr<T>(out), batch, n, m, mode, aligned,
                                  reinterpret_cast<void*>(stream));
}
#endif

}  // namespace

VLK_BIND(boxes) {
  m.def("box_iou_f32", &box_iou<float>);
  m.def("box_iou_f64", &box_iou<double>);
  m.def("segment_iou_f32", &segment_iou<float>);
  m.def("segment_iou_f64", &segment_iou<double>);
  m.def("rle_parse", &rle_parse);
  m.def("rle_to_strings", &rle_to_strings);
  m.def("rle_encode", &rle_encode);
  m.attr("rle_chunk") = vlk::rle::kChunk;
  m.def("rle_encode_runs", [](std::uintptr_t masks, int64_t n, const Geometry& geo) {
    std::vector<int64_t> counts, offsets;
    {
      py::gil_scoped_release release;
      vlk::rle_encode_runs(ptr<const uint8_t>(masks), n, strides_of(geo), counts, offsets);
    }
    return py::make_tuple(to_array(std::move(counts)), to_array(std::move(offsets)));
  });
  m.def("rle_count_chunks", [](std::uintptr_t masks, int64_t n, const Geometry& geo, std::uintptr_t chunk_cnt) {
    py::gil_scoped_release release;
    vlk::launch_rle_count_chunks(ptr<const uint8_t>(masks), n, strides_of(geo), ptr<int64_t>(chunk_cnt));
  });
  m.def("rle_write_ends", [](std::uintptr_t masks, int64_t n, const Geometry& geo, std::uintptr_t chunk_base,
                             std::uintptr_t offsets, std::uintptr_t ends) {
    py::gil_scoped_release release;
    vlk::launch_rle_write_ends(ptr<const uint8_t>(masks), n, strides_of(geo), ptr<const int64_t>(chunk_base),
                               ptr<const int64_t>(offsets), ptr<int64_t>(ends));
  });
  m.def("rle_runs_from_ends", [](std::uintptr_t ends, std::uintptr_t offsets, int64_t n, int64_t hw,
                                 std::uintptr_t counts) {
    py::gil_scoped_release release;
    vlk::launch_rle_runs_from_ends(ptr<const int64_t>(ends), ptr<const int64_t>(offsets), n, hw, ptr<int64_t>(counts));
  });
  m.def("rle_decode_csum", [](std::uintptr_t csum, std::uintptr_t offsets, int64_t n, int64_t hw, std::uintptr_t out,
                              int64_t total) {
    std::string error = check_csr(offsets, n, total);
    if (!error.empty()) return error;
    py::gil_scoped_release release;
    vlk::launch_rle_decode_csum(ptr<const int64_t>(csum), ptr<const int64_t>(offsets), n, hw, ptr<uint8_t>(out));
    return error;
  });
  m.def("rle_iou_csum", [](std::uintptr_t dc, std::uintptr_t doff, std::uintptr_t darea, std::uintptr_t dbox,
                           int64_t nd, std::uintptr_t gc, std::uintptr_t goff, std::uintptr_t garea,
                           std::uintptr_t gbox, int64_t ng, std::uintptr_t iscrowd, std::uintptr_t out,
                           int64_t parts, int64_t dt_total, int64_t gt_total) {
    std::string error = check_csr(doff, nd, dt_total);
    if (error.empty()) error = check_csr(goff, ng, gt_total);
    if (!error.empty()) return error;
    py::gil_scoped_release release;
    vlk::launch_rle_iou_csum(ptr<const int64_t>(dc), ptr<const int64_t>(doff), ptr<const int64_t>(darea),
                             ptr<const double>(dbox), nd, ptr<const int64_t>(gc), ptr<const int64_t>(goff),
                             ptr<const int64_t>(garea), ptr<const double>(gbox), ng, ptr<const uint8_t>(iscrowd),
                             ptr<double>(out), parts);
    return error;
  });
  m.def("rle_area", [](std::uintptr_t counts, std::uintptr_t offsets, int64_t n, std::uintptr_t out, int64_t parts,
                       int64_t total) {
    std::string error = check_csr(offsets, n, total);
    if (!error.empty()) return error;
    py::gil_scoped_release release;
    vlk::launch_rle_area(ptr<const int64_t>(counts), ptr<const int64_t>(offsets), n, ptr<int64_t>(out), parts);
    return error;
  });
  m.def("rle_to_bbox", [](std::uintptr_t counts, std::uintptr_t offsets, int64_t n, std::uintptr_t h, std::uintptr_t w,
                          std::uintptr_t out, int64_t total) {
    std::string error = check_csr(offsets, n, total);
    if (!error.empty()) return error;
    py::gil_scoped_release release;
    vlk::launch_rle_to_bbox(ptr<const int64_t>(counts), ptr<const int64_t>(offsets), n, ptr<const int64_t>(h),
                            ptr<const int64_t>(w), ptr<double>(out));
    return error;
  });
  m.def("rle_iou", [](std::uintptr_t dc, std::uintptr_t doff, int64_t nd, std::uintptr_t gc, std::uintptr_t goff,
                      int64_t ng, int64_t h, int64_t w, std::uintptr_t iscrowd, std::uintptr_t out) {
    py::gil_scoped_release release;
    vlk::launch_rle_iou(ptr<const int64_t>(dc), ptr<const int64_t>(doff), nd, ptr<const int64_t>(gc),
                        ptr<const int64_t>(goff), ng, h, w, ptr<const uint8_t>(iscrowd), ptr<double>(out));
  });
  m.def("coco_box_iou", [](std::uintptr_t dt, int64_t nd, std::uintptr_t gt, int64_t ng, std::uintptr_t iscrowd,
                           std::uintptr_t out) {
    py::gil_scoped_release release;
    vlk::launch_coco_box_iou(ptr<const double>(dt), nd, ptr<const double>(gt), ng, ptr<const uint8_t>(iscrowd),
                             ptr<double>(out));
  });
  m.def("mask_pack", [](std::uintptr_t masks, int64_t k, int64_t pixels, std::uintptr_t words, std::uintptr_t area) {
    py::gil_scoped_release release;
    vlk::launch_mask_pack(ptr<const uint8_t>(masks), k, pixels, ptr<uint64_t>(words), ptr<int64_t>(area));
  });
  m.def("mask_iou", [](std::uintptr_t a, std::uintptr_t area_a, std::uintptr_t b, std::uintptr_t area_b,
                       int64_t batch, int64_t n, int64_t mm, int64_t nw, bool aligned, std::uintptr_t out,
                       std::uintptr_t inter) {
    py::gil_scoped_release release;
    vlk::launch_mask_iou(ptr<const uint64_t>(a), ptr<const int64_t>(area_a), ptr<const uint64_t>(b),
                         ptr<const int64_t>(area_b), batch, n, mm, nw, aligned, ptr<double>(out), ptr<int64_t>(inter));
  });
#ifdef VLK_WITH_CUDA
  m.def("box_iou_cuda_f32", &box_iou_cuda<float>);
  m.def("box_iou_cuda_f64", &box_iou_cuda<double>);
  m.def("segment_iou_cuda_f32", &segment_iou_cuda<float>);
  m.def("segment_iou_cuda_f64", &segment_iou_cuda<double>);
  m.def("mask_pack_cuda", [](std::uintptr_t masks, int64_t k, int64_t pixels, std::uintptr_t words,
                             std::uintptr_t area, std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_mask_pack_cuda(ptr<const uint8_t>(masks), k, pixels, ptr<uint64_t>(words), ptr<int64_t>(area),
                               reinterpret_cast<void*>(stream));
  });
  m.def("mask_iou_cuda", [](std::uintptr_t a, std::uintptr_t area_a, std::uintptr_t b, std::uintptr_t area_b,
                            int64_t batch, int64_t n, int64_t mm, int64_t nw, bool aligned, std::uintptr_t out,
                            std::uintptr_t inter, std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_mask_iou_cuda(ptr<const uint64_t>(a), ptr<const int64_t>(area_a), ptr<const uint64_t>(b),
                              ptr<const int64_t>(area_b), batch, n, mm, nw, aligned, ptr<double>(out),
                              ptr<int64_t>(inter), reinterpret_cast<void*>(stream));
  });
  m.def("rle_count_chunks_cuda", [](std::uintptr_t masks, int64_t n, const Geometry& geo, std::uintptr_t chunk_cnt,
                                    std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_count_chunks_cuda(ptr<const uint8_t>(masks), n, strides_of(geo), ptr<int64_t>(chunk_cnt),
                                      stream_of(stream));
  });
  m.def("rle_write_ends_cuda", [](std::uintptr_t masks, int64_t n, const Geometry& geo, std::uintptr_t chunk_base,
                                  std::uintptr_t offsets, std::uintptr_t ends, std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_write_ends_cuda(ptr<const uint8_t>(masks), n, strides_of(geo), ptr<const int64_t>(chunk_base),
                                    ptr<const int64_t>(offsets), ptr<int64_t>(ends), stream_of(stream));
  });
  m.def("rle_runs_from_ends_cuda", [](std::uintptr_t ends, std::uintptr_t offsets, int64_t n, int64_t hw,
                                      std::uintptr_t counts, std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_runs_from_ends_cuda(ptr<const int64_t>(ends), ptr<const int64_t>(offsets), n, hw,
                                        ptr<int64_t>(counts), stream_of(stream));
  });
  m.def("rle_decode_csum_cuda", [](std::uintptr_t csum, std::uintptr_t offsets, int64_t n, int64_t hw,
                                   std::uintptr_t out, std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_decode_csum_cuda(ptr<const int64_t>(csum), ptr<const int64_t>(offsets), n, hw, ptr<uint8_t>(out),
                                     stream_of(stream));
  });
  m.def("rle_area_cuda", [](std::uintptr_t counts, std::uintptr_t offsets, int64_t n, std::uintptr_t out,
                            std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_area_cuda(ptr<const int64_t>(counts), ptr<const int64_t>(offsets), n, ptr<int64_t>(out),
                              stream_of(stream));
  });
  m.def("rle_to_bbox_cuda", [](std::uintptr_t counts, std::uintptr_t offsets, int64_t n, std::uintptr_t h,
                               std::uintptr_t w, std::uintptr_t out, std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_to_bbox_cuda(ptr<const int64_t>(counts), ptr<const int64_t>(offsets), n, ptr<const int64_t>(h),
                                 ptr<const int64_t>(w), ptr<double>(out), stream_of(stream));
  });
  m.def("rle_iou_csum_cuda", [](std::uintptr_t dc, std::uintptr_t doff, std::uintptr_t darea, std::uintptr_t dbox,
                                int64_t nd, std::uintptr_t gc, std::uintptr_t goff, std::uintptr_t garea,
                                std::uintptr_t gbox, int64_t ng, std::uintptr_t iscrowd, std::uintptr_t out,
                                std::uintptr_t stream) {
    py::gil_scoped_release release;
    vlk::launch_rle_iou_csum_cuda(ptr<const int64_t>(dc), ptr<const int64_t>(doff), ptr<const int64_t>(darea),
                                  ptr<const double>(dbox), nd, ptr<const int64_t>(gc), ptr<const int64_t>(goff),
                                  ptr<const int64_t>(garea), ptr<const double>(gbox), ng, ptr<const uint8_t>(iscrowd),
                                  ptr<double>(out), stream_of(stream));
  });
#endif
}
