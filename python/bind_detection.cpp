#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "detection/coco_eval.h"
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
