// Shared machinery of the caption metrics: whitespace splitting with Python str.split() semantics, word
// interning, exact n-gram keys (n <= 4) packed from word ids, per-image local n-gram dictionaries and a sharded
// document-frequency table. Everything is exact (keys hold the word ids, never only a hash).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/parallel.h"

namespace vlk::cap {

// Polls for Ctrl-C (vlk::check_interrupt) once per ~64k units of work spent (an n-gram, a byte, a DP cell): a long
// loop stops within milliseconds, at the cost of a decrement per unit.
class InterruptPoll {
 public:
  void spend(int64_t work) {
    left_ -= work;
    if (left_ < 0) {
      left_ = kWork;
      vlk::check_interrupt();
    }
  }

 private:
  static constexpr int64_t kWork = int64_t{1} << 16;
  int64_t left_ = kWork;
};

constexpr int kMaxN = 4;
// Word ids are stored +1 in 24-bit fields of a key; 0 means "no word at this position".
constexpr uint32_t kMaxWords = (1u << 24) - 2;

struct TextView {
  const char* p;
  int64_t n;
};

enum class Split { kWhitespace, kSpace };

// Python's str.isspace() code points (the separators of str.split() without arguments) in UTF-8; the input is
// valid UTF-8 because it comes from Python str objects.
inline int whitespace_len(const unsigned char* s, const unsigned char* end) {
  const unsigned char c = s[0];
  if (c < 0x80) return ((c >= 9 && c <= 13) || (c >= 28 && c <= 32)) ? 1 : 0;
  if (c == 0xC2 && s + 1 < end) return (s[1] == 0x85 || s[1] == 0xA0) ? 2 : 0;
  if (c >= 0xE1 && c <= 0xE3 && s + 2 < end) {
    const unsigned char a = s[1], b = s[2];
    if (c == 0xE1) return (a == 0x9A && b == 0x80) ? 3 : 0;
    if (c == 0xE3) return (a == 0x80 && b == 0x80) ? 3 : 0;
    if (a == 0x80 && (b <= 0x8A || b == 0xA8 || b == 0xA9 || b == 0xAF)) return 3;
    if (a == 0x81 && b == 0x9F) return 3;
  }
  return 0;
}

// Calls emit(begin, length) for every word, in order. kWhitespace = str.split(); kSpace = str.split(" ")
// (empty fields kept, so "" yields one empty word).
template <typename F>
inline void split_words(TextView t, Split mode, F&& emit) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(t.p);
  const unsigned char* end = s + t.n;
  if (mode == Split::kSpace) {
    const unsigned char* w = s;
    for (const unsigned char* q = s; q < end; ++q) {
      if (*q == ' ') {
        emit(reinterpret_cast<const char*>(w), static_cast<int64_t>(q - w));
        w = q + 1;
      }
    }
    emit(reinterpret_cast<const char*>(w), static_cast<int64_t>(end - w));
    return;
  }
  const unsigned char* q = s;
  // ASCII bytes are classified inline; only lead bytes of multi-byte sequences go through whitespace_len.
  while (q < end) {
    while (q < end) {
      const unsigned char c = *q;
      if (c < 0x80) {
        if (!((c >= 9 && c <= 13) || (c >= 28 && c <= 32))) break;
        ++q;
      } else {
        const int ws = whitespace_len(q, end);
        if (ws == 0) break;
        q += ws;
      }
    }
    if (q >= end) break;
    const unsigned char* w = q;
    while (q < end) {
      const unsigned char c = *q;
      if (c < 0x80) {
        if ((c >= 9 && c <= 13) || (c >= 28 && c <= 32)) break;
      } else if (whitespace_len(q, end) != 0) {
        break;
      }
      ++q;
    }
    emit(reinterpret_cast<const char*>(w), static_cast<int64_t>(q - w));
  }
}

