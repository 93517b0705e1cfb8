// The PTB lexer: Stanford CoreNLP 3.4.1's PTBLexer as run by pycocoevalcap 1.2 (-preserveLines -lowerCase).
//
// The Java tokenizer is a JFlex scanner: at each position every rule is tried, the longest match wins (a rule with
// trailing context r1/r2 competes with the length of r1 r2 but consumes only r1), and ties go to the earlier rule.
// This file re-implements that selection with one hand-written matcher per rule (their patterns and order are
// listed in vlkernels/captioning/README_tokenizer.md). Matching runs on UTF-16 code units, as Java does: a
// supplementary character reaches the rules as two surrogates, which no rule accepts, so it is dropped like any
// other untokenizable character. Batching around it: ptb_tokenizer.cpp; text handling: ptb_text.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "captioning/ptb/ptb_text.h"
#include "core/parallel.h"

// The per-word shortcut runs once per token of most captions: keep it inside the lexer loop.
#if defined(__GNUC__)
#define VLK_PTB_INLINE __attribute__((always_inline)) inline
#else
#define VLK_PTB_INLINE inline
#endif

namespace vlk::ptb {

// An output buffer that is filled through raw pointers: text[0, size) is the output, the rest spare capacity, so
// appending a token costs no zero-fill (std::string::resize would clear each token's bytes first).
struct OutBuf {
  std::string text;
  size_t size = 0;
  // Room for k more bytes at the end; the caller writes them and adds what it used to `size`.
  char* room(size_t k) {
    if (size + k > text.size()) text.resize(std::max(text.size() * 2, size + k + 256));
    return &text[size];
  }
  void append(const std::string& s) {
    std::copy(s.begin(), s.end(), room(s.size()));
    size += s.size();
  }
};

// Ends of a pattern tried at one start: small sorted sets of positions, the way a JFlex DFA keeps every
// alternative alive until the longest one is known.
using Ends = std::vector<int>;

inline void add_end(Ends& e, int p) {
  if (std::find(e.begin(), e.end(), p) == e.end()) e.push_back(p);
}
inline int max_end(const Ends& e) { return e.empty() ? -1 : *std::max_element(e.begin(), e.end()); }

// A run of at most 8 ASCII letters, lower-cased and packed into an integer (8 bits a letter): how the
// abbreviation lists are looked up, by the whole letter run (every entry is letters followed by '.', so it can only
// match a complete run). 0 for anything else (a longer run, a non-letter), which no list holds.
template <typename CharT>
uint64_t pack_letters(const CharT* s, int len) {
  if (len <= 0 || len > 8) return 0;
  uint64_t key = 0;
  for (int k = 0; k < len; ++k) key = (key << 8) | static_cast<uint64_t>(s[k] | 0x20);
  return key;
}
constexpr uint64_t pack_letters(const char* w) {
  uint64_t key = 0;
  int len = 0;
  for (; w[len]; ++len) {
    const char c = static_cast<char>(w[len] | 0x20);
    if (len == 8 || c < 'a' || c > 'z') return 0;
    key = (key << 8) | static_cast<uint64_t>(c);
  }
  return key;
}

// A set of lower-case words of letters, for pack_letters keys. Entries with other characters are left out: a run of
// letters can never equal them.
class WordSet {
 public:
  WordSet(std::initializer_list<const char*> words) {
    for (const char* w : words)
      if (const uint64_t k = pack_letters(w)) keys_.push_back(k);
    build();
  }
  void add(const WordSet& other) {
    keys_.insert(keys_.end(), other.keys_.begin(), other.keys_.end());
    build();
  }
  // Open addressing, at most a quarter full: one probe for most words.
  bool has(uint64_t key) const {
    if (key == 0) return false;
    for (size_t h = slot(key);; h = (h + 1) & mask_) {
      if (slots_[h] == key) return true;
      if (slots_[h] == 0) return false;
    }
  }

 private:
  std::vector<uint64_t> keys_, slots_;
  size_t mask_ = 0;
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 40) & mask_; }
  void build() {
    size_t n = 16;
    while (n < 4 * keys_.size()) n *= 2;
    slots_.assign(n, 0);
    mask_ = n - 1;
    for (uint64_t k : keys_) {
      size_t h = slot(k);
      while (slots_[h] != 0 && slots_[h] != k) h = (h + 1) & mask_;
      slots_[h] = k;
    }
  }
};

