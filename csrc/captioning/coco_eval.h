// COCO-format caption evaluation from files with bounded memory: the files are parsed into compact buffers
// (coco_json.h), the captions PTB-tokenized in blocks, and CIDEr-D computed one n-gram length at a time on exact
// n-gram ids (cider_by_length), so peak memory follows the captions' words (under 3x the files, distinct-heavy text
// included), not per-caption objects or per-distinct-n-gram tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "captioning/coco_json.h"
#include "captioning/ngrams.h"

namespace vlk::cap {

struct CocoEval {
  // Images in evaluation order (coco_prepare); candidate cand[i], references ref_caps[ref_off[i] .. ref_off[i+1])
  // (indices into the token arrays: references first, then the candidates).
  std::vector<std::string> keys;  // "i<digits>" or "s<text>" (coco_json.h)
  std::vector<int64_t> cand, ref_off{0}, ref_caps;
  // The captions' (tokenized) text: caption c is views[c], held by `text` or `records`.
  std::string text;
  CaptionRecords records[2];
  std::vector<TextView> views;
  int64_t num_images() const { return static_cast<int64_t>(keys.size()); }
};

// Reads both files and prepares the token arrays. `ptb`: PTB-tokenize the captions first (each file's captions as
// one batch in evaluation order, as COCOEvalCap; `block` captions at a time). Throws JsonError naming the file
// ("<path>: ..."), std::invalid_argument for results that do not match the references, std::runtime_error when a
// file cannot be read.
void coco_prepare(const std::string& refs_path, const std::string& preds_path, bool ptb, int64_t block, CocoEval& ev);

// Frees the caption text (after the last split_captions).
void coco_release_text(CocoEval& ev);

// CIDEr-D of every image (`words`, consumed: the captions split on whitespace) with document frequencies over all of them,
// one n-gram length at a time (cider_by_length). logdf[d] = np.log(max(1.0, d)) for d in [0, num_images];
// ref_len = np.log(num_images).
void coco_cider_d(const CocoEval& ev, Tokens words, const double* logdf, int64_t logdf_size, double ref_len,
                  double* out);

}  // namespace vlk::cap
