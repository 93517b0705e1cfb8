#include "captioning/ngrams.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/parallel.h"

namespace vlk::cap {

namespace {

struct WordRef {
  const char* p;
  int64_t n;
  uint64_t h;
};

// Splits every text in parallel in one pass: each thread keeps its words (with their hash) and per-text counts,
// then the chunks are concatenated in text order.
void split_all(const std::vector<TextView>& texts, Split mode, Tokens& out, std::vector<WordRef>& words) {
  const int64_t m = static_cast<int64_t>(texts.size());
  out.off.assign(m + 1, 0);
  struct Chunk {
    int64_t begin;
    std::vector<WordRef> words;
  };
  std::vector<Chunk> chunks;
  std::mutex mu;
  vlk::parallel_for(m, 2048, [&](int64_t b, int64_t e) {
    InterruptPoll poll;
    Chunk c{b, {}};
    int64_t bytes = 0;
    for (int64_t i = b; i < e; ++i) bytes += texts[i].n;
    c.words.reserve(static_cast<size_t>(bytes / 4 + 16));
    for (int64_t i = b; i < e; ++i) {
      const size_t before = c.words.size();
      split_words(texts[i], mode, [&](const char* p, int64_t n) { c.words.push_back(WordRef{p, n, hash_bytes(p, n)}); });
      out.off[i + 1] = static_cast<int64_t>(c.words.size() - before);
      poll.spend(texts[i].n + 16);
    }
    std::lock_guard<std::mutex> lock(mu);
    chunks.push_back(std::move(c));
  });
  std::sort(chunks.begin(), chunks.end(), [](const Chunk& x, const Chunk& y) { return x.begin < y.begin; });
  for (int64_t i = 0; i < m; ++i) out.off[i + 1] += out.off[i];
  if (chunks.size() == 1) {
    words = std::move(chunks[0].words);
  } else {
    words.clear();
    words.reserve(static_cast<size_t>(out.off[m]));
    for (const Chunk& c : chunks) words.insert(words.end(), c.words.begin(), c.words.end());
  }
  out.ids.resize(out.off[m]);
}

// Word -> dense id for words that stay readable where they are (no copy): open addressing over ids, the words
// compared in place. ~24 bytes per distinct word, against ~56 for Vocab (which owns its strings).
class InPlaceVocab {
 public:
  InPlaceVocab() : slots_(1024, 0), mask_(1023) {}
  // The id of the word, and whether it is new.
  uint32_t intern(const char* p, int64_t n, uint64_t h, bool* added) {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint32_t s = slots_[i];
      if (s == 0) {
        const uint32_t id = static_cast<uint32_t>(words_.size());
        words_.push_back(TextView{p, n});
        slots_[i] = id + 1;
        if (2 * words_.size() > slots_.size()) grow();
        *added = true;
        return id;
      }
      const TextView& w = words_[s - 1];
      if (w.n == n && std::memcmp(w.p, p, static_cast<size_t>(n)) == 0) {
        *added = false;
        return s - 1;
      }
    }
  }

 private:
  void grow() {
    std::vector<uint32_t> slots(slots_.size() * 2, 0);
    mask_ = slots.size() - 1;
    for (size_t id = 0; id < words_.size(); ++id) {
      uint64_t i = hash_bytes(words_[id].p, words_[id].n) & mask_;
      while (slots[i] != 0) i = (i + 1) & mask_;
      slots[i] = static_cast<uint32_t>(id + 1);
    }
    slots_.swap(slots);
  }
  std::vector<uint32_t> slots_;  // id + 1, 0 = empty
  uint64_t mask_;
  std::vector<TextView> words_;
};

}  // namespace

