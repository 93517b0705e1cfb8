// Caption metrics: CIDEr(-D), BLEU, ROUGE-L and the SCST document-frequency table. Each public operation is one
// call: the Python objects are read and checked once, here, with the GIL held, and every object whose memory is read
// later is held by a strong reference (a caller's thread may replace a caption meanwhile); then the GIL is released
// for tokenizing and scoring. A malformed input is a ValueError with its final message, naming the image (or group)
// and the caption: the readers below throw a CaptionError (item, position, reason) and each operation names it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "captioning/cider.h"
#include "captioning/coco_eval.h"
#include "captioning/ngrams.h"
#include "core/parallel.h"
#include "core/tensor_arg.h"
#include "ptb_captions.h"
#include "registry.h"

namespace py = pybind11;
using vlk::cap::TextView;
using vlk::cap::Tokens;

namespace {

// Strong references, dropped on destruction. Declare it before any gil_scoped_release in a scope, so that it is
// destroyed after the GIL is back.
class Held {
 public:
  Held() = default;
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() {
    for (PyObject* o : objs_) Py_DECREF(o);
  }
  PyObject* hold(PyObject* o) {
    objs_.push_back(o);
    Py_INCREF(o);
    return o;
  }

 private:
  std::vector<PyObject*> objs_;
};

// A malformed caption input, found while reading (GIL held). Positions: -1 the candidate, -2 the reference list
// (or group), >= 0 a reference. Never crosses into Python: named() turns it into the ValueError.
struct CaptionError {
  int64_t item, pos;
  std::string reason;
};

[[noreturn]] void bad_caption(int64_t item, int64_t pos, const std::string& reason) {
  throw CaptionError{item, pos, reason};
}

// Runs f; a CaptionError becomes ValueError("<name(item, pos)>: <reason>").
template <typename F, typename Name>
auto named(Name name, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const CaptionError& e) {
    throw py::value_error(name(e.item, e.pos) + ": " + e.reason);
  }
}

using vlk::ptb_py::poll;
using vlk::ptb_py::repr_of;
std::string type_of(PyObject* o) { return Py_TYPE(o)->tp_name; }

// "image 5 candidate", "image 'x' references", "image 5 reference 2": the pycocoevalcap layout's items.
std::string image_item(PyObject* key, int64_t pos) {
  std::string s = "image " + repr_of(key);
  if (pos == -1) return s + " candidate";
  if (pos == -2) return s + " references";
  return s + " reference " + std::to_string(pos);
}

// A str's UTF-8 (cached inside the str, so it lives as long as the held object).
TextView utf8_of(PyObject* o, Held& held, int64_t item, int64_t pos) {
  if (!PyUnicode_Check(o)) bad_caption(item, pos, "expected str, got " + type_of(o));
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(o, &n);
  if (p == nullptr) {
    PyErr_Clear();
    bad_caption(item, pos, "not valid UTF-8 (lone surrogate)");
  }
  held.hold(o);
  return TextView{p, static_cast<int64_t>(n)};
}

// Images: candidate cand[i], references ref_caps[ref_off[i] .. ref_off[i+1]), all indices into texts.
struct ImageBatch {
  std::vector<TextView> texts;
  std::vector<int64_t> cand, ref_off{0}, ref_caps;
};

// {id: [references]} and {id: [candidate]}: (id, references, candidate) in gts order, the containers held.
struct Image {
  PyObject *key, *refs, *cand;
};

void read_layout(PyObject* gts, PyObject* res, Held& held, std::vector<Image>& ims) {
  if (!PyDict_Check(gts) || !PyDict_Check(res)) throw py::value_error("gts and res must be dicts");
  ims.reserve(static_cast<size_t>(PyDict_GET_SIZE(gts)));
  Py_ssize_t it = 0;
  PyObject *k, *v;
  while (PyDict_Next(gts, &it, &k, &v)) {
    ims.push_back(Image{held.hold(k), held.hold(v), nullptr});
    poll(static_cast<int64_t>(ims.size()));
  }
  // A lookup may run a key's __eq__ (Python code): everything read so far is held, the lists are read after.
  for (Image& im : ims) {
    PyObject* c = PyDict_GetItemWithError(res, im.key);
    if (c == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      throw py::value_error("gts and res must have the same image ids");
    }
    im.cand = held.hold(c);
    poll(&im - ims.data());
  }
  if (PyDict_GET_SIZE(res) != static_cast<Py_ssize_t>(ims.size()))
    throw py::value_error("gts and res must have the same image ids");
  for (size_t i = 0; i < ims.size(); ++i) {
    const int64_t item = static_cast<int64_t>(i);
    if (!PyList_Check(ims[i].cand)) bad_caption(item, -1, "candidate must be a list, got " + type_of(ims[i].cand));
    if (!PyList_Check(ims[i].refs)) bad_caption(item, -2, "references must be a list, got " + type_of(ims[i].refs));
    if (PyList_GET_SIZE(ims[i].refs) == 0) bad_caption(item, -2, "no reference captions");
    poll(item);
  }
}

