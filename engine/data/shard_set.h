// A directory of token shards as `megatrain tokenize` writes it: shard-00000.mts, shard-00001.mts,
// ... and manifest.json, written last, listing every shard with its counts and checksum. Without
// the manifest a directory is an unfinished run's (or a hand-made one) and training refuses it;
// so it does a listed shard that is missing, a shard the manifest does not list, and a shard whose
// header is not its entry's (another run's shard under the same name). docs/DATA.md has the format.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/data/token_shard.h"

namespace mt {

inline constexpr char kShardManifest[] = "manifest.json";

// Writes examples into a new shard set: a shard each time the current one holds `shard_tokens`
// tokens, the manifest at finish().
class ShardSetWriter {
 public:
  // Creates `dir`, or refuses one that already holds shards or a manifest (a second run would mix
  // two corpora). `tokenizer` names what tokenized the examples and `tokenization` is what it does
  // (jsonl_examples.h: tokenization_fingerprint), for the manifest.
  static Result<ShardSetWriter> create(const std::string& dir, int vocab, std::string tokenizer,
                                       uint64_t shard_tokens, std::string tokenization = {});
  Status add(const TokenizedExample& ex);
  // The last shard, then the manifest: durably, each renamed into place after its bytes are synced.
  Status finish();

  uint64_t shards() const { return written_.size(); }
  uint64_t documents() const { return documents_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t trained_tokens() const { return trained_; }  // loss mask 1

 private:
  ShardSetWriter(std::string dir, int vocab, std::string tokenizer, uint64_t shard_tokens, std::string tokenization);
  Status flush();

  std::string dir_, tokenizer_, tokenization_;
  int vocab_;
  uint64_t shard_tokens_;
  ShardWriter shard_;
  std::vector<ShardEntry> written_;
  uint64_t documents_ = 0, tokens_ = 0, trained_ = 0;
};

// What a data path names: the shards of a directory in the manifest's order, each with the entry
// its header must match, or one shard file named directly (nothing to match it against).
struct ShardListing {
  std::vector<ShardEntry> shards;
  bool from_manifest = false;
};
Result<ShardListing> list_shards(const std::string& path);

// The tokenizer a shard set's manifest names and its tokenization fingerprint; empty where
// unknown: `path` one shard file, a directory without a readable manifest (list_shards says why),
// or a manifest written before the fingerprint was recorded.
struct ShardTokenizer {
  std::string name, tokenization;
};
ShardTokenizer shard_set_tokenizer(const std::string& path);

// A shard opened from a listing equals its manifest entry (counts, size, checksum).
Status check_manifest_entry(const ShardEntry& listed, const TokenShard& opened);

}  // namespace mt
