// Detection bindings: tensors arrive as vlk::TensorArg and every extent, offset and index the kernels follow is
// checked here (a bad argument is a ValueError naming it); the readers of result / RLE dicts hold the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "boxes/launch_args.h"
#include "core/tensor_arg.h"
#include "detection/coco_eval.h"
#include "detection/det_masks.h"
#include "registry.h"

namespace py = pybind11;
using vlk::TensorArg;

namespace {

// A 1-D / n-D contiguous CPU tensor of one dtype and the given shape (-1: any extent).
TensorArg arg(py::handle obj, const char* name, vlk::DType dt, std::initializer_list<int64_t> shape) {
  auto a = TensorArg::from(obj, name);
  a.device(vlk::kCPU).ndim(static_cast<int64_t>(shape.size())).dtype_is(dt);
  int64_t d = 0;
  for (int64_t s : shape) {
    if (s >= 0) a.size(d, s);
    ++d;
  }
  // An empty array may export any strides (numpy gives 0): nothing is read from it.
  if (a.numel() > 0) a.contiguous();
  return a;
}

TensorArg out_arg(py::handle obj, const char* name, vlk::DType dt, std::initializer_list<int64_t> shape) {
  auto a = arg(obj, name, dt, shape);
  a.writable();
  return a;
}

// off[0] = 0, off[last] = n, non-decreasing: every read through the offsets stays inside [0, n).
void check_offsets(const TensorArg& a, int64_t n) {
  const int64_t* off = a.data<const int64_t>();
  const int64_t cells = a.numel() - 1;
  if (cells < 0 || off[0] != 0 || off[cells] != n) a.refuse("must start at 0 and end at " + std::to_string(n));
  for (int64_t c = 0; c < cells; ++c)
    if (off[c + 1] < off[c]) a.refuse("must be non-decreasing");
}

// repr(v) cut to 60 characters, or its type's name where repr fails (an int of more than 4300 digits).
std::string short_repr(PyObject* v) {
  PyObject* r = PyObject_Repr(v);
  if (!r) {
    PyErr_Clear();
    return std::string("a ") + Py_TYPE(v)->tp_name;
  }
  Py_ssize_t len = 0;
  const char* s = PyUnicode_AsUTF8AndSize(r, &len);
  std::string out = s ? std::string(s, static_cast<size_t>(len)) : std::string("a ") + Py_TYPE(v)->tp_name;
  if (!s) PyErr_Clear();
  Py_DECREF(r);
  return out.size() > 60 ? out.substr(0, 57) + "..." : out;
}

// One mask's compressed RLE string: its object (held: a dict entry could be replaced by another thread while the
// GIL is released) and its bytes (a bytes' buffer, or a str's UTF-8, which CPython caches for the str's lifetime).
struct MaskStrings {
  std::vector<py::object> held;
  std::vector<const char*> str;
  std::vector<int64_t> len;
  explicit MaskStrings(int64_t n) : held(static_cast<size_t>(n)), str(static_cast<size_t>(n)), len(static_cast<size_t>(n)) {}
  // False when c is neither bytes nor a str with a UTF-8 form.
  bool set(int64_t k, PyObject* c) {
    held[k] = py::reinterpret_borrow<py::object>(c);
    if (PyBytes_Check(c)) {
      str[k] = PyBytes_AS_STRING(c);
      len[k] = static_cast<int64_t>(PyBytes_GET_SIZE(c));
      return true;
    }
    Py_ssize_t n_bytes = 0;
    const char* s = PyUnicode_Check(c) ? PyUnicode_AsUTF8AndSize(c, &n_bytes) : nullptr;
    if (!s) {
      PyErr_Clear();
      return false;
    }
    str[k] = s;
    len[k] = static_cast<int64_t>(n_bytes);
    return true;
  }
  py::list objects() const {
    py::list out(held.size());
    for (size_t k = 0; k < held.size(); ++k) out[k] = held[k];
    return out;
  }
};

// rows, h, w, need of the two mask phases: rows [n] int64, h and w [n] int64, need None or [n] uint8.
struct MaskRows {
  TensorArg rows, h, w;
  std::vector<TensorArg> keep;
  const uint8_t* need = nullptr;
  MaskRows(py::handle rows_obj, py::handle h_obj, py::handle w_obj, const py::object& need_obj)
      : rows(arg(rows_obj, "rows", vlk::kI64, {-1})),
        h(arg(h_obj, "h", vlk::kI64, {rows.size(0)})),
        w(arg(w_obj, "w", vlk::kI64, {rows.size(0)})) {
    if (!need_obj.is_none()) need = keep.emplace_back(arg(need_obj, "need", vlk::kU8, {n()})).data<const uint8_t>();
  }
  int64_t n() const { return rows.size(0); }
  [[noreturn]] void fail(const std::string& where, int64_t k, const std::string& what) const {
    throw py::value_error(where + "[" + std::to_string(rows.data<const int64_t>()[k]) + "]['segmentation']: " + what);
  }
};

// Phase 1 of the RLE masks of items[rows[k]]["segmentation"] (h[k] x w[k] each; need as det_mask_run_offsets):
// reads each segmentation and writes the run offsets into `offsets` ([n + 1] int64, allocated by Python, which
// then allocates the runs for phase 2). Returns the compressed strings read (str or bytes), for det_mask_decode.
// A compressed RLE dict is read in place; anything else (polygons, uncompressed RLE, a missing segmentation) goes
// through convert(row, h, w), which returns a compressed RLE dict or raises. Errors name where[row].
py::list det_mask_runs(const py::list& items, py::handle rows_obj, py::handle h_obj, py::handle w_obj,
                       const py::object& need_obj, const py::function& convert, const std::string& where,
                       py::handle offsets_obj) {
  const MaskRows r(rows_obj, h_obj, w_obj, need_obj);
  const int64_t n = r.n();
  auto offsets = out_arg(offsets_obj, "offsets", vlk::kI64, {n + 1});
  const int64_t *row = r.rows.data<const int64_t>(), *hh = r.h.data<const int64_t>(), *ww = r.w.data<const int64_t>();
  MaskStrings strings(n);
  const py::str seg_key("segmentation"), counts_key("counts"), size_key("size");
  for (int64_t k = 0; k < n; ++k) {
    if ((k & 4095) == 4095 && PyErr_CheckSignals() != 0) throw py::error_already_set();
    // The list's current size: convert() runs Python code, which could shrink it.
    if (row[k] < 0 || row[k] >= static_cast<int64_t>(PyList_GET_SIZE(items.ptr())))
      r.rows.refuse("holds " + std::to_string(row[k]) + ", not an item index");
    if (hh[k] < 0 || ww[k] < 0) r.h.refuse("holds a negative image size");
    const std::string item = where + "[" + std::to_string(row[k]) + "]";
    auto fail = [&](const std::string& what) { return py::value_error(item + what); };
    // Before any path reads the mask (compressed, uncompressed or polygons): h*w must not wrap.
    if (hh[k] > 0 && ww[k] > vlk::boxes::kMaxPixels / hh[k]) {
      throw fail("['segmentation'] is on an image of " + std::to_string(hh[k]) + " x " + std::to_string(ww[k]) +
                 " pixels; COCO RLE masks hold at most 2^32 - 1 pixels (sizes and runs are 32-bit unsigned)");
    }
    PyObject* d = PyList_GET_ITEM(items.ptr(), row[k]);
    PyObject* seg = PyDict_Check(d) ? PyDict_GetItemWithError(d, seg_key.ptr()) : nullptr;
    if (PyErr_Occurred()) throw py::error_already_set();
    PyObject* c = seg && PyDict_Check(seg) ? PyDict_GetItemWithError(seg, counts_key.ptr()) : nullptr;
    if (PyErr_Occurred()) throw py::error_already_set();
    py::object rle = py::reinterpret_borrow<py::object>(seg ? seg : Py_None);
    if (!c || !(PyUnicode_Check(c) || PyBytes_Check(c))) {
      // Polygons, uncompressed RLE, no segmentation (loadRes' box polygon for box results), or something convert()
      // rejects with its own message.
      rle = convert(row[k], hh[k], ww[k]);
      c = PyDict_Check(rle.ptr()) ? PyDict_GetItemWithError(rle.ptr(), counts_key.ptr()) : nullptr;
      if (PyErr_Occurred()) throw py::error_already_set();
      if (!c || !(PyUnicode_Check(c) || PyBytes_Check(c))) throw fail("['segmentation'] must be an RLE dict or polygons");
    }
    if (!strings.set(k, c)) throw fail("['segmentation'] has undecodable 'counts'");
    PyObject* sz = PyDict_GetItemWithError(rle.ptr(), size_key.ptr());
    if (PyErr_Occurred()) throw py::error_already_set();
    bool size_ok = false;
    if (sz && (PyList_Check(sz) || PyTuple_Check(sz)) && PySequence_Size(sz) == 2) {
      py::object s0 = py::reinterpret_steal<py::object>(PySequence_GetItem(sz, 0));
      py::object s1 = py::reinterpret_steal<py::object>(PySequence_GetItem(sz, 1));
      const long long sh = PyLong_AsLongLong(s0.ptr());
      const long long sw = PyLong_AsLongLong(s1.ptr());
      if (PyErr_Occurred()) PyErr_Clear();
      size_ok = sh == hh[k] && sw == ww[k];
    }
    if (!sz) throw fail("['segmentation'] must be an RLE dict with 'size' and 'counts'");
    if (!size_ok) {
      throw fail("['segmentation'] has size " + short_repr(sz) + " but its image is [" +
                 std::to_string(hh[k]) + ", " + std::to_string(ww[k]) + "]");
    }
  }
  std::string error;
  int64_t bad = -1;
  {
    py::gil_scoped_release release;
    error = vlk::det_mask_run_offsets(strings.str.data(), strings.len.data(), n, hh, ww, r.need,
                                      offsets.data<int64_t>(), bad);
  }
  if (!error.empty()) r.fail(where, bad, "malformed RLE string: " + error);
  return strings.objects();
}

// Phase 2: the strings det_mask_runs returned, decoded into what Python allocated from its offsets: csum
// [offsets[n]] int64 (inclusive run sums over the set), area [n] int64, bbox [n, 4] float64 (rleToBbox, xywh).
void det_mask_decode(const py::list& counts, py::handle rows_obj, py::handle h_obj, py::handle w_obj,
                     const py::object& need_obj, py::handle offsets_obj, py::handle csum_obj, py::handle area_obj,
                     py::handle bbox_obj, const std::string& where) {
  const MaskRows r(rows_obj, h_obj, w_obj, need_obj);
  const int64_t n = r.n();
  auto offsets = arg(offsets_obj, "offsets", vlk::kI64, {n + 1});
  auto csum = out_arg(csum_obj, "csum", vlk::kI64, {-1});
  check_offsets(offsets, csum.size(0));
  auto area = out_arg(area_obj, "area", vlk::kI64, {n});
  auto bbox = out_arg(bbox_obj, "bbox", vlk::kF64, {n, 4});
  if (static_cast<int64_t>(PyList_GET_SIZE(counts.ptr())) != n)
    throw py::value_error("counts must hold one string per row (" + std::to_string(n) + ")");
  MaskStrings strings(n);
  for (int64_t k = 0; k < n; ++k)
    if (!strings.set(k, PyList_GET_ITEM(counts.ptr(), k))) r.fail(where, k, "'counts' must be bytes or a str");
  std::string error;
  int64_t bad = -1;
  {
    py::gil_scoped_release release;
    error = vlk::det_masks_decode(strings.str.data(), strings.len.data(), n, r.h.data<const int64_t>(),
                                  r.w.data<const int64_t>(), r.need, offsets.data<const int64_t>(),
                                  csum.data<int64_t>(), area.data<int64_t>(), bbox.data<double>(), bad);
  }
  if (!error.empty()) r.fail(where, bad, "malformed RLE string: " + error);
}

// Numeric fields of a list of dicts into two tables Python allocated: real [n, real columns] float64 and ints
// [n, int columns] int64. fields[f] = (key, width, default, is_int); width 1 reads a number, width 4 a list of 4
// numbers (a box); a missing key takes the default unless it is NaN (then missing is an error). An int field (ids,
// sizes, flags) is read exactly: a Python int within int64, or an integral float within 2^53 (where a double is
// still exact); never through a double. Returns (-1, "") or (index, message) naming the first bad item. Holds the
// GIL throughout: it only reads Python objects.
py::tuple det_columns(const py::list& items, const std::vector<std::tuple<std::string, int, double, bool>>& fields,
                      py::handle real_o, py::handle ints_o) {
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t real_cols = 0, int_cols = 0;
  std::vector<py::str> keys;
  for (const auto& f : fields) {
    const int width = std::get<1>(f);
    if (width < 1) throw py::value_error("det_columns: field widths must be positive");
    if (std::get<3>(f)) {
      if (width != 1) throw py::value_error("det_columns: integer fields have width 1");
      int_cols += 1;
    } else {
      real_cols += width;
    }
    keys.emplace_back(std::get<0>(f));
  }
  auto real = out_arg(real_o, "real", vlk::kF64, {n, real_cols});
  auto ints = out_arg(ints_o, "ints", vlk::kI64, {n, int_cols});
  double* o = real.data<double>();
  int64_t* oi = ints.data<int64_t>();
  auto fail = [&](int64_t k, const std::string& what) { return py::make_tuple(k, what); };
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
  // "" and *dst set, or why the value is not an exact int64.
  auto integer = [](PyObject* v, int64_t* dst) -> std::string {
    if (PyFloat_Check(v)) {
      const double x = PyFloat_AS_DOUBLE(v);
      if (!std::isfinite(x) || x != std::floor(x)) return "must be an integer";
      if (!(std::fabs(x) <= 9007199254740992.0)) return "is a float beyond 2**53 (not exact): write it as an integer";
      *dst = static_cast<int64_t>(x);
      return {};
    }
    if (PyUnicode_Check(v) || PyBytes_Check(v)) return "must be an integer, not a string";
    // Python ints and integer scalars (numpy, torch) through __index__; never through a double.
    py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(v));
    if (!idx) {
      PyErr_Clear();
      return "must be an integer";
    }
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
    if (overflow) return "is outside the int64 range [-2**63, 2**63)";
    if (x == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return "must be an integer";
    }
    *dst = static_cast<int64_t>(x);
    return {};
  };
  for (int64_t k = 0; k < n; ++k) {
    // Holding the GIL, Python's signal handlers run only when asked: Ctrl-C within a few thousand dicts.
    if ((k & 4095) == 4095 && PyErr_CheckSignals() != 0) throw py::error_already_set();
    // Strong references and the list's current size: a number's __float__ may run Python code that edits them.
    if (k >= static_cast<int64_t>(PyList_GET_SIZE(items.ptr()))) return fail(k, "vanished while being read");
    const py::object hold_d = py::reinterpret_borrow<py::object>(PyList_GET_ITEM(items.ptr(), k));
    PyObject* d = hold_d.ptr();
    if (!PyDict_Check(d)) return fail(k, "must be a dict");
    double* row = o + k * real_cols;
    int64_t* irow = oi + k * int_cols;
    for (size_t f = 0; f < fields.size(); ++f) {
      const int width = std::get<1>(fields[f]);
      const bool is_int = std::get<3>(fields[f]);
      const std::string& key = std::get<0>(fields[f]);
      PyObject* v = PyDict_GetItemWithError(d, keys[f].ptr());
      const py::object hold_v = py::reinterpret_borrow<py::object>(v);
      if (!v) {
        if (PyErr_Occurred()) PyErr_Clear();
        const double dflt = std::get<2>(fields[f]);
        if (dflt != dflt) return fail(k, "has no '" + key + "'");
        if (is_int) {
          *irow++ = static_cast<int64_t>(dflt);
        } else {
          for (int j = 0; j < width; ++j) row[j] = dflt;
          row += width;
        }
        continue;
      }
      if (is_int) {
        const std::string why = integer(v, irow);
        if (!why.empty()) {
          return fail(k, "['" + key + "'] " + why + ", got " + short_repr(v));
        }
        ++irow;
      } else if (width == 1) {
        if (!number(v, row)) return fail(k, "'" + key + "' must be a number");
        row += 1;
      } else {
        PyObject* seq = PySequence_Fast(v, "");
        if (!seq) {
          PyErr_Clear();
          return fail(k, "'" + key + "' must be a list of " + std::to_string(width) + " numbers");
        }
        bool ok = PySequence_Fast_GET_SIZE(seq) == width;
        for (int j = 0; ok && j < width; ++j) ok = number(PySequence_Fast_GET_ITEM(seq, j), row + j);
        Py_DECREF(seq);
        if (!ok) return fail(k, "'" + key + "' must be a list of " + std::to_string(width) + " numbers");
        row += width;
      }
    }
  }
  return py::make_tuple(-1, std::string());
}

}  // namespace