void check_one_candidate(PyObject* cand, int64_t item) {
  if (PyList_GET_SIZE(cand) != 1)
    bad_caption(item, -1, "candidate list must hold exactly one caption, got " + std::to_string(PyList_GET_SIZE(cand)));
}

// Pre-tokenized captions (str), split later on whitespace.
void read_tokenized(const std::vector<Image>& ims, Held& held, ImageBatch& b) {
  b.cand.reserve(ims.size());
  for (size_t i = 0; i < ims.size(); ++i) {
    const int64_t item = static_cast<int64_t>(i);
    check_one_candidate(ims[i].cand, item);
    b.cand.push_back(static_cast<int64_t>(b.texts.size()));
    b.texts.push_back(utf8_of(PyList_GET_ITEM(ims[i].cand, 0), held, item, -1));
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(ims[i].refs); ++j) {
      b.ref_caps.push_back(static_cast<int64_t>(b.texts.size()));
      b.texts.push_back(utf8_of(PyList_GET_ITEM(ims[i].refs, j), held, item, j));
      poll(static_cast<int64_t>(b.texts.size()));
    }
    b.ref_off.push_back(static_cast<int64_t>(b.ref_caps.size()));
  }
}

// The str of a raw caption: a str, or a {"caption": str} dict as pycocoevalcap's PTBTokenizer takes.
PyObject* raw_caption(PyObject* c, Held& held, int64_t item, int64_t pos) {
  static PyObject* caption_key = PyUnicode_InternFromString("caption");
  if (caption_key == nullptr) throw py::error_already_set();
  held.hold(c);  // the lookup below may run Python code that drops c from its list
  if (PyDict_Check(c)) {
    PyObject* s = PyDict_GetItemWithError(c, caption_key);
    if (s == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      bad_caption(item, pos, "annotation dict has no 'caption' field");
    }
    c = s;
  }
  if (!PyUnicode_Check(c)) bad_caption(item, pos, "caption must be str, got " + type_of(c));
  return c;
}

// Raw captions, PTB-tokenized as pycocoevalcap's evaluation does: each dict as one batch in its own key order (the
// lexer reads a caption's end with the next caption as context), then scored in gts order.
struct RawBatch {
  vlk::ptb_py::Captions refs, cands;
  std::vector<std::pair<int64_t, int64_t>> ref_at, cand_at;  // (image, position) of each caption, for errors
  std::vector<PyObject*> ref_obj, cand_obj;                   // held by refs / cands
};

// Why the tokenizer refused a caption (pos in the layout `at`): a lone surrogate, or too long.
[[noreturn]] void bad_text(int64_t bad, const std::vector<PyObject*>& objs,
                           const std::vector<std::pair<int64_t, int64_t>>& at) {
  PyObject* o = objs[static_cast<size_t>(bad)];
  if (PyUnicode_AsUTF8AndSize(o, nullptr) == nullptr) {
    PyErr_Clear();
    bad_caption(at[bad].first, at[bad].second, "not valid UTF-8 (lone surrogate)");
  }
  bad_caption(at[bad].first, at[bad].second, vlk::ptb_py::text_problem(o));
}

