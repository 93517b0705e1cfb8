#include "captioning/coco_eval.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "captioning/cider.h"
#include "captioning/ptb/ptb_tokenizer.h"
#include "core/parallel.h"

namespace vlk::cap {

namespace {

std::string other_type(const std::string& key) { return (key[0] == 'i' ? "s" : "i") + key.substr(1); }

struct PredIndex {
  std::unordered_map<std::string, int64_t> at;
  std::unordered_set<std::string> other_type_seen;  // results ids whose other-type spelling (1 vs "1") is in refs
};

bool keep_scored(const std::string& key, void* ctx) {
  auto* idx = static_cast<PredIndex*>(ctx);
  if (idx->at.count(key) != 0) return true;
  const std::string other = other_type(key);
  if (idx->at.count(other) != 0) idx->other_type_seen.insert(other);
  return false;
}

void read_file(const std::string& path, bool results, KeepImage keep, void* ctx, CaptionRecords& out) {
  try {
    read_caption_file(path, results, keep, ctx, out);
  } catch (const JsonError& e) {
    const std::string what = e.what();
    // Record errors name their index right after the file ("<path>[3]: ..."), others after ": ".
    throw JsonError(path + (what.rfind('[', 0) == 0 ? "" : ": ") + what);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

// Captions texts[order[0..n)] PTB-tokenized `block` at a time, appended to (arena, off). Each block is tokenized with
// following captions as context (at least 4 * kContextBytes bytes, which hold at least kContextBytes code units),
// so every caption sees the context a single call over all captions gives it.
void ptb_in_blocks(const CaptionRecords& src, const std::vector<int64_t>& order, int64_t block, std::string& arena,
                   std::vector<int64_t>& off) {
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<PtbText> texts;
  PtbResult res;
  for (int64_t a = 0; a < n; a += block) {
    vlk::check_interrupt();
    const int64_t b = std::min(n, a + block);
    int64_t c = b, extra = 0;
    while (c < n && extra < static_cast<int64_t>(4 * kContextBytes)) {
      extra += src.off[order[c] + 1] - src.off[order[c]] + 1;
      ++c;
    }
    texts.clear();
    for (int64_t i = a; i < c; ++i) {
      const int64_t k = order[i];
      texts.push_back(PtbText{src.text.data() + src.off[k], src.off[k + 1] - src.off[k], 0});
    }
    const int64_t bad = ptb_tokenize_texts(texts.data(), static_cast<int64_t>(texts.size()), res);
    if (bad >= 0) throw std::invalid_argument("a caption is not valid UTF-8");
    for (int64_t i = 0; i < b - a; ++i) {
      arena.append(res.data(i), static_cast<size_t>(res.size[i]));
      off.push_back(static_cast<int64_t>(arena.size()));
    }
  }
}

}  // namespace

void coco_prepare(const std::string& refs_path, const std::string& preds_path, bool ptb, int64_t block, CocoEval& ev) {
  if (block < 1) throw std::invalid_argument("block must be positive");
  CaptionRecords preds;
  read_file(preds_path, true, nullptr, nullptr, preds);
  const int64_t m = preds.size();
  if (m == 0) throw std::invalid_argument("results is empty: no image to evaluate");
  if (static_cast<int64_t>(preds.keys.size()) != m) {
    std::vector<int64_t> seen(preds.keys.size(), 0);
    for (int64_t c = 0; c < m; ++c)
      if (seen[preds.image[c]]++)
        throw std::invalid_argument("results: image " + shown_key(preds.keys[preds.image[c]]) +
                                    " has more than one caption");
  }
  PredIndex idx;
  idx.at.reserve(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) idx.at.emplace(preds.keys[i], i);
  CaptionRecords refs;
  read_file(refs_path, false, &keep_scored, &idx, refs);
  // The images in COCOEvalCap's order (the PTB tokenizer reads each caption with the next as context, and the means
  // sum in it): the annotation file's "images" list when it has one (loadRes keeps that order), then the order their
  // captions first appear in; results for images in neither follow in results order (they have no reference, an
  // error below). result_at[p]: the result at evaluation position p; pos_of: its inverse.
  std::vector<int64_t> result_at, pos_of(static_cast<size_t>(m), -1);
  result_at.reserve(static_cast<size_t>(m));
  auto place = [&](int64_t i) {
    if (pos_of[i] >= 0) return;
    pos_of[i] = static_cast<int64_t>(result_at.size());
    result_at.push_back(i);
  };
  for (const std::vector<std::string>* keys : {&refs.listed, &refs.keys})
    for (const std::string& k : *keys) {
      const auto it = idx.at.find(k);
      if (it != idx.at.end()) place(it->second);
    }
  for (int64_t i = 0; i < m; ++i) place(i);
  std::vector<std::string>().swap(refs.listed);
  // References grouped by their image's position (counting sort: file order inside an image).
  std::vector<int64_t> count(m + 1, 0);
  std::vector<int64_t> image_of_ref(static_cast<size_t>(refs.size()));
  for (int64_t c = 0; c < refs.size(); ++c) {
    image_of_ref[c] = pos_of[idx.at.at(refs.keys[refs.image[c]])];
    ++count[image_of_ref[c] + 1];
  }
  for (int64_t i = 0; i < m; ++i) {
    if (count[i + 1] == 0) {
      const std::string& k = preds.keys[result_at[i]];
      // Same number and text as an id of the other type (1 vs "1"): say so.
      const std::string other = other_type(k);
      const bool has_other = idx.other_type_seen.count(k) != 0;
      const std::string hint =
          has_other ? " (the annotations have " + shown_key(other) + ": ids must have one type)" : "";
      throw std::invalid_argument("results: image " + shown_key(k) + " has no reference caption in the annotations" +
                                  hint);
    }
    count[i + 1] += count[i];
  }
  std::vector<int64_t> order(static_cast<size_t>(refs.size()));
  {
    std::vector<int64_t> fill(count.begin(), count.end() - 1);
    for (int64_t c = 0; c < refs.size(); ++c) order[fill[image_of_ref[c]]++] = c;
  }
  // The reader keeps a lone surrogate escape in its 3-byte form (not valid UTF-8): a scored caption holding one is
  // refused here, as the in-memory path refuses a str with a surrogate; other images' captions are never looked at.
  for (int64_t c = 0; c < refs.size(); ++c) {
    const int64_t k = order[c], i = image_of_ref[k];
    if (utf8_invalid_offset(refs.text.data() + refs.off[k], refs.off[k + 1] - refs.off[k]) >= 0)
      throw std::invalid_argument(refs_path + ": image " + shown_key(preds.keys[result_at[i]]) + " reference " +
                                  std::to_string(c - count[i]) + ": not valid UTF-8 (a lone surrogate escape)");
  }
  for (int64_t i = 0; i < m; ++i)
    if (utf8_invalid_offset(preds.text.data() + preds.off[i], preds.off[i + 1] - preds.off[i]) >= 0)
      throw std::invalid_argument(preds_path + ": image " + shown_key(preds.keys[i]) +
                                  " caption: not valid UTF-8 (a lone surrogate escape)");
  std::vector<int64_t>().swap(image_of_ref);
  ev.keys.resize(static_cast<size_t>(m));
  for (int64_t p = 0; p < m; ++p) ev.keys[p] = std::move(preds.keys[result_at[p]]);
  ev.ref_off.assign(count.begin(), count.end());
  const int64_t n_refs = refs.size();
  ev.ref_caps.resize(static_cast<size_t>(n_refs));
  std::iota(ev.ref_caps.begin(), ev.ref_caps.end(), int64_t{0});
  ev.cand.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) ev.cand[i] = n_refs + i;
  // Text of every caption (references in evaluation order, then the candidates): PTB-tokenized into one arena,
  // or read where the parse left it.
  ev.views.resize(static_cast<size_t>(n_refs + m));
  if (ptb) {
    const std::vector<int64_t>& pred_order = result_at;
    std::vector<int64_t> off{0};
    // Reserved with room to spare (untouched pages cost nothing; see read_caption_file).
    ev.text.reserve((refs.text.size() + preds.text.size()) * 3 / 2 + 64);
    off.reserve(static_cast<size_t>(n_refs + m + 1));
    ptb_in_blocks(refs, order, block, ev.text, off);
    refs = CaptionRecords();
    ptb_in_blocks(preds, pred_order, block, ev.text, off);
    preds = CaptionRecords();
    for (int64_t c = 0; c < n_refs + m; ++c) ev.views[c] = TextView{ev.text.data() + off[c], off[c + 1] - off[c]};
  } else {
    for (int64_t c = 0; c < n_refs; ++c) {
      const int64_t k = order[c];
      ev.views[c] = TextView{refs.text.data() + refs.off[k], refs.off[k + 1] - refs.off[k]};
    }
    for (int64_t p = 0; p < m; ++p) {
      const int64_t i = result_at[p];
      ev.views[n_refs + p] = TextView{preds.text.data() + preds.off[i], preds.off[i + 1] - preds.off[i]};
    }
    ev.records[0] = std::move(refs);
    ev.records[1] = std::move(preds);
  }
}

void coco_release_text(CocoEval& ev) {
  std::string().swap(ev.text);
  ev.records[0] = CaptionRecords();
  ev.records[1] = CaptionRecords();
  std::vector<TextView>().swap(ev.views);
}

void coco_cider_d(const CocoEval& ev, Tokens words, const double* logdf, int64_t logdf_size, double ref_len,
                  double* out) {
  CiderOpts o;
  o.n = 4;
  o.cider_d = true;
  o.sigma = 6.0;
  o.ref_len = ref_len;
  o.logdf = logdf;
  o.logdf_size = logdf_size;
  cider_by_length(std::move(words), ev.cand.data(), ev.ref_off.data(), ev.ref_caps.data(), ev.num_images(), o, out);
}

}  // namespace vlk::cap
