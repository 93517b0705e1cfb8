#include "captioning/coco_json.h"
#include "captioning/ngrams.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace vlk::cap {

namespace {

constexpr int kMaxDepth = 1000;  // Python's json gives up near its recursion limit; so do we, with a message

// Python type names of JSON values, for messages that read like the Python layer's.
enum class Kind { kObject, kArray, kString, kInt, kFloat, kBool, kNull };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kObject: return "dict";
    case Kind::kArray: return "list";
    case Kind::kString: return "str";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kBool: return "bool";
    default: return "NoneType";
  }
}

// Appends a caption of image `key` (its index from `index`, a new one for a key not seen yet).
void append_caption(CaptionRecords& out, std::unordered_map<std::string, int64_t>& index, const std::string& key,
                    const std::string& caption) {
  auto it = index.find(key);
  if (it == index.end()) {
    it = index.emplace(key, static_cast<int64_t>(out.keys.size())).first;
    out.keys.push_back(key);
  }
  out.text.append(caption);
  out.off.push_back(static_cast<int64_t>(out.text.size()));
  out.image.push_back(it->second);
}

class Parser {
 public:
  Parser(const char* data, int64_t size, bool results, KeepImage keep, void* ctx, CaptionRecords& out)
      : file_(data), begin_(data), p_(data), end_(data + size), results_(results), keep_(keep), ctx_(ctx), out_(out) {}
  // Called as the parse advances (the memory-mapped reader releases what lies behind).
  void (*progress)(const char* at, void* arg) = nullptr;
  void* progress_arg = nullptr;

  void run() {
    encoding();
    ws();
    if (p_ == end_) fail("malformed JSON: expecting value");
    if (*p_ == '[') {
      records("");
    } else if (*p_ == '{') {
      top_object();
    } else {
      const Kind k = skip_value(0);
      ws();
      if (p_ != end_) fail("malformed JSON: extra data");
      throw JsonError(std::string("expected a list of {'image_id', 'caption'} records, got ") + kind_name(k));
    }
    ws();
    if (p_ != end_) fail("malformed JSON: extra data");
    // Problems of the content are reported once the whole text is known to be JSON, as json.load + a check would.
    if (!pending_.empty()) throw JsonError(pending_);
  }

