// Python caption inputs for the C++ PTB tokenizer, shared by the tokenizer bindings and CIDEr from raw captions:
// str objects read in their own memory layout, a cached workspace of buffers, result strs built directly.
#pragma once

#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "captioning/ptb_tokenizer.h"

namespace vlk::ptb_py {

namespace py = pybind11;

// A str's code points as they sit in memory (PEP 393), or UTF-8 bytes; false for any other object.
inline bool text_of(PyObject* obj, vlk::PtbText& t) {
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
inline PyObject* result_str(const vlk::PtbResult& r, int64_t i) {
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
    if (slots_.empty()) return std::make_unique<Workspace>();
    auto w = std::move(slots_.back());
    slots_.pop_back();
    return w;
  }
  void give(std::unique_ptr<Workspace> w) {
    // Keep at most what a batch of a few hundred thousand captions needs; two workspaces, because CIDEr from raw
    // captions tokenizes the references and the candidates at once.
    if (w->result.footprint() > (size_t{64} << 20)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (slots_.size() < 2) slots_.push_back(std::move(w));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Workspace>> slots_;
};

inline WorkspaceCache& workspaces() {
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

// Adds the captions of {key: [caption, ...]} in the dict's order, with their counts per key. A caption is a
// {"caption": str} dict, or (allow_str) a str. Values must be lists (or, without allow_str, tuples). False for
// anything else: the Python caller then takes its general path, which names the problem.
inline bool read_caption_dict(PyObject* d, bool allow_str, Captions& caps) {
  if (!PyDict_CheckExact(d)) return false;
  static PyObject* caption_key = PyUnicode_InternFromString("caption");
  if (caption_key == nullptr) throw pybind11::error_already_set();
  auto& keys = caps.keys();
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(d, &pos, &key, &value)) {
    if (!PyList_CheckExact(value) && (allow_str || !PyTuple_CheckExact(value))) return false;
    caps.add_key(key);
    // The list is read by index each time: a caption dict's lookup may, in theory, run Python code.
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(value); ++j) {
      PyObject* c = PySequence_Fast_GET_ITEM(value, j);
      if (PyDict_CheckExact(c)) {
        c = PyDict_GetItemWithError(c, caption_key);
        if (c == nullptr) {
          PyErr_Clear();
          return false;
        }
        if (!PyUnicode_Check(c)) return false;
      } else if (!allow_str || !PyUnicode_Check(c)) {
        return false;
      }
      if (!caps.add(c)) return false;
      ++keys.back().second;
    }
  }
  return true;
}

}  // namespace vlk::ptb_py