// Tokens of one caption, produced two ways:
//  - run_filtered(): the caption as pycocoevalcap returns it (tokens lower-cased, PUNCTUATIONS dropped, joined by
//    ' '), appended as UTF-8 straight to an output buffer;
//  - run_raw(): the Java output line (all tokens, lower-cased, UTF-16), for ptb_tokens() and for the one case the
//    filtered mode leaves to it (a line whose last token ends in whitespace, which pycocoevalcap's rstrip() trims).
// CharT: char16_t (UTF-16 code units, as Java reads them), or uint8_t for text that is all Latin-1 (each byte is
// then its code point; the rules compare code points, so both read the same text the same way).
template <typename CharT>
class Lexer {
 public:
  // Tokens starting before `end`; s[end:] is read only as trailing context (the Java lexer sees the captions
  // that follow in pycocoevalcap's file, and a few rules look past the end of the current line).
  // fast_paths = false tries every rule at every position (the reference the tests hold the fast paths to).
  Lexer(const CharT* s, int n, int end, bool fast_paths = true) : s_(s), n_(n), end_(end), fast_(fast_paths) {}

  // Appends the caption's tokens, lower-cased (java.lang.String.toLowerCase) and separated by ' ', to `line`:
  // the Java output line. No token holds an ASCII space (the rules turn spaces inside tokens into U+00A0).
  void run_raw(Str& line) {
    line_ = &line;
    out_ = nullptr;
    run<false>();
  }

  // Appends the caption as pycocoevalcap returns it to `out` (UTF-8). Returns false, leaving `out` with
  // unspecified content past its old size, when the last token ends in a character str.rstrip() removes: the
  // caller then goes through run_raw() and join_filtered().
  bool run_filtered(OutBuf& out) {
    out_ = &out;
    line_ = nullptr;
    first_ = true;
    last_ws_ = false;
    non_ascii_ = false;
    run<true>();
    return !last_ws_;
  }
  // After run_filtered(): false when the output is certainly ASCII.
  bool maybe_non_ascii() const { return non_ascii_; }

 private:
  const CharT* s_;
  int n_, end_;
  bool fast_;
  Str* line_ = nullptr;      // run_raw's output
  OutBuf* out_ = nullptr;    // run_filtered's output
  bool first_ = true;        // no token kept yet (run_filtered)
  bool last_ws_ = false;     // the last token ends in a str.isspace() character (run_filtered)
  bool non_ascii_ = false;   // a token (kept or not) holds a non-ASCII character (run_filtered)
  Str scratch_;              // one lower-cased token (run_filtered)

  // kFiltered: run_filtered() (out_), else run_raw() (line_).
  // Positions between two checks for Ctrl-C (check_interrupt() throws when the call must stop). Short captions
  // never check: the caller polls between blocks of captions; one long caption checks every few microseconds.
  static constexpr int kPollEvery = 1 << 13;

  template <bool kFiltered>
  void run() {
    int i = 0, next_poll = kPollEvery;
    if (!fast_) {
      while (i < end_) {
        if (i >= next_poll) {
          check_interrupt();
          next_poll = i + kPollEvery;
        }
        i = step(i);
      }
      return;
    }
    while (i < end_) {
      if (i >= next_poll) {
        check_interrupt();
        next_poll = i + kPollEvery;
      }
      const char16_t c = s_[i];
      if (c == u' ' && (i + 1 >= n_ || s_[i + 1] < 0x80)) {
        ++i;  // (before a non-ASCII character step() decides: the run " \u2002" is one match, Java reads it so)
      } else if (ascii_alpha(c)) {
        const int j = fast_word<kFiltered>(i);
        i = j > 0 ? j : step(i);
      } else if ((c == u'.' || c == u',') && fast_punct<kFiltered>(i)) {
        ++i;
      } else {
        i = step(i);
      }
    }
  }

  void emit(const char16_t* p, size_t len) {
    if (line_) {
      if (!line_->empty()) *line_ += u' ';
      java_lower_append(p, len, *line_);
      return;
    }
    scratch_.clear();
    java_lower_append(p, len, scratch_);
    const char16_t* t = scratch_.data();
    const size_t n = scratch_.size();
    for (size_t k = 0; k < n; ++k) non_ascii_ |= t[k] >= 0x80;
    // What the rstrip() of the whole line would see; run_raw() deals with it (an empty token too: it leaves a
    // trailing ' ' on the line).
    last_ws_ = n == 0 || py_space(t[n - 1]);
    if (is_filtered(t, n)) return;
    char* dst = out_->room(3 * n + 1);
    if (!first_) *dst++ = ' ';
    out_->size += !first_ + put_utf8(dst, t, n);
    first_ = false;
  }
  void emit(const Str& t) { emit(t.data(), t.size()); }

