#include "captioning/cider.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// A TF-IDF weight squared as pycocoevalcap squares it, pow(v, 2) through the C library: that is not always v * v
// (glibc's pow is not correctly rounded: pow(0.6694306539426305, 2) = 0.4481374004380579, the product
// 0.44813740043805783), and the norms must be its bits. The call is made only where it can differ: the product p
// and its exact error e (Dekker's split, no FMA needed) put v^2 within |e| of p, and a pow that errs by less than
// 0.6 units in the last place (glibc's and musl's: 0.52) returns p when |e| <= 0.4 ulp and p's neighbours are a
// whole ulp away (p normal and not a power of two). The exponent of the call is read through a volatile, so that
// the compiler cannot fold it into the product.
volatile double g_two = 2.0;
inline double pow2(double v) {
  const double p = v * v;
  const double c = 134217729.0 * v;  // 2^27 + 1: v = hi + lo with 26-bit halves, so each partial product is exact
  const double hi = c - (c - v), lo = v - hi;
  const double e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo;
  uint64_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  const uint64_t exponent = (bits >> 52) & 0x7ff, mantissa = bits & ((uint64_t{1} << 52) - 1);
  if (exponent > 52 && exponent < 0x7ff && mantissa != 0 && std::fabs(c) < 0x1p1000) {
    const uint64_t ulp_bits = (exponent - 52) << 52;
    double ulp;
    std::memcpy(&ulp, &ulp_bits, sizeof ulp);
    if (std::fabs(e) <= 0.4 * ulp) return p;
  }
  const double two = g_two;
  return std::pow(v, two);
}

// Summed term frequency of the caption's bigrams: pycocoevalcap's "length" used by the length penalty.
int64_t bigram_length(const ImageNgrams& im, int cap, int n) {
  if (n < 2) return 0;
  int64_t len = 0;
  for (const auto* e = im.begin(cap, 1); e != im.end(cap, 1); ++e) len += e->tf;
  return len;
}

// The references' TF-IDF norms and lengths; their vectors are scattered one at a time into a dense row over the
// image's local n-grams (O(U) memory whatever the number of references, O(entries) time per reference).
struct RefVecs {
  std::vector<double> sq;     // [U] pow2(idf): the square of every weight of term frequency 1, the common case
  std::vector<double> norms;  // [nref, kMaxN]
  std::vector<int64_t> len;   // [nref]
  std::vector<double> row;    // [U] the current reference's vector, zero elsewhere
  std::vector<int64_t> cand_len;  // [ncand] scratch of score_candidates
};

void build_ref_vecs(const ImageNgrams& im, int ref_begin, int nref, int n, const std::vector<double>& idf,
                    RefVecs& rv) {
  rv.norms.assign(static_cast<size_t>(nref) * kMaxN, 0.0);
  rv.len.assign(nref, 0);
  rv.row.assign(im.num_ngrams, 0.0);
  rv.sq.resize(im.num_ngrams);
  for (size_t u = 0; u < rv.sq.size(); ++u) rv.sq[u] = pow2(idf[u]);
  for (int r = 0; r < nref; ++r) {
    const int cap = ref_begin + r;
    for (int k = 0; k < n; ++k) {
      double acc = 0.0;
      for (const auto* e = im.begin(cap, k); e != im.end(cap, k); ++e)
        acc += e->tf == 1 ? rv.sq[e->local] : pow2(static_cast<double>(e->tf) * idf[e->local]);
      rv.norms[static_cast<size_t>(r) * kMaxN + k] = std::sqrt(acc);
    }
    rv.len[r] = bigram_length(im, cap, n);
  }
}

