#include "detection/det_masks.h"

#include <string>
#include <vector>

#include "boxes/rle_counts.h"
#include "core/parallel.h"

namespace vlk {
namespace {

constexpr int64_t kMaxRun = 0xFFFFFFFFLL;  // pycocotools keeps runs (and so h*w) in 32-bit unsigned integers

// Number of counts in one string (a count ends at a character without the continuation bit 0x20), or -1 when a
// character is outside '0'..'o' or the string ends inside a count. Branch-free over the characters (this pass reads
// every byte of every result); the over-long-count check is left to the decoder.
int64_t count_runs(const char* s, int64_t n) {
  int64_t runs = 0;
  unsigned bad = 0;
  for (int64_t p = 0; p < n; ++p) {
    const unsigned c = static_cast<unsigned char>(s[p]) - 48u;
    bad |= c > 63u;
    runs += (c & 0x20u) == 0;
  }
  if (bad || (n > 0 && ((static_cast<unsigned char>(s[n - 1]) - 48u) & 0x20u))) return -1;
  return runs;
}

std::string count_error(const char* s, int64_t n) {
  for (int64_t p = 0; p < n; ++p) {
    const int c = static_cast<unsigned char>(s[p]) - 48;
    if (c < 0 || c > 63) return "invalid character at position " + std::to_string(p);
  }
  return "truncated count at end of string";
}

// pycocotools rleFrString into out[0..cap): 5 bits per character, sign from bit 0x10 of the last one, deltas
// against the run two back from the fourth run on. Returns the number of runs, or -1 with `error` set: a character
// outside '0'..'o', a truncated or over-long count, a run outside [0, 2^32), or more than cap runs (nothing is
// written past out[cap - 1]; the caller's offsets give cap).
int64_t decode_runs(const char* s, int64_t n, int64_t* out, int64_t cap, std::string& error) {
  int64_t m = 0;
  for (int64_t p = 0; p < n;) {
    if (m == cap) {
      error = "holds more runs than its offsets give (" + std::to_string(cap) + ")";
      return -1;
    }
    int64_t x = 0;
    int k = 0;
    int c;
    do {
      if (k == 7) {
        error = "count longer than 7 characters at position " + std::to_string(p);
        return -1;
      }
      if (p == n) {
        error = "truncated count at end of string";
        return -1;
      }
      c = static_cast<unsigned char>(s[p++]) - 48;
      if (c < 0 || c > 63) {
        error = "invalid character at position " + std::to_string(p - 1);
        return -1;
      }
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      ++k;
    } while (c & 0x20);
    if (c & 0x10) x |= static_cast<int64_t>(~uint64_t{0} << (5 * k));
    if (m > 2) x += out[m - 2];
    if (x < 0 || x > kMaxRun) {
      error = "run " + std::to_string(m) + " decodes to " + std::to_string(x);
      return -1;
    }
    out[m++] = x;
  }
  return m;
}

// h * w fits the 32-bit sizes and runs of pycocotools (so no sum below wraps).
bool size_ok(int64_t h, int64_t w) { return h >= 0 && w >= 0 && (h == 0 || w <= kMaxRun / h); }

std::string size_error(int64_t h, int64_t w) {
  return "size " + std::to_string(h) + " x " + std::to_string(w) + " is not in [0, 2^32 - 1] pixels";
}

// rle::bbox_one without a division per run: the (column, row) of the running position is advanced run by run
// (a division only for a run of a full column or more). Equal to bbox_one when h * w < 2^32, where its 32-bit
// positions cannot wrap (the caller uses bbox_one otherwise).
void bbox_walk(const int64_t* c, int64_t m_in, int64_t h, int64_t w, double* bb) {
  const int64_t m = (m_in / 2) * 2;
  if (m == 0) {
    bb[0] = bb[1] = bb[2] = bb[3] = 0;
    return;
  }
  uint32_t xs = static_cast<uint32_t>(w), ys = static_cast<uint32_t>(h), xe = 0, ye = 0;
  int64_t col = 0, row = 0;  // of the position where run j starts
  auto advance = [&](int64_t x) {
    row += x;
    if (row >= h) {
      row -= h;
      ++col;
      // Only a run reaching past the next column divides.
      if (row >= h) {
        col += row / h;
        row %= h;
      }
    }
  };
  for (int64_t j = 0; j < m; ++j) {
    const int64_t x = c[j];
    if (j % 2 == 0 || x == 0) {
      advance(x);
      continue;
    }
    const int64_t x0 = col, y0 = row;
    advance(x - 1);  // the run's last pixel
    const int64_t x1 = col, y1 = row;
    advance(1);
    xs = xs < x0 ? xs : static_cast<uint32_t>(x0);
    xe = xe > x1 ? xe : static_cast<uint32_t>(x1);
    if (x0 < x1) {
      ys = 0;
      ye = static_cast<uint32_t>(h - 1);
    } else {
      ys = ys < y0 ? ys : static_cast<uint32_t>(y0);
      ye = ye > y1 ? ye : static_cast<uint32_t>(y1);
    }
  }
  bb[0] = xs;
  bb[2] = static_cast<double>(xe - xs + 1);
  bb[1] = ys;
  bb[3] = static_cast<double>(ye - ys + 1);
}

}  // namespace

std::string det_mask_run_offsets(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                                const int64_t* w, const uint8_t* need, int64_t* offsets, int64_t& bad) {
  bad = -1;
  std::vector<int64_t> runs(static_cast<size_t>(n), 0);
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      if ((k & 63) == 0) check_interrupt();
      runs[k] = count_runs(str[k], len[k]);
    }
  });
  offsets[0] = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (!size_ok(h[k], w[k])) {
      bad = k;
      return size_error(h[k], w[k]);
    }
    if (runs[k] < 0) {
      bad = k;
      return count_error(str[k], len[k]);
    }
    // A dropped mask holds no runs, so the running sums (csum_base reads the previous stored run) skip it.
    offsets[k + 1] = offsets[k] + (!need || need[k] ? runs[k] : 0);
  }
  return {};
}

