// A lower bound of the k-th largest of many scores from a strided sample: the threshold both top-k selections use
// where k is a large share of a row (a selection over 512 sampled scores in place of one over 2k or more).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/cpu_features.h"

namespace vlk {

constexpr int64_t kBoundSample = 512;

// A value that at least k of the n scores get(0), ..., get(n - 1) reach, so at most their k-th largest: a strided
// sample of kBoundSample scores (NaN left out) gives an estimate of the k-th largest; the bound is set about two
// standard deviations below it, so that usually between k and ~1.15 k scores reach it, and lowered until k are
// counted to reach it (NaN never does). Only the count decides, so whatever the order of the scores the bound is
// valid. False when the sample runs out first (a row whose sampled places hold its highest scores).
template <typename T, typename Get>
VLK_INLINE bool sampled_kth_bound(int64_t n, int64_t k, Get get, std::vector<T>& sample, T& bound) {
  sample.clear();
  const int64_t want = std::min(n, kBoundSample);
  for (int64_t t = 0; t < want; ++t) {
    const T v = get(t * (n / want) + t * (n % want) / want);
    if (!std::isnan(v)) sample.push_back(v);
  }
  const int64_t m = static_cast<int64_t>(sample.size());
  const double expect = static_cast<double>(k) * static_cast<double>(m) / static_cast<double>(n);
  int64_t r = static_cast<int64_t>(expect + 2.0 * std::sqrt(expect) + 1.0), lo = 0;
  for (; r < m; lo = r + 1, r = 2 * r + 8) {
    // Descending, so the r-th largest; the part before r was set aside by an earlier, smaller r.
    std::nth_element(sample.begin() + lo, sample.begin() + r, sample.end(), std::greater<T>());
    const T t = sample[r];
    int64_t reach = 0;
    for (int64_t j = 0; j < n; ++j) reach += get(j) >= t;
    if (reach >= k) {
      bound = t;
      return true;
    }
  }
  return false;
}

}  // namespace vlk
