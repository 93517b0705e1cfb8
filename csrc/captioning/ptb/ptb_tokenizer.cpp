// PTB tokenizer compatible with Stanford CoreNLP 3.4.1 PTBTokenizer (-preserveLines -lowerCase) as run by
// pycocoevalcap 1.2, followed by pycocoevalcap's punctuation filter: the batching around the lexer (ptb_lexer.h).
// Captions are laid out as pycocoevalcap's input file holds them (one buffer, '\n'-joined, UTF-16 or Latin-1), so
// the rules that look past a caption's end see the next captions, and are tokenized in parallel blocks, each block
// writing its captions' UTF-8 into one output buffer.
#include "captioning/ptb/ptb_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "captioning/ptb/ptb_lexer.h"
#include "captioning/ptb/ptb_text.h"
#include "core/parallel.h"

// The lexer's out-of-class members: the rule selection, then the rule matchers grouped by kind.
#include "captioning/ptb/ptb_step.inc"
#include "captioning/ptb/ptb_rules_words.inc"
#include "captioning/ptb/ptb_rules_web.inc"
#include "captioning/ptb/ptb_rules_numbers.inc"
#include "captioning/ptb/ptb_rules_symbols.inc"

namespace vlk {

using ptb::append_utf8;
using ptb::is_filtered;
using ptb::Lexer;
using ptb::OutBuf;
using ptb::py_space;
using ptb::Str;
using ptb::utf16_length;
using ptb::utf8_to_utf16;

namespace {

// pycocoevalcap's post-processing of one output line: rstrip(), split(' '), drop the PUNCTUATIONS, join by ' ';
// appended to `out`.
// The rstrip matters: a line may end in a token that ends in U+00A0 (a URL).
void join_filtered(Str& line, std::string& out) {
  while (!line.empty() && py_space(line.back())) line.pop_back();
  bool first = true;
  size_t b = 0;
  for (size_t e = 0; e <= line.size(); ++e) {
    if (e < line.size() && line[e] != u' ') continue;
    const char16_t* t = line.data() + b;
    const size_t len = e - b;
    b = e + 1;
    if (is_filtered(t, len)) continue;
    if (!first) out += ' ';
    first = false;
    append_utf8(out, t, len);
  }
}

}  // namespace

// The lexer indexes one caption (plus kContextBytes of trailing context) with int: a longer caption is refused
// (before, 2^31 units gave "" and 2^32 + k units gave the tokens of k units).
bool caption_fits(int64_t units) { return units <= kMaxCaptionUnits; }

std::vector<std::string> ptb_tokens(const std::string& utf8, const std::string& following) {
  const Str own = utf8_to_utf16(utf8);
  if (!caption_fits(static_cast<int64_t>(own.size()))) return {};  // the Python wrapper refuses it first
  const Str s = own + utf8_to_utf16(following);
  Lexer<char16_t> lexer(s.data(), static_cast<int>(s.size()), static_cast<int>(own.size()));
  Str line;
  lexer.run_raw(line);
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e = 0; e <= line.size() && !line.empty(); ++e) {
    if (e < line.size() && line[e] != u' ') continue;
    std::string u;
    append_utf8(u, line.data() + b, e - b);
    out.push_back(std::move(u));
    b = e + 1;
  }
  return out;
}

namespace {

// The caption's text in UTF-16 units, or -1 when it holds a surrogate code point (a str) or is not valid UTF-8.
int64_t utf16_size(const PtbText& t) {
  switch (t.kind) {
    case 1:
      return t.len;
    case 2: {
      const auto* p = static_cast<const uint16_t*>(t.data);
      uint32_t bad = 0;
      for (int64_t k = 0; k < t.len; ++k) bad |= (p[k] & 0xF800) == 0xD800;
      return bad ? -1 : t.len;
    }
    case 4: {
      const auto* p = static_cast<const uint32_t*>(t.data);
      int64_t extra = 0;
      uint32_t bad = 0;
      for (int64_t k = 0; k < t.len; ++k) {
        extra += p[k] >= 0x10000;
        bad |= (p[k] & 0xFFFFF800u) == 0xD800 || p[k] > 0x10FFFF;
      }
      return bad ? -1 : t.len + extra;
    }
    default: {
      const char* p = static_cast<const char*>(t.data);
      if (utf8_invalid_offset(p, t.len) >= 0) return -1;
      return static_cast<int64_t>(utf16_length(p, static_cast<size_t>(t.len)));
    }
  }
}

// Writes the caption's UTF-16 units at dst, its own '\n' turned into ' ' (the captions' separator in the file).
void write_utf16(const PtbText& t, char16_t* dst) {
  auto nl = [](uint32_t c) { return c == u'\n' ? char16_t(u' ') : static_cast<char16_t>(c); };
  switch (t.kind) {
    case 1: {
      const auto* p = static_cast<const uint8_t*>(t.data);
      for (int64_t k = 0; k < t.len; ++k) dst[k] = nl(p[k]);
      break;
    }
    case 2: {
      const auto* p = static_cast<const uint16_t*>(t.data);
      for (int64_t k = 0; k < t.len; ++k) dst[k] = nl(p[k]);
      break;
    }
    case 4: {
      const auto* p = static_cast<const uint32_t*>(t.data);
      for (int64_t k = 0; k < t.len; ++k) {
        uint32_t c = p[k];
        if (c >= 0x10000) {
          c -= 0x10000;
          *dst++ = static_cast<char16_t>(0xD800 + (c >> 10));
          *dst++ = static_cast<char16_t>(0xDC00 + (c & 0x3FF));
        } else {
          *dst++ = nl(c);
        }
      }
      break;
    }
    default: {
      const size_t m = utf8_to_utf16(static_cast<const char*>(t.data), static_cast<size_t>(t.len), dst);
      for (size_t k = 0; k < m; ++k) dst[k] = nl(dst[k]);
    }
  }
}

bool all_ascii(const char* p, size_t n) {
  unsigned char acc = 0;
  for (size_t k = 0; k < n; ++k) acc |= static_cast<unsigned char>(p[k]);
  return acc < 0x80;
}

}  // namespace

