// PTB tokenizer compatible with pycocoevalcap 1.2: Stanford CoreNLP 3.4.1 PTBTokenizer (-preserveLines -lowerCase)
// followed by pycocoevalcap's punctuation filter, one caption at a time, without Java.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vlk {

// Byte offset of the first invalid UTF-8 sequence in [data, data + len), or -1 when the text is valid UTF-8
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
int64_t utf8_invalid_offset(const char* data, int64_t len);

// Tokens of one caption exactly as PTBTokenizer prints them (lower-cased, before the punctuation filter).
// `utf8` must be valid UTF-8.
// `following` is text read only as trailing context (what comes after the caption in pycocoevalcap's input file).
std::vector<std::string> ptb_tokens(const std::string& utf8, const std::string& following = "");

// Code units of the following captions visible to the lexer as trailing context (its look-ahead is far shorter).
constexpr size_t kContextBytes = 256;
// Longest caption in UTF-16 code units (the lexer indexes a caption plus its context with int).
constexpr int64_t kMaxCaptionUnits = INT32_MAX - static_cast<int64_t>(kContextBytes) - 1;

// One caption as the caller holds it: `len` code points of `kind` bytes each (1, 2, 4: Latin-1, UCS-2, UCS-4, the
// layouts of a Python str), or `len` bytes of UTF-8 (kind 0).
struct PtbText {
  const void* data;
  int64_t len;
  int kind;
};

// Tokenized captions: caption i is size[i] bytes of UTF-8 at data(i), all ASCII when ascii[i].
// A PtbResult may be reused for the next call: its buffers keep their capacity (multi-megabyte buffers freshly
// allocated on each call cost more in page faults than tokenizing short captions does).
struct PtbResult {
  static constexpr int64_t kBlock = 256;  // captions per output buffer (one buffer per task, no allocation per caption)
  std::vector<std::string> blocks;        // output buffers; their size() is their capacity, not what is used
  std::vector<int64_t> begin, size;
  std::vector<uint8_t> ascii;
  const char* data(int64_t i) const { return blocks[static_cast<size_t>(i / kBlock)].data() + begin[i]; }

  // Scratch: where each caption starts in the text, the captions as the lexer reads them ('\n'-joined): UTF-16, or
  // Latin-1 bytes when every caption is a Latin-1 str.
  std::vector<int64_t> start;
  std::unique_ptr<char16_t[]> text;
  size_t text_capacity = 0;
  std::unique_ptr<uint8_t[]> text8;
  size_t text8_capacity = 0;
  // Bytes held by the buffers (for callers that keep a PtbResult between calls).
  size_t footprint() const;
};

// Tokenizes n captions in parallel, as pycocoevalcap does when it gets them in this order (caption i is read with
// '\n' + caption i+1 + ... as trailing context). Returns -1, or the index of the first caption that is not valid
// text (a surrogate code point in kind 2/4, invalid UTF-8 in kind 0) or is longer than kMaxCaptionUnits UTF-16
// code units; then nothing is tokenized. No exceptions:
// the sanitizer build cannot intercept C++ throws from an extension loaded into Python.
// fast_paths = false (for tests) skips the shortcuts for common tokens, the direct filtered output and the Latin-1
// buffer: every rule is tried at every position of the UTF-16 text and the Java output line is filtered afterwards,
// the way the tokenizer is specified.
int64_t ptb_tokenize_texts(const PtbText* texts, int64_t n, PtbResult& out, bool fast_paths = true);

}  // namespace vlk