  // A token of ASCII letters, lower-cased (never in PUNCTUATIONS).
  void emit_ascii_word(int i, int len) {
    if (line_) {
      if (!line_->empty()) *line_ += u' ';
      const size_t at0 = line_->size();
      line_->append(s_ + i, s_ + i + len);
      for (size_t k = at0; k < line_->size(); ++k) (*line_)[k] |= 0x20;
      return;
    }
    last_ws_ = false;
    char* dst = out_->room(static_cast<size_t>(len) + 1);
    if (!first_) *dst++ = ' ';
    for (int k = 0; k < len; ++k) dst[k] = static_cast<char>(s_[i + k] | 0x20);
    out_->size += !first_ + static_cast<size_t>(len);
    first_ = false;
  }

  // The commonest tokens, decided without trying every rule (why no other rule can match is noted at each case).
  // A run of ASCII letters followed by ASCII whitespace (' ', \t, \n, \r, \f: no rule reads through it) or the
  // end of the text: WORD/THING match exactly the run (WORD first), and only the assimilation rules (cannot, gonna,
  // ...) tie with it, on their exact word.
  // The same run followed by ',' or '.' and then ASCII whitespace or the end: WORD still matches the run alone;
  // the rules that read on through such a character (EMAIL, LIKELYURL, HTHING, THING3) need an '@', a
  // top-level domain, a '-' or a '/' before the whitespace, and ACRO needs a one-letter run before a '.', which
  // is left to step(); the abbreviation rules would take the '.' along, so runs in their lists are left too.
  // Returns the end of the token, or -1 when step() must decide.
  template <bool kFiltered>
  VLK_PTB_INLINE int fast_word(int i) {
    if (!kFiltered) {
      const int j = letter_run<false>(i, nullptr);
      if (!word_shortcut(i, j, pack_letters(s_ + i, j - i))) return -1;
      emit_ascii_word(i, j - i);
      return j;
    }
    // The run is copied, lower-cased, to the output while it is scanned, after a separating ' ' unless it is the
    // first token; the copy only counts (out_->size moves) when the shortcut applies.
    char* const base = out_->room(static_cast<size_t>(n_ - i) + 9);
    base[0] = ' ';
    char* const dst = base + !first_;
    const int j = letter_run<true>(i, dst);
    const int len = j - i;
    if (!word_shortcut(i, j, pack_bytes(dst, len))) return -1;
    out_->size += static_cast<size_t>(dst - base) + static_cast<size_t>(len);
    first_ = false;
    last_ws_ = false;
    return j;
  }

  // Whether the run of ASCII letters s_[i, j) (pack_letters() key `key`) is a WORD token by itself.
  VLK_PTB_INLINE bool word_shortcut(int i, int j, uint64_t key) const {
    const int len = j - i;
    if (j < n_) {
      const char16_t d = s_[j];
      if (d == u',' || (d == u'.' && len >= 2)) {
        if (j + 1 < n_ && !ascii_blank(s_[j + 1])) return false;
        if (d == u'.' && any_abbreviation().has(key)) return false;
      } else if (!ascii_blank(d)) {
        // Not every space: EMAIL and LIKELYURL read on through U+00A0, U+2000..U+200A, U+3000, U+000B, U+2028
        // ("foo\u2002bar@x.com" is one token for the Java tokenizer too); step() decides those.
        return false;
      }
    }
    // The assimilations, compared without a branch per word (the packed keys of other runs never equal them).
    constexpr uint64_t kCannot = pack_letters("cannot"), kGonna = pack_letters("gonna"),
                       kGotta = pack_letters("gotta"), kLemme = pack_letters("lemme"), kGimme = pack_letters("gimme"),
                       kWanna = pack_letters("wanna");
    return !((key == kCannot) | (key == kGonna) | (key == kGotta) | (key == kLemme) | (key == kGimme) |
             (key == kWanna));
  }
  static bool ascii_blank(char16_t c) { return c == u' ' || c == u'\t' || c == u'\n' || c == u'\r' || c == u'\f'; }

