// Bindings of the COCO RLE string codec and the CPU string-path kernels: compressed strings <-> run counts in CSR
// form (counts[offsets[k] .. offsets[k + 1]) are mask k's runs) and the CPU encoders. Tensors
// only (vlk::TensorArg), checked here, CSR and runs included, so a wrong tensor is a ValueError; Python allocates the
// runs once C++ has counted them. The outputs that are not arrays are the compressed strings themselves (bytes). Data errors of the
// compressed strings come back as a message (see rle_parse). The counts path is bind_boxes_rle_counts.cpp.
#include <pybind11/stl.h>

#include "boxes/launch_args.h"
#include "boxes/rle.h"
#include "registry.h"

namespace py = pybind11;
using vlk::TensorArg;
using vlk::boxes::csr_offsets;
using vlk::boxes::runs_vector;

namespace {

py::list to_bytes_list(const std::vector<std::string>& strings) {
  py::list out(strings.size());
  for (size_t k = 0; k < strings.size(); ++k) out[k] = py::bytes(strings[k]);
  return out;
}

TensorArg cpu_masks(py::handle obj) {
  auto masks = TensorArg::from(obj, "masks");
  masks.device(vlk::kCPU);
  return masks;
}

// Compressed strings (vlk::boxes::strings_arg) -> run_off int64 [N + 1]: the CSR offsets of their runs, from which
// Python allocates the counts that rle_parse fills.
void rle_string_run_offsets(py::handle buf_obj, py::handle off_obj, py::handle run_off_obj) {
  const auto s = vlk::boxes::strings_arg(buf_obj, off_obj);
  auto run_off = vlk::boxes::int64_vector(run_off_obj, "run_offsets", s.buf, s.n() + 1, "N + 1");
  run_off.writable();
  py::gil_scoped_release release;
  vlk::rle_string_run_offsets(s.buf.data<const uint8_t>(), s.off.data<const int64_t>(), s.n(),
                              run_off.data<int64_t>());
}

// Compressed strings -> their runs in counts[run_off[k] .. run_off[k + 1]) (run_off from rle_string_run_offsets).
// Returns "" or the data error (bad character, truncated count, runs not summing to hw[k], ...) for Python to raise
// with the caller's names. hw: int64 [N].
std::string rle_parse(py::handle buf_obj, py::handle off_obj, py::handle hw_obj, py::handle run_off_obj,
                      py::handle counts_obj) {
  const auto s = vlk::boxes::strings_arg(buf_obj, off_obj);
  auto hw = vlk::boxes::int64_vector(hw_obj, "hw", s.buf, s.n(), "one per string");
  auto counts = runs_vector(counts_obj, "counts");
  counts.device(vlk::kCPU).writable();
  auto run_off = csr_offsets(run_off_obj, counts, "run_offsets");
  run_off.size(0, s.n() + 1, "N + 1");
  py::gil_scoped_release release;
  return vlk::rle_parse_strings(s.buf.data<const uint8_t>(), s.off.data<const int64_t>(), s.n(),
                                hw.data<const int64_t>(), run_off.data<const int64_t>(), counts.data<int64_t>());
}

py::list rle_to_strings(py::handle counts_obj, py::handle offsets_obj) {
  auto counts = runs_vector(counts_obj, "counts");
  counts.device(vlk::kCPU);
  auto offsets = csr_offsets(offsets_obj, counts);
  std::vector<std::string> s;
  {
    py::gil_scoped_release release;
    s = vlk::rle_to_strings(counts.data<const int64_t>(), offsets.data<const int64_t>(), offsets.size(0) - 1);
  }
  return to_bytes_list(s);
}

py::list rle_encode(py::handle masks_obj) {
  auto masks = cpu_masks(masks_obj);
  const vlk::MaskStrides ms = vlk::boxes::mask_strides(masks);
  std::vector<std::string> s;
  {
    py::gil_scoped_release release;
    s = vlk::rle_encode_strings(masks.data<const uint8_t>(), masks.size(0), ms);
  }
  return to_bytes_list(s);
}

// Masks -> run_off int64 [N + 1], the CSR offsets of their runs, from which Python allocates the counts.
void rle_encode_run_offsets(py::handle masks_obj, py::handle run_off_obj) {
  auto masks = cpu_masks(masks_obj);
  const vlk::MaskStrides ms = vlk::boxes::mask_strides(masks);
  auto run_off = vlk::boxes::int64_vector(run_off_obj, "run_offsets", masks, masks.size(0) + 1, "N + 1");
  run_off.writable();
  py::gil_scoped_release release;
  vlk::rle_encode_run_offsets(masks.data<const uint8_t>(), masks.size(0), ms, run_off.data<int64_t>());
}

// Masks -> their runs in counts[run_off[k] .. run_off[k + 1]) (run_off from rle_encode_run_offsets).
void rle_encode_runs(py::handle masks_obj, py::handle run_off_obj, py::handle counts_obj) {
  auto masks = cpu_masks(masks_obj);
  const vlk::MaskStrides ms = vlk::boxes::mask_strides(masks);
  auto counts = runs_vector(counts_obj, "counts");
  counts.device(vlk::kCPU).writable();
  auto run_off = csr_offsets(run_off_obj, counts, "run_offsets");
  run_off.size(0, masks.size(0) + 1, "N + 1");
  bool fits = true;
  {
    py::gil_scoped_release release;
    fits = vlk::rle_encode_runs(masks.data<const uint8_t>(), masks.size(0), ms, run_off.data<const int64_t>(),
                                counts.data<int64_t>());
  }
  if (!fits) run_off.refuse("does not match the masks' run counts (from rle_encode_run_offsets)");
}

}  // namespace

VLK_BIND(boxes_rle) {
  m.def("rle_string_run_offsets", &rle_string_run_offsets, py::arg("strings"), py::arg("string_offsets"),
        py::arg("run_offsets"));
  m.def("rle_parse", &rle_parse, py::arg("strings"), py::arg("string_offsets"), py::arg("hw"), py::arg("run_offsets"),
        py::arg("counts"));
  m.def("rle_to_strings", &rle_to_strings, py::arg("counts"), py::arg("offsets"));
  m.def("rle_encode", &rle_encode, py::arg("masks"));
  m.def("rle_encode_run_offsets", &rle_encode_run_offsets, py::arg("masks"), py::arg("run_offsets"));
  m.def("rle_encode_runs", &rle_encode_runs, py::arg("masks"), py::arg("run_offsets"), py::arg("counts"));
}