void read_raw(const std::vector<Image>& ims, PyObject* res, Held& held, RawBatch& raw, ImageBatch& b) {
  const int64_t m = static_cast<int64_t>(ims.size());
  for (int64_t i = 0; i < m; ++i) {
    PyObject* refs = ims[i].refs;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(refs); ++j) {
      PyObject* s = raw_caption(PyList_GET_ITEM(refs, j), held, i, j);
      if (!raw.refs.add(s)) bad_caption(i, j, "not valid text");
      raw.ref_obj.push_back(s);
      raw.ref_at.emplace_back(i, j);
      b.ref_caps.push_back(static_cast<int64_t>(b.ref_caps.size()));
      poll(static_cast<int64_t>(b.ref_caps.size()));
    }
    b.ref_off.push_back(static_cast<int64_t>(b.ref_caps.size()));
  }
  // The candidates in res' key order: position of each gts image in res.
  py::dict image_of;
  for (int64_t i = 0; i < m; ++i) {
    if (PyDict_SetItem(image_of.ptr(), ims[i].key, py::int_(i).ptr()) < 0) throw py::error_already_set();
    poll(i);
  }
  std::vector<Image> in_res;
  Py_ssize_t it = 0;
  PyObject *k, *v;
  while (PyDict_Next(res, &it, &k, &v)) in_res.push_back(Image{held.hold(k), nullptr, nullptr});
  std::vector<int64_t> res_pos(m, -1);
  for (size_t p = 0; p < in_res.size(); ++p) {
    PyObject* at = PyDict_GetItemWithError(image_of.ptr(), in_res[p].key);
    if (at == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      throw py::value_error("gts and res must have the same image ids");
    }
    const int64_t i = PyLong_AsLongLong(at);
    PyObject* cand = ims[i].cand;
    check_one_candidate(cand, i);
    res_pos[i] = static_cast<int64_t>(p);
    PyObject* s = raw_caption(PyList_GET_ITEM(cand, 0), held, i, -1);
    if (!raw.cands.add(s)) bad_caption(i, -1, "not valid text");
    raw.cand_obj.push_back(s);
    raw.cand_at.emplace_back(i, -1);
    poll(static_cast<int64_t>(p));
  }
  const int64_t n_refs = static_cast<int64_t>(b.ref_caps.size());
  for (int64_t i = 0; i < m; ++i) {
    if (res_pos[i] < 0) throw py::value_error("gts and res must have the same image ids");
    b.cand.push_back(n_refs + res_pos[i]);
  }
  if (const int64_t bad = raw.refs.tokenize(); bad >= 0) bad_text(bad, raw.ref_obj, raw.ref_at);
  if (const int64_t bad = raw.cands.tokenize(); bad >= 0) bad_text(bad, raw.cand_obj, raw.cand_at);
}

// Texts of the tokenizer's results: references first, then the candidates (GIL released).
void raw_texts(const RawBatch& raw, ImageBatch& b) {
  const vlk::PtbResult& gr = raw.refs.result();
  const vlk::PtbResult& rr = raw.cands.result();
  const int64_t n_refs = static_cast<int64_t>(raw.ref_obj.size()), n_cand = static_cast<int64_t>(raw.cand_obj.size());
  b.texts.reserve(static_cast<size_t>(n_refs + n_cand));
  for (int64_t i = 0; i < n_refs; ++i) b.texts.push_back(TextView{gr.data(i), gr.size[i]});
  for (int64_t i = 0; i < n_cand; ++i) b.texts.push_back(TextView{rr.data(i), rr.size[i]});
}

enum Metric { kCider = 1, kBleu = 2, kRouge = 4 };

// Stemming (nltk's PorterStemmer, Python) of whitespace tokens: the distinct words go to `stem` in one call (it
// returns one str per word), and each caption becomes the concatenation of its words' stems split on whitespace,
// which is " ".join(stems).split() of the stemmed caption. Called without the GIL; takes it for the callback only.
void stem_tokens(const py::object& stem, const vlk::cap::Vocab& vocab, Tokens& tok) {
  const uint32_t nw = vocab.size();
  std::string stems;                 // the stems' UTF-8, concatenated
  std::vector<int64_t> stem_off{0};  // word w's stem = stems[stem_off[w] .. stem_off[w+1])
  {
    py::gil_scoped_acquire gil;
    py::list words(nw);
    for (uint32_t w = 0; w < nw; ++w) {
      const std::string_view v = vocab.word(w);
      PyObject* s = PyUnicode_DecodeUTF8(v.data(), static_cast<Py_ssize_t>(v.size()), "strict");
      if (s == nullptr) throw py::error_already_set();
      PyList_SET_ITEM(words.ptr(), w, s);
    }
    py::object out = stem(words);
    if (!PyList_Check(out.ptr()) || PyList_GET_SIZE(out.ptr()) != static_cast<Py_ssize_t>(nw))
      throw py::type_error("the stemmer must return a list with one str per word");
    for (uint32_t w = 0; w < nw; ++w) {
      PyObject* s = PyList_GET_ITEM(out.ptr(), w);
      if (!PyUnicode_Check(s)) throw py::type_error("the stemmer returned " + type_of(s) + ", expected str");
      Py_ssize_t n = 0;
      const char* p = PyUnicode_AsUTF8AndSize(s, &n);
      if (p == nullptr) throw py::error_already_set();
      stems.append(p, static_cast<size_t>(n));
      stem_off.push_back(static_cast<int64_t>(stems.size()));
    }
  }
  vlk::cap::replace_words(stems, stem_off, tok);
}

