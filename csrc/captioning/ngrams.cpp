#include "captioning/ngrams.h"

#include <algorithm>
#include <utility>

#include "core/parallel.h"

namespace vlk::cap {

namespace {

struct WordRef {
  const char* p;
  int64_t n;
  uint64_t h;
};

// Splits every text in parallel: word counts first (for offsets), then the words themselves with their hash.
void split_all(const std::vector<TextView>& texts, Split mode, Tokens& out, std::vector<WordRef>& words) {
  const int64_t m = static_cast<int64_t>(texts.size());
  out.off.assign(m + 1, 0);
  vlk::parallel_for(m, 2048, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t c = 0;
      split_words(texts[i], mode, [&](const char*, int64_t) { ++c; });
      out.off[i + 1] = c;
    }
  });
  for (int64_t i = 0; i < m; ++i) out.off[i + 1] += out.off[i];
  words.resize(out.off[m]);
  out.ids.resize(out.off[m]);
  vlk::parallel_for(m, 2048, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t k = out.off[i];
      split_words(texts[i], mode, [&](const char* p, int64_t n) { words[k++] = WordRef{p, n, hash_bytes(p, n)}; });
    }
  });
}

}  // namespace

void tokenize_texts(const std::vector<TextView>& texts, Split mode, Vocab& vocab, Tokens& out) {
  std::vector<WordRef> words;
  split_all(texts, mode, out, words);
  // Interning is sequential: ids are dense and assigned in first-occurrence order.
  for (size_t i = 0; i < words.size(); ++i) out.ids[i] = vocab.intern(words[i].p, words[i].n, words[i].h);
}

void tokenize_texts_frozen(const std::vector<TextView>& texts, Split mode, const Vocab& vocab, Vocab& extra,
                           Tokens& out) {
  std::vector<WordRef> words;
  split_all(texts, mode, out, words);
  const int64_t m = static_cast<int64_t>(words.size());
  vlk::parallel_for(m, 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out.ids[i] = vocab.find(words[i].p, words[i].n, words[i].h);
  });
  const uint32_t base = vocab.size();
  for (int64_t i = 0; i < m; ++i) {
    if (out.ids[i] != UINT32_MAX) continue;
    const uint32_t id = extra.intern(words[i].p, words[i].n, words[i].h);
    if (static_cast<uint64_t>(base) + id >= kMaxWords) throw std::length_error("vocabulary exceeds 16,777,214 words");
    out.ids[i] = base + id;
  }
}

namespace {

template <typename T>
Span<T> carve(uint64_t*& cursor, const std::vector<T>& src) {
  Span<T> out{reinterpret_cast<T*>(cursor), src.size()};
  if (!src.empty()) std::memcpy(out.p, src.data(), src.size() * sizeof(T));
  cursor += (src.size() * sizeof(T) + 7) / 8;
  return out;
}

template <typename T>
size_t words_of(const std::vector<T>& v) {
  return (v.size() * sizeof(T) + 7) / 8;
}

}  // namespace

void NgramBuilder::build(const Tokens& tok, const int64_t* caps, int ncap, int n, int ref_begin, int ref_end,
                         ImageNgrams& out) {
  keys_.clear();
  hashes_.clear();
  in_ref_.clear();
  entries_.clear();
  group_.assign(static_cast<size_t>(ncap) * (kMaxN + 1), 0);
  lengths_.assign(ncap, 0);
  int64_t total = 0;
  for (int c = 0; c < ncap; ++c) {
    const int64_t L = tok.len(caps[c]);
    for (int k = 1; k <= n; ++k) total += L - k + 1 > 0 ? L - k + 1 : 0;
  }
  local_.clear_sparse(static_cast<size_t>(2 * total + 16));
  stamp_.clear();
  pos_.clear();
  for (int c = 0; c < ncap; ++c) {
    const uint32_t* w = tok.begin(caps[c]);
    const int64_t L = tok.len(caps[c]);
    const bool is_ref = c >= ref_begin && c < ref_end;
    lengths_[c] = L;
    uint32_t* grp = group_.data() + static_cast<size_t>(c) * (kMaxN + 1);
    grp[0] = static_cast<uint32_t>(entries_.size());
    for (int k = 1; k <= kMaxN; ++k) {
      if (k <= n) {
        for (int64_t i = 0; i + k <= L; ++i) {
          const Key key = make_key(w + i, k);
          const uint64_t h = key_hash(key);
          bool inserted;
          uint32_t* v = local_.upsert_tracked(key, h, static_cast<uint32_t>(keys_.size()), &inserted);
          if (inserted) {
            keys_.push_back(key);
            hashes_.push_back(h);
            in_ref_.push_back(0);
            stamp_.push_back(UINT32_MAX);
            pos_.push_back(0);
          }
          const uint32_t u = *v;
          if (is_ref) in_ref_[u] = 1;
          if (stamp_[u] != static_cast<uint32_t>(c)) {
            stamp_[u] = static_cast<uint32_t>(c);
            pos_[u] = static_cast<uint32_t>(entries_.size());
            entries_.push_back(ImageNgrams::Entry{u, 1});
          } else {
            ++entries_[pos_[u]].tf;
          }
        }
      }
      grp[k] = static_cast<uint32_t>(entries_.size());
    }
  }
  const size_t words = words_of(keys_) + words_of(hashes_) + words_of(entries_) + words_of(lengths_) +
                       words_of(group_) + words_of(in_ref_) + (keys_.size() * sizeof(uint32_t) + 7) / 8;
  out.storage.reset(new uint64_t[words]);
  uint64_t* cursor = out.storage.get();
  out.keys = carve(cursor, keys_);
  out.hashes = carve(cursor, hashes_);
  out.entries = carve(cursor, entries_);
  out.lengths = carve(cursor, lengths_);
  out.group = carve(cursor, group_);
  out.in_ref = carve(cursor, in_ref_);
  out.df_index = Span<uint32_t>{reinterpret_cast<uint32_t*>(cursor), keys_.size()};
  out.ncap = ncap;
}

}  // namespace vlk::cap