size_t PtbResult::footprint() const {
  size_t bytes = text_capacity * sizeof(char16_t) + text8_capacity + start.capacity() * sizeof(int64_t) +
                 (begin.capacity() + size.capacity()) * sizeof(int64_t) + ascii.capacity();
  for (const std::string& b : blocks) bytes += b.capacity();
  return bytes;
}

namespace {

// Tokenizes the captions laid out in buf (caption i at start[i], '\n' after each but the last), in blocks of
// PtbResult::kBlock captions, each block with its own output buffer; a block's captions are tokenized in order.
template <typename CharT>
void tokenize_blocks(const CharT* buf, int64_t n, PtbResult& out, bool fast_paths) {
  const std::vector<int64_t>& start = out.start;
  const int64_t total = start[n] - 1;
  const int64_t nblocks = static_cast<int64_t>(out.blocks.size());
  parallel_for(nblocks, 1, [&](int64_t b0, int64_t b1) {
    Str line;
    std::string joined;
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t first = blk * PtbResult::kBlock, last = std::min(n, first + PtbResult::kBlock);
      OutBuf o;
      o.text.swap(out.blocks[static_cast<size_t>(blk)]);
      o.room(static_cast<size_t>(start[last] - start[first]) + 64);
      for (int64_t i = first; i < last; ++i) {
        // The look-ahead of every rule is short; cap the visible context so positions fit in int.
        const int64_t len = start[i + 1] - 1 - start[i];
        const int64_t visible = std::min<int64_t>(total - start[i], len + static_cast<int64_t>(kContextBytes));
        const size_t at0 = o.size;
        Lexer<CharT> lexer(buf + start[i], static_cast<int>(visible), static_cast<int>(len), fast_paths);
        bool check_ascii = true;
        if (fast_paths && lexer.run_filtered(o)) {
          check_ascii = lexer.maybe_non_ascii();
        } else {
          o.size = at0;
          line.clear();
          lexer.run_raw(line);
          joined.clear();
          join_filtered(line, joined);
          o.append(joined);
        }
        out.begin[i] = static_cast<int64_t>(at0);
        out.size[i] = static_cast<int64_t>(o.size - at0);
        out.ascii[i] = !check_ascii || all_ascii(o.text.data() + at0, o.size - at0);
      }
      o.text.swap(out.blocks[static_cast<size_t>(blk)]);
    }
  });
}

// Latin-1 text (a str of kind 1) at dst, its own '\n' turned into ' '.
void write_latin1(const PtbText& t, uint8_t* dst) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  const int64_t len = t.len;  // a local: stores through dst could alias t.len, which would stop vectorization
  for (int64_t k = 0; k < len; ++k) dst[k] = p[k] == '\n' ? uint8_t{' '} : p[k];
}

// The captions joined into buf as pycocoevalcap's file holds them (each written by `write`, a '\n' after each but
// the last), then tokenized. buf is kept between calls and grown (left uninitialised: every unit is written here)
// when smaller than `total` units.
template <typename CharT, typename Write>
void join_and_tokenize(const PtbText* texts, int64_t n, std::unique_ptr<CharT[]>& buf, size_t& capacity,
                       size_t total, Write write, PtbResult& out, bool fast_paths) {
  if (capacity < total) {
    buf.reset(new CharT[total]);
    capacity = total;
  }
  CharT* const text = buf.get();
  const std::vector<int64_t>& start = out.start;
  parallel_for(n, 2048, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      write(texts[i], text + start[i]);
      if (i + 1 < n) text[start[i + 1] - 1] = CharT{'\n'};
    }
  });
  tokenize_blocks(static_cast<const CharT*>(text), n, out, fast_paths);
}

}  // namespace

int64_t ptb_tokenize_texts(const PtbText* texts, int64_t n, PtbResult& out, bool fast_paths) {
  // The lexer reads the captions the way pycocoevalcap's input file holds them: one buffer, captions joined by '\n'
  // (with their own '\n' turned into ' '), so trailing-context rules see the following captions. UTF-16 as in
  // Java; or, when every caption is Latin-1 (a str of kind 1, e.g. ASCII), one byte per code point.
  std::vector<int64_t>& start = out.start;
  start.resize(static_cast<size_t>(n + 1));
  start[0] = 0;
  parallel_for(n, 2048, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) start[i + 1] = utf16_size(texts[i]);
  });
  bool latin1 = fast_paths;  // the reference mode (fast_paths = false) always reads UTF-16
  for (int64_t i = 0; i < n; ++i) {
    if (start[i + 1] < 0 || !caption_fits(start[i + 1])) return i;
    start[i + 1] += start[i] + 1;
    latin1 &= texts[i].kind == 1;
  }
  out.blocks.resize(static_cast<size_t>((n + PtbResult::kBlock - 1) / PtbResult::kBlock));
  // Every entry is written below.
  out.begin.resize(static_cast<size_t>(n));
  out.size.resize(static_cast<size_t>(n));
  out.ascii.resize(static_cast<size_t>(n));
  if (n == 0) return -1;
  const size_t total = static_cast<size_t>(start[n] - 1);
  if (latin1) {
    join_and_tokenize(texts, n, out.text8, out.text8_capacity, total, write_latin1, out, fast_paths);
  } else {
    join_and_tokenize(texts, n, out.text, out.text_capacity, total, write_utf16, out, fast_paths);
  }
  return -1;
}

}  // namespace vlk