// Scores of the pycocoevalcap layout {id: [references]}, {id: [candidate]} in one call. metrics: a Metric mask.
// Returns {"cider": (m,), "any_ref_words": bool, "bleu_stats": (m, 2 + 2n) int64, "bleu": (m, n), "rouge": (m,)}
// for the metrics asked.
// `stem`: None, or a callable list[str] -> list[str] applied to the whitespace tokens of CIDEr and BLEU.
py::dict score_images(py::handle gts, py::handle res, bool tokenize, int metrics, int n, double sigma, bool cider_d,
                      double ref_len, py::handle logdf_obj, const py::object& stem) {
  if (n < 1 || n > vlk::cap::kMaxN) throw py::value_error("n must be in [1, 4]");
  auto logdf = vlk::TensorArg::from(logdf_obj, "logdf");
  logdf.ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  Held held;
  RawBatch raw;
  ImageBatch b;
  std::vector<Image> ims;
  named([&](int64_t item, int64_t pos) { return image_item(ims[static_cast<size_t>(item)].key, pos); }, [&] {
    read_layout(gts.ptr(), res.ptr(), held, ims);
    if (tokenize)
      read_raw(ims, res.ptr(), held, raw, b);
    else
      read_tokenized(ims, held, b);
  });
  const int64_t m = static_cast<int64_t>(ims.size());
  py::array_t<double> cider(m), rouge(m), bleu({m, static_cast<int64_t>(n)});
  py::array_t<int64_t> stats({m, static_cast<int64_t>(2 + 2 * n)});
  vlk::cap::CiderOpts o;
  o.n = n;
  o.sigma = sigma;
  o.cider_d = cider_d;
  o.ref_len = ref_len;
  o.logdf = logdf.data<double>();
  o.logdf_size = logdf.numel();
  double *pc = cider.mutable_data(), *pr = rouge.mutable_data(), *pb = bleu.mutable_data();
  int64_t* ps = stats.mutable_data();
  bool any_ref_words = false;
  {
    py::gil_scoped_release release;
    if (tokenize) raw_texts(raw, b);
    if (metrics & (kCider | kBleu)) {
      vlk::cap::Vocab vocab;
      Tokens tok;
      vlk::cap::tokenize_texts(b.texts, vlk::cap::Split::kWhitespace, vocab, tok);
      if (!stem.is_none()) stem_tokens(stem, vocab, tok);
      for (int64_t c : b.ref_caps) any_ref_words = any_ref_words || tok.len(c) > 0;
      if (metrics & kCider)
        vlk::cap::cider_corpus(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, o, pc);
      if (metrics & kBleu)
        vlk::cap::bleu_images(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, n, ps, pb);
    }
    if (metrics & kRouge) {
      vlk::cap::Vocab vocab;
      Tokens tok;
      vlk::cap::tokenize_texts(b.texts, vlk::cap::Split::kSpace, vocab, tok);
      vlk::cap::rouge_l_images(tok, b.cand.data(), b.ref_off.data(), b.ref_caps.data(), m, 1.2, pr);
    }
  }
  py::dict out;
  if (metrics & kCider) {
    out["cider"] = cider;
    out["any_ref_words"] = any_ref_words;
  }
  if (metrics & kBleu) {
    out["bleu_stats"] = stats;
    out["bleu"] = bleu;
  }
  if (metrics & kRouge) out["rouge"] = rouge;
  return out;
}

// An int64 array from Python (numpy, torch, any DLPack producer): 1-D, contiguous, on the CPU, checked by
// vlk::TensorArg (a ValueError naming it otherwise) and held while this lives.
class I64 {
 public:
  I64() = default;
  I64(py::handle obj, const char* name) : a_(std::make_unique<vlk::TensorArg>(vlk::TensorArg::from(obj, name))) {
    a_->ndim(1).dtype_is(vlk::kI64).device(vlk::kCPU).contiguous();
  }
  const int64_t* data() const { return a_->data<int64_t>(); }
  int64_t size() const { return a_->numel(); }
  int64_t ndim() const { return 1; }

 private:
  std::unique_ptr<vlk::TensorArg> a_;
};

// A caption source of CiderD: a flat list of str (errors name (index, role)), or token-id rows (data, starts, lens)
// as int64 arrays (checked to lie inside data). Holds what it reads.
struct Source {
  std::vector<TextView> texts;
  I64 data, starts, lens;
  bool ids = false;
  int64_t size() const { return ids ? static_cast<int64_t>(starts.size()) : static_cast<int64_t>(texts.size()); }
};

