// CIDEr-D (pycocoevalcap 1.2 / ruotianluo CiderD) and original CIDEr (vrama91 Cider), BLEU and ROUGE-L
// (pycocoevalcap) on interned tokens. Every float operation mirrors the Python scorers' order so per-image
// values agree bit for bit (see vlkernels/captioning/README.md).
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <string>
#include <vector>

#include "captioning/ngrams.h"

namespace vlk::cap {

struct CiderOpts {
  int n = 4;
  double sigma = 6.0;
  bool cider_d = true;           // clipping + Gaussian length penalty (CIDEr-D); false = original CIDEr
  double ref_len = 0.0;          // log(number of documents), computed by numpy in Python
  const double* logdf = nullptr; // logdf[d] = np.log(max(1.0, d)) for d in [0, logdf_size)
  int64_t logdf_size = 0;
};

// One image per entry: candidate caption cand[i], references ref_caps[ref_off[i] .. ref_off[i+1]); document
// frequencies over these images' references (pycocoevalcap Cider.compute_score).
void cider_corpus(const Tokens& tok, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                  int64_t n_images, const CiderOpts& opts, double* out);

// cider_corpus computed one n-gram length at a time on exact n-gram ids (a length-(k+1) id interns the pair of the two
// length-k ids it overlaps), rewritten in place over `words`: memory linear in the number of words with a small
// constant, whatever the share of distinct words (vlkernels/captioning/README.md). Same numbers as cider_corpus.
void cider_by_length(Tokens words, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                     int64_t n_images, const CiderOpts& opts, double* out);

// Document frequencies of a fixed corpus (SCST rewards with precomputed df, as ruotianluo CiderD).
class CiderDf {
 public:
  explicit CiderDf(int n) : n_(n) {}
  int n() const { return n_; }
  int64_t num_docs() const { return num_docs_; }
  uint32_t max_df() const { return df_.max_df(); }
  size_t size() const { return df_.size(); }
  const Vocab& vocab() const { return vocab_; }
  Vocab& vocab() { return vocab_; }
  // Documents = groups ref_caps[ref_off[g] .. ref_off[g+1]) of captions already interned with vocab().
  void add_documents(const Tokens& tok, const int64_t* ref_off, const int64_t* ref_caps, int64_t n_docs);
  // Sets df of one n-gram (words interned with vocab()), as loaded from a file.
  void set(const uint32_t* words, int k, uint32_t df);
  void set_num_docs(int64_t d) { num_docs_ = d; }
  // Writers (add_documents, set) hold it exclusively, score() shared: the bindings call them without the GIL.
  std::shared_mutex& mutex() const { return mutex_; }
  // "w1 w2 ..." strings and counts of every n-gram (for saving).
  void export_items(std::vector<std::string>& ngrams, std::vector<uint32_t>& counts) const;
  // Candidate b is scored against the references ref_caps[ref_off[g] .. ref_off[g+1]) of g = group[b];
  // `tok` was interned with vocab() frozen (ids >= vocab().size() are words unseen in the corpus).
  void score(const Tokens& tok, const int64_t* cand, int64_t n_cand, const int64_t* group, const int64_t* ref_off,
             const int64_t* ref_caps, int64_t n_groups, const CiderOpts& opts, double* out) const;

 private:
  int n_;
  int64_t num_docs_ = 0;
  Vocab vocab_;
  DfTable df_;
  mutable std::shared_mutex mutex_;
};

// BLEU (pycocoevalcap BleuScorer, option "closest"): per image counts and per-image BLEU-1..n.
// stats[i] = {testlen, reflen, guess[0..n), correct[0..n)}; per_image[i * n + k] = BLEU-(k+1) of image i.
void bleu_images(const Tokens& tok, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                 int64_t n_images, int n, int64_t* stats, double* per_image);

// ROUGE-L (pycocoevalcap Rouge, beta = 1.2) on tokens from str.split(" ").
void rouge_l_images(const Tokens& tok, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                    int64_t n_images, double beta, double* out);

}  // namespace vlk::cap
