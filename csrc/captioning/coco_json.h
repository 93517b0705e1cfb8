// COCO caption files read straight into compact buffers (no per-caption objects): a list of
// {"image_id", "caption", ...} records, a COCO annotation object holding such a list under "annotations", or a
// {image_id: [caption, ...]} object. The JSON is checked as Python's json module checks it (strict RFC 8259, UTF-8),
// and errors carry a line and column.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace vlk::cap {

// A caption file's content. Image keys are "i<digits>" for integer ids and "s<text>" for str ids (the
// {image_id: [...]} layout's keys are str ids).
struct CaptionRecords {
  std::string text;              // captions' UTF-8, concatenated
  std::vector<int64_t> off{0};   // caption c = text[off[c] .. off[c+1])
  std::vector<int64_t> image;    // image (index into keys) of caption c
  std::vector<std::string> keys; // distinct image keys in order of first appearance
  // A COCO annotation file's "images" list: the keys of its entries' "id"s, in order (COCOEvalCap evaluates images
  // in that order); empty for the other layouts. Entries that are not a dict with an int or str "id" are left out.
  std::vector<std::string> listed;
  int64_t size() const { return static_cast<int64_t>(image.size()); }
};

struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Which captions to keep: called with an image key, returns false to skip the record (its caption is not stored).
using KeepImage = bool (*)(const std::string& key, void* ctx);

// An image key as messages show it: the number, or the text in quotes, with each lone surrogate (kept by the reader
// in its 3-byte form) written as a \uXXXX escape so that the message is valid UTF-8.
std::string shown_key(const std::string& key);

// Reads the file at `path` (memory-mapped; pages already parsed are released as the parse moves on, so the file
// never sits in memory whole). `results`: the file must be a list of records (a results file). Throws JsonError
// with a message naming the position, or std::runtime_error when the file cannot be read.
void read_caption_file(const std::string& path, bool results, KeepImage keep, void* ctx, CaptionRecords& out);

// Reads JSON text from memory (same rules; for tests and fuzzing).
void read_caption_json(const char* data, int64_t size, bool results, KeepImage keep, void* ctx, CaptionRecords& out);

}  // namespace vlk::cap
