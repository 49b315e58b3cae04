#include "engine/text/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "engine/text/utf8.h"

namespace mt {

namespace {

std::atomic<uint64_t> next_instance{1};

// Words longer than this are encoded without the cache (Hugging Face does the same at 256).
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCachedWords = 1 << 16;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// One thread's encoded words for one Bpe (cleared when the thread serves another, or when full).
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> words;
  std::vector<int32_t> ids;
  void reset(uint64_t new_owner) {
    owner = new_owner;
    words.clear();
    ids.clear();
  }
};

struct HeapEntry {
  int32_t rank, pos, new_id;
  // std heaps pop the largest: the largest here is the lowest rank, then the leftmost position.
  bool operator<(const HeapEntry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

Result<Bpe> Bpe::create(std::vector<std::pair<std::string, int32_t>> vocab,
                        const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options) {
  Bpe m;
  m.opt_ = std::move(options);
  m.instance_ = next_instance.fetch_add(1);
  if (merges.size() > kMaxMerges)
    return invalid_argument("model.merges has " + std::to_string(merges.size()) + " entries, more than the limit of " +
                            std::to_string(kMaxMerges));
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    if (id >= kMaxTokens)
      return invalid_argument("model.vocab: token id " + std::to_string(id) + " is not below the limit of " +
                              std::to_string(kMaxTokens));
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.resize(size_t(max_id + 1));
  m.has_id_.assign(size_t(max_id + 1), 0);
  m.vocab_.reserve(vocab.size());
  for (auto& [tok, id] : vocab) {
    if (id < 0) return invalid_argument("model.vocab: token id " + std::to_string(id) + " is negative");
    if (m.has_id_[size_t(id)]) return invalid_argument("model.vocab: id " + std::to_string(id) + " is used twice");
    m.has_id_[size_t(id)] = 1;
    m.id_to_token_[size_t(id)] = tok;
    m.vocab_.emplace(std::move(tok), id);
  }
  m.merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int32_t ia = m.token_id(a), ib = m.token_id(b), inew = m.token_id(a + b);
    if (ia < 0 || ib < 0 || inew < 0)
      return invalid_argument("model.merges[" + std::to_string(r) + "] names a token that is not in the vocabulary: '" +
                              (ia < 0 ? a : ib < 0 ? b : a + b) + "'");
    m.merges_.insert_or_assign(pair_key(ia, ib), Merge{int32_t(r), inew});  // a repeated pair: the last wins, as in HF
  }
  if (!m.opt_.unk_token.empty()) {
    m.unk_id_ = m.token_id(m.opt_.unk_token);
    if (m.unk_id_ < 0) return invalid_argument("model.unk_token '" + m.opt_.unk_token + "' is not in the vocabulary");
  }
  m.have_byte_fallback_ids_ = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.byte_fallback_ids_[size_t(b)] = m.token_id(name);
    if (m.byte_fallback_ids_[size_t(b)] < 0) m.have_byte_fallback_ids_ = false;
  }
  if (m.opt_.byte_level) {
    for (int b = 0; b < 256; ++b) m.byte_level_ids_[size_t(b)] = m.token_id(utf8::byte_to_char(uint8_t(b)));
    for (const auto& [tok, id] : m.vocab_) {  // tokens by the bytes they stand for
      std::string raw;
      if (utf8::append_byte_level_bytes(raw, tok)) m.raw_vocab_.emplace(std::move(raw), id);
    }
  }
  return m;
}

int32_t Bpe::token_id(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* Bpe::token(int32_t id) const {
  return id >= 0 && size_t(id) < has_id_.size() && has_id_[size_t(id)] ? &id_to_token_[size_t(id)] : nullptr;
}

// One character of the word, as Hugging Face's merge_word handles it: its vocabulary id; else its
// <0xNN> bytes (byte_fallback); else the unk token (fused with a preceding unk under fuse_unk);
// else nothing.
void Bpe::add_char(std::string_view ch, std::vector<int32_t>& symbols, int32_t& pending_unk) const {
  const int32_t id = token_id(ch);
  if (id >= 0) {
    if (pending_unk >= 0) symbols.push_back(pending_unk);
    pending_unk = -1;
    symbols.push_back(id);
    return;
  }
  if (opt_.byte_fallback && have_byte_fallback_ids_) {
    for (const char c : ch) symbols.push_back(byte_fallback_ids_[static_cast<unsigned char>(c)]);
    return;
  }
  if (unk_id_ < 0) return;
  if (pending_unk >= 0 && !opt_.fuse_unk) symbols.push_back(pending_unk);
  pending_unk = unk_id_;
}

void Bpe::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.clear();
  int32_t pending_unk = -1;
  if (opt_.byte_level) {
    for (const char c : word) {
      const uint8_t b = static_cast<uint8_t>(c);
      if (byte_level_ids_[b] >= 0 && pending_unk < 0) symbols.push_back(byte_level_ids_[b]);
      else add_char(utf8::byte_to_char(b), symbols, pending_unk);
    }
  } else {
    for (size_t i = 0; i < word.size();) {
      const size_t n = size_t(utf8::seq_len(static_cast<unsigned char>(word[i])));
      add_char(word.substr(i, n), symbols, pending_unk);
      i += n;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

void Bpe::merge(std::vector<int32_t>& sym) const {
  const int32_t n = int32_t(sym.size());
  if (n < 2) return;
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<HeapEntry> heap;
  prev.resize(size_t(n));
  next.resize(size_t(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1;
    if (i + 1 < n)
      if (auto it = merges_.find(pair_key(sym[size_t(i)], sym[size_t(i + 1)])); it != merges_.end())
        heap.push_back({it->second.rank, i, it->second.new_id});
  }
  std::make_heap(heap.begin(), heap.end());
  constexpr int32_t kRemoved = -1;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const HeapEntry top = heap.back();
    heap.pop_back();
    const size_t pos = size_t(top.pos);
    if (sym[pos] == kRemoved || next[pos] >= n) continue;
    const size_t right = size_t(next[pos]);
    auto it = merges_.find(pair_key(sym[pos], sym[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // a stale entry
    sym[pos] = top.new_id;
    sym[right] = kRemoved;
    next[pos] = next[right];
    if (next[pos] < n) prev[size_t(next[pos])] = top.pos;
    if (prev[pos] >= 0)
      if (auto l = merges_.find(pair_key(sym[size_t(prev[pos])], sym[pos])); l != merges_.end()) {
        heap.push_back({l->second.rank, prev[pos], l->second.new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    if (next[pos] < n)
      if (auto r = merges_.find(pair_key(sym[pos], sym[size_t(next[pos])])); r != merges_.end()) {
        heap.push_back({r->second.rank, top.pos, r->second.new_id});
        std::push_heap(heap.begin(), heap.end());
      }
  }
  sym.erase(std::remove(sym.begin(), sym.end(), kRemoved), sym.end());
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    const StringMap& whole = opt_.byte_level ? raw_vocab_ : vocab_;
    if (auto it = whole.find(word); it != whole.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  thread_local WordCache cache;
  if (cache.owner != instance_) cache.reset(instance_);
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    if (auto it = cache.words.find(word); it != cache.words.end()) {
      const int32_t* p = cache.ids.data() + it->second.first;
      ids.insert(ids.end(), p, p + it->second.second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  initial_symbols(word, symbols);
  merge(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (!cacheable) return;
  if (cache.words.size() >= kMaxCachedWords) cache.reset(instance_);
  cache.words.emplace(std::string(word), std::make_pair(uint32_t(cache.ids.size()), uint32_t(symbols.size())));
  cache.ids.insert(cache.ids.end(), symbols.begin(), symbols.end());
}

}  // namespace mt