 private:
  // A UTF-8 byte order mark is skipped (as json.loads does with bytes, and open(..., encoding="utf-8-sig")); UTF-16
  // and UTF-32 text (a BOM, or a NUL among the first bytes: JSON text starts with ASCII) is refused by name.
  void encoding() {
    const auto* u = reinterpret_cast<const unsigned char*>(p_);
    const int64_t n = end_ - p_;
    if (n >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF) {
      p_ += 3;
      begin_ = p_;  // line and column count from the text after the mark, as Python's decoder gives them
      return;
    }
    const bool bom16 = n >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF));
    const bool bom32 = n >= 4 && u[0] == 0 && u[1] == 0 && u[2] == 0xFE && u[3] == 0xFF;
    const bool nul = (n >= 1 && u[0] == 0) || (n >= 2 && u[1] == 0);
    if (bom16 || bom32 || nul)
      throw JsonError("captions files must be UTF-8; this one looks like UTF-16 or UTF-32 (convert it to UTF-8)");
  }
  // The first problem of the content found (a record without a caption, a wrong type): kept, and thrown by run()
  // after the parse, unless a later duplicate key replaces the value it was found in (json.load keeps the last).
  void defer(const std::string& what) {
    if (pending_.empty()) pending_ = what;
  }

  [[noreturn]] void fail(const std::string& what) const {
    int64_t line = 1, col = 1;
    for (const char* q = begin_; q < p_ && q < end_; ++q) {
      if (*q == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw JsonError(what + " at line " + std::to_string(line) + " column " + std::to_string(col));
  }
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
    if (progress != nullptr) progress(p_, progress_arg);
  }
  void expect(char c) {
    ws();
    if (p_ == end_ || *p_ != c) fail(std::string("malformed JSON: expecting '") + c + "'");
    ++p_;
  }
  bool peek(char c) {
    ws();
    return p_ < end_ && *p_ == c;
  }
  // An object member's name into `field`, then past the ':' and the whitespace before the value.
  void member_name(std::string& field) {
    ws();
    field.clear();
    string(&field);
    expect(':');
    ws();
  }
  // True past the closing `close` of an empty list or object (its opening bracket consumed).
  bool closes(char close) {
    if (!peek(close)) return false;
    ++p_;
    return true;
  }
  // After an item of a list or object: true past a ',' (another item follows), false past the closing `close`.
  bool more(char close) {
    if (peek(',')) {
      ++p_;
      return true;
    }
    expect(close);
    return false;
  }

  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  uint32_t hex4() {
    if (end_ - p_ < 4) fail("malformed JSON: invalid \\uXXXX escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hexval(p_[i]);
      if (h < 0) fail("malformed JSON: invalid \\uXXXX escape");
      v = v * 16 + static_cast<uint32_t>(h);
    }
    p_ += 4;
    return v;
  }
  static void put_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  // Length of the valid UTF-8 sequence at p_ (lead byte >= 0x80), or 0 (as Python's strict decoder rejects it).
  int utf8_len() const {
    const auto* s = reinterpret_cast<const unsigned char*>(p_);
    const int64_t left = end_ - p_;
    const unsigned char c = s[0];
    auto cont = [&](int i) { return i < left && (s[i] & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(1) || !cont(2)) return 0;
      if (c == 0xE0 && s[1] < 0xA0) return 0;   // overlong
      if (c == 0xED && s[1] >= 0xA0) return 0;  // surrogate
      return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return 0;
      if (c == 0xF0 && s[1] < 0x90) return 0;
      if (c == 0xF4 && s[1] >= 0x90) return 0;
      return 4;
    }
    return 0;
  }
  // A string at p_ (after ws). Decoded into `into` when given, else only checked.
  void string(std::string* into) {
    if (p_ == end_ || *p_ != '"') fail("malformed JSON: expecting '\"'");
    ++p_;
    for (;;) {
      const char* run = p_;
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20 &&
             static_cast<unsigned char>(*p_) < 0x80)
        ++p_;
      if (into != nullptr) into->append(run, static_cast<size_t>(p_ - run));
      if (p_ == end_) fail("malformed JSON: unterminated string");
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return;
      }
      if (c >= 0x80) {
        const int n = utf8_len();
        if (n == 0) throw JsonError("invalid UTF-8 at byte " + std::to_string(p_ - file_));
        if (into != nullptr) into->append(p_, static_cast<size_t>(n));
        p_ += n;
        continue;
      }
      if (c < 0x20) fail("malformed JSON: invalid control character in a string");
      ++p_;  // backslash
      if (p_ == end_) fail("malformed JSON: unterminated string");
      const char e = *p_++;
      char out;
      switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && end_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
            const char* save = p_;
            p_ += 2;
            const uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              p_ = save;
            }
          }
          // A lone surrogate is kept in its 3-byte form (json.load keeps it in the str): refused only where the
          // string is used as a caption (coco_prepare), so an unscored image's caption is no error, as in Python.
          if (into != nullptr) put_utf8(*into, cp);
          continue;
        }
        default: fail("malformed JSON: invalid escape");
      }
      if (into != nullptr) into->push_back(out);
    }
  }
  // A number at p_; `digits` receives the canonical text of an integer. Returns kInt or kFloat.
  Kind number(std::string* digits) {
    const char* s = p_;
    if (*p_ == '-') ++p_;
    if (p_ < end_ && (*p_ == 'I')) return literal("Infinity", Kind::kFloat);
    if (p_ == end_ || *p_ < '0' || *p_ > '9') fail("malformed JSON: expecting value");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    const char* int_end = p_;
    bool is_float = false;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') fail("malformed JSON: expecting digits after '.'");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      is_float = true;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') fail("malformed JSON: expecting exponent digits");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      is_float = true;
    }
    if (!is_float && digits != nullptr) {
      digits->assign(s, int_end);
      if (*digits == "-0") *digits = "0";
    }
    return is_float ? Kind::kFloat : Kind::kInt;
  }
  Kind literal(const char* word, Kind k) {
    const size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) fail("malformed JSON: expecting value");
    p_ += n;
    return k;
  }
  // Any value (checked, not kept); returns its kind. `depth` bounds the nesting.
  Kind skip_value(int depth) {
    ws();
    if (p_ == end_) fail("malformed JSON: expecting value");
    if (depth > kMaxDepth) throw JsonError("JSON nested too deeply to read");
    switch (*p_) {
      case '{':
        ++p_;
        if (closes('}')) return Kind::kObject;
        for (;;) {
          ws();
          string(nullptr);
          expect(':');
          skip_value(depth + 1);
          if (more('}')) continue;
          return Kind::kObject;
        }
      case '[':
        ++p_;
        if (closes(']')) return Kind::kArray;
        for (;;) {
          skip_value(depth + 1);
          if (more(']')) continue;
          return Kind::kArray;
        }
      case '"': string(nullptr); return Kind::kString;
      case 't': return literal("true", Kind::kBool);
      case 'f': return literal("false", Kind::kBool);
      case 'n': return literal("null", Kind::kNull);
      case 'N': return literal("NaN", Kind::kFloat);
      default: return number(nullptr);
    }
  }

  void add_caption(const std::string& key, const std::string& caption) {
    poll_.spend(static_cast<int64_t>(caption.size()) + 32);
    if (keep_ == nullptr || keep_(key, ctx_)) append_caption(out_, index_, key, caption);
  }

  std::string where(int64_t i) const { return name_ + "[" + std::to_string(i) + "]"; }

  // [record, ...] with record = {"image_id": int | str, "caption": str, ...} (other fields skipped).
  void records(const std::string& prefix) {
    name_ = prefix;
    expect('[');
    if (closes(']')) return;
    std::string key, caption, field;
    for (int64_t i = 0;; ++i) {
      ws();
      if (p_ == end_ || *p_ != '{') {
        skip_value(1);
        defer(where(i) + ": record must be a dict with 'image_id' and 'caption'");
        if (more(']')) continue;
        return;
      }
      ++p_;
      bool has_id = false, has_caption = false;
      Kind id_kind = Kind::kNull, caption_kind = Kind::kNull;
      if (!peek('}')) {
        for (;;) {
          member_name(field);
          if (p_ == end_) fail("malformed JSON: expecting value");
          if (field == "image_id") {
            has_id = true;
            if (*p_ == '"') {
              key.assign("s");
              string(&key);
              id_kind = Kind::kString;
            } else if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) {
              std::string digits;
              id_kind = number(&digits);
              key = "i" + digits;
            } else {
              id_kind = skip_value(1);
            }
          } else if (field == "caption") {
            has_caption = true;
            if (*p_ == '"') {
              caption.clear();
              string(&caption);
              caption_kind = Kind::kString;
            } else {
              caption_kind = skip_value(1);
            }
          } else {
            skip_value(1);
          }
          if (more('}')) continue;
          break;
        }
      } else {
        ++p_;
      }
      // A repeated field keeps its last value (key, caption and kinds are overwritten), as json.load does.
      if (!has_id || !has_caption)
        defer(where(i) + ": record must be a dict with 'image_id' and 'caption'");
      else if (id_kind != Kind::kInt && id_kind != Kind::kString)
        defer(where(i) + ": image_id must be an int or str, got " + kind_name(id_kind));
      else if (caption_kind != Kind::kString)
        defer(where(i) + " (image " + shown_key(key) + "): caption must be str, got " + kind_name(caption_kind));
      else if (pending_.empty())
        add_caption(key, caption);
      if (more(']')) continue;
      return;
    }
  }

  // A COCO file's "images" list: each entry's "id" key into out_.listed (other fields and entries skipped).
  void image_list() {
    ++p_;
    if (closes(']')) return;
    std::string field, key;
    for (;;) {
      ws();
      if (p_ < end_ && *p_ == '{') {
        ++p_;
        bool has_id = false;
        if (!closes('}')) {
          for (;;) {
            member_name(field);
            if (p_ == end_) fail("malformed JSON: expecting value");
            if (field == "id" && *p_ == '"') {
              key.assign("s");
              string(&key);
              has_id = true;
            } else if (field == "id" && (*p_ == '-' || (*p_ >= '0' && *p_ <= '9'))) {
              std::string digits;
              has_id = number(&digits) == Kind::kInt;
              key = "i" + digits;
            } else {
              if (field == "id") has_id = false;  // a repeated "id" keeps its last value, as json.load does
              skip_value(1);
            }
            if (more('}')) continue;
            break;
          }
        }
        if (has_id) out_.listed.push_back(key);
        poll_.spend(32);
      } else {
        skip_value(1);
      }
      if (more(']')) continue;
      return;
    }
  }

  // An object: a COCO annotation file ("annotations": [records]) or {image_id: [caption, ...]}. A repeated key
  // keeps its last value and its first position, as json.load builds the dict.
  void top_object() {
    ++p_;
    bool annotations = false, coco_fields = false;
    Kind annotations_kind = Kind::kArray;  // of the last "annotations" value
    std::string annotations_pending;       // the content problem of the last "annotations" list
    // The {id: [...]} layout is only known once the whole object is read ("annotations" may come last): its
    // captions are kept aside and dropped if it turns out to be a COCO file. Per key, in order of first appearance:
    // the captions of its last value (layout[first, end)) or the kind of a value that is not a list of str.
    struct LayoutKey {
      int64_t first = 0, end = 0;
      bool bad = false;
      Kind kind = Kind::kArray;
    };
    CaptionRecords layout;
    std::unordered_map<std::string, int64_t> layout_index;
    std::unordered_map<std::string, size_t> key_at;
    std::vector<std::pair<std::string, LayoutKey>> layout_keys;
    bool repeated = false;
    std::string field, caption;
    if (peek('}')) {
      ++p_;
    } else {
      for (;;) {
        member_name(field);
        if (field == "annotations" && !results_) {
          annotations = true;
          if (!peek('[')) {
            annotations_kind = skip_value(1);
          } else {
            // A later "annotations" replaces an earlier one: its records and its problems.
            annotations_kind = Kind::kArray;
            const std::string before = pending_;
            pending_.clear();
            out_.text.clear();
            out_.off.assign(1, 0);
            out_.image.clear();
            out_.keys.clear();
            index_.clear();
            records("");
            annotations_pending = pending_;
            pending_ = before;
          }
        } else if (results_) {
          annotations = annotations || field == "annotations";
          skip_value(1);
        } else if (field == "images") {
          // A COCO file (the {image_id: [captions]} layout has no "images"); a repeated key keeps its last value.
          coco_fields = true;
          out_.listed.clear();
          if (peek('['))
            image_list();
          else
            skip_value(1);
        } else {
          coco_fields = coco_fields || field == "images" || field == "info";
          auto [it, fresh] = key_at.emplace(field, layout_keys.size());
          if (fresh) layout_keys.emplace_back(field, LayoutKey{});
          repeated = repeated || !fresh;
          LayoutKey& lk = layout_keys[it->second].second;
          lk = LayoutKey{layout.size(), layout.size()};
          if (!peek('[')) {
            lk.bad = true;
            lk.kind = skip_value(1);
          } else {
            ++p_;
            bool all_str = true;
            if (!peek(']')) {
              for (;;) {
                ws();
                if (p_ < end_ && *p_ == '"' && all_str) {
                  caption.clear();
                  string(&caption);
                  poll_.spend(static_cast<int64_t>(caption.size()) + 8);
                  if (!annotations) {
                    const std::string key = "s" + field;
                    if (keep_ == nullptr || keep_(key, ctx_)) append_caption(layout, layout_index, key, caption);
                  }
                } else {
                  const Kind k = skip_value(1);
                  if (k != Kind::kString) all_str = false;
                }
                if (more(']')) continue;
                break;
              }
            } else {
              ++p_;
            }
            lk.bad = !all_str;
          }
          lk.end = layout.size();
        }
        if (more('}')) continue;
        break;
      }
    }
    if (results_) {
      throw JsonError(std::string("a results file is a list of {'image_id', 'caption'} records, one per image, got a "
                                  "dict") +
                      (annotations ? " (this looks like an annotation file: pass it first)" : ""));
    }
    if (annotations) {
      if (annotations_kind != Kind::kArray)
        throw JsonError(std::string("expected a list of {'image_id', 'caption'} records, got ") +
                        kind_name(annotations_kind));
      defer(annotations_pending);
      return;
    }
    if (coco_fields) throw JsonError("a COCO annotation file needs an 'annotations' list");
    for (const auto& [key, lk] : layout_keys) {
      if (lk.bad)
        throw JsonError("['" + key + "']: a {image_id: [captions]} reference file needs a list of str per image, got " +
                        kind_name(lk.kind) + " (or a COCO annotation file with an 'annotations' list)");
    }
    if (!repeated) {
      out_ = std::move(layout);
      return;
    }
    // Each key's captions from its last value, at the key's first position.
    CaptionRecords last;
    std::unordered_map<std::string, int64_t> last_index;
    for (const auto& [key, lk] : layout_keys) {
      for (int64_t c = lk.first; c < lk.end; ++c) {
        const std::string text = layout.text.substr(static_cast<size_t>(layout.off[c]),
                                                    static_cast<size_t>(layout.off[c + 1] - layout.off[c]));
        append_caption(last, last_index, "s" + key, text);
      }
    }
    out_ = std::move(last);
  }

  const char* file_;   // the first byte of the file
  const char* begin_;  // where line 1 column 1 is (after a byte order mark)
  const char* p_;
  const char* end_;
  bool results_;
  KeepImage keep_;
  void* ctx_;
  CaptionRecords& out_;
  std::string name_;
  std::unordered_map<std::string, int64_t> index_;
  std::string pending_;
  InterruptPoll poll_;
};

