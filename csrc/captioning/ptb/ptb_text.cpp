// Text handling for the PTB tokenizer (see ptb_text.h).
#include "captioning/ptb/ptb_text.h"

#include "captioning/ptb/ptb_tokenizer.h"

namespace vlk {
namespace ptb {
namespace {

struct CpRange {
  uint32_t lo, hi;
};
struct CpClassRange {
  uint16_t lo, hi;
  uint8_t classes;
};
#include "captioning/ptb/ptb_tables.h"

// The range of the sorted, disjoint table t holding c, or nullptr.
template <typename Range, size_t N>
const Range* find_range(const Range (&t)[N], uint32_t c) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < t[mid].lo) {
      hi = mid;
    } else if (c > t[mid].hi) {
      lo = mid + 1;
    } else {
      return &t[mid];
    }
  }
  return nullptr;
}

template <size_t N>
bool in_table(const CpRange (&t)[N], uint32_t c) {
  return find_range(t, c) != nullptr;
}

// Whether c is in class k (one of the CpClass bits).
bool in_class(char16_t c, CpClass k) {
  const CpClassRange* r = find_range(kClassRanges, c);
  return r != nullptr && (r->classes & k) != 0;
}

}  // namespace

bool in_letter_table(char16_t c) { return in_class(c, kLetter); }
bool in_digit_table(char16_t c) { return in_class(c, kDigit); }

// Letters outside Character.isLetter that the Java WORD rule accepts (combining marks, modifier letters, ...).
bool is_extra_word_char(char16_t c) {
  static const CpRange extra[] = {
      {0x00AD, 0x00AD}, {0x0237, 0x024F}, {0x02C2, 0x02C5}, {0x02D2, 0x02DF}, {0x02E5, 0x02FF}, {0x0300, 0x036F},
      {0x0370, 0x037D}, {0x0384, 0x0385}, {0x03CF, 0x03CF}, {0x03F6, 0x03F6}, {0x03FC, 0x03FF}, {0x0483, 0x0487},
      {0x04CF, 0x04CF}, {0x04F6, 0x04FF}, {0x0510, 0x0525}, {0x055A, 0x055F}, {0x0591, 0x05BD}, {0x05BF, 0x05BF},
      {0x05C1, 0x05C2}, {0x05C4, 0x05C5}, {0x05C7, 0x05C7}, {0x0615, 0x061A}, {0x063B, 0x063F}, {0x064B, 0x065E},
      {0x0670, 0x0670}, {0x06D6, 0x06EF}, {0x06FA, 0x06FF}, {0x070F, 0x070F}, {0x0711, 0x0711}, {0x0730, 0x074F},
      {0x0750, 0x077F}, {0x07A6, 0x07B1}, {0x07CA, 0x07F5}, {0x07FA, 0x07FA}, {0x0900, 0x0903}, {0x093C, 0x093C},
      {0x093E, 0x094E}, {0x0951, 0x0955}, {0x0962, 0x0963}, {0x0981, 0x0983}, {0x09BC, 0x09C4}, {0x09C7, 0x09C8},
      {0x09CB, 0x09CD}, {0x09D7, 0x09D7}, {0x09E2, 0x09E3}, {0x0A01, 0x0A03}, {0x0A3C, 0x0A3C}, {0x0A3E, 0x0A4F},
      {0x0A81, 0x0A83}, {0x0ABC, 0x0ACF}, {0x0B82, 0x0B82}, {0x0BBE, 0x0BC2}, {0x0BC6, 0x0BC8}, {0x0BCA, 0x0BCD},
      {0x0C01, 0x0C03}, {0x0C3E, 0x0C56}, {0x0D3E, 0x0D44}, {0x0D46, 0x0D48}, {0x0E30, 0x0E3A}, {0x0E47, 0x0E4E},
      {0x0EB1, 0x0EBC}, {0x0EC8, 0x0ECD}};
  return in_table(extra, c);
}

