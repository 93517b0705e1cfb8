// Caption metrics: CIDEr(-D), BLEU, ROUGE-L. Python objects are read (and validated) with the GIL held; the
// scoring runs with the GIL released. A malformed caption raises ValueError(("__vlk_caption__", image, position,
// reason)) which vlkernels.captioning turns into a message naming the image id.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "captioning/cider.h"
#include "captioning/ngrams.h"
#include "ptb_captions.h"
#include "registry.h"

namespace py = pybind11;
using vlk::cap::TextView;
using vlk::cap::Tokens;

namespace {

[[noreturn]] void bad_caption(int64_t item, int64_t pos, const std::string& reason) {
  py::tuple args = py::make_tuple("__vlk_caption__", item, pos, reason);
  PyErr_SetObject(PyExc_ValueError, args.ptr());
  throw py::error_already_set();
}

TextView text_of(PyObject* o, int64_t item, int64_t pos) {
  if (!PyUnicode_Check(o)) bad_caption(item, pos, std::string("expected str, got ") + Py_TYPE(o)->tp_name);
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(o, &n);
  if (p == nullptr) {
    PyErr_Clear();
    bad_caption(item, pos, "not valid UTF-8 (lone surrogate)");
  }
  return TextView{p, static_cast<int64_t>(n)};
}

// Images: hyps[i] = [candidate], refs[i] = [reference, ...] (pycocoevalcap's layout).
struct ImageBatch {
  std::vector<TextView> texts;
  std::vector<int64_t> cand, ref_off{0}, ref_caps;
};

ImageBatch read_images(const py::list& hyps, const py::list& refs) {
  ImageBatch b;
  const int64_t n = static_cast<int64_t>(py::len(hyps));
  if (static_cast<int64_t>(py::len(refs)) != n) throw py::value_error("hyps and refs differ in length");
  b.cand.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    PyObject* h = PyList_GET_ITEM(hyps.ptr(), i);
    PyObject* r = PyList_GET_ITEM(refs.ptr(), i);
    if (!PyList_Check(h)) bad_caption(i, -1, std::string("candidate must be a list, got ") + Py_TYPE(h)->tp_name);
    if (PyList_GET_SIZE(h) != 1)
      bad_caption(i, -1, "candidate list must hold exactly one caption, got " + std::to_string(PyList_GET_SIZE(h)));
    if (!PyList_Check(r)) bad_caption(i, -2, std::string("references must be a list, got ") + Py_TYPE(r)->tp_name);
    if (PyList_GET_SIZE(r) == 0) bad_caption(i, -2, "no reference captions");
    b.cand.push_back(static_cast<int64_t>(b.texts.size()));
    b.texts.push_back(text_of(PyList_GET_ITEM(h, 0), i, -1));
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(r); ++j) {
      b.ref_caps.push_back(static_cast<int64_t>(b.texts.size()));
      b.texts.push_back(text_of(PyList_GET_ITEM(r, j), i, j));
    }
    b.ref_off.push_back(static_cast<int64_t>(b.ref_caps.size()));
  }
  return b;
}

// Flat list of str; errors name the item index.
std::vector<TextView> read_texts(const py::list& xs, int64_t role = -1) {
  std::vector<TextView> out(py::len(xs));
  for (size_t i = 0; i < out.size(); ++i) out[i] = text_of(PyList_GET_ITEM(xs.ptr(), i), static_cast<int64_t>(i), role);
  return out;
}

vlk::cap::CiderOpts opts_of(int n, double sigma, bool cider_d, double ref_len, const py::array_t<double>& logdf) {
  vlk::cap::CiderOpts o;
  o.n = n;
  o.sigma = sigma;
  o.cider_d = cider_d;
  o.ref_len = ref_len;
  o.logdf = logdf.data();
  o.logdf_size = static_cast<int64_t>(logdf.size());
  return o;
}

py::array_t<double> cider_corpus(const py::list& hyps, const py::list& refs, int n, double sigma, bool cider_d,
                                 double ref_len, const py::array_t<double, py::array::c_style>& logdf) {
  ImageBatch b = read_images(hyps, refs);
  const int64_t m = static_cast<int64_t>(b.cand.size());
  py::array_t<double> out(m);
  double* po = out.mutable_data();
  const auto o = opts_of(n, sigma, cider_d, ref_len, logdf);
  py::gil_scoped_release release;
  vlk::cap::Vocab vocab;
  Tokens tok;
  vlk::cap::tokenize_texts(b.texts, vlk::cap::Split::kWhitespace, vocab, tok);
  vlk::cap::cider_corpus(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, o, po);
  return out;
}

