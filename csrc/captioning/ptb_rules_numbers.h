// PTB lexer (ptb_lexer.h): Number rules: NUMBER, DATE, FRAC, SUBSUPNUM, PHONE.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "captioning/ptb_lexer.h"

namespace vlk::ptb {

template <typename CharT>
int Lexer<CharT>::digits_ext(int j) const {
  int k = j;
  while (has(k) && is_digit_ext(s_[k])) ++k;
  return k - j;
}

// DATE = {DIGIT}{1,2}[\-\/]{DIGIT}{1,2}[\-\/]{DIGIT}{2,4}
template <typename CharT>
int Lexer<CharT>::date(int i) const {
  int a = digits_ext(i);
  if (a < 1 || a > 2 || (at(i + a) != '-' && at(i + a) != '/')) return -1;
  int j = i + a + 1, b = digits_ext(j);
  if (b < 1 || b > 2 || (at(j + b) != '-' && at(j + b) != '/')) return -1;
  int m = j + b + 1, c = digits_ext(m);
  if (c < 2) return -1;
  return m + std::min(c, 4) - i;
}

// NUMBER = [\-+]?{NUM}; NUM = {DIGIT}+|{DIGIT}*([.:,\u00AD\u066B\u066C]{DIGIT}+)+
template <typename CharT>
int Lexer<CharT>::number(int i) const {
  int j = i;
  if (at(j) == '-' || at(j) == '+') ++j;
  int k = j + digits_ext(j);
  for (;;) {
    char16_t c = at(k);
    if ((c == '.' || c == ':' || c == ',' || c == 0x00AD || c == 0x066B || c == 0x066C) && has(k + 1) &&
        is_digit_ext(s_[k + 1])) {
      k += 1 + digits_ext(k + 1);
    } else {
      break;
    }
  }
  return k > j ? k - i : -1;
}

// SUBSUPNUM = [\u207A\u207B\u208A\u208B]?([\u2070\u00B9\u00B2\u00B3\u2074-\u2079]+|[\u2080-\u2089]+)
template <typename CharT>
int Lexer<CharT>::subsupnum(int i) const {
  int j = i;
  if (in_set(at(j), u"\u207A\u207B\u208A\u208B")) ++j;
  auto sup = [](char16_t c) { return c == 0x2070 || c == 0xB9 || c == 0xB2 || c == 0xB3 || (c >= 0x2074 && c <= 0x2079); };
  auto sub = [](char16_t c) { return c >= 0x2080 && c <= 0x2089; };
  int k = j;
  if (has(k) && sup(s_[k])) {
    while (has(k) && sup(s_[k])) ++k;
  } else {
    while (has(k) && sub(s_[k])) ++k;
  }
  return k > j ? k - i : -1;
}

// FRAC = ({DIGIT}{1,4}[- \u00A0])?{DIGIT}{1,4}(\\?\/|\u2044){DIGIT}{1,4}
template <typename CharT>
int Lexer<CharT>::frac_core(int j) const {
  int a = digits_ext(j);
  if (a < 1 || a > 4) return -1;
  int k = j + a;
  if (at(k) == '\\' && at(k + 1) == '/') {
    k += 2;
  } else if (at(k) == '/' || at(k) == 0x2044) {
    k += 1;
  } else {
    return -1;
  }
  int b = digits_ext(k);
  if (b < 1) return -1;
  return k + std::min(b, 4);
}

template <typename CharT>
int Lexer<CharT>::frac(int i) const {
  int best = frac_core(i);
  int a = digits_ext(i);
  if (a >= 1 && a <= 4 && (at(i + a) == '-' || at(i + a) == ' ' || at(i + a) == 0x00A0)) {
    best = std::max(best, frac_core(i + a + 1));
  }
  return best < 0 ? -1 : best - i;
}

// PHONE (American and international forms); longest length or -1.
template <typename CharT>
int Lexer<CharT>::phone(int i) const {
  auto dig = [&](int j, int lo, int hi, Ends& out) {
    int k = j;
    while (has(k) && ascii_digit(s_[k]) && k - j < hi) ++k;
    for (int e = j + lo; e <= k; ++e) add_end(out, e);
  };
  auto sep = [&](int j) { return at(j) == '-' || at(j) == ' ' || at(j) == 0x00A0; };
  int best = -1;
  // (\([0-9]{2,3}\)[ \u00A0]?|(\+\+?)?([0-9]{2,4}[\- \u00A0])?[0-9]{2,4}[\- \u00A0])[0-9]{3,4}[\- \u00A0]?[0-9]{3,5}
  Ends heads;
  if (at(i) == '(') {
    Ends d;
    dig(i + 1, 2, 3, d);
    for (int e : d)
      if (at(e) == ')') {
        add_end(heads, e + 1);
        if (at(e + 1) == ' ' || at(e + 1) == 0x00A0) add_end(heads, e + 2);
      }
  }
  {
    Ends starts{i};
    if (at(i) == '+') {
      add_end(starts, i + 1);
      if (at(i + 1) == '+') add_end(starts, i + 2);
    }
    for (int st : starts) {
      if (st == i && at(i) == '+') continue;
      Ends mids{st};
      Ends d0;
      dig(st, 2, 4, d0);
      for (int e : d0)
        if (sep(e)) add_end(mids, e + 1);
      for (int m : mids) {
        Ends d1;
        dig(m, 2, 4, d1);
        for (int e : d1)
          if (sep(e)) add_end(heads, e + 1);
      }
    }
  }
  for (int h : heads) {
    Ends d;
    dig(h, 3, 4, d);
    for (int e : d) {
      Ends tails{e};
      if (sep(e)) add_end(tails, e + 1);
      for (int t : tails) {
        Ends f;
        dig(t, 3, 5, f);
        best = std::max(best, max_end(f));
      }
    }
  }
  // ((\+\+?)?[0-9]{2,4}\.)?[0-9]{2,4}\.[0-9]{3,4}\.[0-9]{3,5}
  {
    Ends starts{i};
    Ends pre;
    int p = i;
    if (at(p) == '+') {
      ++p;
      if (at(p) == '+') ++p;
    }
    Ends d;
    dig(p, 2, 4, d);
    for (int e : d)
      if (at(e) == '.') add_end(starts, e + 1);
    for (int st : starts) {
      if (at(st) == '+') continue;
      Ends a;
      dig(st, 2, 4, a);
      for (int e : a) {
        if (at(e) != '.') continue;
        Ends b;
        dig(e + 1, 3, 4, b);
        for (int f : b) {
          if (at(f) != '.') continue;
          Ends c;
          dig(f + 1, 3, 5, c);
          best = std::max(best, max_end(c));
        }
      }
    }
  }
  return best < 0 ? -1 : best - i;
}

}  // namespace vlk::ptb