  // '.' or ',' not followed by a digit (NUMBER: ".5", ",5"), and '.' not starting an LDOTS ("...", ". . ."): the
  // one-character token (PUNCT, INSENTP), which PUNCTUATIONS drops. No other rule starts with either character.
  template <bool kFiltered>
  bool fast_punct(int i) {
    const char16_t d = at(i + 1);
    if (is_digit_ext(d)) return false;
    if (s_[i] == u'.' && (d == u'.' || ((d == u' ' || d == 0x00A0) && at(i + 2) == u'.'))) return false;
    if (kFiltered) {
      last_ws_ = false;
    } else {
      const char16_t c = s_[i];
      emit(&c, 1);
    }
    return true;
  }

  // pack_letters() of a run already lower-cased at p, which has 8 readable bytes.
  static uint64_t pack_bytes(const char* p, int len) {
    if (len > 8) return 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap64(v) >> (64 - 8 * len);
#else
    uint64_t key = 0;
    for (int k = 0; k < len; ++k) key = (key << 8) | static_cast<unsigned char>(p[k]);
    return key;
#endif
  }

  // End of the run of ASCII letters that starts at i. kCopy: the run is also written, lower-cased, at dst, which
  // has room for n_ - i + 8 bytes (up to 8 bytes past the run may be overwritten).
  template <bool kCopy>
  VLK_PTB_INLINE int letter_run(int i, char* dst) const {
    int j = i;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if constexpr (sizeof(CharT) == 2) {
      // Four UTF-16 units at a time in one 64-bit word (lane k = unit j + k): a lane stops the run unless it is
      // below 0x80 and, with bit 5 set (lower case), between 'a' and 'z'. No lane's arithmetic carries into the next.
      while (j + 4 <= n_) {
        uint64_t x;
        std::memcpy(&x, s_ + j, sizeof x);
        const uint64_t non_ascii =
            (((x >> 7) & 0x01FF01FF01FF01FFull) + 0x7FFF7FFF7FFF7FFFull) & 0x8000800080008000ull;
        const uint64_t lower = (x | 0x0020002000200020ull) & 0x007F007F007F007Full;
        const uint64_t from_a = lower + 0x001F001F001F001Full;  // bit 7: lower >= 'a'
        const uint64_t past_z = lower + 0x0005000500050005ull;  // bit 7: lower > 'z'
        const uint64_t stop = ((~from_a | past_z) & 0x0080008000800080ull) | (non_ascii >> 8);
        if (kCopy) {
          uint64_t bytes = (lower | (lower >> 8)) & 0x0000FFFF0000FFFFull;  // the four low bytes, packed
          bytes |= bytes >> 16;
          const uint32_t four = static_cast<uint32_t>(bytes);
          std::memcpy(dst + (j - i), &four, sizeof four);
        }
        if (stop) return j + (__builtin_ctzll(stop) >> 4);
        j += 4;
      }
    } else {
      // Eight Latin-1 bytes at a time, the same test per byte lane.
      while (j + 8 <= n_) {
        uint64_t x;
        std::memcpy(&x, s_ + j, sizeof x);
        const uint64_t lower = (x | 0x2020202020202020ull) & 0x7F7F7F7F7F7F7F7Full;
        const uint64_t from_a = lower + 0x1F1F1F1F1F1F1F1Full;  // bit 7: lower >= 'a'
        const uint64_t past_z = lower + 0x0505050505050505ull;  // bit 7: lower > 'z'
        const uint64_t stop = ((~from_a | past_z) | x) & 0x8080808080808080ull;
        if (kCopy) std::memcpy(dst + (j - i), &lower, sizeof lower);
        if (stop) return j + (__builtin_ctzll(stop) >> 3);
        j += 8;
      }
    }
#endif
    for (; j < n_ && ascii_alpha(s_[j]); ++j)
      if (kCopy) dst[j - i] = static_cast<char>(s_[j] | 0x20);
    return j;
  }

  char16_t at(int i) const { return i < n_ ? s_[i] : char16_t(0xFFFF); }
  bool has(int i) const { return i < n_; }

