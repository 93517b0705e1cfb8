#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "captioning/ptb_tokenizer.h"
#include "registry.h"

namespace py = pybind11;

namespace {
// captions: a list of bytes (UTF-8, validated in C++). Python checked the types and named the bad item.
py::list ptb_tokenize(const py::list& captions) {
  const int64_t n = static_cast<int64_t>(captions.size());
  std::vector<const char*> ptrs(n);
  std::vector<int64_t> lens(n);
  for (int64_t i = 0; i < n; ++i) {
    PyObject* obj = captions[i].ptr();
    if (!PyBytes_Check(obj)) throw py::value_error("caption " + std::to_string(i) + " is not bytes");
    ptrs[i] = PyBytes_AS_STRING(obj);
    lens[i] = PyBytes_GET_SIZE(obj);
  }
  std::vector<std::string> out(n);
  int64_t bad;
  {
    py::gil_scoped_release release;
    bad = vlk::launch_ptb_tokenize(ptrs.data(), lens.data(), n, out.data());
  }
  if (bad >= 0) throw py::value_error("caption " + std::to_string(bad) + " is not valid UTF-8");
  py::list result(n);
  for (int64_t i = 0; i < n; ++i) result[i] = py::str(out[i]);
  return result;
}

// Raw PTBTokenizer tokens of one caption (before the punctuation filter), for tests and debugging.
py::list ptb_tokens(const py::bytes& caption, const py::bytes& following) {
  std::string s = caption, f = following;
  if (vlk::utf8_invalid_offset(s.data(), static_cast<int64_t>(s.size())) >= 0 ||
      vlk::utf8_invalid_offset(f.data(), static_cast<int64_t>(f.size())) >= 0)
    throw py::value_error("caption is not valid UTF-8");
  py::list result;
  for (const auto& t : vlk::ptb_tokens(s, f)) result.append(py::str(t));
  return result;
}
}  // namespace

VLK_BIND(captioning_tokenizer) {
  m.def("ptb_tokenize", &ptb_tokenize, py::arg("captions"));
  m.def("ptb_tokens", &ptb_tokens, py::arg("caption"), py::arg("following") = py::bytes(""));
}
