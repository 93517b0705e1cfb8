#include "detection/det_masks.h"

#include "boxes/rle_counts.h"
#include "core/parallel.h"

namespace vlk {
namespace {

constexpr int64_t kMaxRun = 0xFFFFFFFFLL;  // pycocotools keeps runs in 32-bit unsigned integers

// Number of counts in one string (a count ends at a character without the continuation bit 0x20), or -1 with
// `error` set when a character is outside '0'..'o', a count is longer than 7 characters or the string ends inside
// one.
int64_t count_runs(const char* s, int64_t n, std::string& error) {
  int64_t runs = 0, k = 0;
  for (int64_t p = 0; p < n; ++p) {
    const int c = static_cast<unsigned char>(s[p]) - 48;
    if (c < 0 || c > 63) {
      error = "invalid character at position " + std::to_string(p);
      return -1;
    }
    if (++k > 7) {
      error = "count longer than 7 characters at position " + std::to_string(p);
      return -1;
    }
    if (!(c & 0x20)) {
      ++runs;
      k = 0;
    }
  }
  if (k) {
    error = "truncated count at end of string";
    return -1;
  }
  return runs;
}

// pycocotools rleFrString into out[0..m): 5 bits per character, sign from bit 0x10 of the last one, deltas against
// the run two back from the fourth run on.
bool decode_runs(const char* s, int64_t n, int64_t* out, std::string& error) {
  int64_t m = 0;
  for (int64_t p = 0; p < n;) {
    int64_t x = 0;
    int k = 0;
    int c;
    do {
      c = static_cast<unsigned char>(s[p++]) - 48;
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      ++k;
    } while (c & 0x20);
    if (c & 0x10) x |= static_cast<int64_t>(~uint64_t{0} << (5 * k));
    if (m > 2) x += out[m - 2];
    if (x < 0 || x > kMaxRun) {
      error = "run " + std::to_string(m) + " decodes to " + std::to_string(x);
      return false;
    }
    out[m++] = x;
  }
  return true;
}

}  // namespace

std::string det_masks_from_strings(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                                   const int64_t* w, std::vector<int64_t>& csum, std::vector<int64_t>& offsets,
                                   std::vector<int64_t>& area, std::vector<double>& bbox) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<int64_t> runs(static_cast<size_t>(n), 0);
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) runs[k] = count_runs(str[k], len[k], errors[k]);
  });
  offsets.assign(static_cast<size_t>(n) + 1, 0);
  std::vector<int64_t> base(static_cast<size_t>(n) + 1, 0);
  for (int64_t k = 0; k < n; ++k) {
    if (runs[k] < 0) return "malformed RLE string at index " + std::to_string(k) + ": " + errors[k];
    offsets[k + 1] = offsets[k] + runs[k];
    base[k + 1] = base[k] + h[k] * w[k];
  }
  csum.assign(static_cast<size_t>(offsets[n]), 0);
  area.assign(static_cast<size_t>(n), 0);
  bbox.assign(static_cast<size_t>(4 * n), 0.0);
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t* c = csum.data() + offsets[k];
      const int64_t m = offsets[k + 1] - offsets[k];
      if (!decode_runs(str[k], len[k], c, errors[k])) continue;
      int64_t total = 0;
      for (int64_t j = 0; j < m; ++j) total += c[j];
      if (total != h[k] * w[k]) {
        errors[k] = "runs sum to " + std::to_string(total) + " but the size h*w is " + std::to_string(h[k] * w[k]);
        continue;
      }
      area[k] = rle::area_part(c, m, 0, 1);
      rle::bbox_one(c, m, h[k], w[k], bbox.data() + 4 * k);
      // Runs -> inclusive sums over the whole set (each mask's runs add up to its h * w).
      int64_t acc = base[k];
      for (int64_t j = 0; j < m; ++j) c[j] = acc += c[j];
    }
  });
  for (int64_t k = 0; k < n; ++k)
    if (!errors[k].empty()) return "malformed RLE string at index " + std::to_string(k) + ": " + errors[k];
  return {};
}

}  // namespace vlk