void read_source(const py::object& src, int64_t role, Held& held, Source& out) {
  if (PyList_Check(src.ptr())) {
    PyObject* xs = src.ptr();
    held.hold(xs);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(xs); ++i) {
      out.texts.push_back(utf8_of(PyList_GET_ITEM(xs, i), held, i, role));
      poll(i);
    }
    return;
  }
  auto tup = src.cast<py::tuple>();
  if (tup.size() != 3) throw py::value_error("token-id source must be (data, starts, lens)");
  out.ids = true;
  out.data = I64(tup[0], "token ids");
  out.starts = I64(tup[1], "row starts");
  out.lens = I64(tup[2], "row lengths");
  if (out.starts.ndim() != 1 || out.lens.ndim() != 1 || out.starts.size() != out.lens.size())
    throw py::value_error("starts and lens must be 1-D of one length");
  const int64_t total = static_cast<int64_t>(out.data.size());
  for (py::ssize_t c = 0; c < out.starts.size(); ++c) {
    const int64_t s = out.starts.data()[c], l = out.lens.data()[c];
    if (s < 0 || l < 0 || s > total || l > total - s) throw py::value_error("token-id row outside the data array");
  }
}

void tokenize_source(const Source& s, const vlk::cap::Vocab* frozen, vlk::cap::Vocab& vocab,
                     vlk::cap::Vocab& extra, Tokens& out) {
  Tokens t;
  if (!s.ids) {
    if (frozen)
      vlk::cap::tokenize_texts_frozen(s.texts, vlk::cap::Split::kWhitespace, *frozen, extra, t);
    else
      vlk::cap::tokenize_texts(s.texts, vlk::cap::Split::kWhitespace, vocab, t);
  } else if (frozen) {
    vlk::cap::tokenize_ids_frozen(s.data.data(), s.starts.data(), s.lens.data(), s.size(), *frozen, extra, t);
  } else {
    vlk::cap::tokenize_ids(s.data.data(), s.starts.data(), s.lens.data(), s.size(), vocab, t);
  }
  vlk::cap::append_tokens(out, t);
}

// Names CiderD's items: pos -1 candidates[item], -4 flat reference `item` as refs[group][j], -2 group `item` as
// refs[group]. `names`: the groups' names (a list: the dict keys of the corpus), or None for their indices.
struct GroupNames {
  py::object names;
  const I64& off;
  std::string operator()(int64_t item, int64_t pos) const {
    if (pos == -1) return "candidates[" + std::to_string(item) + "]";
    const int64_t* o = off.data();
    const int64_t g = pos == -2 ? item : static_cast<int64_t>(std::upper_bound(o, o + off.size(), item) - o) - 1;
    const std::string group = names.is_none() ? std::to_string(g) : repr_of(PyList_GET_ITEM(names.ptr(), g));
    return "refs[" + group + "]" + (pos == -2 ? "" : "[" + std::to_string(item - o[g]) + "]");
  }
};

void check_offsets(const I64& off, int64_t count) {
  const int64_t* o = off.data();
  if (off.ndim() != 1 || off.size() < 1 || o[0] != 0 || o[off.size() - 1] != count)
    throw py::value_error("group offsets must run from 0 to the number of captions");
  for (py::ssize_t g = 1; g < off.size(); ++g)
    if (o[g] <= o[g - 1]) bad_caption(g - 1, -2, "no reference captions");
}

// The SCST table with the numpy logarithms its scores need. Lock order: nobody waits for the table's lock while
// holding the GIL (bindings release the GIL first), so a call that holds the lock may take the GIL (interrupt
// polling, the log-table callback) without deadlock.
struct DfScorer {
  explicit DfScorer(int n) : df(n) {}
  vlk::cap::CiderDf df;
  // np.log(max(1, d)) for d in [0, logdf.size()) and np.log(num_docs) for ref_len_docs, from numpy (bit-identical
  // to the Python scorers); replaced, never modified, under cache_mu (held only briefly, never across a GIL change).
  std::mutex cache_mu;
  std::shared_ptr<const std::vector<double>> logdf = std::make_shared<std::vector<double>>();
  int64_t ref_len_docs = -1;
  double ref_len = 0.0;
};

