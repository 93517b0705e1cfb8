// PTB lexer (ptb_lexer.h): Word-like rules: WORD and its letters, apostrophe words and contractions, THING/HTHING/THINGA/THING3, ACRO and the abbreviation lists, TBSPEC.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "captioning/ptb_lexer.h"

namespace vlk::ptb {

// {APOS} = ['\u0092\u2019]|&apos;
template <typename CharT>
int Lexer<CharT>::apos(int i) const {
  if (!has(i)) return -1;
  char16_t c = s_[i];
  if (c == '\'' || c == 0x0092 || c == 0x2019) return 1;
  if (c == '&') return lit(i, "&apos;");
  return -1;
}

// {APOSETCETERA} = {APOS}|[`\u0091\u2018\u201B] (the backtick too: Java gives "do n`t", "ma`am", "o`clock")
template <typename CharT>
int Lexer<CharT>::apos_etc(int i) const {
  int a = apos(i);
  if (a > 0) return a;
  char16_t c = at(i);
  return (c == '`' || c == 0x0091 || c == 0x2018 || c == 0x201B) ? 1 : -1;
}

// {LETTER} as used by WORD: [:letter:], an SGML letter entity (&eacute; ...), or an extra range.
template <typename CharT>
int Lexer<CharT>::letter(int i) const {
  if (!has(i)) return -1;
  char16_t c = s_[i];
  if (is_letter(c) || is_extra_word_char(c)) return 1;
  if (c == '&' && i + 1 < n_ && in_set(s_[i + 1], u"aeiouAEIOU")) {
    for (const char* suf : {"acute;", "grave;", "uml;"}) {
      int k = lit(i + 2, suf);
      if (k > 0) return 2 + k;
    }
  }
  return -1;
}

// WORD = LETTER (LETTER|DIGIT)* ([.!?] LETTER (LETTER|DIGIT)*)*  -> longest end, -1 if none.
template <typename CharT>
int Lexer<CharT>::word(int i) const {
  int k = letter(i);
  if (k < 0) return -1;
  int j = i + k;
  for (;;) {
    int l = letter(j);
    if (l > 0) {
      j += l;
    } else if (has(j) && is_digit(s_[j])) {
      ++j;
    } else if (has(j) && (s_[j] == '.' || s_[j] == '!' || s_[j] == '?') && letter(j + 1) > 0) {
      j += 1 + letter(j + 1);
    } else {
      break;
    }
  }
  return j;
}

// REDAUX = {APOS}([msdMSD]|re|ve|ll)
template <typename CharT>
int Lexer<CharT>::redaux(int i) const {
  int a = apos(i);
  if (a < 0) return -1;
  int j = i + a;
  if (has(j) && in_set(s_[j], u"msdMSD")) return a + 1;
  for (const char* w : {"re", "ve", "ll"})
    if (lit(j, w) > 0) return a + 2;
  return -1;
}

// SREDAUX = n{APOSETCETERA}t
template <typename CharT>
int Lexer<CharT>::sredaux(int i) const {
  if (lit(i, "n") < 0) return -1;
  int a = apos_etc(i + 1);
  if (a < 0 || lit(i + 1 + a, "t") < 0) return -1;
  return a + 2;
}

// {SWORD}/{SREDAUX}: SWORD = [A-Za-z\u00AD]*[A-MO-Za-mo-z]\u00AD*  -> (total, token length)
template <typename CharT>
void Lexer<CharT>::sword_sredaux(int i, int& total, int& tok) const {
  total = tok = -1;
  int j = i;
  while (has(j) && (ascii_alpha(s_[j]) || s_[j] == 0x00AD)) ++j;
  // The token ends right before an n of n't; its last non-soft-hyphen letter must not be n.
  for (int p = i + 1; p <= j; ++p) {
    int r = sredaux(p);
    if (r < 0) continue;
    int q = p - 1;
    while (q >= i && s_[q] == 0x00AD) --q;
    if (q < i || (s_[q] | 0x20) == 'n') continue;
    if (p + r - i > total) {
      total = p + r - i;
      tok = p - i;
    }
  }
}

// APOWORD alternatives; longest length or -1.
template <typename CharT>
int Lexer<CharT>::apoword(int i) const {
  int best = -1;
  auto upd = [&](int len) {
    if (len > best) best = len;
  };
  int a = apos(i);
  if (a > 0) {
    int j = i + a;
    if (lit(j, "n") > 0) {
      int b = apos(j + 1);
      upd(b > 0 ? a + 1 + b : a + 1);
    }
    if (lit(j, "em") > 0) upd(a + 2);
    if (has(j) && s_[j] >= '2' && s_[j] <= '9' && at(j + 1) == '0' && lit(j + 2, "s") > 0) upd(a + 3);
    if (lit(j, "till") > 0) upd(a + 4);
    if (lit(j, "til") > 0) upd(a + 3);
    if (lit(j, "cause") > 0) upd(a + 5);
  }
  if (has(i) && in_set(s_[i], u"lLdDjJ")) {
    int b = apos(i + 1);
    if (b > 0) upd(1 + b);
  }
  for (const char* w : {"dunkin", "somethin", "ol"}) {
    int k = lit(i, w);
    if (k > 0) {
      int b = apos(i + k);
      if (b > 0) upd(k + b);
    }
  }
  // [A-HJ-XZn]{APOSETCETERA}[:letter:]{2}[:letter:]*
  if (has(i) && ((s_[i] >= 'A' && s_[i] <= 'H') || (s_[i] >= 'J' && s_[i] <= 'X') || s_[i] == 'Z' || s_[i] == 'n')) {
    int b = apos_etc(i + 1);
    if (b > 0) {
      int j = i + 1 + b, k = j;
      while (has(k) && is_letter(s_[k])) ++k;
      if (k - j >= 2) upd(k - i);
    }
  }
  // [:letter:][:letter:]*[aeiouyAEIOUY]{APOSETCETERA}[aeiouA-Z][:letter:]*
  {
    int k = i;
    while (has(k) && is_letter(s_[k])) ++k;
    if (k - i >= 2 && in_set(s_[k - 1], u"aeiouyAEIOUY")) {
      int b = apos_etc(k);
      if (b > 0 && has(k + b) && (in_set(s_[k + b], u"aeiou") || ascii_upper(s_[k + b]))) {
        int m = k + b + 1;
        while (has(m) && is_letter(s_[m])) ++m;
        upd(m - i);
      }
    }
  }
  for (const char* w : {"cont'd.", "cont'd", "nor'easter", "c'mon", "e'er", "s'mores", "ev'ry", "li'l", "nat'l"}) {
    int k = lit(i, w);
    if (k > 0) upd(k);
  }
  // O{APOSETCETERA}o (caseless: Java keeps "o'o", "O`o", "o&apos;o" whole)
  if (lit(i, "o") > 0) {
    const int b = apos_etc(i + 1);
    if (b > 0 && lit(i + 1 + b, "o") > 0) upd(b + 2);
  }
  return best;
}

// THING3 = [A-Za-z0-9]+(-[A-Za-z]+){0,2}(\\?\/[A-Za-z0-9]+(-[A-Za-z]+){0,2}){1,2}  -> the ends that matter
template <typename CharT>
Ends Lexer<CharT>::thing3_part(const Ends& starts, bool first) const {
  Ends out;
  for (int j0 : starts) {
    int j = j0;
    if (!first) {
      if (at(j) == '\\' && at(j + 1) == '/') {
        j += 2;
      } else if (at(j) == '/') {
        j += 1;
      } else {
        continue;
      }
    }
    int k = j;
    while (has(k) && ascii_alnum(s_[k])) ++k;
    if (k == j) continue;
    // Of the ends of a run only its last can be followed by '/' or '-' or be the longest: the shorter ones
    // (followed by a letter or digit) are left out.
    add_end(out, k);
    int h = k;
    for (int rep = 0; rep < 2; ++rep) {
      if (at(h) != '-') break;
      int m = h + 1;
      while (has(m) && ascii_alpha(s_[m])) ++m;
      if (m == h + 1) break;
      add_end(out, m);
      h = m;
    }
  }
  return out;
}

template <typename CharT>
int Lexer<CharT>::thing3(int i) const {
  Ends e0 = thing3_part(Ends{i}, true);
  Ends e1 = thing3_part(e0, false);
  Ends e2 = thing3_part(e1, false);
  int best = std::max(max_end(e1), max_end(e2));
  return best < 0 ? -1 : best - i;
}

// ACRO = [A-Za-z](\.[A-Za-z])*|(Canada|Sino|Korean|EU|Japan|non)-U\.S|U\.S\.-(U\.K|U\.S\.S\.R)  -> its ends
// that can matter: of the chain "a.b.c..." only the last two (every user wants the longest end followed by '.',
// or one followed by whitespace or '-', which an inner end -- followed by ".letter" -- never is), and the special
// forms. The chain end is memoised: starts inside one chain share it ("a.a.a..." was quadratic).
template <typename CharT>
Ends Lexer<CharT>::acro(int i) const {
  Ends out;
  if (has(i) && ascii_alpha(s_[i])) {
    RunMemo& m = acro_memo_;
    if (!(i >= m.from && i < m.end && (i - m.from) % 2 == 0)) {
      int k = i + 1;
      while (at(k) == '.' && has(k + 1) && ascii_alpha(s_[k + 1])) k += 2;
      m.from = i;
      m.end = k;
    }
    if (m.end - i >= 3) out.push_back(m.end - 2);
    out.push_back(m.end);
  }
  for (const char* w : {"canada-u.s", "sino-u.s", "korean-u.s", "eu-u.s", "japan-u.s", "non-u.s", "u.s.-u.k",
                        "u.s.-u.s.s.r"}) {
    int k = lit(i, w);
    if (k > 0) add_end(out, i + k);
  }
  return out;
}

// ABBREV1 = ({ABMONTH}|{ABDAYS}|{ABSTATE}|{ABCOMP}|{ABNUM}|{ABPTIT}|etc|al|seq|Bldg)\.
template <typename CharT>
int Lexer<CharT>::abbrev1(int i) const {
  const WordSet& caseless = abbrev1_words();
  const WordSet& cap_first = abbrev1_cap_first_words();
  int j = i;
  while (j < n_ && caseless_ascii(s_[j])) ++j;
  if (j == i || at(j) != '.') return -1;
  const uint64_t w = pack_caseless(i, j);
  int best = -1;
  if (caseless.has(w) || (ascii_upper(s_[i]) && cap_first.has(w))) best = j + 1 - i;
  for (const char* d : {"ed.d.", "ph.d."})
    if (lit(i, d) > 0) best = std::max(best, 5);
  return best;
}

// SENTEND = {SPACENL}({SPACENL}|([A-Z]|{SGML})) at j: its length, or 0.
template <typename CharT>
int Lexer<CharT>::sentend(int j) const {
  auto spacenl = [&](int k) { return has(k) && (is_space(s_[k]) || is_newline_char(s_[k])); };
  if (!spacenl(j)) return 0;
  if (spacenl(j + 1) || ascii_upper(at(j + 1))) return 2;
  const int g = at(j + 1) == '<' ? sgml(j + 1) : 0;
  return g > 0 ? 1 + g : 0;
}

template <typename CharT>
const WordSet& Lexer<CharT>::abbrev1_words() {
  static const WordSet words = {
      "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mon", "tue",
      "tues", "wed", "thu", "thurs", "fri", "ala", "ariz", "calif", "colo", "conn", "ct", "dak", "fla", "ga",
      "ind", "kan", "kans", "ky", "md", "mich", "minn", "mo", "mont", "neb", "nev", "okla", "penn", "tenn",
      "va", "vt", "wis", "wisc", "wyo", "inc", "co", "cos", "corp", "pty", "ptys", "pte", "ptes", "ppty",
      "pptys", "ppte", "pptes", "ltd", "plc", "rt", "bancorp", "bhd", "assn", "univ", "intl", "sys", "tel",
      "est", "ext", "sq", "jr", "bros", "ed.d", "ph.d", "esq", "etc", "al", "seq", "bldg"};
  return words;
}

// [A]z, [A]rk, [D]el, [I]ll, [L]a, [M]ass, [M]iss, [O]re, [P]a, [T]ex, [W]ash: the bracketed first letter is a
// character class, which %caseless leaves case-sensitive.
template <typename CharT>
const WordSet& Lexer<CharT>::abbrev1_cap_first_words() {
  static const WordSet words = {"az", "ark", "del", "ill", "la", "mass", "miss", "ore", "pa", "tex", "wash"};
  return words;
}

// ABBREV2 = {ABBREV4}\.; ABBREV4 = {ABTITLE}|vs|[v]|Alex|Wm|Jos|Cie|a\.k\.a|cf|TREAS|Ph|{ACRO}|{ABCOMP2}
template <typename CharT>
int Lexer<CharT>::abbrev2(int i, bool acro_possible) const {
  int j = i;
  while (j < n_ && caseless_ascii(s_[j])) ++j;
  int best = -1;
  if (j > i && at(j) == '.') {
    const uint64_t w = pack_caseless(i, j);
    // [M]iss and M[ft]g: a character class keeps its case under %caseless ("MFG." is no abbreviation, "mFg." no).
    const bool mfg = w == pack_letters("mfg") || w == pack_letters("mtg");
    if ((abbrev2_words().has(w) && !(mfg && s_[i + 1] != 'f' && s_[i + 1] != 't')) ||
        (s_[i] == 'M' && w == pack_letters("miss")))
      best = j + 1 - i;
  }
  if (lit(i, "a.k.a.") > 0) best = std::max(best, 6);
  if (acro_possible)
    for (int e : acro(i))
      if (at(e) == '.') best = std::max(best, e + 1 - i);
  return best;
}

template <typename CharT>
const WordSet& Lexer<CharT>::abbrev2_words() {
  static const WordSet words = {
      "mr", "mrs", "ms", "dr", "drs", "prof", "profs", "sen", "sens", "rep", "reps", "atty", "attys", "lt",
      "col", "gen", "messrs", "gov", "govs", "adm", "rev", "maj", "sgt", "cpl", "pvt", "capt", "st", "ste",
      "ave", "pres", "lieut", "rt", "hon", "brig", "cmdr", "comdr", "pfc", "spc", "supt", "supts", "det", "mt",
      "ft", "adj", "adv", "asst", "assoc", "ens", "insp", "mlle", "mme", "msgr", "sfc", "sr", "vs", "alex",
      "wm", "jos", "cie", "cf", "treas", "ph", "invt", "elec", "natl", "mfg", "mtg", "dept", "blvd",
      "rd"};
  return words;
}

// {ABBREV3}/{SPACENL}?[:digit:]; ABBREV3 = (ca|figs?|prop|nos?|art|bldg|pp|op)\. in 3.4.1 (read off the jar: later
// CoreNLP versions added sect?s?, arts, paras?, approx, Pt, rs; 3.4.1 splits "rs. 2", "sec. 2", "Pt. 2").
template <typename CharT>
void Lexer<CharT>::abbrev3(int i, int& total, int& tok) const {
  total = tok = -1;
  int j = i;
  while (j < n_ && caseless_ascii(s_[j])) ++j;
  if (j == i || at(j) != '.') return;
  if (!abbrev3_words().has(pack_caseless(i, j))) return;
  const int best = j + 1 - i;
  if (has(j + 1) && is_digit(s_[j + 1])) {
    total = best + 1;
  } else if (has(j + 2) && (is_space(s_[j + 1]) || is_newline_char(s_[j + 1])) && is_digit(s_[j + 2])) {
    total = best + 2;
  } else {
    return;
  }
  tok = best;
}

template <typename CharT>
const WordSet& Lexer<CharT>::abbrev3_words() {
  static const WordSet words = {"ca", "fig", "figs", "prop", "no", "nos", "art", "bldg", "pp", "op"};
  return words;
}

// Every word of the abbreviation lists, whatever the case of its first letter (a superset, for fast_word()).
template <typename CharT>
const WordSet& Lexer<CharT>::any_abbreviation() {
  static const WordSet words = [] {
    WordSet all = {"miss"};
    for (const WordSet* w : {&abbrev1_words(), &abbrev1_cap_first_words(), &abbrev2_words(), &abbrev3_words()})
      all.add(*w);
    return all;
  }();
  return words;
}

// {ACRONYM}/({SPACENLS})([A]bout|...|[Y]ou|{SGML}){SPACENL}: an acronym (ACRO\.) before a sentence-initial
// word.
// A one-letter acronym ("P.") gives up its period: the token is the letter alone.
template <typename CharT>
void Lexer<CharT>::acronym_sentence_end(int i, int& total, int& tok) const {
  total = tok = -1;
  static const char* const words[] = {
      "About", "According", "Additionally", "After", "An", "A", "As", "At", "But", "Earlier", "He", "Her",
      "Here", "However", "If", "In", "It", "Last", "Many", "More", "Mr.", "Ms.", "Now", "Once", "One", "Other",
      "Our", "She", "Since", "So", "Some", "Such", "That", "The", "Then", "There", "These", "They", "This", "We",
      "When", "While", "What", "Yet", "You"};
  for (int e : acro(i)) {
    if (at(e) != '.') continue;
    int j = e + 1, k = j;
    while (has(k) && (is_space(s_[k]) || is_newline_char(s_[k]))) ++k;
    if (k == j) continue;
    // An SGML tag also counts as a sentence start here (3.4.1 behaviour, verified against the jar).
    const int g = sgml(k);
    if (g > 0) {
      const int q = k + g;
      if (has(q) && (is_space(s_[q]) || is_newline_char(s_[q])) && q + 1 - i > total) {
        total = q + 1 - i;
        tok = (e + 1 - i == 2) ? 1 : e + 1 - i;
      }
    }
    for (const char* w : words) {
      if (at(k) != static_cast<char16_t>(w[0])) continue;
      int m = lit(k + 1, w + 1);
      if (m < 0) continue;
      int q = k + 1 + m;
      if (has(q) && (is_space(s_[q]) || is_newline_char(s_[q]))) {
        if (q + 1 - i > total) {
          total = q + 1 - i;
          tok = (e + 1 - i == 2) ? 1 : e + 1 - i;
        }
      }
    }
  }
}

// HTHING = [A-Za-z0-9][A-Za-z0-9.,\u00AD]*(-([A-Za-z0-9\u00AD]+|{ACRO2}\.))+  -> the ends that matter, ascending:
// of a [A-Za-z0-9\u00AD]+ segment only its full length (a shorter one is followed by a letter or digit, so it is
// neither the longest nor followed by '-' or '.'), of an ACRO2 only acro()'s ends. Each '-' that can continue the
// match is expanded once, in increasing order (the old frontier deduplicated by linear search: quadratic on
// "a-a-a...").
template <typename CharT>
Ends Lexer<CharT>::hthing(int i) const {
  Ends out;
  if (!has(i) || !ascii_alnum(s_[i])) return out;
  auto body = [](char16_t c) { return ascii_alnum(c) || c == '.' || c == ',' || c == 0xAD; };
  int k = i + 1;
  while (has(k) && body(s_[k])) ++k;
  std::vector<int> dashes{k};  // a min-heap of positions holding the '-' of a next segment
  int prev = -1;
  while (!dashes.empty()) {
    std::pop_heap(dashes.begin(), dashes.end(), std::greater<int>());
    const int h = dashes.back();
    dashes.pop_back();
    if (h == prev || at(h) != '-') continue;
    prev = h;
    auto reach = [&](int e) {
      out.push_back(e);
      if (at(e) == '-') {
        dashes.push_back(e);
        std::push_heap(dashes.begin(), dashes.end(), std::greater<int>());
      }
    };
    const int j = h + 1;
    int m = j;
    while (has(m) && (ascii_alnum(s_[m]) || s_[m] == 0xAD)) ++m;
    if (m > j) reach(m);
    // {ACRO2}\.: an acronym of at least two letters (a single letter and its period do not count here).
    for (int e : acro(j))
      if (e > j + 1 && at(e) == '.') reach(e + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// THING = ([dDoOlL]{APOSETCETERA}([:letter:]|[:digit:]))?([:letter:]|[:digit:])+
//         ({HYPHEN}([dDoOlL]{APOSETCETERA}([:letter:]|[:digit:]))?([:letter:]|[:digit:])+)*   -> longest end
template <typename CharT>
int Lexer<CharT>::thing(int i) const {
  auto ld = [](char16_t c) { return is_letter(c) || is_digit(c); };
  auto seg = [&](int j) -> int {
    // longest end of one segment starting at j, or -1
    int best = -1;
    if (has(j) && in_set(s_[j], u"dDoOlL")) {
      int a = apos_etc(j + 1);
      if (a > 0 && has(j + 1 + a) && ld(s_[j + 1 + a])) {
        int k = j + 2 + a;
        while (has(k) && ld(s_[k])) ++k;
        if (k > j + 2 + a) best = k;
      }
    }
    int k = j;
    while (has(k) && ld(s_[k])) ++k;
    if (k > j) best = std::max(best, k);
    return best;
  };
  auto hyphen = [](char16_t c) { return c == '-' || c == '_' || c == 0x058A || c == 0x2010 || c == 0x2011; };
  int e = seg(i);
  if (e < 0) return -1;
  for (;;) {
    if (!has(e) || !hyphen(s_[e])) break;
    int f = seg(e + 1);
    if (f < 0) break;
    e = f;
  }
  return e - i;
}

// THINGA = [A-Z]+(([+&]|{SPAMP})[A-Z]+)+
template <typename CharT>
int Lexer<CharT>::thinga(int i) const {
  int k = i;
  while (has(k) && ascii_upper(s_[k])) ++k;
  if (k == i) return -1;
  int best = -1;
  for (;;) {
    int j;
    if (at(k) == '+' || at(k) == '&') {
      j = k + 1;
      int a = lit(k, "&amp;");
      if (a > 0 && has(k + a) && ascii_upper(s_[k + a])) j = k + a;
    } else {
      break;
    }
    int m = j;
    while (has(m) && ascii_upper(s_[m])) ++m;
    if (m == j) break;
    best = m;
    k = m;
  }
  return best < 0 ? -1 : best - i;
}

// TBSPEC = -(RRB|LRB|RCB|LCB|RSB|LSB)-|C\.D\.s|pro-|anti-|S(&|&amp;)P-500|S(&|&amp;)Ls|Cap{APOS}n|c{APOS}est
template <typename CharT>
int Lexer<CharT>::tbspec(int i) const {
  int best = -1;
  for (const char* w : {"-rrb-", "-lrb-", "-rcb-", "-lcb-", "-rsb-", "-lsb-", "c.d.s", "pro-", "anti-", "s&p-500",
                        "s&amp;p-500", "s&ls", "s&amp;ls"}) {
    int k = lit(i, w);
    if (k > best) best = k;
  }
  int k = lit(i, "cap");
  if (k > 0) {
    int a = apos(i + 3);
    if (a > 0 && lit(i + 3 + a, "n") > 0) best = std::max(best, 4 + a);
  }
  if (lit(i, "c") > 0) {
    int a = apos(i + 1);
    if (a > 0 && lit(i + 1 + a, "est") > 0) best = std::max(best, 4 + a);
  }
  return best;
}

}  // namespace vlk::ptb
