#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "captioning/ptb_tokenizer.h"
#include "ptb_captions.h"
#include "registry.h"

namespace py = pybind11;

namespace {

using namespace vlk::ptb_py;

// captions: a list or tuple of str / UTF-8 bytes. Returns the list of tokenized captions, or None when an item is
// anything else or not valid text: the Python wrapper then names the bad item (no C++ exception on that path).
// _fast_paths=False (tests only) tries every rule at every position, the reference for the fast paths.
py::object ptb_tokenize(py::handle captions, bool fast_paths) {
  PyObject* seq = captions.ptr();
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) return py::none();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  Captions caps;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!caps.add(items[i])) return py::none();
  if (!caps.tokenize(fast_paths)) return py::none();
  const vlk::PtbResult& r = caps.result();
  py::list out(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* s = result_str(r, i);
    if (s == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), i, s);
  }
  return std::move(out);
}

// {key: [caption, ...]} -> {key: [tokenized caption, ...]}, all captions tokenized as one batch in the dict's order
// (as pycocoevalcap does). With drop_empty, keys with no caption are left out of the result (pycocoevalcap's
// PTBTokenizer). Returns None when read_caption_dict refuses the input or a caption is not valid text.
py::object ptb_tokenize_dict(py::handle mapping, bool allow_str, bool drop_empty) {
  Captions caps;
  if (!read_caption_dict(mapping.ptr(), allow_str, caps)) return py::none();
  auto& keys = caps.keys();
  if (!caps.tokenize()) return py::none();
  const vlk::PtbResult& r = caps.result();
  GcPause pause;
  py::dict out;
  int64_t at = 0;
  for (const auto& [k, count] : keys) {
    if (count == 0 && drop_empty) continue;
    py::list toks(count);
    for (Py_ssize_t j = 0; j < count; ++j, ++at) {
      PyObject* s = result_str(r, at);
      if (s == nullptr) throw py::error_already_set();
      PyList_SET_ITEM(toks.ptr(), j, s);
    }
    if (PyDict_SetItem(out.ptr(), k, toks.ptr()) < 0) throw py::error_already_set();
  }
  return std::move(out);
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
  m.def("ptb_tokenize", &ptb_tokenize, py::arg("captions"), py::arg("_fast_paths") = true);
  m.def("ptb_tokenize_dict", &ptb_tokenize_dict, py::arg("captions"), py::arg("allow_str"), py::arg("drop_empty"));
  m.def("ptb_tokens", &ptb_tokens, py::arg("caption"), py::arg("following") = py::bytes(""));
}
