#include <string>

#include "registry.h"

namespace vlk {
const char* source_hash();
}

namespace vlk::bind {
std::vector<std::pair<const char*, Binder>>& binders() {
  static std::vector<std::pair<const char*, Binder>> all;
  return all;
}
}  // namespace vlk::bind

PYBIND11_MODULE(_C, m) {
  m.doc() = "vlkernels compiled kernels (C++ CPU and, when built with it, CUDA)";
  m.attr("source_hash") = vlk::source_hash();
#ifdef VLK_WITH_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  pybind11::list families;
  for (auto& [name, fn] : vlk::bind::binders()) {
    fn(m);
    families.append(name);
  }
  m.attr("families") = families;
}