// The last mixing steps of every hash here (splitmix64's finalizer, halved).
inline uint64_t finish_hash(uint64_t h) {
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

inline uint64_t hash_bytes(const char* p, int64_t n) {
  // FNV-1a over 8-byte words then a final mix: fast for short words, only used to place words in the table.
  uint64_t h = 0xcbf29ce484222325ull ^ static_cast<uint64_t>(n);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  std::memcpy(&w, p + i, static_cast<size_t>(n - i));
  return finish_hash((h ^ w) * 0x9E3779B97F4A7C15ull);
}

// Word -> dense id. Open addressing over (hash, id); strings live in one arena.
class Vocab {
 public:
  Vocab() { rehash(1024); }
  uint32_t size() const { return static_cast<uint32_t>(offsets_.size()); }
  std::string_view word(uint32_t id) const {
    return std::string_view(arena_.data() + offsets_[id], lengths_[id]);
  }
  // Returns the id, or UINT32_MAX when absent.
  uint32_t find(const char* p, int64_t n, uint64_t h) const {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id == kEmpty) return kEmpty;
      if (s.hash == h && lengths_[s.id] == n && std::memcmp(arena_.data() + offsets_[s.id], p, n) == 0) return s.id;
    }
  }
  uint32_t intern(const char* p, int64_t n, uint64_t h) {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id == kEmpty) {
        if (offsets_.size() >= kMaxWords) throw std::length_error("vocabulary exceeds 16,777,214 distinct words");
        const uint32_t id = size();
        offsets_.push_back(static_cast<int64_t>(arena_.size()));
        lengths_.push_back(n);
        arena_.append(p, static_cast<size_t>(n));
        s.hash = h;
        s.id = id;
        if (2 * offsets_.size() > slots_.size()) rehash(slots_.size() * 2);
        return id;
      }
      if (s.hash == h && lengths_[s.id] == n && std::memcmp(arena_.data() + offsets_[s.id], p, n) == 0) return s.id;
    }
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t hash;
    uint32_t id;
  };
  void rehash(size_t cap) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(cap, Slot{0, kEmpty});
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (s.id == kEmpty) continue;
      uint64_t i = s.hash & mask_;
      while (slots_[i].id != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  std::string arena_;
  std::vector<int64_t> offsets_, lengths_;
};

// Token ids of many captions: caption c is ids[off[c] .. off[c+1]).
struct Tokens {
  std::vector<uint32_t> ids;
  std::vector<int64_t> off{0};
  int64_t size() const { return static_cast<int64_t>(off.size()) - 1; }
  const uint32_t* begin(int64_t c) const { return ids.data() + off[c]; }
  int64_t len(int64_t c) const { return off[c + 1] - off[c]; }
};

// Splits and interns texts. With `frozen`, words already in `vocab` keep their id and `vocab` is not modified;
// other words get ids >= frozen_size from `extra` (so they still match each other inside this call).
void tokenize_texts(const std::vector<TextView>& texts, Split mode, Vocab& vocab, Tokens& out);
void tokenize_texts_frozen(const std::vector<TextView>& texts, Split mode, const Vocab& vocab, Vocab& extra,
                           Tokens& out);
// tokenize_texts with a private vocabulary (the same ids: dense, in first-occurrence order) that holds only words that
// may occur more than once: memory ~4 bytes per word plus the repeated words, for very large inputs.
void tokenize_texts_compact(const std::vector<TextView>& texts, Split mode, Tokens& out);

// Exact n-gram key: up to four (word id + 1) in 24-bit fields; lo != 0 for every real n-gram.
struct Key {
  uint64_t lo;
  uint32_t hi;
  bool operator==(const Key& o) const { return lo == o.lo && hi == o.hi; }
};

inline Key make_key(const uint32_t* w, int k) {
  uint64_t a = w[0] + 1ull, b = k > 1 ? w[1] + 1ull : 0, c = k > 2 ? w[2] + 1ull : 0, d = k > 3 ? w[3] + 1ull : 0;
  return Key{a | (b << 24) | ((c & 0xFFFFull) << 48), static_cast<uint32_t>((c >> 16) | (d << 8))};
}