void tokenize_texts(const std::vector<TextView>& texts, Split mode, Vocab& vocab, Tokens& out) {
  // Each thread splits, hashes and interns its share of the texts into a small local vocabulary (in cache, no
  // per-word buffer); the local vocabularies are then merged in text order, so ids are dense and in global
  // first-occurrence order exactly as a sequential pass would assign them, and ids are remapped in parallel.
  const int64_t m = static_cast<int64_t>(texts.size());
  out.off.assign(m + 1, 0);
  int64_t bytes = 0;
  for (const TextView& t : texts) bytes += t.n;
  struct Chunk {
    int64_t begin, end;
    Vocab local;
    std::vector<uint32_t> ids;
    std::vector<uint32_t> to_global;
  };
  std::vector<std::unique_ptr<Chunk>> chunks;
  std::mutex mu;
  vlk::parallel_for(m, 4096, [&](int64_t b, int64_t e) {
    InterruptPoll poll;
    auto c = std::make_unique<Chunk>();
    c->begin = b;
    c->end = e;
    int64_t cb = 0;
    for (int64_t i = b; i < e; ++i) cb += texts[i].n;
    c->ids.reserve(static_cast<size_t>(cb / 5 + 16));
    for (int64_t i = b; i < e; ++i) {
      const size_t before = c->ids.size();
      split_words(texts[i], mode,
                  [&](const char* p, int64_t n) { c->ids.push_back(c->local.intern(p, n, hash_bytes(p, n))); });
      out.off[i + 1] = static_cast<int64_t>(c->ids.size() - before);
      poll.spend(texts[i].n + 16);
    }
    std::lock_guard<std::mutex> lock(mu);
    chunks.push_back(std::move(c));
  });
  std::sort(chunks.begin(), chunks.end(), [](const auto& x, const auto& y) { return x->begin < y->begin; });
  for (int64_t i = 0; i < m; ++i) out.off[i + 1] += out.off[i];
  InterruptPoll poll;
  for (auto& c : chunks) {
    c->to_global.resize(c->local.size());
    for (uint32_t id = 0; id < c->local.size(); ++id) {
      poll.spend(16);
      const std::string_view w = c->local.word(id);
      c->to_global[id] = vocab.intern(w.data(), static_cast<int64_t>(w.size()), hash_bytes(w.data(), w.size()));
    }
  }
  out.ids.resize(static_cast<size_t>(out.off[m]));
  vlk::parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const Chunk& c = *chunks[k];
      uint32_t* dst = out.ids.data() + out.off[c.begin];
      for (size_t j = 0; j < c.ids.size(); ++j) dst[j] = c.to_global[c.ids[j]];
    }
  });
}

void tokenize_texts_compact(const std::vector<TextView>& texts, Split mode, Tokens& out) {
  // Pass 1 counts the words of each text; pass 2 marks the hash buckets the words fall in (seen once, seen again);
  // pass 3 gives a word alone in its bucket a fresh id (no other occurrence of it exists) and interns the others.
  // The vocabulary holds only the words that may repeat: on distinct-heavy text it is a small fraction of the words.
  const int64_t m = static_cast<int64_t>(texts.size());
  out.off.assign(m + 1, 0);
  vlk::parallel_for(m, 4096, [&](int64_t b, int64_t e) {
    InterruptPoll poll;
    for (int64_t i = b; i < e; ++i) {
      int64_t words = 0;
      split_words(texts[i], mode, [&](const char*, int64_t) { ++words; });
      out.off[i + 1] = words;
      poll.spend(texts[i].n + 16);
    }
  });
  for (int64_t i = 0; i < m; ++i) out.off[i + 1] += out.off[i];
  const int64_t total = out.off[m];
  int shift = 64 - 6;  // buckets: a power of two >= 8 per word, as bits in 64-bit words
  while (shift > 1 && (uint64_t{1} << (64 - shift)) < static_cast<uint64_t>(8 * total)) --shift;
  std::vector<uint64_t> once(size_t{1} << (64 - shift - 6), 0), again(once.size(), 0);
  vlk::parallel_for(m, 4096, [&](int64_t b, int64_t e) {
    InterruptPoll poll;
    for (int64_t i = b; i < e; ++i) {
      split_words(texts[i], mode, [&](const char* p, int64_t n) {
        const uint64_t bucket = hash_bytes(p, n) >> shift;
        const uint64_t bit = uint64_t{1} << (bucket & 63);
        if (__atomic_fetch_or(&once[bucket >> 6], bit, __ATOMIC_RELAXED) & bit)
          __atomic_fetch_or(&again[bucket >> 6], bit, __ATOMIC_RELAXED);
      });
      poll.spend(texts[i].n + 16);
    }
  });
  std::vector<uint64_t>().swap(once);
  out.ids.resize(static_cast<size_t>(total));
  InPlaceVocab vocab;
  std::vector<uint32_t> to_id;  // vocabulary id -> word id
  uint32_t next = 0;
  int64_t j = 0;
  InterruptPoll poll;
  for (int64_t i = 0; i < m; ++i) {
    split_words(texts[i], mode, [&](const char* p, int64_t n) {
      const uint64_t h = hash_bytes(p, n);
      const uint64_t bucket = h >> shift;
      if ((again[bucket >> 6] >> (bucket & 63) & 1) == 0) {
        if (next >= kMaxWords) throw std::length_error("vocabulary exceeds 16,777,214 distinct words");
        out.ids[j++] = next++;
        return;
      }
      bool added;
      const uint32_t v = vocab.intern(p, n, h, &added);
      if (added) {
        if (next >= kMaxWords) throw std::length_error("vocabulary exceeds 16,777,214 distinct words");
        to_id.push_back(next++);
      }
      out.ids[j++] = to_id[v];
    });
    poll.spend(texts[i].n + 16);
  }
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
  InterruptPoll poll;
  for (int64_t i = 0; i < m; ++i) {
    poll.spend(1);
    if (out.ids[i] != UINT32_MAX) continue;
    const uint32_t id = extra.intern(words[i].p, words[i].n, words[i].h);
    if (static_cast<uint64_t>(base) + id >= kMaxWords) throw std::length_error("vocabulary exceeds 16,777,214 words");
    out.ids[i] = base + id;
  }
}