void df_add_documents(DfScorer& self, const py::object& refs, py::handle ref_off_obj, const py::object& names) {
  const I64 ref_off(ref_off_obj, "ref_off");
  if (!names.is_none() && (!PyList_Check(names.ptr()) || PyList_GET_SIZE(names.ptr()) + 1 != ref_off.size()))
    throw py::value_error("names must be None or a list with one name per reference group");
  Held held;
  Source src;
  named(GroupNames{names, ref_off}, [&] {
    read_source(refs, -4, held, src);
    check_offsets(ref_off, src.size());
  });
  const int64_t ndocs = static_cast<int64_t>(ref_off.size()) - 1;
  py::gil_scoped_release release;
  // Ctrl-C stops it before the counts change (the n-gram build polls, the counting does not); the vocabulary may
  // keep words that no count refers to.
  Tokens tok;
  vlk::cap::Vocab unused;
  std::unique_lock<std::shared_mutex> lock(self.df.mutex());
  tokenize_source(src, nullptr, self.df.vocab(), unused, tok);
  std::vector<int64_t> caps(tok.size());
  for (int64_t i = 0; i < tok.size(); ++i) caps[i] = i;
  self.df.add_documents(tok, ref_off.data(), caps.data(), ndocs);
}

// df of n-grams given as "w1 w2 ..." strings; counts are checked against [0, num_docs] (stored as uint32).
void df_set_items_unnamed(DfScorer& self, const py::list& ngrams, const I64& counts, int64_t num_docs) {
  if (num_docs < 1 || num_docs > static_cast<int64_t>(UINT32_MAX)) throw py::value_error("num_docs must be in [1, 2^32)");
  if (counts.ndim() != 1 || counts.size() != static_cast<py::ssize_t>(py::len(ngrams)))
    throw py::value_error("one count per n-gram");
  Held held;
  std::vector<TextView> texts;
  texts.reserve(static_cast<size_t>(PyList_GET_SIZE(ngrams.ptr())));
  held.hold(ngrams.ptr());
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ngrams.ptr()); ++i) {
    texts.push_back(utf8_of(PyList_GET_ITEM(ngrams.ptr(), i), held, i, -1));
    const int64_t c = counts.data()[i];
    if (c < 0 || c > num_docs)
      bad_caption(i, -1, "document frequency " + std::to_string(c) + " outside [0, num_docs = " +
                             std::to_string(num_docs) + "]");
  }
  int64_t bad = -1;
  {
    py::gil_scoped_release release;
    std::unique_lock<std::shared_mutex> lock(self.df.mutex());
    std::vector<uint32_t> words;
    for (size_t i = 0; i < texts.size() && bad < 0; ++i) {
      words.clear();
      vlk::cap::split_words(texts[i], vlk::cap::Split::kWhitespace, [&](const char* p, int64_t n) {
        words.push_back(self.df.vocab().intern(p, n, vlk::cap::hash_bytes(p, n)));
      });
      if (words.empty() || words.size() > static_cast<size_t>(self.df.n())) {
        bad = static_cast<int64_t>(i);
        break;
      }
      self.df.set(words.data(), static_cast<int>(words.size()), static_cast<uint32_t>(counts.data()[i]));
    }
    if (bad < 0) self.df.set_num_docs(num_docs);
  }
  if (bad >= 0) bad_caption(bad, -1, "n-gram must hold 1 to " + std::to_string(self.df.n()) + " words");
}

void df_set_items(DfScorer& self, const py::list& ngrams, py::handle counts_obj, int64_t num_docs) {
  const I64 counts(counts_obj, "counts");
  named([&](int64_t item, int64_t) { return "document_frequency key " + repr_of(PyList_GET_ITEM(ngrams.ptr(), item)); },
        [&] { df_set_items_unnamed(self, ngrams, counts, num_docs); });
}

// Everything save() writes, read under one lock: {"n", "num_docs", "ngrams", "df"}.
py::dict df_export(DfScorer& self) {
  std::vector<std::string> ngrams;
  std::vector<uint32_t> counts;
  int64_t num_docs = 0;
  {
    py::gil_scoped_release release;
    std::shared_lock<std::shared_mutex> lock(self.df.mutex());
    self.df.export_items(ngrams, counts);
    num_docs = self.df.num_docs();
  }
  py::array_t<int64_t> c(static_cast<int64_t>(counts.size()));
  for (size_t i = 0; i < counts.size(); ++i) c.mutable_data()[i] = counts[i];
  py::dict out;
  out["n"] = self.df.n();
  out["num_docs"] = num_docs;
  out["ngrams"] = py::cast(ngrams);
  out["df"] = c;
  return out;
}