inline uint64_t key_hash(const Key& k) {
  return finish_hash(k.lo * 0x9E3779B97F4A7C15ull ^
                     (static_cast<uint64_t>(k.hi) + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full);
}

// Key -> value with open addressing; a table of one shard. Not thread-safe for writes.
class KeyTable {
 public:
  struct Slot {
    uint64_t lo;
    uint32_t hi;
    uint32_t val;
  };
  explicit KeyTable(size_t cap = 16) { reset(cap); }
  // `poll`: a large table is zeroed in steps with an interrupt check between them (hundreds of MB of fresh pages
  // for one huge image); only for tables that are dropped when the call stops.
  void reset(size_t cap, bool poll = false) {
    size_t c = 16;
    while (c < cap) c <<= 1;
    constexpr size_t kStep = size_t{1} << 20;
    if (!poll || c <= kStep) {
      slots_.assign(c, Slot{0, 0, 0});
    } else {
      slots_.clear();
      slots_.reserve(c);
      for (size_t i = 0; i < c; i += kStep) {
        vlk::check_interrupt();
        slots_.insert(slots_.end(), std::min(kStep, c - i), Slot{0, 0, 0});
      }
    }
    mask_ = c - 1;
    count_ = 0;
    used_.clear();
  }
  size_t size() const { return count_; }
  size_t capacity() const { return slots_.size(); }
  // Empties the table in O(size) by clearing only occupied slots (a local dictionary is reused per image).
  void clear_sparse(size_t min_cap, bool poll = false) {
    if (slots_.size() < min_cap || slots_.size() > 8 * min_cap + 1024) {
      reset(min_cap, poll);
      return;
    }
    for (uint32_t i : used_) slots_[i] = Slot{0, 0, 0};
    used_.clear();
    count_ = 0;
  }
  // upsert for a table cleared with clear_sparse: remembers the slots it fills and never grows.
  uint32_t* upsert_tracked(const Key& k, uint64_t h, uint32_t init, bool* inserted) {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.lo == 0) {
        s = Slot{k.lo, k.hi, init};
        ++count_;
        used_.push_back(static_cast<uint32_t>(i));
        *inserted = true;
        return &s.val;
      }
      if (s.lo == k.lo && s.hi == k.hi) {
        *inserted = false;
        return &s.val;
      }
    }
  }
  // upsert_tracked that doubles the table past 3/4 load (the filled slots stay tracked).
  uint32_t* upsert_tracked_growing(const Key& k, uint64_t h, uint32_t init, bool* inserted) {
    if (4 * (count_ + 1) > 3 * slots_.size()) {
      grow();
      used_.clear();
      for (size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].lo != 0) used_.push_back(static_cast<uint32_t>(i));
    }
    return upsert_tracked(k, h, init, inserted);
  }
  // Pointer to the value of `k`, inserting it with value `init` when absent.
  uint32_t* upsert(const Key& k, uint64_t h, uint32_t init, bool* inserted) {
    // Linear probing stays short up to ~3/4 load with a mixed 64-bit hash.
    if (4 * (count_ + 1) > 3 * slots_.size()) grow();
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.lo == 0) {
        s = Slot{k.lo, k.hi, init};
        ++count_;
        *inserted = true;
        return &s.val;
      }
      if (s.lo == k.lo && s.hi == k.hi) {
        *inserted = false;
        return &s.val;
      }
    }
  }
  const uint32_t* find(const Key& k, uint64_t h) const {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.lo == 0) return nullptr;
      if (s.lo == k.lo && s.hi == k.hi) return &s.val;
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.lo != 0) f(Key{s.lo, s.hi}, s.val);
  }

 private:
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{0, 0, 0});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.lo == 0) continue;
      uint64_t i = key_hash(Key{s.lo, s.hi}) & mask_;
      while (slots_[i].lo != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::vector<uint32_t> used_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

// Document frequency: key -> number of documents (images) whose references contain the n-gram. Sharded by the
// high hash bits so shards are filled in parallel without locks; read-only afterwards. Each shard maps a key to a
// dense index into its counts. 256 shards keep one shard's table in L2 while it is filled (COCO val2014: 1.36M
// distinct n-grams, ~5k per shard): the df pass is a radix-partitioned hash join, not random probes into one table.
class DfTable {
 public:
  static constexpr int kShardBits = 8;
  static constexpr int kShards = 1 << kShardBits;
  DfTable() : shards_(kShards), counts_(kShards) {}
  static int shard_of(uint64_t h) { return static_cast<int>(h >> (64 - kShardBits)); }
  uint32_t get(const Key& k, uint64_t h) const {
    const int s = shard_of(h);
    const uint32_t* v = shards_[s].find(k, h);
    return v ? counts_[s][*v] : 0;
  }
  // Dense index of `k` in its shard (inserted with count 0 when absent). Only the shard's owner thread calls it.
  uint32_t index_of(int s, const Key& k, uint64_t h) {
    bool inserted;
    uint32_t* v = shards_[s].upsert(k, h, static_cast<uint32_t>(counts_[s].size()), &inserted);
    if (inserted) {
      if (counts_[s].size() >= UINT32_MAX) throw std::length_error("too many distinct n-grams");
      counts_[s].push_back(0);
    }
    return *v;
  }
  uint32_t& count(int s, uint32_t index) { return counts_[s][index]; }
  std::vector<uint32_t>& counts(int s) { return counts_[s]; }
  void reserve(int s, size_t n) {
    if (shards_[s].size() == 0) shards_[s].reset(n);
  }
  template <typename F>
  void for_each(F&& f) const {
    for (int s = 0; s < kShards; ++s) shards_[s].for_each([&](const Key& k, uint32_t i) { f(k, counts_[s][i]); });
  }
  uint32_t max_df() const { return max_df_; }
  void set_max_df(uint32_t m) { max_df_ = m; }
  size_t size() const {
    size_t n = 0;
    for (const auto& s : shards_) n += s.size();
    return n;
  }

 private:
  std::vector<KeyTable> shards_;
  std::vector<std::vector<uint32_t>> counts_;
  uint32_t max_df_ = 0;
};

template <typename T>
struct Span {
  T* p = nullptr;
  size_t n = 0;
  size_t size() const { return n; }
  T* data() const { return p; }
  T& operator[](size_t i) const { return p[i]; }
};

// Bump allocator of 8-byte words in 1 MiB blocks that are kept on reset(): reused memory is already mapped, and
// page faults on fresh memory cost more than building short captions' n-grams does.
class Arena {
 public:
  uint64_t* alloc(size_t words) {
    while (block_ < blocks_.size()) {
      if (used_ + words <= sizes_[block_]) {
        uint64_t* p = blocks_[block_].get() + used_;
        used_ += words;
        return p;
      }
      ++block_;
      used_ = 0;
    }
    const size_t size = words > kBlockWords ? words : kBlockWords;
    blocks_.emplace_back(new uint64_t[size]);
    sizes_.push_back(size);
    used_ = words;
    return blocks_.back().get();
  }
  void reset() {
    block_ = 0;
    used_ = 0;
  }
  size_t footprint() const {
    size_t n = 0;
    for (size_t s : sizes_) n += s * sizeof(uint64_t);
    return n;
  }

 private:
  static constexpr size_t kBlockWords = size_t{1} << 17;
  std::vector<std::unique_ptr<uint64_t[]>> blocks_;
  std::vector<size_t> sizes_;
  size_t block_ = 0, used_ = 0;
};

// N-grams of one image (candidate + references) against a local dictionary: every distinct n-gram of the image
// gets a local index; each caption is a list of (local index, count) in pycocoevalcap's precook order (n-gram
// length outer, position inner, first occurrence), grouped by n. The arrays live in the caller's Arena (thousands
// of images stay alive between the df and the scoring passes); the keys themselves stay in the builder, which hands
// them to the df pass right after the build.
struct ImageNgrams {
  struct Entry {
    uint32_t local;
    uint32_t tf;
  };
  Span<Entry> entries;      // all captions' entries
  Span<uint32_t> group;     // per caption kMaxN+1 offsets into entries
  Span<uint32_t> df;        // [U] document frequency of each n-gram, filled by the df pass
  uint32_t num_ngrams = 0;  // U
  int ncap = 0;
  const Entry* begin(int cap, int n) const { return entries.data() + group[cap * (kMaxN + 1) + n]; }
  const Entry* end(int cap, int n) const { return entries.data() + group[cap * (kMaxN + 1) + n + 1]; }
};

// Builds ImageNgrams for the captions tok[caps[0..ncap)]; captions ref_begin..ref_end-1 are references. The
// distinct n-grams of the last build stay readable through keys()/hashes()/in_ref() until the next build.
class NgramBuilder {
 public:
  // out's arrays are allocated from `arena`; out.df is left empty (the df pass points it at its own storage).
  void build(const Tokens& tok, const int64_t* caps, int ncap, int n, int ref_begin, int ref_end, ImageNgrams& out,
             Arena& arena);
  uint32_t size() const { return count_; }
  const Key* keys() const { return keys_.data(); }
  const uint64_t* hashes() const { return hashes_.data(); }
  const uint8_t* in_ref() const { return in_ref_.data(); }

 private:
  KeyTable local_;
  InterruptPoll poll_;
  uint32_t count_ = 0;
  std::vector<uint32_t> stamp_, pos_;
  std::vector<Key> keys_;
  std::vector<uint64_t> hashes_;
  std::vector<uint8_t> in_ref_;
  std::vector<ImageNgrams::Entry> entries_;
  std::vector<uint32_t> group_;
};

// Calls f(i, caps, builder, im, scratch) for every image i, in parallel: caps = {cand[i], its references...}, `im`
// the image's n-grams of lengths 1..n (references: caps[1..]) from `builder`, `scratch` one Scratch per thread.
template <typename Scratch, typename F>
void for_each_image(const Tokens& tok, int n, const int64_t* cand, const int64_t* ref_off, const int64_t* ref_caps,
                    int64_t n_images, F&& f) {
  vlk::parallel_for(n_images, 64, [&](int64_t b, int64_t e) {
    NgramBuilder builder;
    Arena arena;
    ImageNgrams im;
    std::vector<int64_t> caps;
    Scratch scratch;
    for (int64_t i = b; i < e; ++i) {
      caps.assign(1, cand[i]);
      caps.insert(caps.end(), ref_caps + ref_off[i], ref_caps + ref_off[i + 1]);
      const int ncap = static_cast<int>(caps.size());
      if (ncap < 2) throw std::invalid_argument("an image has no references");
      arena.reset();
      builder.build(tok, caps.data(), ncap, n, 1, ncap, im, arena);
      f(i, caps, builder, im, scratch);
    }
  });
}

}  // namespace vlk::cap

namespace vlk::cap {

// Token-id captions (ruotianluo convention): each integer id is the word spelled by its decimal digits, so id
// sequences and their space-joined strings give the same n-grams. Captions are data[starts[c] .. +lens[c]).
void tokenize_ids(const int64_t* data, const int64_t* starts, const int64_t* lens, int64_t count, Vocab& vocab,
                  Tokens& out);
void tokenize_ids_frozen(const int64_t* data, const int64_t* starts, const int64_t* lens, int64_t count,
                         const Vocab& vocab, Vocab& extra, Tokens& out);
// Appends src's captions after dst's.
void append_tokens(Tokens& dst, const Tokens& src);
// Replaces every word w of `tok` by the whitespace-separated words of repl[off[w], off[w + 1]) (a stemmer's output
// for w), interned in a fresh vocabulary: each caption becomes " ".join(replacements).split(). Polls for Ctrl-C.
void replace_words(const std::string& repl, const std::vector<int64_t>& off, Tokens& tok);

}  // namespace vlk::cap