// Characters the MISCSYMBOL rule returns as one-character tokens.
bool is_misc_symbol(char16_t c) {
  static const CpRange misc[] = {
      {0x0025, 0x0026}, {0x002B, 0x002B}, {0x005C, 0x005C}, {0x005E, 0x005E}, {0x007C, 0x007C}, {0x007E, 0x007E},
      {0x00A6, 0x00A9}, {0x00AC, 0x00AC}, {0x00AE, 0x00BA}, {0x00D7, 0x00D7}, {0x00F7, 0x00F7}, {0x0387, 0x0387},
      {0x05BE, 0x05BE}, {0x05C0, 0x05C0}, {0x05C3, 0x05C3}, {0x05C6, 0x05C6}, {0x05F3, 0x05F4}, {0x0600, 0x0603},
      {0x0606, 0x060A}, {0x060C, 0x060C}, {0x0614, 0x0614}, {0x061B, 0x061B}, {0x061E, 0x061E}, {0x066A, 0x066A},
      {0x066D, 0x066D}, {0x0703, 0x070D}, {0x07F6, 0x07F8}, {0x0964, 0x0965}, {0x0E4F, 0x0E4F}, {0x1FBD, 0x1FBD},
      {0x2016, 0x2017}, {0x2020, 0x2023}, {0x2030, 0x2038}, {0x203B, 0x203B}, {0x203E, 0x2042}, {0x2044, 0x2044},
      {0x207A, 0x207F}, {0x208A, 0x208E}, {0x2100, 0x214F}, {0x2190, 0x21FF}, {0x2200, 0x2BFF}, {0x3012, 0x3012},
      {0x30FB, 0x30FB}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20}, {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}};
  return in_table(misc, c);
}

