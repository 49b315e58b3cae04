// ExampleSet: tokenized examples (ids with a loss mask) by index, whatever holds them — token
// shards mapped from disk, or a jsonl file tokenized into memory at job start. Packing reads
// examples through this and never knows which.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/text/example.h"

namespace mt {

class ExampleSet {
 public:
  virtual ~ExampleSet() = default;
  virtual uint64_t size() const = 0;
  virtual uint64_t length(uint64_t i) const = 0;  // tokens of example i (>= 1)
  // Copies tokens [begin, begin + n) of example i (within its length): ids and loss mask. An id
  // outside the vocabulary the set was opened for is an error naming it.
  virtual Status read(uint64_t i, uint64_t begin, uint64_t n, int32_t* ids, uint8_t* loss) const = 0;
  virtual std::string describe() const = 0;
  // Tokens whose loss mask is 1 and that can be a target (not an example's first), over every
  // example: 0 means there is nothing to train on.
  virtual uint64_t trained_tokens() const = 0;
  // What the examples are (ids and masks, in order), as 16 hex digits: a set edited to the same
  // counts (lines reordered, text changed) has other contents, which a resume is told of.
  virtual std::string contents() const = 0;
};

// Examples held in memory (empty examples are dropped).
std::unique_ptr<ExampleSet> make_memory_example_set(std::vector<TokenizedExample> examples, std::string what);

// The shards of `path` (a shard set's directory, checked against its manifest, or one shard file;
// shard_set.h), memory-mapped: one example per document. Shards tokenized for a vocabulary larger
// than `vocab` are refused.
Result<std::unique_ptr<ExampleSet>> open_shard_example_set(const std::string& path, int vocab);

}  // namespace mt
