// Caption metrics: CIDEr(-D), BLEU, ROUGE-L and the SCST document-frequency table. Each public operation is one
// call: the Python objects are read and checked once, here, with the GIL held, and every object whose memory is read
// later is held by a strong reference (a caller's thread may replace a caption meanwhile); then the GIL is released
// for tokenizing and scoring. A malformed input is a ValueError with its final message, naming the image (or group)
// and the caption: the readers below throw a CaptionError (item, position, reason) and each operation names it.
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

// A float64 / int64 output Python allocated: (rows[, cols]) contiguous on the CPU, writable.
vlk::TensorArg out_arg(py::handle obj, const char* name, vlk::DType dt, int64_t rows, int64_t cols = -1) {
  auto a = vlk::TensorArg::from(obj, name);
  a.ndim(cols < 0 ? 1 : 2).size(0, rows).dtype_is(dt).device(vlk::kCPU).contiguous().writable();
  if (cols >= 0) a.size(1, cols);
  return a;
}

// Per-image outputs, allocated by Python for the m images: cider (m,), bleu_stats (m, 2 + 2n) int64, bleu (m, n),
// rouge (m,); each filled when its metric is asked.
struct ImageScores {
  vlk::TensorArg cider, stats, bleu, rouge;
  ImageScores(py::handle c, py::handle st, py::handle b, py::handle r, int64_t m, int n)
      : cider(out_arg(c, "cider", vlk::kF64, m)),
        stats(out_arg(st, "bleu_stats", vlk::kI64, m, 2 + 2 * int64_t{n})),
        bleu(out_arg(b, "bleu", vlk::kF64, m, n)),
        rouge(out_arg(r, "rouge", vlk::kF64, m)) {}
};