// CIDEr(-D) from raw caption dicts, as pycocoevalcap's evaluation computes it (each dict PTB-tokenized as one batch
// in its own key order, then scored in gts order); the tokenized captions reach the scorer as C++ buffers, never as
// Python strs. Returns None when the input is not the plain layout (dicts of lists of {"caption": str} or str, one
// candidate and at least one reference per image, the same keys) or a caption is not valid text: the Python caller
// then takes its general path, which names the problem. Else (per-image scores in gts order, whether any
// reference caption has a word).
py::object cider_corpus_raw(py::handle gts, py::handle res, int n, double sigma, bool cider_d, double ref_len,
                            const py::array_t<double, py::array::c_style>& logdf) {
  namespace pp = vlk::ptb_py;
  pp::Captions g, r;
  if (!pp::read_caption_dict(gts.ptr(), true, g) || !pp::read_caption_dict(res.ptr(), true, r)) return py::none();
  const auto& gk = g.keys();
  const auto& rk = r.keys();
  if (gk.empty() || gk.size() != rk.size()) return py::none();
  py::dict cand_of;  // res key -> its caption's index in the res batch
  for (size_t i = 0; i < rk.size(); ++i) {
    if (rk[i].second != 1) return py::none();
    if (PyDict_SetItem(cand_of.ptr(), rk[i].first, py::int_(i).ptr()) < 0) throw py::error_already_set();
  }
  int64_t n_refs = 0;
  for (const auto& [k, count] : gk) n_refs += count;
  ImageBatch b;
  b.cand.reserve(gk.size());
  for (const auto& [k, count] : gk) {
    if (count == 0) return py::none();
    PyObject* at = PyDict_GetItemWithError(cand_of.ptr(), k);
    if (at == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return py::none();
    }
    b.cand.push_back(n_refs + PyLong_AsLongLong(at));
    for (Py_ssize_t j = 0; j < count; ++j) b.ref_caps.push_back(static_cast<int64_t>(b.ref_caps.size()));
    b.ref_off.push_back(static_cast<int64_t>(b.ref_caps.size()));
  }
  if (!g.tokenize() || !r.tokenize()) return py::none();
  const int64_t m = static_cast<int64_t>(b.cand.size());
  py::array_t<double> out(m);
  double* po = out.mutable_data();
  const auto o = opts_of(n, sigma, cider_d, ref_len, logdf);
  bool any_words = false;
  {
    py::gil_scoped_release release;
    const vlk::PtbResult& gr = g.result();
    const vlk::PtbResult& rr = r.result();
    b.texts.reserve(static_cast<size_t>(n_refs) + rk.size());
    for (int64_t i = 0; i < n_refs; ++i) b.texts.push_back(TextView{gr.data(i), gr.size[i]});
    for (size_t i = 0; i < rk.size(); ++i) b.texts.push_back(TextView{rr.data(i), rr.size[i]});
    vlk::cap::Vocab vocab;
    Tokens tok;
    vlk::cap::tokenize_texts(b.texts, vlk::cap::Split::kWhitespace, vocab, tok);
    any_words = tok.off[n_refs] > 0;
    vlk::cap::cider_corpus(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, o, po);
  }
  return py::make_tuple(out, any_words);
}

py::tuple bleu_corpus(const py::list& hyps, const py::list& refs, int n) {
  ImageBatch b = read_images(hyps, refs);
  const int64_t m = static_cast<int64_t>(b.cand.size());
  py::array_t<int64_t> stats({m, static_cast<int64_t>(2 + 2 * n)});
  py::array_t<double> per({m, static_cast<int64_t>(n)});
  int64_t* ps = stats.mutable_data();
  double* pp = per.mutable_data();
  {
    py::gil_scoped_release release;
    vlk::cap::Vocab vocab;
    Tokens tok;
    vlk::cap::tokenize_texts(b.texts, vlk::cap::Split::kWhitespace, vocab, tok);
    vlk::cap::bleu_images(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, n, ps, pp);
  }
  return py::make_tuple(stats, per);
}

py::array_t<double> rouge_corpus(const py::list& hyps, const py::list& refs, double beta) {
  ImageBatch b = read_images(hyps, refs);
  const int64_t m = static_cast<int64_t>(b.cand.size());
  py::array_t<double> out(m);
  double* po = out.mutable_data();
  py::gil_scoped_release release;
  vlk::cap::Vocab vocab;
  Tokens tok;
  vlk::cap::tokenize_texts(b.texts, vlk::cap::Split::kSpace, vocab, tok);
  vlk::cap::rouge_l_images(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, beta, po);
  return out;
}

using I64 = py::array_t<int64_t, py::array::c_style>;

