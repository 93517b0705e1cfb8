// PTB lexer (ptb_lexer.h): Symbol rules and token rewrites: ASIANSMILEY, LDOTS, QUOTES, and the actions' text rewrites (latexQuotes, soft hyphens, &amp;, spaces).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "captioning/ptb_lexer.h"

namespace vlk::ptb {

// ASIANSMILEY (3.4.1; %caseless does not reach into character classes, so "~_X" is split): [^x=~<>] "." "[^x=~<>]"
// (a literal tail: the pattern's brackets are escaped) | [-^x=~<>']_[-^x=~<>'] | "(" [-^x=~<>'] [_.]? [-^x=~<>'] ")"
// | "(" [^x=~<>'] "-" [^x=~<>'`] ")" (Java: "(^-^)", "(x-`)" whole; "(--^)", "(`-^)" split)  -> longest length or -1.
template <typename CharT>
int Lexer<CharT>::asian_smiley(int i) const {
  auto eye = [&](int k, bool hyphen_quote) {
    const char16_t e = at(k);
    return e == '^' || e == 'x' || e == '=' || e == '~' || e == '<' || e == '>' ||
           (hyphen_quote && (e == '-' || e == '\''));
  };
  int best = -1;
  if (eye(i, false) && at(i + 1) == '.' && lit_cs(i + 2, "[^") > 0 && lit(i + 4, "x=~<>]") > 0) best = 10;
  if (eye(i, true) && at(i + 1) == '_' && eye(i + 2, true)) best = std::max(best, 3);
  if (at(i) == '(' && eye(i + 1, true)) {
    int k = i + 2;
    if (at(k) == '_' || at(k) == '.') ++k;
    if (eye(k, true) && at(k + 1) == ')') best = std::max(best, k + 2 - i);
  }
  if (at(i) == '(' && (eye(i + 1, false) || at(i + 1) == '\'') && at(i + 2) == '-' &&
      (eye(i + 3, false) || at(i + 3) == '\'' || at(i + 3) == '`') && at(i + 4) == ')')
    best = std::max(best, 5);
  return best;
}

// LDOTS = \.{3,5}|(\.[ \u00A0]){2,4}\.|[\u0085\u2026]
template <typename CharT>
int Lexer<CharT>::ldots(int i) const {
  if (at(i) == 0x0085 || at(i) == 0x2026) return 1;
  int best = -1;
  int k = i;
  while (at(k) == '.' && k - i < 5) ++k;
  if (k - i >= 3) best = k - i;
  int j = i, reps = 0;
  while (reps < 4 && at(j) == '.' && (at(j + 1) == ' ' || at(j + 1) == 0x00A0)) {
    j += 2;
    ++reps;
    if (reps >= 2 && at(j) == '.') best = std::max(best, j + 1 - i);
  }
  return best;
}

template <typename CharT>
int Lexer<CharT>::quotes(int i) const {
  int best = apos(i);
  if (at(i) == '\'' && at(i + 1) == '\'') best = std::max(best, 2);
  auto q = [](char16_t c) {
    return c == '`' || c == 0x2018 || c == 0x2019 || c == 0x201A || c == 0x201B || c == 0x201C || c == 0x201D ||
           c == 0x0091 || c == 0x0092 || c == 0x0093 || c == 0x0094 || c == 0x201E || c == 0x201F ||
           c == 0x2039 || c == 0x203A || c == 0x00AB || c == 0x00BB;
  };
  if (has(i) && q(s_[i])) best = std::max(best, (has(i + 1) && q(s_[i + 1])) ? 2 : 1);
  return best;
}

// latexQuotes(): how the Java tokenizer rewrites quote characters in a token.
template <typename CharT>
Str Lexer<CharT>::latex_quotes(const Str& in, bool probably_left) {
  Str a;
  for (size_t k = 0; k < in.size();) {
    if (in.compare(k, 6, u"&apos;") == 0 || in[k] == '\'') {
      a += probably_left ? u"`" : u"'";
      k += in[k] == '\'' ? 1 : 6;
    } else if (in.compare(k, 6, u"&quot;") == 0 || in[k] == '"') {
      a += probably_left ? u"``" : u"''";
      k += in[k] == '"' ? 1 : 6;
    } else {
      a += in[k++];
    }
  }
  Str out;
  for (char16_t c : a) {
    if (c == 0x0091 || c == 0x2018 || c == 0x201B || c == 0x2039) {
      out += u"`";
    } else if (c == 0x0092 || c == 0x2019 || c == 0x203A) {
      out += u"'";
    } else if (c == 0x0093 || c == 0x201C || c == 0x00AB) {
      out += u"``";
    } else if (c == 0x0094 || c == 0x201D || c == 0x00BB) {
      out += u"''";
    } else {
      out += c;
    }
  }
  return out;
}

template <typename CharT>
Str Lexer<CharT>::remove_soft_hyphens(const Str& in) {
  Str out;
  for (char16_t c : in)
    if (c != 0x00AD) out += c;
  return out.empty() ? Str(u"-") : out;
}

template <typename CharT>
Str Lexer<CharT>::normalize_amp(const Str& in) {
  Str out;
  for (size_t k = 0; k < in.size();) {
    if (in[k] == '&' && k + 5 <= in.size()) {
      Str w = in.substr(k, 5);
      for (auto& c : w) c = ascii_alpha(c) ? (c | 0x20) : c;
      if (w == u"&amp;") {
        out += u"&";
        k += 5;
        continue;
      }
    }
    out += in[k++];
  }
  return out;
}

template <typename CharT>
Str Lexer<CharT>::spaces_to_nbsp(Str in) {
  for (auto& c : in)
    if (c == ' ') c = 0x00A0;
  return in;
}

}  // namespace vlk::ptb
