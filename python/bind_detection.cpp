#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "detection/coco_eval.h"
#include "detection/det_masks.h"
#include "registry.h"

namespace py = pybind11;
using vlk::bind::ptr;

namespace {

// Python validated the arrays; the offsets are re-checked here because every read is bounded by them.
void check_offsets(const int64_t* off, int64_t n_cells, int64_t n, const char* name) {
  if (off[0] != 0 || off[n_cells] != n) throw std::invalid_argument(std::string(name) + " must span [0, n]");
  for (int64_t c = 0; c < n_cells; ++c)
    if (off[c + 1] < off[c]) throw std::invalid_argument(std::string(name) + " must be non-decreasing");
}

template <typename T>
py::array_t<T> to_array(std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(heap->size())}, {sizeof(T)}, heap->data(), owner);
}

// segs: list of compressed-RLE dicts; h, w: the expected size of each. Every counts object is referenced (INCREF)
// while the GIL is released, so the buffers read stay alive whatever other Python threads do.
py::tuple det_masks(const py::list& segs, std::uintptr_t h, std::uintptr_t w) {
  const int64_t n = static_cast<int64_t>(segs.size());
  const int64_t* hh = ptr<const int64_t>(h);
  const int64_t* ww = ptr<const int64_t>(w);
  std::vector<py::object> held(static_cast<size_t>(n));
  std::vector<const char*> str(static_cast<size_t>(n));
  std::vector<int64_t> len(static_cast<size_t>(n));
  const py::str counts_key("counts"), size_key("size");
  for (int64_t k = 0; k < n; ++k) {
    PyObject* d = PyList_GET_ITEM(segs.ptr(), k);
    auto fail = [&](const std::string& what) {
      return py::make_tuple(py::none(), py::none(), py::none(), py::none(), k, what);
    };
    if (!PyDict_Check(d)) return fail("must be an RLE dict or polygons");
    PyObject* c = PyDict_GetItemWithError(d, counts_key.ptr());
    PyObject* sz = PyDict_GetItemWithError(d, size_key.ptr());
    if (!c || !sz) {
      PyErr_Clear();
      return fail("must be an RLE dict with 'size' and 'counts'");
    }
    if (PyBytes_Check(c)) {
      str[k] = PyBytes_AS_STRING(c);
      len[k] = static_cast<int64_t>(PyBytes_GET_SIZE(c));
    } else if (PyUnicode_Check(c)) {
      Py_ssize_t n_bytes = 0;
      // UTF-8 of an ASCII str is its own storage (cached by CPython for the object's lifetime).
      const char* s = PyUnicode_AsUTF8AndSize(c, &n_bytes);
      if (!s) {
        PyErr_Clear();
        return fail("has undecodable 'counts'");
      }
      str[k] = s;
      len[k] = static_cast<int64_t>(n_bytes);
    } else {
      return fail("'counts' must be a string here");
    }
    held[k] = py::reinterpret_borrow<py::object>(c);
    bool size_ok = false;
    if ((PyList_Check(sz) || PyTuple_Check(sz)) && PySequence_Size(sz) == 2) {
      py::object s0 = py::reinterpret_steal<py::object>(PySequence_GetItem(sz, 0));
      py::object s1 = py::reinterpret_steal<py::object>(PySequence_GetItem(sz, 1));
      const long long sh = PyLong_AsLongLong(s0.ptr());
      const long long sw = PyLong_AsLongLong(s1.ptr());
      if (PyErr_Occurred()) PyErr_Clear();
      size_ok = sh == hh[k] && sw == ww[k];
    }
    if (!size_ok) {
      return fail("has size " + py::repr(py::handle(sz)).cast<std::string>() + " but its image is [" +
                  std::to_string(hh[k]) + ", " + std::to_string(ww[k]) + "]");
    }
  }
  std::vector<int64_t> csum, offsets, area;
  std::vector<double> bbox;
  std::string error;
  {
    py::gil_scoped_release release;
    error = vlk::det_masks_from_strings(str.data(), len.data(), n, hh, ww, csum, offsets, area, bbox);
  }
  if (!error.empty()) return py::make_tuple(py::none(), py::none(), py::none(), py::none(), -1, error);
  return py::make_tuple(to_array(std::move(csum)), to_array(std::move(offsets)), to_array(std::move(area)),
                        to_array(std::move(bbox)), -1, std::string());
}