  // Case-insensitive ASCII literal at i (JFlex %caseless applies to literals, not to character classes).
  // pack_letters() key of s_[i, j) read as a %caseless literal (caseless_ascii letters), or 0.
  uint64_t pack_caseless(int i, int j) const {
    if (j <= i || j - i > 8) return 0;
    uint64_t key = 0;
    for (int k = i; k < j; ++k) key = (key << 8) | caseless_ascii(s_[k]);
    return key;
  }
  int lit(int i, const char* w) const {
    int k = 0;
    for (; w[k]; ++k) {
      if (i + k >= n_) return -1;
      char16_t c = s_[i + k];
      char16_t x = static_cast<char16_t>(static_cast<unsigned char>(w[k]));
      if (ascii_alpha(x) ? caseless_ascii(c) != (x | 0x20) : c != x) return -1;
    }
    return k;
  }
  // Exact (case-sensitive) literal.
  int lit_cs(int i, const char* w) const {
    int k = 0;
    for (; w[k]; ++k) {
      if (i + k >= n_ || s_[i + k] != static_cast<char16_t>(w[k])) return -1;
    }
    return k;
  }

  int apos(int i) const;
  int apos_etc(int i) const;

  int filename_unit(int j) const;
  int filename(int i) const;
  // The chain of '.'-separated letter/digit segments read from `from` (ending at `end`) and its last extension.
  struct FileChainMemo {
    int from = 1, end = 0, last_seg = -1, last_end = -1;
  };
  mutable FileChainMemo file_memo_;

  int asian_smiley(int i) const;

  int letter(int i) const;

  int word(int i) const;

  int redaux(int i) const;
  int sredaux(int i) const;

  void sword_sredaux(int i, int& total, int& tok) const;

  int apoword(int i) const;

  // End of the run of characters satisfying `pred` from k. The lexer only moves forward, so a query inside the run
  // found last answers from the memo: each memo scans a character once per caption, which keeps rules that read to
  // the end of a run (URL bodies, e-mail local parts) linear on long runs (160 KiB of '%' took 12.8 s before).
  struct RunMemo {
    int from = 1, end = 0;
  };
  // A query before the memoised run reads only up to it (the run then starts earlier, same end).
  template <class Pred>
  int run_end(RunMemo& m, int k, Pred pred) const {
    if (k >= m.from && k <= m.end) return m.end;
    int e = k;
    while (e < n_ && pred(s_[e])) {
      if (e == m.from && m.from <= m.end) {  // (the initial memo holds no run)
        e = m.end;
        break;
      }
      ++e;
    }
    m.from = k;
    m.end = e;
    return e;
  }
  mutable RunMemo hthing_memo_, acro_memo_, decl_memo_, qstr_memo_, thing3_memo_;
  int hthing_run_end_ = -1;  // the first run's end of hthing_ends_
  Ends hthing_ends_;

  // Character classes used by the URL / e-mail rules.
  static bool url_body(char16_t c) {
    static const AsciiSet ex(" \t\n\f\r\"<>|(){}");
    return !ex.has(c);
  }
  static bool url_last(char16_t c) {
    static const AsciiSet ex(" \t\n\f\r\"<>|.!?(){},-");
    return !ex.has(c);
  }

  // Longest prefix of a run of url_body chars, starting at j, of length >= 2 whose last char is url_last.
  // braces: LIKELYURL's path also takes '{' and '}' inside ("a.com/x}y" is one token; STRICT_URL's does not).
  // The run's last url_last position is memoised with the run: "a/,,,,..." would be read back once per start.
  struct TailMemo {
    int from = 1, end = 0, last = -1;
  };
  int url_tail(int j, bool braces = false) const;
  mutable TailMemo url_tail_, path_tail_;

  int fullurl(int i) const;

  // A chain of segments separated by single '.'s as LIKELYURL reads it, from `from` to `end`: for each segment
  // start after a '.', the end the rule's alternative gives there (-1 for none) and whether a '/' follows it (a URL
  // path may follow). Starts inside the chain share it: every segment after the start counts, so a query is a
  // binary search (a chain read per start made "www.www.www..." and "%.%.%..." quadratic).
  struct UrlChain {
    int from = 1, end = 0;
    std::vector<int> seg, stop;       // segment starts (after a '.') and the alternative's end there
    std::vector<int> suffix_best;     // max of stop[t..]
    std::vector<int> next_slash;      // first t' >= t whose stop is followed by '/', or -1
    void finish(const Lexer& lx) {
      const size_t n = seg.size();
      if (n == 0) return;  // (no allocation for the commonest chain, a single run)
      suffix_best.assign(n + 1, -1);
      next_slash.assign(n + 1, -1);
      for (size_t t = n; t-- > 0;) {
        suffix_best[t] = std::max(suffix_best[t + 1], stop[t]);
        next_slash[t] = (stop[t] >= 0 && lx.at(stop[t]) == '/') ? static_cast<int>(t) : next_slash[t + 1];
      }
    }
    // Best end over the segments starting after q (LIKELYURL: an end, or the path after an end followed by '/').
    int best_after(const Lexer& lx, int q) const {
      if (seg.empty()) return -1;
      const size_t t = static_cast<size_t>(std::upper_bound(seg.begin(), seg.end(), q) - seg.begin());
      int best = suffix_best[t];
      // Every '/'-path of one chain lies in one url_body run (the path class holds all the chain's characters), so
      // the first one reaches furthest.
      if (next_slash[t] >= 0) best = std::max(best, lx.url_tail(stop[static_cast<size_t>(next_slash[t])] + 1, true));
      return best;
    }
  };
  mutable UrlChain www_chain_, tld_chain_;