// java.lang.String.toLowerCase of one token, appended to `out` (BMP; U+0130 expands to "i\u0307"; final sigma).
void java_lower_append(const char16_t* in, size_t n, Str& out) {
  for (size_t k = 0; k < n; ++k) {
    char16_t c = in[k];
    if (c < 0x80) {
      out += (c >= 'A' && c <= 'Z') ? static_cast<char16_t>(c | 0x20) : c;
    } else if (c == 0x0130) {
      out += u"i\u0307";
    } else if (c == 0x03A3) {
      // Final sigma, as java.lang.ConditionalSpecialCasing decides it: a cased letter before it and none after it
      // within the same word, words as the JDK's word BreakIterator delimits them (all checked against the jar):
      // - letters (not the JDK's kanji and kana classes, which form words of their own), spacing marks and numbers
      //   (digits, "½", "Ⅻ") are inside a word;
      // - non-spacing and enclosing marks and format characters are transparent ("áΣ-" -> "áς", "aΣ\u0301é" -> σ);
      // - a mid-word character (a dash, U+00AD, U+2027, '"', '\'', '.') or a connector ('_', U+203F, ...) joins two
      //   letters only ("ΟΔΟΣ-LRB", "Mr.Σ", "ΣΑΣ_ST" keep one word; "ΑΣ_2" and "a1_Σ" are two), and '.', ',', '\'',
      //   '"', U+066B two numbers ("xΣ12.34M" is one word).
      auto mid_word = [](char16_t m) {
        return m == '-' || m == '.' || m == '\'' || m == '"' || m == 0x00AD || m == 0x2027 || m == 0x058A ||
               m == 0x05BE || m == 0x1806 || (m >= 0x2010 && m <= 0x2015) || m == 0x2E17 || m == 0x301C ||
               m == 0x3030 || m == 0x30A0 || m == 0xFE31 || m == 0xFE32 || m == 0xFE58 || m == 0xFE63 || m == 0xFF0D;
      };
      auto connector = [](char16_t x) {
        return x == '_' || x == 0x203F || x == 0x2040 || x == 0x2054 || x == 0xFE33 || x == 0xFE34 ||
               (x >= 0xFE4D && x <= 0xFE4F) || x == 0xFF3F;
      };
      auto transparent = [](char16_t x) { return in_class(x, kIgnorable); };  // Mn, Me, Cf but U+00AD
      auto numeric = [](char16_t x) { return in_class(x, kNumeric); };
      auto mid_num = [](char16_t m) { return m == '"' || m == '\'' || m == ',' || m == '.' || m == 0x066B; };
      // The JDK's kanji, hiragana and katakana classes (words of their own); other ideographs and Hangul are
      // letters to it (checked against the jar code point by code point at the class edges).
      auto cjk = [](char16_t x) {
        return x == 0x3005 || (x >= 0x4E00 && x <= 0x9FA5) || (x >= 0xF900 && x <= 0xFA2D) ||
               (x >= 0x3041 && x <= 0x3094) || x == 0x309D || x == 0x309E || (x >= 0x30A1 && x <= 0x30FE);
      };
      // The JDK's $let: letters (not those) and spacing marks.
      auto jdk_letter = [&](char16_t x) { return (is_letter(x) && !cjk(x)) || in_class(x, kSpacingMark); };
      // in[a] between two letters (or, for mid_num, two digits), marks and format characters skipped before it,
      // format characters only after it: a non-spacing or enclosing mark after it attaches to it and ends the word
      // ("b_\u0301\u03a3" -> σ, "b_\u200d\u03a3" -> ς; checked against the jar).
      auto joins = [&](size_t a) {
        size_t p = a, q = a + 1;
        while (p > 0 && transparent(in[p - 1])) --p;
        while (q < n && in_class(in[q], kFormat)) ++q;
        if (p == 0 || q >= n) return false;
        const char16_t l = in[p - 1], r = in[q], m = in[a];
        return ((mid_word(m) || connector(m)) && jdk_letter(l) && jdk_letter(r)) ||
               (mid_num(m) && numeric(l) && numeric(r));
      };
      // Cased: categories Lu, Ll, Lt, and the Other_Lowercase/Other_Uppercase characters the JDK lists.
      auto cased = [](char16_t x) {
        return in_class(x, kCased) || (x >= 0x02B0 && x <= 0x02B8) || x == 0x02C0 || x == 0x02C1 ||
               (x >= 0x02E0 && x <= 0x02E4) || x == 0x0345 || x == 0x037A || (x >= 0x1D2C && x <= 0x1D61) ||
               (x >= 0x2160 && x <= 0x217F) || (x >= 0x24B6 && x <= 0x24E9);
      };
      auto in_word = [&](size_t a) {
        const char16_t x = in[a];
        return jdk_letter(x) || numeric(x) || transparent(x) || joins(a);
      };
      // Backwards, a run of marks and format characters belongs to the character before it: in the word with it,
      // outside it with it, and outside every word at the start of the token ("!\u0345Σ", "\u0345Σ" -> σ).
      bool before = false, after = false;
      for (size_t b = k; b > 0;) {
        size_t p = b;
        bool cased_mark = false;
        while (p > 0 && transparent(in[p - 1])) cased_mark |= cased(in[--p]);
        if (p == 0 || !in_word(p - 1)) break;
        if (cased_mark || cased(in[p - 1])) {
          before = true;
          break;
        }
        b = p - 1;
      }
      for (size_t a = k + 1; a < n && in_word(a); ++a)
        if (cased(in[a])) {
          after = true;
          break;
        }
      out += (before && !after) ? char16_t(0x03C2) : char16_t(0x03C3);
    } else {
      // kLowerMap is sorted by source code point.
      constexpr size_t kN = sizeof(kLowerMap) / sizeof(kLowerMap[0]);
      size_t lo = 0, hi = kN;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (kLowerMap[mid].lo < c) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      out += (lo < kN && kLowerMap[lo].lo == c) ? static_cast<char16_t>(kLowerMap[lo].hi) : c;
    }
  }
}

