// BLEU as pycocoevalcap's BleuScorer (David Chiang's bleu_scorer with option "closest"): clipped n-gram counts
// against the per-n-gram maximum over references, closest reference length (ties: the shorter), and the
// per-image score with its tiny/small smoothing constants.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "captioning/cider.h"
#include "core/parallel.h"

namespace vlk::cap {

void bleu_images(const Tokens& tok, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                 int64_t n_images, int n, int64_t* stats, double* per_image) {
  if (n < 1 || n > kMaxN) throw std::invalid_argument("n must be in [1, 4]");
  const int width = 2 + 2 * n;
  struct Scratch {
    std::vector<uint32_t> maxcount;
    InterruptPoll poll;
  };
  for_each_image<Scratch>(tok, n, cand, ref_off, ref_caps, n_images,
                          [&](int64_t i, const std::vector<int64_t>& caps, const NgramBuilder&, const ImageNgrams& im,
                              Scratch& t) {
      const int ncap = static_cast<int>(caps.size());
      t.poll.spend(static_cast<int64_t>(im.entries.size()) + ncap);
      std::vector<uint32_t>& maxcount = t.maxcount;
      maxcount.assign(im.num_ngrams, 0);
      for (int c = 1; c < ncap; ++c)
        for (int k = 0; k < n; ++k)
          for (const auto* x = im.begin(c, k); x != im.end(c, k); ++x)
            maxcount[x->local] = std::max(maxcount[x->local], x->tf);
      const int64_t testlen = tok.len(caps[0]);
      // min((abs(l - testlen), l)) over the references: closest length, the shorter one on ties.
      int64_t reflen = tok.len(caps[1]);
      for (int c = 2; c < ncap; ++c) {
        const int64_t l = tok.len(caps[c]);
        const int64_t d = std::llabs(l - testlen), dbest = std::llabs(reflen - testlen);
        if (d < dbest || (d == dbest && l < reflen)) reflen = l;
      }
      int64_t* st = stats + i * width;
      st[0] = testlen;
      st[1] = reflen;
      for (int k = 0; k < n; ++k) {
        int64_t correct = 0;
        for (const auto* x = im.begin(0, k); x != im.end(0, k); ++x)
          correct += std::min<int64_t>(maxcount[x->local], x->tf);
        st[2 + k] = std::max<int64_t>(0, testlen - k);
        st[2 + n + k] = correct;
      }
      const double tiny = 1e-15, small = 1e-9;
      double bleu = 1.0;
      double* out = per_image + i * n;
      for (int k = 0; k < n; ++k) {
        bleu *= (static_cast<double>(st[2 + n + k]) + tiny) / (static_cast<double>(st[2 + k]) + small);
        out[k] = std::pow(bleu, 1.0 / (k + 1));
      }
      const double ratio = (static_cast<double>(testlen) + tiny) / (static_cast<double>(reflen) + small);
      if (ratio < 1) {
        for (int k = 0; k < n; ++k) out[k] *= std::exp(1 - 1 / ratio);
      }
  });
}

}  // namespace vlk::cap
