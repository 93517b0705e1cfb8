#include "core/count_above.h"
#include "core/parallel.h"
#include "registry.h"

namespace py = pybind11;

namespace {
template <typename T>
void count_above(std::uintptr_t scores, int64_t n, int64_t m, int64_t stride_row, std::uintptr_t thr,
                 std::uintptr_t out, bool inclusive) {
  py::gil_scoped_release release;
  vlk::launch_count_above<T>(vlk::bind::ptr<const T>(scores), n, m, stride_row, vlk::bind::ptr<const T>(thr),
                             vlk::bind::ptr<int64_t>(out), inclusive);
}
#ifdef VLK_WITH_CUDA
template <typename T>
void count_above_cuda(std::uintptr_t scores, int64_t n, int64_t m, int64_t stride_row, std::uintptr_t thr,
                      std::uintptr_t out, bool inclusive, std::uintptr_t stream) {
  py::gil_scoped_release release;
  vlk::launch_count_above_cuda<T>(vlk::bind::ptr<const T>(scores), n, m, stride_row, vlk::bind::ptr<const T>(thr),
                                  vlk::bind::ptr<int64_t>(out), inclusive, reinterpret_cast<void*>(stream));
}
#endif
}  // namespace

VLK_BIND(core) {
  m.def("get_num_threads", &vlk::get_num_threads);
  m.def("set_num_threads", &vlk::set_num_threads, py::arg("n"));
  m.def("count_above_f32", &count_above<float>);
  m.def("count_above_f64", &count_above<double>);
#ifdef VLK_WITH_CUDA
  m.def("count_above_cuda_f32", &count_above_cuda<float>);
  m.def("count_above_cuda_f64", &count_above_cuda<double>);
#endif
}