// UTF-16 -> UTF-8 at dst (room for 3 bytes a unit); returns the bytes written. A lone surrogate is written as its
// 3-byte form, as before (no rule keeps half of a pair in a token).
size_t put_utf8(char* dst, const char16_t* s, size_t n) {
  char* const dst0 = dst;
  for (size_t k = 0; k < n; ++k) {
    uint32_t c = s[k];
    if (c < 0x80) {
      *dst++ = static_cast<char>(c);
      continue;
    }
    if (c >= 0xD800 && c <= 0xDBFF && k + 1 < n && s[k + 1] >= 0xDC00 && s[k + 1] <= 0xDFFF) {
      c = 0x10000 + ((c - 0xD800) << 10) + (s[k + 1] - 0xDC00);
      ++k;
    }
    if (c < 0x800) {
      *dst++ = static_cast<char>(0xC0 | (c >> 6));
      *dst++ = static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      *dst++ = static_cast<char>(0xE0 | (c >> 12));
      *dst++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      *dst++ = static_cast<char>(0x80 | (c & 0x3F));
    } else {
      *dst++ = static_cast<char>(0xF0 | (c >> 18));
      *dst++ = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      *dst++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      *dst++ = static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return static_cast<size_t>(dst - dst0);
}

void append_utf8(std::string& out, const char16_t* s, size_t n) {
  const size_t at0 = out.size();
  out.resize(at0 + 3 * n);
  out.resize(at0 + put_utf8(&out[at0], s, n));
}

// pycocoevalcap's PUNCTUATIONS (the upper-case entries never match a -lowerCase token; kept for fidelity).
bool is_filtered(const char16_t* t, size_t len) {
  if (len == 0 || len > 5 || !in_set(t[0], u"'`-.?!,:;")) return false;
  static const char16_t* const kPunct[] = {u"''", u"'", u"``", u"`", u"-LRB-", u"-RRB-", u"-LCB-", u"-RCB-", u".",
                                           u"?",  u"!", u",",  u":", u"-",     u"--",    u"...",   u";"};
  for (const char16_t* p : kPunct)
    if (std::char_traits<char16_t>::length(p) == len && std::char_traits<char16_t>::compare(p, t, len) == 0)
      return true;
  return false;
}

// Python's str.isspace(), for the rstrip() pycocoevalcap applies to each output line.
bool py_space(char16_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Valid UTF-8 -> UTF-16 code units at dst (supplementary characters as surrogate pairs); returns the units written.
size_t utf8_to_utf16(const char* data, size_t n, char16_t* dst) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  char16_t* const dst0 = dst;
  for (size_t i = 0; i < n;) {
    uint32_t c = p[i];
    if (c < 0x80) {
      *dst++ = static_cast<char16_t>(c);
      ++i;
      continue;
    }
    const int len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    c &= len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
    for (int k = 1; k < len; ++k) c = (c << 6) | (p[i + k] & 0x3F);
    i += len;
    if (c >= 0x10000) {
      c -= 0x10000;
      *dst++ = static_cast<char16_t>(0xD800 + (c >> 10));
      *dst++ = static_cast<char16_t>(0xDC00 + (c & 0x3FF));
    } else {
      *dst++ = static_cast<char16_t>(c);
    }
  }
  return static_cast<size_t>(dst - dst0);
}

// UTF-16 length of valid UTF-8: one unit a character, two for a 4-byte one.
size_t utf16_length(const char* data, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  size_t units = 0;
  for (size_t i = 0; i < n; ++i) units += ((p[i] & 0xC0) != 0x80) + (p[i] >= 0xF0);
  return units;
}

Str utf8_to_utf16(const std::string& s) {
  Str out(utf16_length(s.data(), s.size()), u'\0');
  utf8_to_utf16(s.data(), s.size(), &out[0]);
  return out;
}

}  // namespace ptb

int64_t utf8_invalid_offset(const char* data, int64_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  int64_t i = 0;
  while (i < len) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= len || (p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += n + 1;
  }
  return -1;
}

}  // namespace vlk
