#include "captioning/cider.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

#include "core/parallel.h"

namespace vlk::cap {

namespace {

constexpr double kE = 2.718281828459045;  // np.e; the penalty is np.e ** x (pow), not exp(x)

double logdf_of(const CiderOpts& o, uint32_t df) {
  if (static_cast<int64_t>(df) >= o.logdf_size) throw std::out_of_range("document frequency beyond the log table");
  return o.logdf[df];
}

// Summed term frequency of the caption's bigrams: pycocoevalcap's "length" used by the length penalty.
int64_t bigram_length(const ImageNgrams& im, int cap, int n) {
  if (n < 2) return 0;
  int64_t len = 0;
  for (const auto* e = im.begin(cap, 1); e != im.end(cap, 1); ++e) len += e->tf;
  return len;
}

// TF-IDF vectors of the references ref_begin .. ref_begin+nref-1 as dense rows over the image's local n-grams.
struct RefVecs {
  std::vector<double> dense;  // [nref, U]
  std::vector<double> norms;  // [nref, kMaxN]
  std::vector<int64_t> len;   // [nref]
};

void build_ref_vecs(const ImageNgrams& im, int ref_begin, int nref, int n, const std::vector<double>& idf,
                    RefVecs& rv) {
  const size_t U = im.keys.size();
  rv.dense.assign(static_cast<size_t>(nref) * U, 0.0);
  rv.norms.assign(static_cast<size_t>(nref) * kMaxN, 0.0);
  rv.len.assign(nref, 0);
  for (int r = 0; r < nref; ++r) {
    const int cap = ref_begin + r;
    double* row = rv.dense.data() + static_cast<size_t>(r) * U;
    for (int k = 0; k < n; ++k) {
      double acc = 0.0;
      for (const auto* e = im.begin(cap, k); e != im.end(cap, k); ++e) {
        const double v = static_cast<double>(e->tf) * idf[e->local];
        row[e->local] = v;
        acc += v * v;
      }
      rv.norms[static_cast<size_t>(r) * kMaxN + k] = std::sqrt(acc);
    }
    rv.len[r] = bigram_length(im, cap, n);
  }
}

// Mirrors CiderScorer.compute_cider for one candidate: sim() per reference summed per n, mean over n,
// divided by the number of references, times 10.
double score_candidate(const ImageNgrams& im, int cap, int nref, const std::vector<double>& idf, const RefVecs& rv,
                       const CiderOpts& o) {
  const int n = o.n;
  const size_t U = im.keys.size();
  double norm_h[kMaxN];
  for (int k = 0; k < n; ++k) {
    double acc = 0.0;
    for (const auto* e = im.begin(cap, k); e != im.end(cap, k); ++e) {
      const double v = static_cast<double>(e->tf) * idf[e->local];
      acc += v * v;
    }
    norm_h[k] = std::sqrt(acc);
  }
  const int64_t len_h = bigram_length(im, cap, n);
  double score[kMaxN] = {0.0, 0.0, 0.0, 0.0};
  const double two_sigma2 = 2.0 * (o.sigma * o.sigma);
  for (int r = 0; r < nref; ++r) {
    const double* row = rv.dense.data() + static_cast<size_t>(r) * U;
    const double delta = static_cast<double>(len_h - rv.len[r]);
    const double penalty = o.cider_d ? std::pow(kE, -(delta * delta) / two_sigma2) : 1.0;
    for (int k = 0; k < n; ++k) {
      double val = 0.0;
      for (const auto* e = im.begin(cap, k); e != im.end(cap, k); ++e) {
        const double vh = static_cast<double>(e->tf) * idf[e->local];
        const double vr = row[e->local];
        if (o.cider_d) {
          // Python's min(a, b) returns a unless b < a.
          val += (vr < vh ? vr : vh) * vr;
        } else {
          val += vh * vr;
        }
      }
      const double norm_r = rv.norms[static_cast<size_t>(r) * kMaxN + k];
      if (norm_h[k] != 0 && norm_r != 0) val /= (norm_h[k] * norm_r);
      if (o.cider_d) val *= penalty;
      score[k] += val;
    }
  }
  // np.mean over the n values sums left to right, then divides.
  double mean = score[0];
  for (int k = 1; k < n; ++k) mean += score[k];
  mean /= static_cast<double>(n);
  mean /= static_cast<double>(nref);
  mean *= 10.0;
  return mean;
}

// Builds the n-grams of many images in parallel; per_shard counts their (image, reference n-gram) pairs.
template <typename Caps>
void build_images(const Tokens& tok, int64_t n_images, int n, Caps&& caps_of, std::vector<ImageNgrams>& ims,
                  std::vector<size_t>& per_shard) {
  ims.resize(n_images);
  per_shard.assign(DfTable::kShards, 0);
  std::mutex mu;
  vlk::parallel_for(n_images, 64, [&](int64_t b, int64_t e) {
    NgramBuilder builder;
    std::vector<int64_t> caps;
    std::vector<size_t> counts(DfTable::kShards, 0);
    for (int64_t i = b; i < e; ++i) {
      int ref_begin, ref_end;
      caps_of(i, caps, ref_begin, ref_end);
      builder.build(tok, caps.data(), static_cast<int>(caps.size()), n, ref_begin, ref_end, ims[i]);
      const ImageNgrams& im = ims[i];
      for (size_t u = 0; u < im.keys.size(); ++u)
        if (im.in_ref[u]) ++counts[DfTable::shard_of(im.hashes[u])];
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int s = 0; s < DfTable::kShards; ++s) per_shard[s] += counts[s];
  });
}

// Inserts the reference n-grams of every image into df (+1 per image) and records their dense df index in the
// image; shards are filled by disjoint threads (an n-gram belongs to one shard, so df_index writes never race).
void count_documents(std::vector<ImageNgrams>& ims, const std::vector<size_t>& per_shard, DfTable& df) {
  std::vector<uint32_t> shard_max(DfTable::kShards, 0);
  vlk::parallel_for(DfTable::kShards, 1, [&](int64_t b, int64_t e) {
    // Sized for the usual ~30% distinct pairs (COCO val2014: 1.36M distinct of 4.77M): about half full, so the
    // table stays small (cache misses dominate) and rarely rehashes.
    for (int64_t s = b; s < e; ++s) df.reserve(static_cast<int>(s), per_shard[s] * 2 / 5 + 16);
    for (ImageNgrams& im : ims) {
      const size_t U = im.keys.size();
      for (size_t u = 0; u < U; ++u) {
        if (u + 8 < U) {
          const int sp = DfTable::shard_of(im.hashes[u + 8]);
          if (sp >= b && sp < e) df.prefetch(im.hashes[u + 8]);
        }
        if (!im.in_ref[u]) continue;
        const int s = DfTable::shard_of(im.hashes[u]);
        if (s < b || s >= e) continue;
        const uint32_t index = df.index_of(s, im.keys[u], im.hashes[u]);
        im.df_index[u] = index;
        uint32_t& c = df.count(s, index);
        ++c;
        shard_max[s] = std::max(shard_max[s], c);
      }
    }
  });
  uint32_t m = df.max_df();
  for (uint32_t v : shard_max) m = std::max(m, v);
  df.set_max_df(m);
}

void validate_opts(const CiderOpts& o) {
  if (o.n < 1 || o.n > kMaxN) throw std::invalid_argument("n must be in [1, 4]");
}

}  // namespace

void cider_corpus(const Tokens& tok, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                  int64_t n_images, const CiderOpts& opts, double* out) {
  validate_opts(opts);
  std::vector<ImageNgrams> ims;
  std::vector<size_t> per_shard;
  build_images(tok, n_images, opts.n, [&](int64_t i, std::vector<int64_t>& caps, int& rb, int& re) {
    caps.assign(1, cand[i]);
    caps.insert(caps.end(), ref_caps + ref_off[i], ref_caps + ref_off[i + 1]);
    rb = 1;
    re = static_cast<int>(caps.size());
  }, ims, per_shard);
  DfTable df;
  count_documents(ims, per_shard, df);
  if (static_cast<int64_t>(df.max_df()) >= opts.logdf_size) throw std::out_of_range("log table too small");
  vlk::parallel_for(n_images, 64, [&](int64_t b, int64_t e) {
    std::vector<double> idf;
    RefVecs rv;
    for (int64_t i = b; i < e; ++i) {
      ImageNgrams& im = ims[i];
      const size_t U = im.keys.size();
      idf.resize(U);
      for (size_t u = 0; u < U; ++u) {
        // Reference n-grams read their df through the index of the df pass; candidate-only ones probe the table.
        const uint32_t d = im.in_ref[u] ? df.count_at(im.hashes[u], im.df_index[u]) : df.get(im.keys[u], im.hashes[u]);
        idf[u] = opts.ref_len - logdf_of(opts, d);
      }
      const int nref = im.ncap - 1;
      if (nref < 1) throw std::invalid_argument("an image has no references");
      build_ref_vecs(im, 1, nref, opts.n, idf, rv);
      out[i] = score_candidate(im, 0, nref, idf, rv, opts);
      // Free the image's n-grams as soon as it is scored (peak memory).
      im = ImageNgrams();
    }
  });
}

void CiderDf::add_documents(const Tokens& tok, const int64_t* ref_off, const int64_t* ref_caps, int64_t n_docs) {
  std::vector<ImageNgrams> ims;
  std::vector<size_t> per_shard;
  build_images(tok, n_docs, n_, [&](int64_t i, std::vector<int64_t>& caps, int& rb, int& re) {
    caps.assign(ref_caps + ref_off[i], ref_caps + ref_off[i + 1]);
    rb = 0;
    re = static_cast<int>(caps.size());
  }, ims, per_shard);
  count_documents(ims, per_shard, df_);
  num_docs_ += n_docs;
}

void CiderDf::set(const uint32_t* words, int k, uint32_t value) {
  if (k < 1 || k > kMaxN) throw std::invalid_argument("n-gram length must be in [1, 4]");
  const Key key = make_key(words, k);
  const uint64_t h = key_hash(key);
  const int s = DfTable::shard_of(h);
  df_.count(s, df_.index_of(s, key, h)) = value;
  df_.set_max_df(std::max(df_.max_df(), value));
}

void CiderDf::export_items(std::vector<std::string>& ngrams, std::vector<uint32_t>& counts) const {
  {
    df_.for_each([&](const Key& k, uint32_t v) {
      const uint32_t w[4] = {static_cast<uint32_t>(k.lo & 0xFFFFFF), static_cast<uint32_t>((k.lo >> 24) & 0xFFFFFF),
                             static_cast<uint32_t>((k.lo >> 48) | ((static_cast<uint64_t>(k.hi) & 0xFF) << 16)),
                             static_cast<uint32_t>(k.hi >> 8)};
      std::string text;
      for (int j = 0; j < kMaxN && w[j] != 0; ++j) {
        if (j) text.push_back(' ');
        text.append(vocab_.word(w[j] - 1));
      }
      ngrams.push_back(std::move(text));
      counts.push_back(v);
    });
  }
}

void CiderDf::score(const Tokens& tok, const int64_t* cand, int64_t n_cand, const int64_t* group,
                    const int64_t* ref_off, const int64_t* ref_caps, int64_t n_groups, const CiderOpts& opts,
                    double* out) const {
  validate_opts(opts);
  if (opts.n != n_) throw std::invalid_argument("n differs from the n of the document frequencies");
  if (static_cast<int64_t>(df_.max_df()) >= opts.logdf_size) throw std::out_of_range("log table too small");
  // Candidates bucketed by reference group (counting sort keeps their order inside a group).
  std::vector<int64_t> start(n_groups + 1, 0), order(n_cand);
  for (int64_t b = 0; b < n_cand; ++b) ++start[group[b] + 1];
  for (int64_t g = 0; g < n_groups; ++g) start[g + 1] += start[g];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t b = 0; b < n_cand; ++b) order[fill[group[b]]++] = b;
  }
  vlk::parallel_for(n_groups, 4, [&](int64_t gb, int64_t ge) {
    NgramBuilder builder;
    ImageNgrams im;
    std::vector<int64_t> caps;
    std::vector<double> idf;
    RefVecs rv;
    for (int64_t g = gb; g < ge; ++g) {
      if (start[g] == start[g + 1]) continue;
      caps.assign(ref_caps + ref_off[g], ref_caps + ref_off[g + 1]);
      const int nref = static_cast<int>(caps.size());
      for (int64_t j = start[g]; j < start[g + 1]; ++j) caps.push_back(cand[order[j]]);
      builder.build(tok, caps.data(), static_cast<int>(caps.size()), n_, 0, nref, im);
      idf.resize(im.keys.size());
      for (size_t u = 0; u < im.keys.size(); ++u)
        idf[u] = opts.ref_len - logdf_of(opts, df_.get(im.keys[u], im.hashes[u]));
      build_ref_vecs(im, 0, nref, n_, idf, rv);
      for (int64_t j = start[g]; j < start[g + 1]; ++j)
        out[order[j]] = score_candidate(im, nref + static_cast<int>(j - start[g]), nref, idf, rv, opts);
    }
  });
}

}  // namespace vlk::cap