// Numeric fields of a list of dicts as one float64 table [n, cols]: fields[f] = (key, width, default); width 1 reads
// a number, width 4 a list of 4 numbers (a box); a missing key takes the default unless it is NaN (then missing is
// an error). Returns (table, -1, "") or (None, index, message) naming the first bad item. Holds the GIL throughout:
// it only reads Python objects.
py::tuple det_columns(const py::list& items, const std::vector<std::tuple<std::string, int, double>>& fields) {
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t cols = 0;
  std::vector<py::str> keys;
  for (const auto& f : fields) {
    cols += std::get<1>(f);
    keys.emplace_back(std::get<0>(f));
  }
  py::array_t<double> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(cols)});
  double* o = out.mutable_data();
  auto fail = [&](int64_t k, const std::string& what) { return py::make_tuple(py::none(), k, what); };
  auto number = [](PyObject* v, double* dst) {
    if (PyFloat_CheckExact(v)) {
      *dst = PyFloat_AS_DOUBLE(v);
      return true;
    }
    if (PyUnicode_Check(v) || PyBytes_Check(v)) return false;
    const double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    *dst = x;
    return true;
  };
  for (int64_t k = 0; k < n; ++k) {
    PyObject* d = PyList_GET_ITEM(items.ptr(), k);
    if (!PyDict_Check(d)) return fail(k, "must be a dict");
    double* row = o + k * cols;
    for (size_t f = 0; f < fields.size(); ++f) {
      const int width = std::get<1>(fields[f]);
      PyObject* v = PyDict_GetItemWithError(d, keys[f].ptr());
      if (!v) {
        if (PyErr_Occurred()) PyErr_Clear();
        const double dflt = std::get<2>(fields[f]);
        if (dflt != dflt) return fail(k, "has no '" + std::get<0>(fields[f]) + "'");
        for (int j = 0; j < width; ++j) row[j] = dflt;
        row += width;
        continue;
      }
      if (width == 1) {
        if (!number(v, row)) return fail(k, "'" + std::get<0>(fields[f]) + "' must be a number");
      } else {
        PyObject* seq = PySequence_Fast(v, "");
        if (!seq) {
          PyErr_Clear();
          return fail(k, "'" + std::get<0>(fields[f]) + "' must be a list of " + std::to_string(width) + " numbers");
        }
        bool ok = PySequence_Fast_GET_SIZE(seq) == width;
        for (int j = 0; ok && j < width; ++j) ok = number(PySequence_Fast_GET_ITEM(seq, j), row + j);
        Py_DECREF(seq);
        if (!ok)
          return fail(k, "'" + std::get<0>(fields[f]) + "' must be a list of " + std::to_string(width) + " numbers");
      }
      row += width;
    }
  }
  return py::make_tuple(out, -1, std::string());
}

}  // namespace