// Scores of the pycocoevalcap layout {id: [references]}, {id: [candidate]} in one call, into `out` (ImageScores for
// m = len(gts)). metrics: a Metric mask. Returns any_ref_words (whether any reference has a word: CIDEr's df exists).
// `stem`: None, or a callable list[str] -> list[str] applied to the whitespace tokens of CIDEr and BLEU.
bool score_images(py::handle gts, py::handle res, bool tokenize, int metrics, int n, double sigma, bool cider_d,
                  double ref_len, py::handle logdf_obj, const py::object& stem, py::handle cider_obj,
                  py::handle stats_obj, py::handle bleu_obj, py::handle rouge_obj) {
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
  ImageScores out(cider_obj, stats_obj, bleu_obj, rouge_obj, m, n);
  vlk::cap::CiderOpts o;
  o.n = n;
  o.sigma = sigma;
  o.cider_d = cider_d;
  o.ref_len = ref_len;
  o.logdf = logdf.data<double>();
  o.logdf_size = logdf.numel();
  double *pc = out.cider.data<double>(), *pr = out.rouge.data<double>(), *pb = out.bleu.data<double>();
  int64_t* ps = out.stats.data<int64_t>();
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
  return any_ref_words;
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

// The SCST table. Bindings release the GIL before they take its lock and never call Python while holding it. The
// numpy logarithms a score needs come in from Python (vlkernels.captioning.CiderD keeps them beside the table and
// makes them again when it adds documents).
struct DfScorer {
  explicit DfScorer(int n) : df(n) {}
  vlk::cap::CiderDf df;
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
  py::dict out;
  out["n"] = self.df.n();
  out["num_docs"] = num_docs;
  out["ngrams"] = py::cast(ngrams);
  out["df"] = py::cast(counts);
  return out;
}

// Rewards of candidates against reference groups with the table's document frequencies, in one call, into out
// (float64 [n_cand], allocated by Python). logdf (np.log(max(1, d)) for d < logdf.size()) and ref_len
// (np.log(num_docs)) were made by Python for a table of num_docs documents: refused when the table holds another
// number or a document frequency beyond the log table (its documents were added behind CiderD's back).
void df_score(DfScorer& self, const py::object& cands, const py::object& refs, py::handle ref_off_obj,
              py::handle group_obj, double sigma, py::handle logdf_obj, double ref_len, int64_t num_docs,
              py::handle out_obj) {
  const I64 ref_off(ref_off_obj, "ref_off"), group(group_obj, "ref_index");
  auto logdf = vlk::TensorArg::from(logdf_obj, "logdf");
  logdf.ndim(1).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
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
  auto out = vlk::TensorArg::from(out_obj, "out");
  out.ndim(1).size(0, n_cand).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous().writable();
  vlk::cap::CiderOpts o;
  o.n = self.df.n();
  o.sigma = sigma;
  o.cider_d = true;
  o.ref_len = ref_len;
  o.logdf = logdf.data<double>();
  o.logdf_size = logdf.numel();
  std::vector<int64_t> cand(n_cand), ref_caps(n_refs);
  for (int64_t i = 0; i < n_cand; ++i) cand[i] = i;
  for (int64_t i = 0; i < n_refs; ++i) ref_caps[i] = n_cand + i;
  int64_t table_docs = 0, max_df = 0;
  {
    py::gil_scoped_release release;
    std::shared_lock<std::shared_mutex> lock(self.df.mutex());
    table_docs = self.df.num_docs();
    max_df = self.df.max_df();
    if (table_docs >= 1 && table_docs == num_docs && max_df < logdf.numel()) {
      Tokens tok;
      vlk::cap::Vocab extra, unused;
      tokenize_source(cs, &self.df.vocab(), unused, extra, tok);
      tokenize_source(rs, &self.df.vocab(), unused, extra, tok);
      self.df.score(tok, cand.data(), n_cand, group.data(), ref_off.data(), ref_caps.data(), n_groups, o,
                    out.data<double>());
    }
  }
  if (table_docs < 1) throw py::value_error("no document frequencies: build CiderD from refs, a dict, or load()");
  if (table_docs != num_docs || max_df >= logdf.numel())
    throw py::value_error("the table holds " + std::to_string(table_docs) + " documents (largest df " +
                          std::to_string(max_df) + ") but the log table was made for " + std::to_string(num_docs) +
                          " documents and df < " + std::to_string(logdf.numel()) +
                          ": add documents through CiderD, which keeps both");
}

template <typename R>
R locked(DfScorer& d, R (vlk::cap::CiderDf::*get)() const) {
  py::gil_scoped_release release;
  std::shared_lock<std::shared_mutex> lock(d.df.mutex());
  return (d.df.*get)();
}

// COCO-format evaluation of two files (BLEU-1..4 counts, ROUGE-L, CIDEr-D per image, results order) with bounded
// memory: nothing per caption becomes a Python object. Two phases, because the number of images is known only once
// the files are read: cap_files_prepare reads them (every input problem a ValueError naming the file) into a
// CapFiles, whose num_images sizes the outputs Python allocates; CapFiles.score fills them once.
struct CapFiles {
  vlk::cap::CocoEval ev;
  bool scored = false;  // set with the GIL held: score consumes the text, so one call only
};

std::unique_ptr<CapFiles> files_prepare(const std::string& refs, const std::string& preds, bool tokenize,
                                        int64_t block_captions) {
  auto f = std::make_unique<CapFiles>();
  try {
    py::gil_scoped_release release;
    vlk::cap::coco_prepare(refs, preds, tokenize, block_captions, f->ev);
  } catch (const std::runtime_error& e) {
    throw py::value_error(e.what());  // a JsonError or an unreadable file
  }
  return f;
}

// logdf: np.log(max(1, d)) for d in [0, num_images], ref_len: np.log(num_images) (from numpy, as the Python
// scorers compute them: bit-identical scores). Outputs: ImageScores for num_images and n = 4. Returns
// (any_ref_words, keys): CIDEr is left unwritten when any_ref_words is False; keys are the images' "i<digits>"
// (int id) / "s<text>" (str id) tags as bytes, decoded by Python (a str id may hold a lone surrogate). Consumes the
// prepared text: a second call is refused.
py::tuple files_score(CapFiles& f, py::handle logdf_obj, double ref_len, py::handle cider_obj, py::handle stats_obj,
                 py::handle bleu_obj, py::handle rouge_obj) {
  vlk::cap::CocoEval& e = f.ev;
  const int64_t m = e.num_images();
  auto logdf = vlk::TensorArg::from(logdf_obj, "logdf");
  logdf.ndim(1).size(0, m + 1).dtype_is(vlk::kF64).device(vlk::kCPU).contiguous();
  ImageScores out(cider_obj, stats_obj, bleu_obj, rouge_obj, m, 4);
  if (f.scored) throw py::value_error("these files were scored already (a CapFiles scores once)");
  f.scored = true;
  double *pc = out.cider.data<double>(), *pr = out.rouge.data<double>(), *pb = out.bleu.data<double>();
  int64_t* ps = out.stats.data<int64_t>();
  bool any_ref_words = false;
  {
    // One split of the text alive at a time, and the text freed before the CIDEr-D tables are built.
    py::gil_scoped_release release;
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
  py::list keys(static_cast<py::ssize_t>(m));
  for (int64_t i = 0; i < m; ++i) keys[static_cast<size_t>(i)] = py::bytes(e.keys[static_cast<size_t>(i)]);
  return py::make_tuple(any_ref_words, keys);
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
  m.def("cap_files_prepare", &files_prepare);
  py::class_<CapFiles>(m, "CapFiles")
      .def_property_readonly("num_images", [](const CapFiles& f) { return f.ev.num_images(); })
      .def("score", &files_score);
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
