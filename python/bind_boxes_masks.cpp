// Bindings of the COCO mask API (pycocotools' frPyObjects and merge): polygons and xywh boxes to compressed RLE
// strings, and the union / intersection of RLEs. Inputs are copied before the GIL is released; boxes and runs
// arrive as tensors (vlk::TensorArg: dtype, shape, strides and device checked here, ValueError otherwise). Data errors
// come back as a str "TypeError: ..." / "ValueError: ..." that Python raises with the caller's names.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "boxes/rle.h"
#include "boxes/rle_merge.h"
#include "boxes/rle_poly.h"
#include "core/tensor_arg.h"
#include "registry.h"

namespace py = pybind11;

namespace {

std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

// Appends one polygon's coordinates: a 1-D array of any real dtype, or a list / tuple of numbers (read from a tuple
// snapshot, so a __float__ that mutates the list cannot invalidate what is being read). "" or the error.
std::string read_polygon(py::handle p, size_t index, std::vector<double>& xy) {
  const std::string where = "polygon " + std::to_string(index);
  if (py::isinstance<py::array>(p)) {
    auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(p);
    if (!a) {
      PyErr_Clear();
      return "TypeError: " + where + " is an array that does not convert to float64";
    }
    if (a.ndim() != 1)
      return "ValueError: " + where + " must be a flat [x1, y1, x2, y2, ...] array, got " + std::to_string(a.ndim()) +
             " dimensions";
    xy.insert(xy.end(), a.data(), a.data() + a.size());
    return {};
  }
  if (!PyList_Check(p.ptr()) && !PyTuple_Check(p.ptr()))
    return "TypeError: " + where + " must be a flat list [x1, y1, x2, y2, ...] of numbers, got " + type_name(p);
  const py::tuple t = py::reinterpret_steal<py::tuple>(PySequence_Tuple(p.ptr()));
  if (!t) {
    PyErr_Clear();
    return "TypeError: " + where + " could not be read as a sequence";
  }
  for (size_t j = 0; j < t.size(); ++j) {
    const double v = PyFloat_AsDouble(t[j].ptr());
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return "TypeError: " + where + ": coordinate " + std::to_string(j) + " is a " + type_name(t[j]) +
             "; a polygon is a flat list of numbers [x1, y1, x2, y2, ...]";
    }
    xy.push_back(v);
  }
  return {};
}

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

py::object from_polygons(const py::sequence& polys, int64_t h, int64_t w) {
  const py::tuple items = py::reinterpret_steal<py::tuple>(PySequence_Tuple(polys.ptr()));
  if (!items) {
    PyErr_Clear();
    return py::str("TypeError: polygons could not be read as a sequence");
  }
  std::vector<double> xy;
  std::vector<int64_t> off{0};
  for (size_t p = 0; p < items.size(); ++p) {
    const size_t before = xy.size();
    const std::string bad = read_polygon(items[p], p, xy);
    if (!bad.empty()) return py::str(bad);
    if ((xy.size() - before) % 2)
      return value_error("polygon " + std::to_string(p) + " has " + std::to_string(xy.size() - before) +
                         " coordinates; a polygon is a flat list of x, y pairs");
    off.push_back(static_cast<int64_t>(xy.size() / 2));
  }
  std::vector<int64_t> runs, run_off;
  std::string error;
  {
    py::gil_scoped_release release;
    error = vlk::rle_from_polygons(xy.data(), off.data(), static_cast<int64_t>(items.size()), h, w, runs, run_off);
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

// Compressed strings of one h x w size -> merged string (parse, merge and encode with the GIL released).
py::object merge_strings(const std::vector<std::string>& strings, int64_t h, int64_t w, bool intersect) {
  if (strings.empty()) return value_error("rle merge: no RLE strings");
  std::vector<int64_t> counts, offsets, out;
  std::string error, s;
  {
    py::gil_scoped_release release;
    const std::vector<int64_t> hw(strings.size(), h * w);
    error = vlk::rle_parse_strings(strings, hw.data(), counts, offsets);
    if (error.empty())
      error = vlk::rle_merge_runs(counts.data(), static_cast<int64_t>(counts.size()), offsets.data(),
                                  static_cast<int64_t>(strings.size()), intersect, out);
    if (error.empty()) {
      const int64_t off[2] = {0, static_cast<int64_t>(out.size())};
      s = vlk::rle_to_strings(out.data(), off, 1)[0];
    }
  }
  if (!error.empty()) return value_error(error);
  return py::bytes(s);
}

}  // namespace

VLK_BIND(boxes_masks) {
  m.def("rle_from_polygons", &from_polygons);
  m.def("rle_from_bboxes", &from_bboxes);
  m.def("rle_merge", &merge);
  m.def("rle_merge_strings", &merge_strings);
}
