// Text handling for the PTB tokenizer: the code-point classes its rules use (as java.lang.Character and JFlex
// define them), java.lang.String.toLowerCase of a token, UTF-8 <-> UTF-16, and pycocoevalcap's output filter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vlk::ptb {

using Str = std::u16string;

// Table lookups of the BMP categories (ptb_tables.h, generated from unicodedata by gen_ptb_tables.py).
bool in_letter_table(char16_t c);  // L*: Character.isLetter, JFlex's [:letter:]
bool in_digit_table(char16_t c);   // Nd: Character.isDigit, JFlex's [:digit:]

inline bool is_letter(char16_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_letter_table(c);
}
inline bool is_digit(char16_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_digit_table(c);
}
inline bool ascii_alpha(char16_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
inline bool ascii_upper(char16_t c) { return c >= 'A' && c <= 'Z'; }
inline bool ascii_digit(char16_t c) { return c >= '0' && c <= '9'; }
inline bool ascii_alnum(char16_t c) { return ascii_alpha(c) || ascii_digit(c); }
// The non-ASCII characters JFlex's %caseless adds to ASCII letters of literals (their lower or upper case is one):
// U+0130 and U+0131 (i), U+017F (s), U+212A (k). Java matches "'t\u0130s" as "'tis", "\u0130nc." as "Inc.".
inline bool caseless_special(char16_t c) { return c == 0x0130 || c == 0x0131 || c == 0x017F || c == 0x212A; }
// The lower-case ASCII letter c matches in a %caseless literal, or 0.
inline char16_t caseless_ascii(char16_t c) {
  if (c < 0x80) return ascii_alpha(c) ? static_cast<char16_t>(c | 0x20) : 0;
  return c == 0x017F ? u's' : c == 0x212A ? u'k' : caseless_special(c) ? u'i' : 0;
}
inline bool in_set(char16_t c, const char16_t* set) {
  for (; *set; ++set)
    if (*set == c) return true;
  return false;
}

// An ASCII character class as a 128-bit mask (non-ASCII code units are never members).
struct AsciiSet {
  uint64_t lo = 0, hi = 0;
  explicit AsciiSet(const char* chars) {
    for (; *chars; ++chars) {
      const unsigned c = static_cast<unsigned char>(*chars);
      (c < 64 ? lo : hi) |= uint64_t{1} << (c & 63);
    }
  }
  bool has(char16_t c) const { return c < 64 ? (lo >> c) & 1 : c < 128 ? (hi >> (c - 64)) & 1 : false; }
};

// Letters outside Character.isLetter that the Java WORD rule accepts (combining marks, modifier letters, ...).
bool is_extra_word_char(char16_t c);

// Characters the MISCSYMBOL rule returns as one-character tokens.
bool is_misc_symbol(char16_t c);

inline bool is_space(char16_t c) {
  return c == ' ' || c == '\t' || c == 0x00A0 || (c >= 0x2000 && c <= 0x200A) || c == 0x3000;
}
inline bool is_newline_char(char16_t c) {
  return c == '\r' || c == '\n' || c == 0x2028 || c == 0x2029 || c == 0x0B || c == 0x0C || c == 0x85;
}

// java.lang.String.toLowerCase of one token, appended to `out` (BMP; U+0130 expands to "i\u0307"; final sigma).
void java_lower_append(const char16_t* in, size_t n, Str& out);

// UTF-16 -> UTF-8 at dst (room for 3 bytes a unit); returns the bytes written. A lone surrogate is written as its
// 3-byte form, as before (no rule keeps half of a pair in a token).
size_t put_utf8(char* dst, const char16_t* s, size_t n);

void append_utf8(std::string& out, const char16_t* s, size_t n);

// pycocoevalcap's PUNCTUATIONS (the upper-case entries never match a -lowerCase token; kept for fidelity).
bool is_filtered(const char16_t* t, size_t len);

// Python's str.isspace(), for the rstrip() pycocoevalcap applies to each output line.
bool py_space(char16_t c);

// Valid UTF-8 -> UTF-16 code units at dst (supplementary characters as surrogate pairs); returns the units written.
size_t utf8_to_utf16(const char* data, size_t n, char16_t* dst);

// UTF-16 length of valid UTF-8: one unit a character, two for a 4-byte one.
size_t utf16_length(const char* data, size_t n);

Str utf8_to_utf16(const std::string& s);

}  // namespace vlk::ptb
