// Bindings of the COCO mask API (pycocotools' frPyObjects and merge): polygons and xywh boxes to compressed RLE
// strings, and the union / intersection of RLEs. Every array arrives as a tensor (vlk::TensorArg: dtype, shape,
// strides and device checked here, ValueError otherwise): polygons and strings flattened to CSR form by Python. The
// outputs are the RLE strings themselves (bytes). Data errors come back as a str "ValueError: ..." that Python
// raises with the caller's names.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "boxes/launch_args.h"
#include "boxes/rle.h"
#include "boxes/rle_merge.h"
#include "boxes/rle_poly.h"
#include "core/tensor_arg.h"
#include "registry.h"

namespace py = pybind11;

namespace {

py::list runs_to_bytes(const std::vector<int64_t>& runs, const std::vector<int64_t>& off) {
  std::vector<std::string> s;
  {
    py::gil_scoped_release release;
    s = vlk::rle_to_strings(runs.data(), off.data(), static_cast<int64_t>(off.size()) - 1);
  }
  py::list out(s.size());
  for (size_t k = 0; k < s.size(); ++k) out[k] = py::bytes(s[k]);
  return out;
}

py::object value_error(const std::string& message) { return py::str("ValueError: " + message); }

// Polygons in CSR form: xy float64 [2V] (x, y pairs back to back), poly_off int64 [P + 1] in vertices (polygon p
// is vertices poly_off[p] .. poly_off[p + 1]). Flattened and checked for form (flat, even length) in Python.
py::object from_polygons(py::handle xy_obj, py::handle off_obj, int64_t h, int64_t w) {
  auto xy = vlk::TensorArg::from(xy_obj, "xy");
  xy.ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  if (xy.numel() % 2) xy.refuse("must hold x, y pairs (an even number of values)");
  auto off = vlk::boxes::int64_vector(off_obj, "polygon_offsets", xy);
  if (off.size(0) < 1) off.refuse("must hold P + 1 >= 1 entries");
  const std::string csr = vlk::rle_check_csr(off.data<const int64_t>(), off.size(0) - 1, xy.numel() / 2);
  if (!csr.empty()) off.refuse("is not a valid CSR over the vertices: " + csr);
  std::vector<int64_t> runs, run_off;
  std::string error;
  {
    py::gil_scoped_release release;
    error = vlk::rle_from_polygons(xy.data<const double>(), off.data<const int64_t>(), off.size(0) - 1, h, w, runs,
                                   run_off);
  }
  if (!error.empty()) return value_error(error);
  return runs_to_bytes(runs, run_off);
}

// boxes: float64 (N, 4) xywh on CPU, contiguous.
py::object from_bboxes(py::handle boxes_obj, int64_t h, int64_t w) {
  auto boxes = vlk::TensorArg::from(boxes_obj, "boxes");
  boxes.ndim(2).size(1, 4, "x, y, width, height").dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  const std::vector<double> b(boxes.data<const double>(), boxes.data<const double>() + boxes.numel());
  std::vector<int64_t> runs, run_off;
  std::string error;
  {
    py::gil_scoped_release release;
    error = vlk::rle_from_bboxes(b.data(), boxes.size(0), h, w, runs, run_off);
  }
  if (!error.empty()) return value_error(error);
  return runs_to_bytes(runs, run_off);
}

// counts / offsets: int64 CPU runs in CSR form (rle_merge_runs checks the CSR, the runs and their totals).
py::object merge(py::handle counts_obj, py::handle offsets_obj, bool intersect) {
  auto counts = vlk::TensorArg::from(counts_obj, "counts");
  counts.ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).contiguous();
  auto offsets = vlk::TensorArg::from(offsets_obj, "offsets");
  offsets.ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).contiguous();
  if (offsets.size(0) < 2) offsets.refuse("must hold N + 1 >= 2 entries");
  // Copied while the GIL is held: the checks and the merge then read data no other thread can change.
  const std::vector<int64_t> c(counts.data<const int64_t>(), counts.data<const int64_t>() + counts.numel());
  const std::vector<int64_t> o(offsets.data<const int64_t>(), offsets.data<const int64_t>() + offsets.size(0));
  std::vector<int64_t> out;
  std::string error, s;
  {
    py::gil_scoped_release release;
    error = vlk::rle_merge_runs(c.data(), static_cast<int64_t>(c.size()), o.data(), static_cast<int64_t>(o.size()) - 1,
                                intersect, out);
    if (error.empty()) {
      const int64_t off[2] = {0, static_cast<int64_t>(out.size())};
      s = vlk::rle_to_strings(out.data(), off, 1)[0];
    }
  }
  if (!error.empty()) return value_error(error);
  return py::bytes(s);
}

// Compressed strings (vlk::boxes::strings_arg) of one h x w size -> merged string (parse, merge and encode with
// the GIL released; the runs are internal to this call).
py::object merge_strings(py::handle buf_obj, py::handle off_obj, int64_t h, int64_t w, bool intersect) {
  const auto strings = vlk::boxes::strings_arg(buf_obj, off_obj);
  const int64_t n = strings.n();
  if (n == 0) return value_error("rle merge: no RLE strings");
  std::vector<int64_t> run_off(static_cast<size_t>(n) + 1), counts, out;
  std::string error, s;
  {
    py::gil_scoped_release release;
    const uint8_t* buf = strings.buf.data<const uint8_t>();
    const int64_t* off = strings.off.data<const int64_t>();
    vlk::rle_string_run_offsets(buf, off, n, run_off.data());
    counts.resize(static_cast<size_t>(run_off[n]));
    const std::vector<int64_t> hw(static_cast<size_t>(n), h * w);
    error = vlk::rle_parse_strings(buf, off, n, hw.data(), run_off.data(), counts.data());
    if (error.empty())
      error = vlk::rle_merge_runs(counts.data(), static_cast<int64_t>(counts.size()), run_off.data(), n, intersect,
                                  out);
    if (error.empty()) {
      const int64_t o[2] = {0, static_cast<int64_t>(out.size())};
      s = vlk::rle_to_strings(out.data(), o, 1)[0];
    }
  }
  if (!error.empty()) return value_error(error);
  return py::bytes(s);
}

}  // namespace

VLK_BIND(boxes_masks) {
  m.def("rle_from_polygons", &from_polygons, py::arg("xy"), py::arg("polygon_offsets"), py::arg("h"), py::arg("w"));
  m.def("rle_from_bboxes", &from_bboxes, py::arg("boxes"), py::arg("h"), py::arg("w"));
  m.def("rle_merge", &merge, py::arg("counts"), py::arg("offsets"), py::arg("intersect"));
  m.def("rle_merge_strings", &merge_strings, py::arg("buf"), py::arg("offsets"), py::arg("h"), py::arg("w"),
        py::arg("intersect"));
}