  int likelyurl(int i) const;
  template <class Body, class StopAt>
  void read_chain(UrlChain& c, int from, Body body, StopAt stop_at) const;

  // EMAIL = (&lt;|<)?[a-zA-Z0-9][^ \t\n\f\r\"<>|()\u00A0{}]*@([^ \t\n\f\r\"<>|(){}.\u00A0]+\.)*
  //         ([^ \t\n\f\r\"<>|(){}.\u00A0]+)(&gt;|>)?
  // The domain class is the local one without '.', so a domain lies inside the local run and ends at its first
  // ".." (or "." before the run end) after the '@', or at the run end: the later the '@', the longer the match.
  // The run's last '@' followed by a domain and that domain's end are memoised with the run ("a@a@a..." and long
  // local parts were quadratic).
  struct EmailMemo {
    int from = 1, end = 0, at = -1, last = -1;
  };
  int email(int i) const;
  mutable EmailMemo email_memo_;

  int twitter(int i) const;

  static bool is_digit_ext(char16_t c) { return is_digit(c) || (c >= 0x07C0 && c <= 0x07C9); }
  int digits_ext(int j) const;

  int date(int i) const;

  int number(int i) const;

  int subsupnum(int i) const;

  int frac_core(int j) const;
  int frac(int i) const;

  Ends thing3_part(const Ends& starts, bool first) const;
  int thing3(int i) const;

  Ends acro(int i) const;

  int abbrev1(int i) const;
  int sentend(int j) const;
  static const WordSet& abbrev1_words();
  static const WordSet& abbrev1_cap_first_words();

  int abbrev2(int i, bool acro_possible) const;
  static const WordSet& abbrev2_words();

  void abbrev3(int i, int& total, int& tok) const;

  static const WordSet& abbrev3_words();
  static const WordSet& any_abbreviation();

  void acronym_sentence_end(int i, int& total, int& tok) const;

  int phone(int i) const;

  Ends hthing(int i) const;

  int thing(int i) const;

  int thinga(int i) const;

  int sgml(int i) const;

  int tbspec(int i) const;

  int ldots(int i) const;

  int quotes(int i) const;

  static Str latex_quotes(const Str& in, bool probably_left);

  static Str remove_soft_hyphens(const Str& in);
  static Str normalize_amp(const Str& in);
  static Str spaces_to_nbsp(Str in);

  enum Rule {
    kProgLang, kAssim3, kAssim2, kSgml, kSpmdash, kSpamp, kSppunc, kWordRedaux, kSwordSredaux, kWord, kApoword,
    kApoword2, kFullUrl, kLikelyUrl, kEmail, kTwitter, kRedauxCtx, kSredaux, kDate, kNumber, kSubSupNum, kFrac,
    kFrac2, kTbspec, kThing3, kDolsign, kDolsign2, kAcronymEnd, kAbbrev1Back, kAbbrev1, kAbbrev3, kAbbrev2, kTbspec2, kWordDot, kPhone, kDblquotLeft,
    kDblquot, kDel, kLrb, kRrb, kLsb, kRsb, kLcb, kRcb, kLess, kGreater, kSmiley, kAsianSmiley, kFilename, kHyphens, kLdots, kFnmarks, kAsts,
    kInsentp, kBang, kPunct, kEquals, kSlash, kHthingDot, kHthing, kThingDot, kThing, kThingaDot, kThinga,
    kQuoteLeft, kRedaux, kQuotes, kDuckFeet, kMisc, kIgnore, kAny
  };

  // Tries every rule at i, applies the winner's action and returns the next position (ptb_step.inc).
  int step(int i);
};

}  // namespace vlk::ptb
