#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "captioning/ptb/ptb_tokenizer.h"
#include "ptb_captions.h"
#include "registry.h"

namespace py = pybind11;

namespace {

using namespace vlk::ptb_py;

// captions: a list or tuple of str / UTF-8 bytes. Returns the list of tokenized captions; anything else is a
// ValueError naming the item ("captions[i] ..."), raised here with its final message.
// _fast_paths=False (tests only) tries every rule at every position, the reference for the fast paths.
py::list ptb_tokenize(py::handle captions, bool fast_paths) {
  PyObject* seq = captions.ptr();
  if (!PyList_Check(seq) && !PyTuple_Check(seq))
    throw py::value_error("captions must be a list or tuple of str, got " + type_name(seq));
  Captions caps;
  // Read by index each time, the sequence held: nothing here runs Python code, but the list is the caller's.
  caps.hold(seq);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* c = PySequence_Fast_GET_ITEM(seq, i);
    if (!caps.add(c))
      throw py::value_error("captions[" + std::to_string(i) + "] must be a str (or UTF-8 bytes), got " + type_name(c));
    poll(i);
  }
  const int64_t bad = caps.tokenize(fast_paths);
  if (bad >= 0) refused_caption(caps.caption(bad), "captions[" + std::to_string(bad) + "]");
  const vlk::PtbResult& r = caps.result();
  py::list out(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* s = result_str(r, i);
    if (s == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), i, s);
    poll(i);
  }
  return out;
}

// {key: [caption, ...]} -> {key: [tokenized caption, ...]}, all captions tokenized as one batch in the dict's order
// (as pycocoevalcap does). With drop_empty, keys with no caption are left out of the result (pycocoevalcap's
// PTBTokenizer). Errors are ValueErrors naming `name`[key][position].
py::dict ptb_tokenize_dict(py::handle mapping, bool allow_str, bool drop_empty, const std::string& name) {
  Captions caps;
  read_caption_dict(mapping.ptr(), allow_str, name.c_str(), caps);
  auto& keys = caps.keys();
  const int64_t bad = caps.tokenize();
  if (bad >= 0) {
    int64_t first = 0;
    for (const auto& [k, count] : keys) {
      if (bad < first + count)
        refused_caption(caps.caption(bad), name + "[" + repr_of(k) + "][" + std::to_string(bad - first) + "]");
      first += count;
    }
  }
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
      poll(at);
    }
    if (PyDict_SetItem(out.ptr(), k, toks.ptr()) < 0) throw py::error_already_set();
  }
  return out;
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
  m.def("ptb_tokenize_dict", &ptb_tokenize_dict, py::arg("captions"), py::arg("allow_str"), py::arg("drop_empty"),
        py::arg("name"));
  m.def("ptb_tokens", &ptb_tokens, py::arg("caption"), py::arg("following") = py::bytes(""));
}
