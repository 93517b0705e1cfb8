// ROUGE-L as pycocoevalcap's Rouge: tokens from str.split(" "), LCS length per reference, the maximum precision
// and recall over references, F-measure with beta = 1.2.
#include <algorithm>
#include <stdexcept>

#include "captioning/cider.h"
#include "core/parallel.h"

namespace vlk::cap {

namespace {

int64_t lcs_length(const uint32_t* a, int64_t na, const uint32_t* b, int64_t nb, std::vector<int64_t>& row,
                   InterruptPoll& poll) {
  if (na < nb) {
    std::swap(a, b);
    std::swap(na, nb);
  }
  // One DP row over the shorter sequence; prev holds lengths[i-1][j-1].
  row.assign(nb + 1, 0);
  for (int64_t i = 1; i <= na; ++i) {
    poll.spend(nb + 1);  // the DP is quadratic in the caption lengths: poll per row
    int64_t prev = 0;
    for (int64_t j = 1; j <= nb; ++j) {
      const int64_t up = row[j];
      row[j] = a[i - 1] == b[j - 1] ? prev + 1 : std::max(up, row[j - 1]);
      prev = up;
    }
  }
  return row[nb];
}

}  // namespace

void rouge_l_images(const Tokens& tok, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                    int64_t n_images, double beta, double* out) {
  vlk::parallel_for(n_images, 64, [&](int64_t b, int64_t e) {
    std::vector<int64_t> row;
    InterruptPoll poll;
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = cand[i];
      const int64_t lc = tok.len(c);
      if (ref_off[i + 1] == ref_off[i]) throw std::invalid_argument("an image has no references");
      double prec_max = 0.0, rec_max = 0.0;
      bool first = true;
      for (int64_t j = ref_off[i]; j < ref_off[i + 1]; ++j) {
        const int64_t r = ref_caps[j];
        const int64_t lr = tok.len(r);
        const int64_t lcs = lcs_length(tok.begin(r), lr, tok.begin(c), lc, row, poll);
        const double prec = static_cast<double>(lcs) / static_cast<double>(lc);
        const double rec = static_cast<double>(lcs) / static_cast<double>(lr);
        if (first || prec > prec_max) prec_max = prec;
        if (first || rec > rec_max) rec_max = rec;
        first = false;
      }
      const double b2 = beta * beta;
      out[i] = (prec_max != 0 && rec_max != 0) ? ((1 + b2) * prec_max * rec_max) / (rec_max + b2 * prec_max) : 0.0;
    }
  });
}

}  // namespace vlk::cap