// A caption source is a list of str, or (data, starts, lens) int64 arrays of token ids.
// role: -1 candidates, -4 flattened references (names the item in errors).
void tokenize_source(const py::object& src, const vlk::cap::Vocab* frozen, vlk::cap::Vocab& vocab,
                     vlk::cap::Vocab& extra, Tokens& out, int64_t role) {
  Tokens t;
  if (py::isinstance<py::list>(src)) {
    auto texts = read_texts(src.cast<py::list>(), role);
    py::gil_scoped_release release;
    if (frozen)
      vlk::cap::tokenize_texts_frozen(texts, vlk::cap::Split::kWhitespace, *frozen, extra, t);
    else
      vlk::cap::tokenize_texts(texts, vlk::cap::Split::kWhitespace, vocab, t);
  } else {
    auto tup = src.cast<py::tuple>();
    auto data = tup[0].cast<I64>();
    auto starts = tup[1].cast<I64>();
    auto lens = tup[2].cast<I64>();
    const int64_t count = static_cast<int64_t>(starts.size());
    py::gil_scoped_release release;
    if (frozen)
      vlk::cap::tokenize_ids_frozen(data.data(), starts.data(), lens.data(), count, *frozen, extra, t);
    else
      vlk::cap::tokenize_ids(data.data(), starts.data(), lens.data(), count, vocab, t);
  }
  vlk::cap::append_tokens(out, t);
}

void df_add_documents(vlk::cap::CiderDf& self, const py::object& refs, const I64& ref_off) {
  Tokens tok;
  vlk::cap::Vocab unused;
  tokenize_source(refs, nullptr, self.vocab(), unused, tok, -4);
  const int64_t ndocs = static_cast<int64_t>(ref_off.size()) - 1;
  std::vector<int64_t> caps(tok.size());
  for (int64_t i = 0; i < tok.size(); ++i) caps[i] = i;
  py::gil_scoped_release release;
  self.add_documents(tok, ref_off.data(), caps.data(), ndocs);
}

void df_set_items(vlk::cap::CiderDf& self, const py::list& ngrams, const py::array_t<int64_t>& counts) {
  auto texts = read_texts(ngrams);
  auto c = counts.unchecked<1>();
  std::vector<uint32_t> words;
  for (size_t i = 0; i < texts.size(); ++i) {
    words.clear();
    vlk::cap::split_words(texts[i], vlk::cap::Split::kWhitespace, [&](const char* p, int64_t n) {
      words.push_back(self.vocab().intern(p, n, vlk::cap::hash_bytes(p, n)));
    });
    if (words.empty() || words.size() > static_cast<size_t>(self.n()))
      bad_caption(static_cast<int64_t>(i), -1, "n-gram must hold 1 to " + std::to_string(self.n()) + " words");
    self.set(words.data(), static_cast<int>(words.size()), static_cast<uint32_t>(c(i)));
  }
}

py::tuple df_items(const vlk::cap::CiderDf& self) {
  std::vector<std::string> ngrams;
  std::vector<uint32_t> counts;
  self.export_items(ngrams, counts);
  py::array_t<int64_t> c(static_cast<int64_t>(counts.size()));
  for (size_t i = 0; i < counts.size(); ++i) c.mutable_data()[i] = counts[i];
  return py::make_tuple(py::cast(ngrams), c);
}

py::array_t<double> df_score(const vlk::cap::CiderDf& self, const py::object& cands, const py::object& refs,
                             const I64& ref_off, const I64& group, double sigma, double ref_len,
                             const py::array_t<double, py::array::c_style>& logdf) {
  Tokens tok;
  vlk::cap::Vocab extra, unused;
  tokenize_source(cands, &self.vocab(), unused, extra, tok, -1);
  const int64_t n_cand = tok.size();
  tokenize_source(refs, &self.vocab(), unused, extra, tok, -4);
  const int64_t n_refs = tok.size() - n_cand;
  const int64_t n_groups = static_cast<int64_t>(ref_off.size()) - 1;
  if (static_cast<int64_t>(group.size()) != n_cand) throw py::value_error("group must have one entry per candidate");
  std::vector<int64_t> cand(n_cand), ref_caps(n_refs);
  for (int64_t i = 0; i < n_cand; ++i) cand[i] = i;
  for (int64_t i = 0; i < n_refs; ++i) ref_caps[i] = n_cand + i;
  py::array_t<double> out(n_cand);
  double* po = out.mutable_data();
  const auto o = opts_of(self.n(), sigma, true, ref_len, logdf);
  py::gil_scoped_release release;
  self.score(tok, cand.data(), n_cand, group.data(), ref_off.data(), ref_caps.data(), n_groups, o, po);
  return out;
}