namespace vlk::cap {

namespace {

// Maps integer token ids to word ids through their decimal spelling; small ids are cached in a flat array.
template <typename Resolve>
void ids_to_words(const int64_t* data, const int64_t* starts, const int64_t* lens, int64_t count, Tokens& out,
                  Resolve&& resolve) {
  out.off.assign(count + 1, 0);
  for (int64_t c = 0; c < count; ++c) out.off[c + 1] = out.off[c] + lens[c];
  out.ids.resize(out.off[count]);
  constexpr int64_t kFlat = 1 << 20;
  std::vector<uint32_t> flat;
  std::vector<std::pair<int64_t, uint32_t>> spill;
  for (int64_t c = 0; c < count; ++c) {
    const int64_t* t = data + starts[c];
    uint32_t* o = out.ids.data() + out.off[c];
    for (int64_t j = 0; j < lens[c]; ++j) {
      const int64_t id = t[j];
      if (id >= 0 && id < kFlat) {
        if (static_cast<int64_t>(flat.size()) <= id) flat.resize(std::min<int64_t>(kFlat, 2 * id + 64), UINT32_MAX);
        if (flat[id] == UINT32_MAX) {
          const std::string s = std::to_string(id);
          flat[id] = resolve(s.data(), static_cast<int64_t>(s.size()));
        }
        o[j] = flat[id];
      } else {
        auto it = std::find_if(spill.begin(), spill.end(), [&](const auto& p) { return p.first == id; });
        if (it == spill.end()) {
          const std::string s = std::to_string(id);
          spill.emplace_back(id, resolve(s.data(), static_cast<int64_t>(s.size())));
          it = spill.end() - 1;
        }
        o[j] = it->second;
      }
    }
  }
}

}  // namespace

void tokenize_ids(const int64_t* data, const int64_t* starts, const int64_t* lens, int64_t count, Vocab& vocab,
                  Tokens& out) {
  ids_to_words(data, starts, lens, count, out,
               [&](const char* p, int64_t n) { return vocab.intern(p, n, hash_bytes(p, n)); });
}

void tokenize_ids_frozen(const int64_t* data, const int64_t* starts, const int64_t* lens, int64_t count,
                         const Vocab& vocab, Vocab& extra, Tokens& out) {
  const uint32_t base = vocab.size();
  ids_to_words(data, starts, lens, count, out, [&](const char* p, int64_t n) {
    const uint64_t h = hash_bytes(p, n);
    const uint32_t id = vocab.find(p, n, h);
    if (id != UINT32_MAX) return id;
    const uint32_t x = extra.intern(p, n, h);
    if (static_cast<uint64_t>(base) + x >= kMaxWords) throw std::length_error("vocabulary exceeds 16,777,214 words");
    return base + x;
  });
}

void append_tokens(Tokens& dst, const Tokens& src) {
  const int64_t base = static_cast<int64_t>(dst.ids.size());
  dst.ids.insert(dst.ids.end(), src.ids.begin(), src.ids.end());
  for (int64_t c = 1; c < static_cast<int64_t>(src.off.size()); ++c) dst.off.push_back(base + src.off[c]);
}

}  // namespace vlk::cap
