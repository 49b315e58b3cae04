// The BPE model of tokenizer.json: vocabulary, ranked merges (a hash map keyed by the id pair),
// unk/byte_fallback/fuse_unk, ignore_merges, and a per-thread cache of encoded words. Merging
// follows Hugging Face `tokenizers` exactly: the lowest-ranked adjacent pair first, leftmost on a
// tie, until no pair has a merge.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace mt {

struct BpeOptions {
  std::string unk_token;  // empty: none
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  // Words arrive as raw bytes that the vocabulary spells through GPT-2's byte table.
  bool byte_level = false;
};

class Bpe {
 public:
  // Bounds on what a tokenizer.json may make this allocate: ids in [0, kMaxTokens), at most
  // kMaxMerges merges (Llama 3: 128256 tokens, 280147 merges; Qwen2: 151643 and 151387).
  static constexpr int32_t kMaxTokens = 1 << 20;
  static constexpr size_t kMaxMerges = size_t(1) << 22;
  // vocab: (token, id) pairs; merges: pairs of tokens, rank = index. A merge naming a token that
  // is not in the vocabulary (or whose concatenation is not) is kInvalidArgument.
  static Result<Bpe> create(std::vector<std::pair<std::string, int32_t>> vocab,
                            const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;
  int32_t token_id(std::string_view token) const;  // -1 when absent
  // The token of `id` as the vocabulary spells it; nullptr when the model has no such id.
  const std::string* token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  void add_char(std::string_view ch, std::vector<int32_t>& symbols, int32_t& pending_unk) const;
  void merge(std::vector<int32_t>& symbols) const;

  BpeOptions opt_;
  StringMap vocab_;
  StringMap raw_vocab_;  // byte_level: tokens by the bytes they stand for (ignore_merges, cache keys)
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_fallback_ids_{};  // <0xNN>, when all 256 exist
  bool have_byte_fallback_ids_ = false;
  std::array<int32_t, 256> byte_level_ids_{};  // byte_level: the id of each byte's character, or -1
  int32_t unk_id_ = -1;
  uint64_t instance_ = 0;  // keys the per-thread cache
};

}  // namespace mt