// Python's str.split() on one string, for tests of the whitespace rule.
py::list split_words(const py::str& s, bool space_only) {
  py::list out;
  vlk::cap::split_words(text_of(s.ptr(), 0, -1),
                        space_only ? vlk::cap::Split::kSpace : vlk::cap::Split::kWhitespace,
                        [&](const char* p, int64_t n) { out.append(py::str(p, static_cast<size_t>(n))); });
  return out;
}

// Validation without C++ exceptions (plain CPython functions returning NULL with a ValueError set): Python calls
// these before the scorers, so bad input never unwinds through C++ (some sanitizer runtimes cannot intercept a
// throw from a module loaded after them).
bool set_caption_error(int64_t item, int64_t pos, const std::string& reason) {
  PyObject* args = Py_BuildValue("(sLLs)", "__vlk_caption__", static_cast<long long>(item),
                                 static_cast<long long>(pos), reason.c_str());
  if (args != nullptr) {
    PyErr_SetObject(PyExc_ValueError, args);
    Py_DECREF(args);
  }
  return false;
}

bool check_text(PyObject* o, int64_t item, int64_t pos) {
  if (!PyUnicode_Check(o)) return set_caption_error(item, pos, std::string("expected str, got ") + Py_TYPE(o)->tp_name);
  Py_ssize_t n = 0;
  if (PyUnicode_AsUTF8AndSize(o, &n) == nullptr) {
    PyErr_Clear();
    return set_caption_error(item, pos, "not valid UTF-8 (lone surrogate)");
  }
  return true;
}

PyObject* check_images(PyObject*, PyObject* args) {
  PyObject *hyps, *refs;
  if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &hyps, &PyList_Type, &refs)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(hyps);
  if (PyList_GET_SIZE(refs) != n) {
    PyErr_SetString(PyExc_ValueError, "hyps and refs differ in length");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* h = PyList_GET_ITEM(hyps, i);
    PyObject* r = PyList_GET_ITEM(refs, i);
    if (!PyList_Check(h)) {
      set_caption_error(i, -1, std::string("candidate must be a list, got ") + Py_TYPE(h)->tp_name);
      return nullptr;
    }
    if (PyList_GET_SIZE(h) != 1) {
      set_caption_error(i, -1, "candidate list must hold exactly one caption, got " +
                                   std::to_string(PyList_GET_SIZE(h)));
      return nullptr;
    }
    if (!PyList_Check(r)) {
      set_caption_error(i, -2, std::string("references must be a list, got ") + Py_TYPE(r)->tp_name);
      return nullptr;
    }
    if (PyList_GET_SIZE(r) == 0) {
      set_caption_error(i, -2, "no reference captions");
      return nullptr;
    }
    if (!check_text(PyList_GET_ITEM(h, 0), i, -1)) return nullptr;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(r); ++j)
      if (!check_text(PyList_GET_ITEM(r, j), i, j)) return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* check_texts(PyObject*, PyObject* args) {
  PyObject* xs;
  long long role;
  if (!PyArg_ParseTuple(args, "O!L", &PyList_Type, &xs, &role)) return nullptr;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(xs); ++i)
    if (!check_text(PyList_GET_ITEM(xs, i), i, role)) return nullptr;
  Py_RETURN_NONE;
}

PyMethodDef check_defs[] = {
    {"cap_check_images", check_images, METH_VARARGS, "Validates pycocoevalcap-style caption lists."},
    {"cap_check_texts", check_texts, METH_VARARGS, "Validates a flat list of captions."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

VLK_BIND(captioning) {
  for (PyMethodDef* d = check_defs; d->ml_name != nullptr; ++d)
    m.add_object(d->ml_name, py::reinterpret_steal<py::object>(PyCFunction_New(d, nullptr)));
  m.def("cap_cider_corpus", &cider_corpus);
  m.def("cap_cider_corpus_raw", &cider_corpus_raw);
  m.def("cap_bleu_corpus", &bleu_corpus);
  m.def("cap_rouge_corpus", &rouge_corpus);
  m.def("cap_split_words", &split_words);
  py::class_<vlk::cap::CiderDf>(m, "CapCiderDf")
      .def(py::init<int>())
      .def_property_readonly("n", &vlk::cap::CiderDf::n)
      .def_property_readonly("num_docs", &vlk::cap::CiderDf::num_docs)
      .def_property_readonly("max_df", &vlk::cap::CiderDf::max_df)
      .def("__len__", &vlk::cap::CiderDf::size)
      .def("set_num_docs", &vlk::cap::CiderDf::set_num_docs)
      .def("add_documents", &df_add_documents)
      .def("set_items", &df_set_items)
      .def("items", &df_items)
      .def("score", &df_score);
}