// Rewards of candidates against reference groups with the table's document frequencies, in one call: the log table
// and ref_len come from numpy through vlkernels.captioning._common (fetched again only when the table has grown).
py::array_t<double> df_score(DfScorer& self, const py::object& cands, const py::object& refs, py::handle ref_off_obj,
                             py::handle group_obj, double sigma) {
  const I64 ref_off(ref_off_obj, "ref_off"), group(group_obj, "ref_index");
  Held held;
  Source cs, rs;
  named(GroupNames{py::none(), ref_off}, [&] {
    read_source(cands, -1, held, cs);
    read_source(refs, -4, held, rs);
    check_offsets(ref_off, rs.size());
  });
  const int64_t n_cand = cs.size(), n_refs = rs.size();
  const int64_t n_groups = static_cast<int64_t>(ref_off.size()) - 1;
  if (group.ndim() != 1 || static_cast<int64_t>(group.size()) != n_cand)
    throw py::value_error("ref_index must have one entry per candidate");
  for (int64_t i = 0; i < n_cand; ++i)
    if (group.data()[i] < 0 || group.data()[i] >= n_groups) throw py::value_error("ref_index out of range");
  vlk::cap::CiderOpts o;
  o.n = self.df.n();
  o.sigma = sigma;
  o.cider_d = true;
  py::array_t<double> out(n_cand);
  double* po = out.mutable_data();
  std::vector<int64_t> cand(n_cand), ref_caps(n_refs);
  for (int64_t i = 0; i < n_cand; ++i) cand[i] = i;
  for (int64_t i = 0; i < n_refs; ++i) ref_caps[i] = n_cand + i;
  py::gil_scoped_release release;
  std::shared_lock<std::shared_mutex> lock(self.df.mutex());
  const int64_t num_docs = self.df.num_docs(), max_df = self.df.max_df();
  std::shared_ptr<const std::vector<double>> logdf;
  int64_t docs = -1;  // the table size the cached logarithms were taken for (read under cache_mu: calls share it)
  {
    std::lock_guard<std::mutex> c(self.cache_mu);
    logdf = self.logdf;
    docs = self.ref_len_docs;
    o.ref_len = self.ref_len;
  }
  if (num_docs != docs || max_df >= static_cast<int64_t>(logdf->size())) {
    // The table changed since the logarithms were taken (or never had them): fetch them for its current size while
    // holding the table's lock, so that a thread adding documents all the time cannot make this call start over
    // forever (the lock order above allows taking the GIL here).
    py::gil_scoped_acquire gil;
    if (num_docs < 1) throw py::value_error("no document frequencies: build CiderD from refs, a dict, or load()");
    py::module_ common = py::module_::import("vlkernels.captioning._common");
    logdf = std::make_shared<const std::vector<double>>(common.attr("log_table")(max_df).cast<std::vector<double>>());
    o.ref_len = common.attr("ref_len_of")(num_docs).cast<double>();
    std::lock_guard<std::mutex> c(self.cache_mu);
    self.logdf = logdf;
    self.ref_len_docs = num_docs;
    self.ref_len = o.ref_len;
  }
  o.logdf = logdf->data();
  o.logdf_size = static_cast<int64_t>(logdf->size());
  Tokens tok;
  vlk::cap::Vocab extra, unused;
  tokenize_source(cs, &self.df.vocab(), unused, extra, tok);
  tokenize_source(rs, &self.df.vocab(), unused, extra, tok);
  self.df.score(tok, cand.data(), n_cand, group.data(), ref_off.data(), ref_caps.data(), n_groups, o, po);
  return out;
}

template <typename R>
R locked(DfScorer& d, R (vlk::cap::CiderDf::*get)() const) {
  py::gil_scoped_release release;
  std::shared_lock<std::shared_mutex> lock(d.df.mutex());
  return (d.df.*get)();
}