// CiderScorer.compute_cider's per-n sums for candidates cands[0..ncand) against the references ref_begin ..
// ref_begin+nref-1, over the nk n-gram lengths `im` holds: sim() per reference summed per n (references in order, as
// pycocoevalcap). The caller sets rv.cand_len and rv.len (the length penalty's lengths). acc[j * 2 * kMaxN + kMaxN + k]
// = the sum of length k+1 of cands[j].
void score_candidates(const ImageNgrams& im, const int* cands, int ncand, int ref_begin, int nref, int nk,
                      const std::vector<double>& idf, RefVecs& rv, const CiderOpts& o, InterruptPoll& poll,
                      std::vector<double>& acc) {
  // Per candidate: norms [kMaxN] and the per-n score sums [kMaxN].
  acc.assign(static_cast<size_t>(ncand) * 2 * kMaxN, 0.0);
  int64_t cand_entries = 0;
  for (int j = 0; j < ncand; ++j) {
    double* a = acc.data() + static_cast<size_t>(j) * 2 * kMaxN;
    for (int k = 0; k < nk; ++k) {
      double s = 0.0;
      for (const auto* e = im.begin(cands[j], k); e != im.end(cands[j], k); ++e)
        s += e->tf == 1 ? rv.sq[e->local] : pow2(static_cast<double>(e->tf) * idf[e->local]);
      a[k] = std::sqrt(s);
      cand_entries += im.end(cands[j], k) - im.begin(cands[j], k);
    }
  }
  const double two_sigma2 = 2.0 * (o.sigma * o.sigma);
  double* row = rv.row.data();
  for (int r = 0; r < nref; ++r) {
    const int rc = ref_begin + r;
    for (int k = 0; k < nk; ++k)
      for (const auto* e = im.begin(rc, k); e != im.end(rc, k); ++e)
        row[e->local] = static_cast<double>(e->tf) * idf[e->local];
    for (int j = 0; j < ncand; ++j) {
      double* a = acc.data() + static_cast<size_t>(j) * 2 * kMaxN;
      const double delta = static_cast<double>(rv.cand_len[j] - rv.len[r]);
      const double penalty = o.cider_d ? std::pow(kE, -(delta * delta) / two_sigma2) : 1.0;
      for (int k = 0; k < nk; ++k) {
        double val = 0.0;
        for (const auto* e = im.begin(cands[j], k); e != im.end(cands[j], k); ++e) {
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
        if (a[k] != 0 && norm_r != 0) val /= (a[k] * norm_r);
        if (o.cider_d) val *= penalty;
        a[kMaxN + k] += val;
      }
    }
    for (int k = 0; k < nk; ++k)
      for (const auto* e = im.begin(rc, k); e != im.end(rc, k); ++e) row[e->local] = 0.0;
    poll.spend(cand_entries + (im.end(rc, nk - 1) - im.begin(rc, 0)) + 8);
  }
}

// The image's score from its per-n sums: np.mean over the n values (summed left to right, then divided), divided by
// the number of references, times 10.
double cider_of_sums(const double* sums, int n, int nref) {
  double mean = sums[0];
  for (int k = 1; k < n; ++k) mean += sums[k];
  mean /= static_cast<double>(n);
  mean /= static_cast<double>(nref);
  mean *= 10.0;
  return mean;
}

// score_candidates over all n lengths held in `im`, the lengths taken from its bigrams; out[j] = score of cands[j].
void score_all_lengths(const ImageNgrams& im, const int* cands, int ncand, int ref_begin, int nref,
                       const std::vector<double>& idf, RefVecs& rv, const CiderOpts& o, InterruptPoll& poll,
                       std::vector<double>& acc, double* out) {
  rv.cand_len.resize(ncand);
  for (int j = 0; j < ncand; ++j) rv.cand_len[j] = bigram_length(im, cands[j], o.n);
  score_candidates(im, cands, ncand, ref_begin, nref, o.n, idf, rv, o, poll, acc);
  for (int j = 0; j < ncand; ++j) out[j] = cider_of_sums(acc.data() + static_cast<size_t>(j) * 2 * kMaxN + kMaxN, o.n, nref);
}

// A distinct n-gram of one image bound for its df shard, and where its document frequency goes (index into the
// part's df array).
struct DfRecord {
  uint64_t lo;
  uint32_t hi;
  uint32_t pos;
};

// Records grouped by shard. Each shard's vector is reserved for its expected share up front: reserved pages that
// are never written cost nothing, while regrowth or a second (sorted) copy would touch fresh pages, and page
// faults are a large part of this pass's time.
struct Partition {
  std::vector<std::vector<DfRecord>> shards;
  void reserve(size_t expected_total) {
    shards.resize(DfTable::kShards);
    const size_t per = expected_total / DfTable::kShards;
    for (auto& v : shards) v.reserve(per + per / 4 + 64);
  }
  const DfRecord* begin(int s) const { return shards.empty() ? nullptr : shards[s].data(); }
  const DfRecord* end(int s) const { return shards.empty() ? nullptr : shards[s].data() + shards[s].size(); }
  size_t size(int s) const { return shards.empty() ? 0 : shards[s].size(); }
};

// What one thread's contiguous range of images hands to the df pass: the radix partition of its n-grams by shard,
// and the images' n-gram arrays.
struct DfPart {
  int64_t begin = 0;
  std::vector<uint32_t> df;  // document frequency of every n-gram of the range's images, image by image
  Partition insert;          // reference n-grams: +1 document each
  Partition lookup;          // candidate-only n-grams: df read after all inserts
  Arena arena;               // the range's ImageNgrams arrays
  // Empties it for the next call, keeping every buffer's capacity.
  void clear() {
    df.clear();
    for (auto& v : insert.shards) v.clear();
    for (auto& v : lookup.shards) v.clear();
    arena.reset();
  }
  size_t footprint() const {
    size_t n = df.capacity() * sizeof(uint32_t) + arena.footprint();
    for (const auto& v : insert.shards) n += v.capacity() * sizeof(DfRecord);
    for (const auto& v : lookup.shards) n += v.capacity() * sizeof(DfRecord);
    return n;
  }
};
using Parts = std::vector<std::unique_ptr<DfPart>>;

// DfParts kept between calls (up to 64 MiB in all), so repeated scoring (evaluation loops, SCST corpora) reuses
// mapped memory instead of page-faulting ~40 MB afresh per 5,000 images; larger corpora free theirs.
class PartCache {
 public:
  static PartCache& get() {
    static PartCache* cache = new PartCache();  // never destroyed: no work at interpreter exit
    return *cache;
  }
  std::unique_ptr<DfPart> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<DfPart>();
    auto p = std::move(free_.back());
    free_.pop_back();
    held_ -= p->footprint();
    return p;
  }
  void give(Parts& parts) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : parts) {
      const size_t f = p->footprint();
      if (held_ + f > kLimit) continue;  // freed with `parts`
      p->clear();
      held_ += f;
      free_.push_back(std::move(p));
    }
    parts.clear();
  }

 private:
  static constexpr size_t kLimit = size_t{64} << 20;
  std::mutex mu_;
  std::vector<std::unique_ptr<DfPart>> free_;
  size_t held_ = 0;
};

