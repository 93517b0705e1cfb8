// Python caption inputs for the C++ PTB tokenizer, shared by the tokenizer bindings and CIDEr from raw captions:
// str objects read in their own memory layout, a cached workspace of buffers, result strs built directly.
#pragma once

#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "captioning/ptb/ptb_tokenizer.h"
#include "core/parallel.h"

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

// Ctrl-C in the loops over captions that run with the GIL held (reading the input, building the result strs:
// ~0.5 s for 3,000,000 captions): vlk::check_interrupt() every 4096 items (it runs the signal handlers every ~20 ms).
inline void poll(int64_t i) {
  if ((i & 4095) == 4095) vlk::check_interrupt();
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
  std::vector<PyObject*> held;     // and to the containers they were read from
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
    for (PyObject* o : w_->held) Py_DECREF(o);
    w_->held.clear();
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
  // A strong reference held until the call ends (a container whose items are read).
  void hold(PyObject* obj) {
    Py_INCREF(obj);
    w_->held.push_back(obj);
  }
  // The i-th caption object added.
  PyObject* caption(int64_t i) const { return w_->objects[static_cast<size_t>(i)]; }
  void add_key(PyObject* key) {
    Py_INCREF(key);
    w_->keys.emplace_back(key, 0);
  }
  std::vector<std::pair<PyObject*, Py_ssize_t>>& keys() { return w_->keys; }
  // -1, or the index of the first caption that is not valid text (a str with surrogates, bytes that are not UTF-8)
  // or is too long; then nothing is tokenized.
  int64_t tokenize(bool fast_paths = true) {
    py::gil_scoped_release release;
    return vlk::ptb_tokenize_texts(w_->texts.data(), static_cast<int64_t>(w_->texts.size()), w_->result, fast_paths);
  }
  const vlk::PtbResult& result() const { return w_->result; }

 private:
  std::unique_ptr<Workspace> w_;
};

inline std::string type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

// repr(o), for error messages.
inline std::string repr_of(PyObject* o) {
  py::object r = py::reinterpret_steal<py::object>(PyObject_Repr(o));
  if (!r) throw py::error_already_set();
  return r.cast<std::string>();
}

// UTF-16 code units of valid text (a str, or UTF-8 bytes).
inline int64_t utf16_units(PyObject* obj) {
  int64_t units = 0;
  if (PyBytes_Check(obj)) {
    const auto* p = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(obj));
    for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(obj); ++i) units += ((p[i] & 0xC0) != 0x80) + (p[i] >= 0xF0);
    return units;
  }
  const Py_ssize_t n = PyUnicode_GET_LENGTH(obj);
  units = n;
  if (PyUnicode_KIND(obj) == PyUnicode_4BYTE_KIND)
    for (Py_ssize_t i = 0; i < n; ++i) units += PyUnicode_READ(PyUnicode_4BYTE_KIND, PyUnicode_DATA(obj), i) > 0xFFFF;
  return units;
}

// Why the tokenizer refused a caption it was given (str or bytes), as the end of a sentence naming it: "is not valid
// Unicode text (surrogates not allowed at index 4)", "is not valid UTF-8 (invalid start byte at byte 0)", or "has N
// UTF-16 code units; ...".
inline std::string text_problem(PyObject* obj) {
  const bool is_str = PyUnicode_Check(obj);
  PyObject* converted = is_str ? PyUnicode_AsUTF8String(obj)
                               : PyUnicode_DecodeUTF8(PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj), "strict");
  if (converted != nullptr) {
    Py_DECREF(converted);
    return "has " + std::to_string(utf16_units(obj)) + " UTF-16 code units; the PTB tokenizer takes at most " +
           std::to_string(vlk::kMaxCaptionUnits) + " per caption";
  }
  if (!PyErr_ExceptionMatches(PyExc_UnicodeError)) throw py::error_already_set();
  py::error_already_set err;  // takes the pending UnicodeError
  PyObject* e = err.value().ptr();
  Py_ssize_t start = 0;
  PyObject* reason = is_str ? PyUnicodeEncodeError_GetReason(e) : PyUnicodeDecodeError_GetReason(e);
  if ((is_str ? PyUnicodeEncodeError_GetStart(e, &start) : PyUnicodeDecodeError_GetStart(e, &start)) < 0 ||
      reason == nullptr) {
    Py_XDECREF(reason);
    throw py::error_already_set();
  }
  const std::string why = py::reinterpret_steal<py::str>(reason).cast<std::string>();
  return is_str ? "is not valid Unicode text (" + why + " at index " + std::to_string(start) + ")"
                : "is not valid UTF-8 (" + why + " at byte " + std::to_string(start) + ")";
}

// The captions of a {key: [caption, ...]} dict in the dict's order, with their counts per key. A caption is a
// {"caption": str} dict, or (allow_str) a str; a key's captions a list, a tuple or another sequence (not str/bytes).
// Anything else is a ValueError naming `name`[key][position].
inline void read_caption_dict(PyObject* d, bool allow_str, const char* name, Captions& caps) {
  if (!PyDict_Check(d)) throw py::value_error(std::string(name) + " must be a dict, got " + type_name(d));
  static PyObject* caption_key = PyUnicode_InternFromString("caption");
  if (caption_key == nullptr) throw py::error_already_set();
  auto& keys = caps.keys();
  const std::string expected = allow_str ? "a str or a dict with a 'caption' key" : "a dict with a 'caption' key";
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(d, &pos, &key, &value)) {
    auto where = [&]() { return std::string(name) + "[" + repr_of(key) + "]"; };
    if (PyUnicode_Check(value) || PyBytes_Check(value) || !PySequence_Check(value))
      throw py::value_error(where() + " must be a list of captions, got " + type_name(value));
    caps.add_key(key);
    // Another sequence type becomes a list, held as the key's captions (PySequence_Fast may run Python code).
    py::object seq = py::reinterpret_steal<py::object>(PySequence_Fast(value, "a sequence"));
    if (!seq) throw py::error_already_set();
    caps.hold(seq.ptr());
    // The list is read by index each time: a caption dict's lookup may, in theory, run Python code.
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seq.ptr()); ++j) {
      PyObject* c = PySequence_Fast_GET_ITEM(seq.ptr(), j);
      auto at = [&]() { return where() + "[" + std::to_string(j) + "]"; };
      if (PyDict_Check(c)) {
        PyObject* s = PyDict_GetItemWithError(c, caption_key);
        if (s == nullptr) {
          if (PyErr_Occurred()) throw py::error_already_set();
          throw py::value_error(at() + " must be " + expected + ", got a dict without one");
        }
        if (!PyUnicode_Check(s)) throw py::value_error(at() + "['caption'] must be a str, got " + type_name(s));
        c = s;
      } else if (!allow_str || !PyUnicode_Check(c)) {
        throw py::value_error(at() + " must be " + expected + ", got " + type_name(c));
      }
      caps.add(c);
      ++keys.back().second;
      poll(static_cast<int64_t>(caps.keys().size()) + j);
    }
  }
}

// The ValueError of the caption a tokenize() call refused, `where` naming it.
[[noreturn]] inline void refused_caption(PyObject* caption, const std::string& where) {
  throw py::value_error(where + " " + text_problem(caption));
}

}  // namespace vlk::ptb_py