struct Mapped {
  const char* data = nullptr;
  size_t size = 0;
  size_t released = 0;
  ~Mapped() {
    if (data != nullptr && size > 0) munmap(const_cast<char*>(data), size);
  }
};

// Releases the mapped pages behind the parse position in 1 MiB steps (they are clean file pages: dropping them
// costs nothing, and a later error message that needs the line number reads them back). Mapped pages count in the
// process's resident memory, so the step bounds what the file itself adds to the peak (~2 MiB).
void release_behind(const char* at, void* arg) {
  auto* m = static_cast<Mapped*>(arg);
  constexpr size_t kStep = size_t{1} << 20;
  const size_t pos = static_cast<size_t>(at - m->data);
  if (pos < m->released + 2 * kStep) return;
  const size_t upto = (pos - kStep) & ~(kStep - 1);
  madvise(const_cast<char*>(m->data) + m->released, upto - m->released, MADV_DONTNEED);
  m->released = upto;
}

}  // namespace

std::string shown_key(const std::string& key) {
  if (key[0] == 'i') return key.substr(1);
  std::string out = "'";
  for (size_t i = 1; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c == 0xED && i + 2 < key.size() && static_cast<unsigned char>(key[i + 1]) >= 0xA0) {
      const unsigned cp = 0xD000u | ((static_cast<unsigned char>(key[i + 1]) & 0x3Fu) << 6) |
                          (static_cast<unsigned char>(key[i + 2]) & 0x3Fu);
      static const char hex[] = "0123456789abcdef";
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out.push_back(hex[(cp >> shift) & 0xF]);
      i += 2;
    } else {
      out.push_back(key[i]);
    }
  }
  return out + "'";
}