// Builds the n-grams of many images in parallel and partitions them by df shard. With `lookups`, n-grams that
// appear in no reference of their image are partitioned too (their df comes from the other images).
template <typename Caps>
void build_images(const Tokens& tok, int64_t n_images, int n, bool lookups, Caps&& caps_of,
                  std::vector<ImageNgrams>& ims, Parts& parts) {
  ims.resize(n_images);
  std::mutex mu;
  vlk::parallel_for(n_images, 64, [&](int64_t b, int64_t e) {
    std::unique_ptr<DfPart> owned = PartCache::get().take();
    DfPart& part = *owned;
    part.begin = b;
    NgramBuilder builder;
    std::vector<int64_t> caps;
    std::vector<size_t> offs;
    offs.reserve(e - b);
    {
      // Upper bound of the range's n-gram occurrences; distinct reference n-grams are about 2/3 of it.
      int64_t occ = 0;
      for (int64_t i = b; i < e; ++i) {
        int rb, re;
        caps_of(i, caps, rb, re);
        for (int64_t c : caps) occ += std::max<int64_t>(0, n * tok.len(c) - n * (n - 1) / 2);
      }
      part.insert.reserve(static_cast<size_t>(occ) * 3 / 4);
      if (lookups) part.lookup.reserve(static_cast<size_t>(occ) / 8);
    }
    for (int64_t i = b; i < e; ++i) {
      int ref_begin, ref_end;
      caps_of(i, caps, ref_begin, ref_end);
      builder.build(tok, caps.data(), static_cast<int>(caps.size()), n, ref_begin, ref_end, ims[i], part.arena);
      const uint32_t U = builder.size();
      const size_t base = part.df.size();
      if (base + U >= UINT32_MAX) throw std::length_error("too many n-grams in one thread's share of images");
      offs.push_back(base);
      part.df.resize(base + U, 0);
      const Key* keys = builder.keys();
      const uint64_t* hashes = builder.hashes();
      const uint8_t* in_ref = builder.in_ref();
      for (uint32_t u = 0; u < U; ++u) {
        const DfRecord r{keys[u].lo, keys[u].hi, static_cast<uint32_t>(base + u)};
        if (!in_ref[u] && !lookups) continue;  // (then part.lookup has no shards)
        const int s = DfTable::shard_of(hashes[u]);
        auto& dst = in_ref[u] ? part.insert.shards[s] : part.lookup.shards[s];
        // 256 output streams: ask for the line two ahead now, so the store does not wait for its read-for-ownership.
        // (Integer arithmetic: the address may lie past the vector's storage, where a prefetch is harmless.)
        __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(dst.data() + dst.size()) +
                                                         8 * sizeof(DfRecord)),
                           1);
        dst.push_back(r);
      }
    }
    for (int64_t i = b; i < e; ++i)
      ims[i].df = Span<uint32_t>{part.df.data() + offs[i - b], ims[i].num_ngrams};
    std::lock_guard<std::mutex> lock(mu);
    parts.push_back(std::move(owned));
  });
  // Image order, whatever the thread timing: df indices (and saved df files) do not depend on scheduling.
  std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x->begin < y->begin; });
}