// COCO-format evaluation of two files (BLEU-1..4 counts, ROUGE-L, CIDEr-D per image, results order) with bounded
// memory: nothing per caption becomes a Python object. Returns {"keys": [image ids], "cider", "bleu_stats",
// "bleu", "rouge", "any_ref_words"}; every input problem is a ValueError naming the file.
py::dict evaluate_files(const std::string& refs, const std::string& preds, bool tokenize, int64_t block_captions) {
  auto ev = std::make_unique<vlk::cap::CocoEval>();
  try {
    py::gil_scoped_release release;
    vlk::cap::coco_prepare(refs, preds, tokenize, block_captions, *ev);
  } catch (const std::runtime_error& e) {
    throw py::value_error(e.what());  // a JsonError or an unreadable file
  }
  const int64_t m = ev->num_images();
  py::module_ common = py::module_::import("vlkernels.captioning._common");
  // The logarithms come from numpy, as the Python scorers compute them (bit-identical scores).
  py::object logdf_obj = common.attr("log_table")(m);
  auto logdf = vlk::TensorArg::from(logdf_obj, "log_table");
  logdf.ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  const double ref_len = common.attr("ref_len_of")(m).cast<double>();
  py::array_t<double> cider(m), rouge(m), bleu({m, int64_t{4}});
  py::array_t<int64_t> stats({m, int64_t{10}});
  double *pc = cider.mutable_data(), *pr = rouge.mutable_data(), *pb = bleu.mutable_data();
  int64_t* ps = stats.mutable_data();
  bool any_ref_words = false;
  {
    // One split of the text alive at a time, and the text freed before the CIDEr-D tables are built.
    py::gil_scoped_release release;
    vlk::cap::CocoEval& e = *ev;
    {
      Tokens spaces;
      vlk::cap::tokenize_texts_compact(e.views, vlk::cap::Split::kSpace, spaces);
      vlk::cap::rouge_l_images(spaces, e.cand.data(), e.ref_off.data(), e.ref_caps.data(), m, 1.2, pr);
    }
    Tokens words;
    vlk::cap::tokenize_texts_compact(e.views, vlk::cap::Split::kWhitespace, words);
    vlk::cap::coco_release_text(e);
    any_ref_words = words.off[e.ref_caps.size()] > 0;
    vlk::cap::bleu_images(words, e.cand.data(), e.ref_off.data(), e.ref_caps.data(), m, 4, ps, pb);
    if (any_ref_words) vlk::cap::coco_cider_d(e, std::move(words), logdf.data<double>(), logdf.numel(), ref_len, pc);
  }
  py::list keys;
  for (const std::string& k : ev->keys) {
    if (k[0] == 'i') {
      PyObject* v = PyLong_FromString(k.c_str() + 1, nullptr, 10);
      if (v == nullptr) throw py::error_already_set();
      keys.append(py::reinterpret_steal<py::object>(v));
    } else {
      keys.append(py::str(k.data() + 1, k.size() - 1));
    }
    poll(static_cast<int64_t>(py::len(keys)));
  }
  py::dict out;
  out["keys"] = keys;
  out["cider"] = cider;
  out["rouge"] = rouge;
  out["bleu"] = bleu;
  out["bleu_stats"] = stats;
  out["any_ref_words"] = any_ref_words;
  return out;
}

// Python's str.split() on one string, for tests of the whitespace rule.
py::list split_words(const py::str& s, bool space_only) {
  Held held;
  py::list out;
  vlk::cap::split_words(utf8_of(s.ptr(), held, 0, -1),
                        space_only ? vlk::cap::Split::kSpace : vlk::cap::Split::kWhitespace,
                        [&](const char* p, int64_t n) { out.append(py::str(p, static_cast<size_t>(n))); });
  return out;
}

}  // namespace

VLK_BIND(captioning) {
  m.attr("CAP_CIDER") = static_cast<int>(kCider);
  m.attr("CAP_BLEU") = static_cast<int>(kBleu);
  m.attr("CAP_ROUGE") = static_cast<int>(kRouge);
  m.def("cap_score_images", &score_images);
  m.def("cap_split_words", &split_words);
  m.def("cap_evaluate_files", &evaluate_files);
  // CapCiderDf(n), CapCiderDf(n, refs, ref_off) (a corpus, one call) or CapCiderDf.from_items(n, ngrams, df, num_docs).
  py::class_<DfScorer>(m, "CapCiderDf")
      .def(py::init<int>())
      .def(py::init([](int n, const py::object& refs, py::handle ref_off, const py::object& names) {
        auto d = std::make_unique<DfScorer>(n);
        df_add_documents(*d, refs, ref_off, names);
        return d;
      }))
      .def_static("from_items",
                  [](int n, const py::list& ngrams, py::handle counts, int64_t num_docs) {
                    auto d = std::make_unique<DfScorer>(n);
                    df_set_items(*d, ngrams, counts, num_docs);
                    return d;
                  })
      .def_property_readonly("n", [](const DfScorer& d) { return d.df.n(); })
      .def_property_readonly("num_docs", [](DfScorer& d) { return locked(d, &vlk::cap::CiderDf::num_docs); })
      .def_property_readonly("max_df", [](DfScorer& d) { return locked(d, &vlk::cap::CiderDf::max_df); })
      .def("__len__", [](DfScorer& d) { return locked(d, &vlk::cap::CiderDf::size); })
      .def("add_documents", &df_add_documents, py::arg("refs"), py::arg("ref_off"), py::arg("names") = py::none())
      .def("export", &df_export)
      .def("score", &df_score);
}