VLK_BIND(detection) {
  m.def("det_evaluate", [](int kind, int64_t n_cells, int64_t n_gt, int64_t n_dt, std::uintptr_t gt_off,
                           std::uintptr_t dt_off, const std::vector<std::uintptr_t>& geo,
                           const std::vector<std::uintptr_t>& flags, int64_t n_area, std::uintptr_t area_rng,
                           int64_t n_thr, std::uintptr_t thr, const std::vector<std::uintptr_t>& out) {
    if (geo.size() != 8 || flags.size() != 7 || out.size() != 5) throw std::invalid_argument("det_evaluate: arity");
    if (kind != 0 && kind != 1) throw std::invalid_argument("det_evaluate: kind must be 0 (bbox) or 1 (segm)");
    vlk::DetEvalInputs in{};
    in.n_cells = n_cells;
    in.n_gt = n_gt;
    in.n_dt = n_dt;
    in.gt_off = ptr<const int64_t>(gt_off);
    in.dt_off = ptr<const int64_t>(dt_off);
    check_offsets(in.gt_off, n_cells, n_gt, "gt_off");
    check_offsets(in.dt_off, n_cells, n_dt, "dt_off");
    in.geo = vlk::DetGeometry{kind,
                              ptr<const double>(geo[0]),
                              ptr<const double>(geo[1]),
                              ptr<const int64_t>(geo[2]),
                              ptr<const int64_t>(geo[3]),
                              ptr<const int64_t>(geo[4]),
                              ptr<const int64_t>(geo[5]),
                              ptr<const int64_t>(geo[6]),
                              ptr<const int64_t>(geo[7])};
    in.gt_crowd = ptr<const uint8_t>(flags[0]);
    in.gt_ignore = ptr<const uint8_t>(flags[1]);
    in.gt_area = ptr<const double>(flags[2]);
    in.dt_area = ptr<const double>(flags[3]);
    in.gt_id_nonzero = ptr<const uint8_t>(flags[4]);
    in.dt_id_pos = ptr<const uint8_t>(flags[5]);
    in.dt_extra_ignore = ptr<const uint8_t>(flags[6]);
    in.n_area = n_area;
    in.area_rng = ptr<const double>(area_rng);
    in.n_thr = n_thr;
    in.thr = ptr<const double>(thr);
    py::gil_scoped_release release;
    vlk::launch_det_evaluate(in, ptr<uint8_t>(out[0]), ptr<int64_t>(out[1]), ptr<int64_t>(out[2]),
                             ptr<int64_t>(out[3]), ptr<uint8_t>(out[4]));
  });
  m.def("det_masks", &det_masks);
  m.def("det_columns", &det_columns);
  m.def("det_accumulate", [](int64_t n_cells, int64_t n_dt, std::uintptr_t dt_off, std::uintptr_t cell_group,
                             int64_t n_groups, std::uintptr_t status, std::uintptr_t npig, std::uintptr_t score,
                             int64_t n_area_eval, int64_t n_area_src, std::uintptr_t area_src, int64_t n_thr,
                             int64_t n_rec, std::uintptr_t rec_thr, int64_t n_max, std::uintptr_t max_dets,
                             int64_t out_k, int64_t out_a, int64_t out_m, std::uintptr_t precision,
                             std::uintptr_t recall, std::uintptr_t scores) {
    vlk::DetAccumInputs in{n_cells,      n_dt,    ptr<const int64_t>(dt_off),  ptr<const int64_t>(cell_group),
                           n_groups,     ptr<const uint8_t>(status),       ptr<const int64_t>(npig),
                           ptr<const double>(score), n_area_eval, n_area_src, ptr<const int64_t>(area_src),
                           n_thr,        n_rec,   ptr<const double>(rec_thr), n_max, ptr<const int64_t>(max_dets),
                           out_k,        out_a,   out_m};
    check_offsets(in.dt_off, n_cells, n_dt, "dt_off");
    if (n_groups > out_k || n_area_src > out_a || n_max > out_m)
      throw std::invalid_argument("det_accumulate: more slots filled than the output holds");
    for (int64_t c = 0; c < n_cells; ++c)
      if (in.cell_group[c] < -1 || in.cell_group[c] >= n_groups)
        throw std::invalid_argument("det_accumulate: cell_group out of range");
    for (int64_t a = 0; a < n_area_src; ++a)
      if (in.area_src[a] < 0 || in.area_src[a] >= n_area_eval)
        throw std::invalid_argument("det_accumulate: area_src out of range");
    py::gil_scoped_release release;
    vlk::launch_det_accumulate(in, ptr<double>(precision), ptr<double>(recall), ptr<double>(scores));
  });
}