namespace {

// kind 0 (bbox): gt_box / dt_box are the annotation boxes. kind 1 (segm): they are the masks' rleToBbox boxes and
// gt_masks / dt_masks are (csum, offsets, area) from det_mask_decode, indexed like the ground truths / detections.
void det_evaluate(int kind, py::handle gt_off_o, py::handle dt_off_o, py::handle gt_box_o, py::handle dt_box_o,
                  py::object gt_masks, py::object dt_masks, py::handle gt_crowd_o, py::handle gt_ignore_o,
                  py::handle gt_area_o, py::handle dt_area_o, py::handle gt_id_nz_o, py::handle dt_id_pos_o,
                  py::object dt_extra_o, py::handle area_rng_o, py::handle thr_o, py::handle status_o,
                  py::handle npig_o, py::object dt_match_o, py::object gt_match_o, py::object gt_ign_o) {
  if (kind != 0 && kind != 1) throw py::value_error("kind must be 0 (bbox) or 1 (segm), got " + std::to_string(kind));
  auto gt_area = arg(gt_area_o, "gt_area", vlk::kF64, {-1});
  auto dt_area = arg(dt_area_o, "dt_area", vlk::kF64, {-1});
  const int64_t ng = gt_area.size(0), nd = dt_area.size(0);
  auto gt_off = arg(gt_off_o, "gt_off", vlk::kI64, {-1});
  const int64_t nc = gt_off.size(0) - 1;
  auto dt_off = arg(dt_off_o, "dt_off", vlk::kI64, {nc + 1});
  check_offsets(gt_off, ng);
  check_offsets(dt_off, nd);
  auto gt_box = arg(gt_box_o, "gt_box", vlk::kF64, {ng, 4});
  auto dt_box = arg(dt_box_o, "dt_box", vlk::kF64, {nd, 4});
  auto gt_crowd = arg(gt_crowd_o, "gt_crowd", vlk::kU8, {ng});
  auto gt_ignore = arg(gt_ignore_o, "gt_ignore", vlk::kU8, {ng});
  auto gt_id_nz = arg(gt_id_nz_o, "gt_id_nonzero", vlk::kU8, {ng});
  auto dt_id_pos = arg(dt_id_pos_o, "dt_id_pos", vlk::kU8, {nd});
  std::vector<TensorArg> keep;
  keep.reserve(16);  // no reallocation: references into it are taken below
  auto masks = [&](const py::object& m, const char* name, int64_t n) -> std::tuple<const int64_t*, const int64_t*,
                                                                                    const int64_t*> {
    if (kind == 0) return {nullptr, nullptr, nullptr};
    if (m.is_none() || py::len(m) != 3) throw py::value_error(std::string(name) + " must be (csum, offsets, area)");
    const py::tuple t(m);
    auto& csum = keep.emplace_back(arg(t[0], name, vlk::kI64, {-1}));
    auto& off = keep.emplace_back(arg(t[1], name, vlk::kI64, {n + 1}));
    check_offsets(off, csum.size(0));
    auto& area = keep.emplace_back(arg(t[2], name, vlk::kI64, {n}));
    return {csum.data<const int64_t>(), off.data<const int64_t>(), area.data<const int64_t>()};
  };
  const auto [gcs, gro, gra] = masks(gt_masks, "gt_masks", ng);
  const auto [dcs, dro, dra] = masks(dt_masks, "dt_masks", nd);
  auto area_rng = arg(area_rng_o, "area_rng", vlk::kF64, {-1, 2});
  auto thr = arg(thr_o, "thr", vlk::kF64, {-1});
  const int64_t A = area_rng.size(0), T = thr.size(0);
  auto status = out_arg(status_o, "status", vlk::kU8, {A, T, nd});
  auto npig = out_arg(npig_o, "npig", vlk::kI64, {A, nc});
  const uint8_t* extra = nullptr;
  if (!dt_extra_o.is_none()) extra = keep.emplace_back(arg(dt_extra_o, "dt_extra_ignore", vlk::kU8, {nd})).data<const uint8_t>();
  int64_t* dm = nullptr;
  int64_t* gm = nullptr;
  uint8_t* gi = nullptr;
  if (!dt_match_o.is_none()) dm = keep.emplace_back(out_arg(dt_match_o, "dt_match", vlk::kI64, {A, T, nd})).data<int64_t>();
  if (!gt_match_o.is_none()) gm = keep.emplace_back(out_arg(gt_match_o, "gt_match", vlk::kI64, {A, T, ng})).data<int64_t>();
  if (!gt_ign_o.is_none()) gi = keep.emplace_back(out_arg(gt_ign_o, "gt_ignore_out", vlk::kU8, {A, ng})).data<uint8_t>();
  vlk::DetEvalInputs in{};
  in.n_cells = nc;
  in.n_gt = ng;
  in.n_dt = nd;
  in.gt_off = gt_off.data<const int64_t>();
  in.dt_off = dt_off.data<const int64_t>();
  in.geo = vlk::DetGeometry{kind, gt_box.data<const double>(), dt_box.data<const double>(), gcs, gro, gra, dcs, dro, dra};
  in.gt_crowd = gt_crowd.data<const uint8_t>();
  in.gt_ignore = gt_ignore.data<const uint8_t>();
  in.gt_area = gt_area.data<const double>();
  in.dt_area = dt_area.data<const double>();
  in.gt_id_nonzero = gt_id_nz.data<const uint8_t>();
  in.dt_id_pos = dt_id_pos.data<const uint8_t>();
  in.dt_extra_ignore = extra;
  in.n_area = A;
  in.area_rng = area_rng.data<const double>();
  in.n_thr = T;
  in.thr = thr.data<const double>();
  py::gil_scoped_release release;
  vlk::launch_det_evaluate(in, status.data<uint8_t>(), npig.data<int64_t>(), dm, gm, gi);
}

// precision / scores [T, R, K, A, M] and recall [T, K, A, M] (pre-filled by the caller): slot k gathers the cells
// whose cell_group is k, slot a reads evaluated area range area_src[a], slot m keeps max_dets[m] per cell.
void det_accumulate(py::handle dt_off_o, py::handle group_o, int64_t n_groups, py::handle status_o, py::handle npig_o,
                    py::handle score_o, py::handle area_src_o, py::handle rec_thr_o, py::handle max_dets_o,
                    py::handle precision_o, py::handle recall_o, py::object scores_o) {
  auto score = arg(score_o, "score", vlk::kF64, {-1});
  const int64_t nd = score.size(0);
  auto dt_off = arg(dt_off_o, "dt_off", vlk::kI64, {-1});
  const int64_t nc = dt_off.size(0) - 1;
  check_offsets(dt_off, nd);
  auto status = arg(status_o, "status", vlk::kU8, {-1, -1, nd});
  const int64_t A_eval = status.size(0), T = status.size(1);
  auto npig = arg(npig_o, "npig", vlk::kI64, {A_eval, nc});
  auto group = arg(group_o, "cell_group", vlk::kI64, {nc});
  auto area_src = arg(area_src_o, "area_src", vlk::kI64, {-1});
  auto rec_thr = arg(rec_thr_o, "rec_thr", vlk::kF64, {-1});
  auto max_dets = arg(max_dets_o, "max_dets", vlk::kI64, {-1});
  auto precision = out_arg(precision_o, "precision", vlk::kF64, {T, rec_thr.size(0), -1, -1, -1});
  const int64_t K = precision.size(2), A = precision.size(3), M = precision.size(4);
  auto recall = out_arg(recall_o, "recall", vlk::kF64, {T, K, A, M});
  double* scores = nullptr;
  std::vector<TensorArg> keep;
  if (!scores_o.is_none())
    scores = keep.emplace_back(out_arg(scores_o, "scores", vlk::kF64, {T, rec_thr.size(0), K, A, M})).data<double>();
  if (n_groups < 0 || n_groups > K) throw py::value_error("n_groups must be in [0, " + std::to_string(K) + "]");
  if (area_src.size(0) > A) area_src.refuse("has more entries than precision has area slots");
  if (max_dets.size(0) > M) max_dets.refuse("has more entries than precision has maxDet slots");
  const int64_t* g = group.data<const int64_t>();
  for (int64_t c = 0; c < nc; ++c)
    if (g[c] < -1 || g[c] >= n_groups) group.refuse("holds " + std::to_string(g[c]) + ", outside [-1, n_groups)");
  const int64_t* src = area_src.data<const int64_t>();
  for (int64_t a = 0; a < area_src.size(0); ++a)
    if (src[a] < 0 || src[a] >= A_eval) area_src.refuse("holds " + std::to_string(src[a]) + ", not an area range");
  vlk::DetAccumInputs in{nc, nd, dt_off.data<const int64_t>(), g, n_groups, status.data<const uint8_t>(),
                         npig.data<const int64_t>(), score.data<const double>(), A_eval, area_src.size(0), src, T,
                         rec_thr.size(0), rec_thr.data<const double>(), max_dets.size(0),
                         max_dets.data<const int64_t>(), K, A, M};
  py::gil_scoped_release release;
  vlk::launch_det_accumulate(in, precision.data<double>(), recall.data<double>(), scores);
}

}  // namespace

VLK_BIND(detection) {
  m.def("det_evaluate", &det_evaluate);
  m.def("det_accumulate", &det_accumulate);
  m.def("det_mask_runs", &det_mask_runs, py::arg("items"), py::arg("rows"), py::arg("h"), py::arg("w"),
        py::arg("need"), py::arg("convert"), py::arg("where"), py::arg("offsets"));
  m.def("det_mask_decode", &det_mask_decode, py::arg("counts"), py::arg("rows"), py::arg("h"), py::arg("w"),
        py::arg("need"), py::arg("offsets"), py::arg("csum"), py::arg("area"), py::arg("bbox"), py::arg("where"));
  m.def("det_columns", &det_columns, py::arg("items"), py::arg("fields"), py::arg("real"), py::arg("ints"));
}