std::string det_masks_decode(const char* const* str, const int64_t* len, int64_t n, const int64_t* h,
                             const int64_t* w, const uint8_t* need, const int64_t* offsets, int64_t* csum,
                             int64_t* area, double* bbox, int64_t& bad) {
  bad = -1;
  // Each kept mask's inclusive sums start at the pixels of the kept masks before it.
  std::vector<int64_t> base(static_cast<size_t>(n) + 1, 0);
  for (int64_t k = 0; k < n; ++k) {
    if (!size_ok(h[k], w[k])) {
      bad = k;
      return size_error(h[k], w[k]);
    }
    base[k + 1] = base[k] + (!need || need[k] ? h[k] * w[k] : 0);
  }
  std::vector<std::string> errors(static_cast<size_t>(n));
  parallel_for(n, 256, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> scratch;
    for (int64_t k = begin; k < end; ++k) {
      if ((k & 15) == 0) check_interrupt();
      const bool keep = !need || need[k];
      int64_t* c = csum + offsets[k];
      const int64_t m_given = offsets[k + 1] - offsets[k];
      int64_t cap = m_given;
      if (!keep) {
        // Validated like the others, decoded into scratch and dropped: an empty mask in the set. A string of
        // len[k] characters holds at most len[k] runs.
        if (m_given != 0) {
          errors[k] = "is dropped (need 0) but its offsets give it " + std::to_string(m_given) + " runs";
          continue;
        }
        cap = len[k];
        scratch.resize(static_cast<size_t>(cap));
        c = scratch.data();
      }
      const int64_t m = decode_runs(str[k], len[k], c, cap, errors[k]);
      if (m < 0) continue;
      if (keep && m != m_given) {
        errors[k] = "holds " + std::to_string(m) + " runs but its offsets give " + std::to_string(m_given);
        continue;
      }
      int64_t total = 0;
      for (int64_t j = 0; j < m; ++j) total += c[j];
      const int64_t hw = h[k] * w[k];
      if (total != hw) {
        errors[k] = "runs sum to " + std::to_string(total) + " but the size h*w is " + std::to_string(hw);
        continue;
      }
      if (!keep) {
        area[k] = 0;
        bbox[4 * k] = bbox[4 * k + 1] = bbox[4 * k + 2] = bbox[4 * k + 3] = 0.0;
        continue;
      }
      area[k] = rle::area_part(c, m, 0, 1);
      if (hw < (int64_t{1} << 32) && h[k] > 0) {
        bbox_walk(c, m, h[k], w[k], bbox + 4 * k);
      } else {
        rle::bbox_one(c, m, h[k], w[k], bbox + 4 * k);
      }
      // Runs -> inclusive sums over the whole set (each mask's runs add up to its h * w).
      int64_t acc = base[k];
      for (int64_t j = 0; j < m; ++j) c[j] = acc += c[j];
    }
  });
  for (int64_t k = 0; k < n; ++k) {
    if (!errors[k].empty()) {
      bad = k;
      return errors[k];
    }
  }
  return {};
}

}  // namespace vlk
