// Token shards: tokenized examples (ids, document boundaries, loss mask) in one file that a data
// source memory-maps and reads without copying. `megatrain tokenize` writes them; docs/DATA.md
// gives the byte layout. Opening checks every size and boundary against the file, so a
// truncated or hostile shard is an error naming the problem, never a crash or an allocation the
// header asked for.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/text/example.h"

namespace mt {

class MappedFile;

struct ShardFormat {
  static constexpr char kMagic[8] = {'M', 'T', 'S', 'H', 'A', 'R', 'D', '\0'};
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kHeaderBytes = 64;
  static constexpr uint32_t kFlagHasMask = 1;  // else every token is trained on (mask all 1)
  // Bounds a header may claim: a shard is meant to be mapped, not to hold a whole corpus.
  static constexpr uint64_t kMaxTokens = uint64_t(1) << 36;
  static constexpr uint64_t kMaxDocuments = uint64_t(1) << 32;
  static constexpr uint64_t kMaxDocumentTokens = uint64_t(1) << 31;
  static constexpr uint64_t kMaxVocab = uint64_t(1) << 31;
  // Shards up to this many body bytes have their checksum verified at open.
  static constexpr uint64_t kVerifyBodyBytes = uint64_t(1) << 30;
};

// What a written shard holds, as its header records it (and a shard set's manifest lists it).
struct ShardEntry {
  std::string path;
  uint64_t documents = 0, tokens = 0, bytes = 0, checksum = 0;
};

// Collects examples in memory and writes them as one shard. dtype: uint16 when the vocabulary
// fits, else uint32.
class ShardWriter {
 public:
  explicit ShardWriter(int vocab);
  // An empty example is refused (it would be a document with no token).
  Status add(const TokenizedExample& ex);
  uint64_t tokens() const { return tokens_; }
  uint64_t documents() const { return offsets_.size() - 1; }
  uint64_t trained_tokens() const { return trained_; }
  // Writes path durably (a temporary file renamed into place) and clears the writer.
  Result<ShardEntry> write(const std::string& path);

 private:
  int vocab_;
  uint32_t width_;
  std::string ids_;
  std::vector<uint64_t> offsets_{0};
  std::string mask_;
  uint64_t tokens_ = 0, trained_ = 0;
};

// A read-only, memory-mapped shard. Its accessors never read outside the mapping, even over a
// shard truncated under it; a reader asks intact() once it has read.
class TokenShard {
 public:
  // Refuses a shard whose vocabulary exceeds `max_vocab` (the model's), naming both.
  static Result<std::unique_ptr<TokenShard>> open(const std::string& path, int max_vocab);
  ~TokenShard();

  uint64_t documents() const { return docs_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t vocab() const { return vocab_; }
  uint64_t trained_tokens() const { return trained_; }  // loss mask 1, a document's first token not counted
  uint32_t width() const { return width_; }
  ShardEntry entry() const;  // path, counts, file size and checksum from the header
  // Document bounds as the file gives them, clamped to [0, tokens()] and a length of at least 1,
  // so that a shard truncated after open() (its bytes read as zeros) never sends a reader outside
  // the mapping; the reader's intact() then says the data is not the file's.
  uint64_t doc_begin(uint64_t d) const;
  uint64_t doc_length(uint64_t d) const;
  int32_t id(uint64_t i) const;
  uint8_t loss(uint64_t i) const;
  const std::string& path() const;
  // Ok unless the file shrank while mapped (mapped_file.h): what was read is then not its data.
  Status intact() const;

 private:
  TokenShard() = default;
  Status parse();

  std::unique_ptr<MappedFile> map_;
  uint32_t width_ = 2, flags_ = 0;
  uint64_t tokens_ = 0, docs_ = 0, vocab_ = 0, trained_ = 0, checksum_ = 0;
  size_t ids_at_ = 0, offsets_at_ = 0, mask_at_ = 0;
};

}  // namespace mt