void read_caption_json(const char* data, int64_t size, bool results, KeepImage keep, void* ctx, CaptionRecords& out) {
  Parser p(data, size, results, keep, ctx, out);
  p.run();
}

void read_caption_file(const std::string& path, bool results, KeepImage keep, void* ctx, CaptionRecords& out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read (" + std::string(std::strerror(errno)) + ")");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    throw std::runtime_error("cannot read (" + std::string(std::strerror(e)) + ")");
  }
  Mapped m;
  m.size = static_cast<size_t>(st.st_size);
  if (m.size > 0) {
    void* p = mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      close(fd);
      throw std::runtime_error("cannot read (" + std::string(std::strerror(e)) + ")");
    }
    m.data = static_cast<const char*>(p);
    madvise(p, m.size, MADV_SEQUENTIAL);
  }
  close(fd);
  // Reserved, not touched: untouched pages cost no memory, and growth by doubling would hold the old and the new
  // buffer at once (3x the captions' size for a moment). A record takes at least ~30 bytes of JSON.
  out.text.reserve(m.size);
  out.off.reserve(m.size / 24 + 1);
  out.image.reserve(m.size / 24 + 1);
  static const char kEmpty[1] = {0};
  Parser parser(m.data != nullptr ? m.data : kEmpty, static_cast<int64_t>(m.size), results, keep, ctx, out);
  if (m.data != nullptr) {
    parser.progress = &release_behind;
    parser.progress_arg = &m;
  }
  parser.run();
}

}  // namespace vlk::cap
