// Bindings of the COCO RLE string codec and the CPU string-path kernels: compressed strings <-> run counts in CSR
// form (counts[offsets[k] .. offsets[k + 1]) are mask k's runs) and the CPU encoders. Tensors
// only (vlk::TensorArg), checked here, CSR and runs included, so a wrong tensor is a ValueError. Data errors of the
// compressed strings come back as a message (see rle_parse). The counts path is bind_boxes_rle_counts.cpp.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "boxes/launch_args.h"
#include "boxes/rle.h"
#include "registry.h"

namespace py = pybind11;
using vlk::TensorArg;
using vlk::boxes::csr_offsets;
using vlk::boxes::runs_vector;

namespace {

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

TensorArg cpu_masks(py::handle obj) {
  auto masks = TensorArg::from(obj, "masks");
  masks.device(vlk::kCPU);
  return masks;
}

// Compressed strings -> (counts, offsets, error): the error (bad character, truncated count, runs not summing to
// hw[k], ...) is data, returned for Python to raise with the caller's names. hw: int64 [len(strings)].
py::tuple rle_parse(const std::vector<std::string>& strings, py::handle hw_obj) {
  auto hw = TensorArg::from(hw_obj, "hw");
  hw.ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).size(0, static_cast<int64_t>(strings.size()), "one per string");
  hw.contiguous();
  std::vector<int64_t> counts, offsets;
  std::string error;
  {
    py::gil_scoped_release release;
    error = vlk::rle_parse_strings(strings, hw.data<const int64_t>(), counts, offsets);
  }
  return py::make_tuple(to_array(std::move(counts)), to_array(std::move(offsets)), error);
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

py::tuple rle_encode_runs(py::handle masks_obj) {
  auto masks = cpu_masks(masks_obj);
  const vlk::MaskStrides ms = vlk::boxes::mask_strides(masks);
  std::vector<int64_t> counts, offsets;
  {
    py::gil_scoped_release release;
    vlk::rle_encode_runs(masks.data<const uint8_t>(), masks.size(0), ms, counts, offsets);
  }
  return py::make_tuple(to_array(std::move(counts)), to_array(std::move(offsets)));
}

}  // namespace

VLK_BIND(boxes_rle) {
  m.def("rle_parse", &rle_parse, py::arg("strings"), py::arg("hw"));
  m.def("rle_to_strings", &rle_to_strings, py::arg("counts"), py::arg("offsets"));
  m.def("rle_encode", &rle_encode, py::arg("masks"));
  m.def("rle_encode_runs", &rle_encode_runs, py::arg("masks"));
}
