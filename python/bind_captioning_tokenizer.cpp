#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "captioning/ptb_tokenizer.h"
#include "registry.h"

namespace py = pybind11;

namespace {

// A str's code points as they sit in memory (PEP 393), or UTF-8 bytes; false for any other object.
bool text_of(PyObject* obj, vlk::PtbText& t) {
  if (PyUnicode_Check(obj)) {
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(obj) < 0) {
      PyErr_Clear();
      return false;
    }
#endif
    t = {PyUnicode_DATA(obj), static_cast<int64_t>(PyUnicode_GET_LENGTH(obj)), static_cast<int>(PyUnicode_KIND(obj))};
    return true;
  }
  if (PyBytes_Check(obj)) {
    t = {PyBytes_AS_STRING(obj), static_cast<int64_t>(PyBytes_GET_SIZE(obj)), 0};
    return true;
  }
  return false;
}

// A new reference to the i-th tokenized caption as a str.
PyObject* result_str(const vlk::PtbResult& r, int64_t i) {
  const char* p = r.data(i);
  const Py_ssize_t len = static_cast<Py_ssize_t>(r.size[i]);
  if (!r.ascii[i]) return PyUnicode_DecodeUTF8(p, len, "strict");
  PyObject* s = PyUnicode_New(len, 127);
  if (s != nullptr && len > 0) std::memcpy(PyUnicode_DATA(s), p, static_cast<size_t>(len));
  return s;
}

// Pauses the cyclic garbage collector while the results are built: thousands of new lists would otherwise trigger
// collections (and promote the lists to older generations, which makes later full collections due sooner) in the
// middle of filling them, although they hold only str objects and can form no cycle.
struct GcPause {
#if PY_VERSION_HEX >= 0x030A0000
  int was_enabled = PyGC_Disable();
  ~GcPause() {
    if (was_enabled) PyGC_Enable();
  }
#endif
};

// What one call needs besides Python objects: the captions' texts and the result buffers. One set is kept between
// calls so that their pages stay mapped (see vlk::PtbResult); a call made while another holds it gets its own.
struct Workspace {
  std::vector<PyObject*> objects;  // strong references to the caption objects while the GIL is released
  std::vector<vlk::PtbText> texts;
  std::vector<std::pair<PyObject*, Py_ssize_t>> keys;  // ptb_tokenize_dict: strong references, captions per key
  vlk::PtbResult result;
};

class WorkspaceCache {
 public:
  std::unique_ptr<Workspace> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return slot_ ? std::move(slot_) : std::make_unique<Workspace>();
  }
  void give(std::unique_ptr<Workspace> w) {
    // Keep at most what a batch of a few hundred thousand captions needs.
    if (w->result.footprint() > (size_t{64} << 20)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!slot_) slot_ = std::move(w);
  }

 private:
  std::mutex mutex_;
  std::unique_ptr<Workspace> slot_;
};

WorkspaceCache& workspaces() {
  static WorkspaceCache* cache = new WorkspaceCache();  // never destroyed: no work at interpreter exit
  return *cache;
}

// Borrows a workspace for one call; drops the references it holds (GIL held) and returns it to the cache.
class Captions {
 public:
  Captions() : w_(workspaces().take()) {}
  ~Captions() {
    for (PyObject* o : w_->objects) Py_DECREF(o);
    for (auto& k : w_->keys) Py_DECREF(k.first);
    w_->objects.clear();
    w_->texts.clear();
    w_->keys.clear();
    workspaces().give(std::move(w_));
  }
  Captions(const Captions&) = delete;
  Captions& operator=(const Captions&) = delete;

  bool add(PyObject* obj) {
    vlk::PtbText t;
    if (!text_of(obj, t)) return false;
    Py_INCREF(obj);
    w_->objects.push_back(obj);
    w_->texts.push_back(t);
    return true;
  }
  void add_key(PyObject* key) {
    Py_INCREF(key);
    w_->keys.emplace_back(key, 0);
  }
  std::vector<std::pair<PyObject*, Py_ssize_t>>& keys() { return w_->keys; }
  // False when a caption is not valid text (a str with surrogates, bytes that are not UTF-8).
  bool tokenize(bool fast_paths = true) {
    int64_t bad;
    {
      py::gil_scoped_release release;
      bad = vlk::ptb_tokenize_texts(w_->texts.data(), static_cast<int64_t>(w_->texts.size()), w_->result, fast_paths);
    }
    return bad < 0;
  }
  const vlk::PtbResult& result() const { return w_->result; }

 private:
  std::unique_ptr<Workspace> w_;
};

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
// (as pycocoevalcap does). A caption is a {"caption": str} dict, or (allow_str) a str. With drop_empty, keys with no
// caption are left out of the result (pycocoevalcap's PTBTokenizer). Values must be lists (or, without allow_str,
// tuples). Returns None for anything else, and for a caption that is not valid text: the Python caller then takes
// its general path, which names the problem.
py::object ptb_tokenize_dict(py::handle mapping, bool allow_str, bool drop_empty) {
  PyObject* d = mapping.ptr();
  if (!PyDict_CheckExact(d)) return py::none();
  static PyObject* caption_key = PyUnicode_InternFromString("caption");
  if (caption_key == nullptr) throw py::error_already_set();
  Captions caps;
  auto& keys = caps.keys();
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(d, &pos, &key, &value)) {
    if (!PyList_CheckExact(value) && (allow_str || !PyTuple_CheckExact(value))) return py::none();
    caps.add_key(key);
    // The list is read by index each time: a caption dict's lookup may, in theory, run Python code.
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(value); ++j) {
      PyObject* c = PySequence_Fast_GET_ITEM(value, j);
      if (PyDict_CheckExact(c)) {
        c = PyDict_GetItemWithError(c, caption_key);
        if (c == nullptr) {
          PyErr_Clear();
          return py::none();
        }
        if (!PyUnicode_Check(c)) return py::none();
      } else if (!allow_str || !PyUnicode_Check(c)) {
        return py::none();
      }
      if (!caps.add(c)) return py::none();
      ++keys.back().second;
    }
  }
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