constexpr int64_t kPollStep = int64_t{1} << 16;

void NgramBuilder::build(const Tokens& tok, const int64_t* caps, int ncap, int n, int ref_begin, int ref_end,
                         ImageNgrams& out, Arena& arena) {
  int64_t total = 0;
  for (int c = 0; c < ncap; ++c) {
    const int64_t L = tok.len(caps[c]);
    for (int k = 1; k <= n; ++k) total += L - k + 1 > 0 ? L - k + 1 : 0;
  }
  if (total >= static_cast<int64_t>(UINT32_MAX)) throw std::length_error("too many n-grams in one image");
  // Arrays sized for the worst case (every occurrence distinct) and filled by index: no push_back in the loop.
  const size_t cap = static_cast<size_t>(total);
  if (keys_.size() < cap) {
    // Fresh pages for a huge image take a while to fault in: poll between the arrays (the builder is dropped
    // when the call stops).
    keys_.resize(cap);
    vlk::check_interrupt();
    hashes_.resize(cap);
    in_ref_.resize(cap);
    vlk::check_interrupt();
    stamp_.resize(cap);
    pos_.resize(cap);
    vlk::check_interrupt();
    entries_.resize(cap);
  }
  group_.resize(static_cast<size_t>(ncap) * (kMaxN + 1));
  local_.clear_sparse(2 * cap + 16, true);
  uint32_t U = 0, E = 0;
  Key* keys = keys_.data();
  uint64_t* hashes = hashes_.data();
  uint8_t* in_ref = in_ref_.data();
  uint32_t* stamp = stamp_.data();
  uint32_t* pos = pos_.data();
  ImageNgrams::Entry* entries = entries_.data();
  for (int c = 0; c < ncap; ++c) {
    const uint32_t* w = tok.begin(caps[c]);
    const int64_t L = tok.len(caps[c]);
    const uint8_t is_ref = c >= ref_begin && c < ref_end;
    uint32_t* grp = group_.data() + static_cast<size_t>(c) * (kMaxN + 1);
    grp[0] = E;
    for (int k = 1; k <= kMaxN; ++k) {
      if (k <= n) {
        poll_.spend(L);
        // Positions in steps of 64k with an interrupt check between (a caption of millions of words), the inner
        // loop left tight.
        for (int64_t i0 = 0; i0 + k <= L; i0 += kPollStep) {
          if (i0 > 0) vlk::check_interrupt();
          const int64_t i1 = std::min(L - k + 1, i0 + kPollStep);
          for (int64_t i = i0; i < i1; ++i) {
            const Key key = make_key(w + i, k);
            const uint64_t h = key_hash(key);
            bool inserted;
            uint32_t* v = local_.upsert_tracked(key, h, U, &inserted);
            if (inserted) {
              keys[U] = key;
              hashes[U] = h;
              in_ref[U] = 0;
              stamp[U] = UINT32_MAX;
              ++U;
            }
            const uint32_t u = *v;
            in_ref[u] |= is_ref;
            if (stamp[u] != static_cast<uint32_t>(c)) {
              stamp[u] = static_cast<uint32_t>(c);
              pos[u] = E;
              entries[E++] = ImageNgrams::Entry{u, 1};
            } else {
              ++entries[pos[u]].tf;
            }
          }
        }
      }
      grp[k] = E;
    }
  }
  count_ = U;
  const size_t words = (E * sizeof(ImageNgrams::Entry) + 7) / 8 + (group_.size() * sizeof(uint32_t) + 7) / 8;
  uint64_t* cursor = arena.alloc(words);
  out.entries = Span<ImageNgrams::Entry>{reinterpret_cast<ImageNgrams::Entry*>(cursor), E};
  // An image without a word has no entry, and entries_ may never have been allocated (memcpy from null is UB).
  if (E > 0) std::memcpy(cursor, entries, E * sizeof(ImageNgrams::Entry));
  cursor += (E * sizeof(ImageNgrams::Entry) + 7) / 8;
  out.group = Span<uint32_t>{reinterpret_cast<uint32_t*>(cursor), group_.size()};
  if (!group_.empty()) std::memcpy(cursor, group_.data(), group_.size() * sizeof(uint32_t));
  out.df = Span<uint32_t>{};
  out.num_ngrams = U;
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
  std::unordered_map<int64_t, uint32_t> spill;  // ids outside [0, kFlat): hashed, so any id mix stays linear
  InterruptPoll poll;
  for (int64_t c = 0; c < count; ++c) {
    poll.spend(lens[c] + 1);
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
        auto it = spill.find(id);
        if (it == spill.end()) {
          const std::string s = std::to_string(id);
          it = spill.emplace(id, resolve(s.data(), static_cast<int64_t>(s.size()))).first;
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

void replace_words(const std::string& repl, const std::vector<int64_t>& off, Tokens& tok) {
  const int64_t nw = static_cast<int64_t>(off.size()) - 1;
  // Word w -> its replacement's tokens map_ids[map_off[w] .. map_off[w+1]) in a fresh vocabulary.
  Vocab fresh;
  std::vector<uint32_t> map_ids;
  std::vector<int64_t> map_off{0};
  map_off.reserve(static_cast<size_t>(nw) + 1);
  for (int64_t w = 0; w < nw; ++w) {
    const TextView t{repl.data() + off[w], off[w + 1] - off[w]};
    split_words(t, Split::kWhitespace,
                [&](const char* p, int64_t n) { map_ids.push_back(fresh.intern(p, n, hash_bytes(p, n))); });
    map_off.push_back(static_cast<int64_t>(map_ids.size()));
    if ((w & 4095) == 0) vlk::check_interrupt();
  }
  Tokens out;
  out.off.reserve(tok.off.size());
  out.ids.reserve(tok.ids.size());
  for (int64_t c = 0; c < tok.size(); ++c) {
    for (const uint32_t* w = tok.begin(c); w != tok.begin(c) + tok.len(c); ++w) {
      if (*w >= static_cast<uint64_t>(nw)) throw std::out_of_range("replace_words: word id without a replacement");
      out.ids.insert(out.ids.end(), map_ids.begin() + map_off[*w], map_ids.begin() + map_off[*w + 1]);
    }
    out.off.push_back(static_cast<int64_t>(out.ids.size()));
    if ((c & 4095) == 0) vlk::check_interrupt();
  }
  tok = std::move(out);
}

}  // namespace vlk::cap