// Counts every shard's reference n-grams (+1 per image) and writes the document frequency of each image n-gram. Shards
// are disjoint, so threads never share a table; each shard's table is small enough to stay in cache.
void count_documents(Parts& parts, DfTable& df, bool keep_keys) {
  std::vector<uint32_t> shard_max(DfTable::kShards, 0);
  vlk::parallel_for(DfTable::kShards, 1, [&](int64_t b, int64_t e) {
    // Without keep_keys (one-shot corpus scoring) a shard's keys live in a scratch table reused across shards:
    // only the counts outlive the pass, and the scratch stays in cache.
    KeyTable scratch;
    std::vector<uint32_t> index;  // dense df index of each insert record of the shard, in record order
    for (int64_t si = b; si < e; ++si) {
      const int s = static_cast<int>(si);
      // A kept table is never left half counted: it is not interrupted (a shard is milliseconds of work).
      if (!keep_keys) vlk::check_interrupt();
      size_t pairs = 0;
      for (const auto& p : parts) pairs += p->insert.size(s);
      std::vector<uint32_t>& counts = df.counts(s);
      // Sized for the usual ~30% distinct pairs (COCO val2014: 1.36M distinct of 4.77M), about half full.
      if (keep_keys)
        df.reserve(s, pairs * 2 / 5 + 16);
      else
        scratch.clear_sparse(pairs * 2 / 5 + 16);
      auto index_of = [&](const Key& k, uint64_t h) -> uint32_t {
        if (keep_keys) return df.index_of(s, k, h);
        bool inserted;
        const uint32_t* v = scratch.upsert_tracked_growing(k, h, static_cast<uint32_t>(counts.size()), &inserted);
        if (inserted) {
          if (counts.size() >= UINT32_MAX) throw std::length_error("too many distinct n-grams");
          counts.push_back(0);
        }
        return *v;
      };
      // Pass 1 counts; pass 2 writes the final counts into the images, so scoring reads its df sequentially.
      index.resize(pairs);
      size_t j = 0;
      uint32_t m = 0;
      for (const auto& pp : parts) {
        const DfPart& p = *pp;
        for (const DfRecord* r = p.insert.begin(s); r != p.insert.end(s); ++r, ++j) {
          const Key k{r->lo, r->hi};
          const uint32_t x = index_of(k, key_hash(k));
          m = std::max(m, ++counts[x]);
          index[j] = x;
        }
      }
      j = 0;
      for (auto& pp : parts) {
        DfPart& p = *pp;
        uint32_t* out = p.df.data();
        const DfRecord* end = p.insert.end(s);
        for (const DfRecord* r = p.insert.begin(s); r != end; ++r, ++j) {
          // Scattered stores into the images' df arrays: fetch the line of the record 8 ahead meanwhile.
          if (end - r > 8) __builtin_prefetch(out + r[8].pos, 1);
          out[r->pos] = counts[index[j]];
        }
        for (const DfRecord* r = p.lookup.begin(s); r != p.lookup.end(s); ++r) {
          const Key k{r->lo, r->hi};
          const uint64_t h = key_hash(k);
          if (keep_keys) {
            out[r->pos] = df.get(k, h);
          } else {
            const uint32_t* v = scratch.find(k, h);
            out[r->pos] = v ? counts[*v] : 0;
          }
        }
      }
      shard_max[s] = m;
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
  Parts parts;
  build_images(tok, n_images, opts.n, true, [&](int64_t i, std::vector<int64_t>& caps, int& rb, int& re) {
    caps.assign(1, cand[i]);
    caps.insert(caps.end(), ref_caps + ref_off[i], ref_caps + ref_off[i + 1]);
    rb = 1;
    re = static_cast<int>(caps.size());
  }, ims, parts);
  DfTable df;
  count_documents(parts, df, false);
  if (static_cast<int64_t>(df.max_df()) >= opts.logdf_size) throw std::out_of_range("log table too small");
  vlk::parallel_for(n_images, 64, [&](int64_t b, int64_t e) {
    std::vector<double> idf, acc;
    RefVecs rv;
    InterruptPoll poll;
    const int cand0 = 0;
    for (int64_t i = b; i < e; ++i) {
      ImageNgrams& im = ims[i];
      const uint32_t U = im.num_ngrams;
      idf.resize(U);
      for (uint32_t u = 0; u < U; ++u) idf[u] = opts.ref_len - logdf_of(opts, im.df[u]);
      const int nref = im.ncap - 1;
      if (nref < 1) throw std::invalid_argument("an image has no references");
      build_ref_vecs(im, 1, nref, opts.n, idf, rv);
      score_all_lengths(im, &cand0, 1, 1, nref, idf, rv, opts, poll, acc, out + i);
    }
  });
  PartCache::get().give(parts);
}

void CiderDf::add_documents(const Tokens& tok, const int64_t* ref_off, const int64_t* ref_caps, int64_t n_docs) {
  std::vector<ImageNgrams> ims;
  Parts parts;
  build_images(tok, n_docs, n_, false, [&](int64_t i, std::vector<int64_t>& caps, int& rb, int& re) {
    caps.assign(ref_caps + ref_off[i], ref_caps + ref_off[i + 1]);
    rb = 0;
    re = static_cast<int>(caps.size());
  }, ims, parts);
  count_documents(parts, df_, true);
  PartCache::get().give(parts);
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
    Arena arena;
    ImageNgrams im;
    std::vector<int64_t> caps;
    std::vector<int> cands;
    std::vector<double> idf, acc, scores;
    RefVecs rv;
    InterruptPoll poll;
    for (int64_t g = gb; g < ge; ++g) {
      if (start[g] == start[g + 1]) continue;
      caps.assign(ref_caps + ref_off[g], ref_caps + ref_off[g + 1]);
      const int nref = static_cast<int>(caps.size());
      for (int64_t j = start[g]; j < start[g + 1]; ++j) caps.push_back(cand[order[j]]);
      arena.reset();
      builder.build(tok, caps.data(), static_cast<int>(caps.size()), n_, 0, nref, im, arena);
      idf.resize(builder.size());
      for (uint32_t u = 0; u < builder.size(); ++u)
        idf[u] = opts.ref_len - logdf_of(opts, df_.get(builder.keys()[u], builder.hashes()[u]));
      build_ref_vecs(im, 0, nref, n_, idf, rv);
      const int ncand = static_cast<int>(start[g + 1] - start[g]);
      cands.resize(ncand);
      for (int j = 0; j < ncand; ++j) cands[j] = nref + j;
      scores.resize(ncand);
      score_all_lengths(im, cands.data(), ncand, 0, nref, idf, rv, opts, poll, acc, scores.data());
      for (int j = 0; j < ncand; ++j) out[order[start[g] + j]] = scores[j];
    }
  });
}

namespace {

// Exact ids of (prefix id, word id) pairs: open addressing over the 64-bit pair itself (never a hash of it).
class PairIds {
 public:
  PairIds() { rehash(1024); }
  // The id of `key`, given `next` (and `next` advanced) when it is new.
  uint32_t intern(uint64_t key, uint64_t& next) {
    if (2 * (count_ + 1) > keys_.size()) rehash(keys_.size() * 2);
    for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == kEmpty) {
        keys_[i] = key;
        vals_[i] = static_cast<uint32_t>(next++);
        ++count_;
        return vals_[i];
      }
      if (keys_[i] == key) return vals_[i];
    }
  }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;  // a prefix id is < UINT32_MAX, so no pair is all ones
  static uint64_t mix(uint64_t k) { return finish_hash(k * 0x9E3779B97F4A7C15ull); }
  void rehash(size_t cap) {
    std::vector<uint64_t> keys(cap, kEmpty);
    std::vector<uint32_t> vals(cap);
    mask_ = cap - 1;
    for (size_t j = 0; j < keys_.size(); ++j) {
      if (keys_[j] == kEmpty) continue;
      uint64_t i = mix(keys_[j]) & mask_;
      while (keys[i] != kEmpty) i = (i + 1) & mask_;
      keys[i] = keys_[j];
      vals[i] = vals_[j];
    }
    keys_.swap(keys);
    vals_.swap(vals);
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

// The captions' n-grams of length k+1 from those of length k (`grams`, ids < num_ids, rewritten in place): the n-gram
// at position i is the pair (id at i, id at i+1) of the two length-k n-grams it overlaps, interned exactly. When
// either occurs once in all captions, so does the pair: it gets a fresh id without entering the table (on
// distinct-heavy text nearly all do, so the table stays small). Returns the number of ids.
uint32_t extend_grams(uint32_t num_ids, Tokens& grams) {
  InterruptPoll poll;
  std::vector<uint8_t> occ(num_ids, 0);  // occurrences of each id, saturated at 2
  for (uint32_t id : grams.ids) occ[id] = static_cast<uint8_t>(occ[id] < 2 ? occ[id] + 1 : 2);
  PairIds pairs;
  uint64_t next = 0;
  const int64_t count = grams.size();
  uint32_t* ids = grams.ids.data();
  int64_t j = 0;
  for (int64_t c = 0; c < count; ++c) {
    // off[c] is read before it is rewritten, off[c+1] before the next caption rewrites it.
    const int64_t src = grams.off[c], len = grams.off[c + 1] - src - 1;
    grams.off[c] = j;
    poll.spend(len + 1);
    for (int64_t i = 0; i < len; ++i) {
      const uint32_t p = ids[src + i], q = ids[src + i + 1];
      // j <= src + i: an id is written at or before the first position it was read from.
      ids[j++] = occ[p] == 1 || occ[q] == 1 ? static_cast<uint32_t>(next++) : pairs.intern((uint64_t{p} << 32) | q, next);
    }
    if (next >= UINT32_MAX) throw std::length_error("too many distinct n-grams");
  }
  grams.off[count] = j;
  grams.ids.resize(static_cast<size_t>(j));
  return static_cast<uint32_t>(next);
}

// One thread's scratch while it scores images.
struct ScoreScratch {
  std::vector<double> idf, acc;
  RefVecs rv;
  InterruptPoll poll;
};

}  // namespace

void cider_by_length(Tokens grams, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                     int64_t n_images, const CiderOpts& opts, double* out) {
  validate_opts(opts);
  const int n = opts.n;
  std::vector<double> sums(static_cast<size_t>(n_images) * kMaxN, 0.0);
  // The length penalty's length of each caption: its bigram count (0 when n = 1), as bigram_length.
  std::vector<int64_t> length(static_cast<size_t>(grams.size()));
  for (int64_t c = 0; c < grams.size(); ++c) length[c] = n < 2 ? 0 : std::max<int64_t>(0, grams.len(c) - 1);
  uint32_t num_ids = 0;
  for (uint32_t id : grams.ids) num_ids = std::max(num_ids, id + 1);
  for (int k = 0; k < n; ++k) {
    // Document frequency of each n-gram: +1 per image whose references hold it (threads add atomically).
    std::vector<uint32_t> df(num_ids, 0);
    for_each_image<ScoreScratch>(grams, 1, cand, ref_off, ref_caps, n_images,
                   [&](int64_t, const std::vector<int64_t>&, const NgramBuilder& b, const ImageNgrams&, ScoreScratch&) {
                     for (uint32_t u = 0; u < b.size(); ++u)
                       if (b.in_ref()[u]) __atomic_fetch_add(&df[b.keys()[u].lo - 1], 1u, __ATOMIC_RELAXED);
                   });
    // Per image, the sum over references of this length's similarity.
    for_each_image<ScoreScratch>(grams, 1, cand, ref_off, ref_caps, n_images,
                   [&](int64_t i, const std::vector<int64_t>& caps, const NgramBuilder& b, const ImageNgrams& im,
                       ScoreScratch& t) {
                     std::vector<double>& idf = t.idf;
                     idf.resize(b.size());
                     for (uint32_t u = 0; u < b.size(); ++u)
                       idf[u] = opts.ref_len - logdf_of(opts, df[b.keys()[u].lo - 1]);
                     const int nref = static_cast<int>(caps.size()) - 1;
                     RefVecs& rv = t.rv;
                     build_ref_vecs(im, 1, nref, 1, idf, rv);
                     for (int r = 0; r < nref; ++r) rv.len[r] = length[caps[1 + r]];
                     rv.cand_len.assign(1, length[caps[0]]);
                     const int cand0 = 0;
                     score_candidates(im, &cand0, 1, 1, nref, 1, idf, rv, opts, t.poll, t.acc);
                     sums[static_cast<size_t>(i) * kMaxN + k] = t.acc[kMaxN];
                   });
    if (k + 1 < n) {
      std::vector<uint32_t>().swap(df);
      num_ids = extend_grams(num_ids, grams);
    }
  }
  for (int64_t i = 0; i < n_images; ++i)
    out[i] = cider_of_sums(sums.data() + static_cast<size_t>(i) * kMaxN, n, static_cast<int>(ref_off[i + 1] - ref_off[i]));
}

}  // namespace vlk::cap
