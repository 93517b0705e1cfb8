// PTB lexer (ptb_lexer.h): Web and markup rules: FULLURL, LIKELYURL, EMAIL, TWITTER, SGML, FILENAME.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "captioning/ptb_lexer.h"

namespace vlk::ptb {

// {FILENAME}/({SPACENL}|[.?!,]): ({LETTER}|{DIGIT})+(\.({LETTER}|{DIGIT})+)*\.EXT with 3.4.1's extension list
// (caseless; the list was read off the jar by probing "1.<ext>" for every 1-4 letter and 1-3 alphanumeric
// extension). Java keeps "1.txt", "9b.x", "1.2.c" whole; "1.cd", "1.c;" are split. {LETTER} is WORD's (combining
// marks, U+00AD, entities such as &eacute; included: "lemme\u0915\u094d\u0937.9b.x", "1\u00ad2.c" are one token,
// kept as written), {DIGIT} holds the NKo digits.  -> token length or -1.
template <typename CharT>
int Lexer<CharT>::filename_unit(int j) const {
  if (!has(j)) return 0;
  if (is_digit_ext(s_[j])) return 1;
  const int l = letter(j);
  return l > 0 ? l : 0;
}

template <typename CharT>
int Lexer<CharT>::filename(int i) const {
  static const char* const kExt[] = {"bat", "bmp", "c", "cgi", "cpp", "dll", "doc", "docx", "exe", "gif", "gz", "h",
                                     "htm", "html", "jar", "java", "jpeg", "jpg", "mov", "mp3", "pdf", "php", "pl",
                                     "png", "ppt", "ps", "py", "sql", "tar", "txt", "wav", "x", "xml", "zip"};
  // The segments after i are those of the chain i lies in, so the chain is read once (memoised) and the last
  // segment that is an extension in context answers every start inside the chain ("1.a.1.a..." was quadratic).
  FileChainMemo& m = file_memo_;
  if (i >= m.from && i < m.end) {
    // Inside an entity the chain read it as one unit; from there the run stops at its ';': no file name.
    for (int p = std::max(m.from, i - 7); p < i; ++p)
      if (s_[p] == '&' && p + filename_unit(p) > i) return -1;
  } else {
    int j = i, u;
    while ((u = filename_unit(j)) > 0) j += u;
    m.from = i;
    m.last_seg = m.last_end = -1;
    while (j > i && at(j) == '.' && filename_unit(j + 1) > 0) {
      const int seg = j + 1;
      j = seg;
      while ((u = filename_unit(j)) > 0) j += u;
      const char16_t ctx = at(j);
      // (the trailing context needs a character: at the end of the text "1.txt" is split, as in Java)
      if (!has(j) || !(is_space(ctx) || is_newline_char(ctx) || in_set(ctx, u".?!,"))) continue;
      if (j - seg > 4) continue;
      for (const char* e : kExt)
        if (static_cast<int>(std::strlen(e)) == j - seg && lit(seg, e) > 0) {
          m.last_seg = seg;
          m.last_end = j;
          break;
        }
    }
    m.end = std::max(j, i + 1);
  }
  return m.last_seg > i ? m.last_end - i : -1;
}

template <typename CharT>
int Lexer<CharT>::url_tail(int j, bool braces) const {
  TailMemo& m = braces ? path_tail_ : url_tail_;
  if (!(j >= m.from && j <= m.end)) {
    int k = j;
    while (k < n_ && (url_body(s_[k]) || (braces && (s_[k] == '{' || s_[k] == '}')))) ++k;
    int e = k;
    while (e > j && !url_last(s_[e - 1])) --e;
    m.from = j;
    m.end = k;
    m.last = e > j ? e : -1;
  }
  return m.last >= j + 2 ? m.last : -1;
}

template <typename CharT>
int Lexer<CharT>::fullurl(int i) const {
  int k = lit(i, "https://");
  if (k < 0) k = lit(i, "http://");
  if (k < 0) return -1;
  int e = url_tail(i + k);
  return e < 0 ? -1 : e - i;
}

// LIKELYURL = www\.([^ \t\n\f\r\"<>|.!?(){},]+\.)+[a-zA-Z]{2,4} | ([^ \t\n\f\r\"`'<>|.!?(){},-_$]+\.)+(com|net|org|edu)
// (each optionally followed by '/' and a path); ",-_" is the range U+002C..U+005F.
template <typename CharT>
int Lexer<CharT>::likelyurl(int i) const {
  static const AsciiSet www_ex(" \t\n\f\r\"<>|.!?(){},"), tld_ex(" \t\n\f\r\"`'<>|.!?(){}$");
  auto www_body = [](char16_t c) { return !www_ex.has(c); };
  auto tld_body = [](char16_t c) { return !(tld_ex.has(c) || (c >= 0x2C && c <= 0x5F)); };
  int best = -1;
  if (lit(i, "www.") > 0) {
    const int q = i + 4;
    if (has(q) && www_body(s_[q])) {
      if (!(q >= www_chain_.from && q < www_chain_.end)) {
        read_chain(www_chain_, q, www_body, [&](int j) {
          int m = j;
          while (has(m) && ascii_alpha(s_[m]) && m - j < 4) ++m;
          return m >= j + 2 ? m : -1;
        });
      }
      best = www_chain_.best_after(*this, q);
    }
  }
  if (has(i) && tld_body(s_[i])) {
    if (!(i >= tld_chain_.from && i < tld_chain_.end)) {
      read_chain(tld_chain_, i, tld_body, [&](int j) {
        for (const char* tld : {"com", "net", "org", "edu"})
          if (lit(j, tld) > 0) return j + 3;
        return -1;
      });
    }
    best = std::max(best, tld_chain_.best_after(*this, i));
  }
  return best < 0 ? -1 : best - i;
}

// Reads the chain of `body` runs separated by single '.'s from `from` into c; stop_at(j) is the alternative's end
// at a segment start j.
template <typename CharT>
template <class Body, class StopAt>
void Lexer<CharT>::read_chain(UrlChain& c, int from, Body body, StopAt stop_at) const {
  c.seg.clear();
  c.stop.clear();
  int j = from;
  for (;;) {
    int k = j;
    while (k < n_ && body(s_[k])) ++k;
    if (k == j || at(k) != '.') {
      c.end = std::max(k, from + 1);
      break;
    }
    j = k + 1;
    c.seg.push_back(j);
    c.stop.push_back(stop_at(j));
  }
  c.from = from;
  c.finish(*this);
}

template <typename CharT>
int Lexer<CharT>::email(int i) const {
  int p = i;
  if (lit(i, "&lt;") > 0) {
    p = i + 4;
  } else if (at(i) == '<') {
    p = i + 1;
  }
  if (!has(p) || !ascii_alnum(s_[p])) return -1;
  static const AsciiSet local_ex(" \t\n\f\r\"<>|(){}");
  auto local = [](char16_t c) { return !local_ex.has(c) && c != 0x00A0; };
  EmailMemo& m = email_memo_;
  const int q = p + 1;
  if (!(q >= m.from && q <= m.end)) {
    int k = q;
    m.at = -1;
    for (; k < n_ && local(s_[k]); ++k)
      if (s_[k] == '@' && k + 1 < n_ && local(s_[k + 1]) && s_[k + 1] != '.') m.at = k;
    m.from = q;
    m.end = k;
    if (m.at >= 0) {
      int e = m.at + 1;  // the domain: segments separated by single '.'s, up to the run end
      while (e < k && !(s_[e] == '.' && (e + 1 == k || s_[e + 1] == '.'))) ++e;
      m.last = e;
    }
  }
  if (m.at < q) return -1;
  int last = m.last;
  if (lit(last, "&gt;") > 0) {
    last += 4;
  } else if (at(last) == '>') {
    last += 1;
  }
  return last - i;
}

// TWITTER = @[a-zA-Z_][a-zA-Z_0-9]* | #{LETTER}+
template <typename CharT>
int Lexer<CharT>::twitter(int i) const {
  if (at(i) == '@' && has(i + 1) && (ascii_alpha(s_[i + 1]) || s_[i + 1] == '_')) {
    int k = i + 2;
    while (has(k) && (ascii_alnum(s_[k]) || s_[k] == '_')) ++k;
    return k - i;
  }
  if (at(i) == '#') {
    int e = i + 1, l;
    while ((l = letter(e)) > 0) e += l;
    if (e > i + 1) return e - i;
  }
  return -1;
}

// SGML = <([!?][A-Za-z-][^>\r\n]*|\/?{NAME}([ ]+({NAME}([ ]*=[ ]*QSTR)?
//        |QSTR|[ ]*\/))*[ ]*)>   with QSTR = ['"][^\r\n'"]*['"], NAME = [A-Za-z][A-Za-z0-9_:.-]* ("<a_b c_d>" whole)
template <typename CharT>
int Lexer<CharT>::sgml(int i) const {
  if (at(i) != '<') return -1;
  int best = -1;
  int j = i + 1;
  if ((at(j) == '!' || at(j) == '?') && has(j + 1) && (ascii_alpha(s_[j + 1]) || s_[j + 1] == '-')) {
    const int k = run_end(decl_memo_, j + 2, [](char16_t x) { return x != '>' && x != '\r' && x != '\n'; });
    if (at(k) == '>') best = k + 1;
  }
  auto name_end = [&](int p) -> int {
    if (!has(p) || !ascii_alpha(s_[p])) return -1;
    int k = p + 1;
    while (has(k) && (ascii_alnum(s_[k]) || s_[k] == '_' || s_[k] == ':' || s_[k] == '.' || s_[k] == '-')) ++k;
    return k;
  };
  auto qstr = [&](int p) -> int {
    if (at(p) != '\'' && at(p) != '"') return -1;
    const int k = run_end(qstr_memo_, p + 1, [](char16_t x) { return x != '\r' && x != '\n' && x != '\'' && x != '"'; });
    return has(k) ? k + 1 : -1;
  };
  auto spaces = [&](int p) {
    while (at(p) == ' ') ++p;
    return p;
  };
  int p = j;
  if (at(p) == '/') ++p;
  int ne = name_end(p);
  if (ne > 0) {
    // Attribute lists are matched greedily; the grammar only ends at '>', so the longest parse is the one
    // that reaches the first '>' it can.
    Ends frontier{ne};
    std::unordered_set<int> seen{ne};
    for (size_t idx = 0; idx < frontier.size(); ++idx) {
      int q = frontier[idx];
      int r = spaces(q);
      if (at(r) == '>') best = std::max(best, r + 1);
      if (at(j) != '/' && at(r) == '/' && at(spaces(r + 1)) == '>')  // "<br/>", "<br / >" (not "</br/>")
        best = std::max(best, spaces(r + 1) + 1);
      if (r == q) continue;
      Ends nexts;
      int a = name_end(r);
      if (a > 0) {
        add_end(nexts, a);
        int b = spaces(a);
        if (at(b) == '=') {
          int c = qstr(spaces(b + 1));
          if (c > 0) add_end(nexts, c);
        }
      }
      int c = qstr(r);
      if (c > 0) add_end(nexts, c);
      if (at(r) == '/') add_end(nexts, r + 1);
      for (int x : nexts)
        if (seen.insert(x).second) frontier.push_back(x);
    }
  }
  return best < 0 ? -1 : best - i;
}

}  // namespace vlk::ptb
