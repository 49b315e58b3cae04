// Example sets in memory and over memory-mapped token shards.
#include "engine/data/example_set.h"

#include <algorithm>

#include "engine/base/hash.h"
#include "engine/data/shard_set.h"
#include "engine/data/token_shard.h"

namespace mt {

namespace {

class MemoryExampleSet final : public ExampleSet {
 public:
  MemoryExampleSet(std::vector<TokenizedExample> ex, std::string what) : ex_(std::move(ex)), what_(std::move(what)) {
    ex_.erase(std::remove_if(ex_.begin(), ex_.end(), [](const TokenizedExample& e) { return e.ids.empty(); }),
              ex_.end());
    uint64_t h = kFnv1aBasis;
    for (const auto& e : ex_) {  // an example's first token is never a target: nothing precedes it
      trained_ += uint64_t(std::count(e.loss.begin() + 1, e.loss.end(), uint8_t(1)));
      h = fnv1a64(std::string_view(reinterpret_cast<const char*>(e.ids.data()), e.ids.size() * sizeof(e.ids[0])), h);
      h = fnv1a64(std::string_view(reinterpret_cast<const char*>(e.loss.data()), e.loss.size()), fnv1a64("\n", h));
    }
    contents_ = hex64(h);
  }
  uint64_t size() const override { return ex_.size(); }
  uint64_t length(uint64_t i) const override { return ex_[i].ids.size(); }
  Status read(uint64_t i, uint64_t begin, uint64_t n, int32_t* ids, uint8_t* loss) const override {
    std::copy_n(ex_[i].ids.begin() + long(begin), n, ids);
    std::copy_n(ex_[i].loss.begin() + long(begin), n, loss);
    return Status::Ok();
  }
  std::string describe() const override { return what_; }
  uint64_t trained_tokens() const override { return trained_; }
  std::string contents() const override { return contents_; }

 private:
  std::vector<TokenizedExample> ex_;
  std::string what_;
  uint64_t trained_ = 0;
  std::string contents_;
};

class ShardExampleSet final : public ExampleSet {
 public:
  ShardExampleSet(std::vector<std::unique_ptr<TokenShard>> shards, std::string path)
      : shards_(std::move(shards)), path_(std::move(path)) {
    first_.push_back(0);
    for (const auto& s : shards_) first_.push_back(first_.back() + s->documents());
  }
  uint64_t size() const override { return first_.back(); }
  uint64_t length(uint64_t i) const override {
    const auto [s, d] = locate(i);
    return shards_[s]->doc_length(d);
  }
  Status read(uint64_t i, uint64_t begin, uint64_t n, int32_t* ids, uint8_t* loss) const override {
    const auto [s, d] = locate(i);
    const TokenShard& sh = *shards_[s];
    const uint64_t at = sh.doc_begin(d) + begin;
    if (at > sh.tokens() || n > sh.tokens() - at) {  // only a shard truncated under us
      MT_RETURN_IF_ERROR(sh.intact());
      return data_loss("token shard '" + sh.path() + "': document " + std::to_string(d) + " reaches past its " +
                       std::to_string(sh.tokens()) + " tokens");
    }
    for (uint64_t k = 0; k < n; ++k) {
      ids[k] = sh.id(at + k);
      loss[k] = sh.loss(at + k);
      if (ids[k] < 0 || uint64_t(ids[k]) >= sh.vocab())
        return data_loss("token shard '" + sh.path() + "': token " + std::to_string(at + k) + " has value " +
                         std::to_string(uint32_t(ids[k])) + ", outside its vocabulary of " +
                         std::to_string(sh.vocab()));
    }
    return sh.intact();
  }
  uint64_t trained_tokens() const override {
    uint64_t n = 0;
    for (const auto& s : shards_) n += s->trained_tokens();
    return n;
  }
  std::string describe() const override {
    uint64_t tokens = 0, vocab = 0;
    for (const auto& s : shards_) tokens += s->tokens(), vocab = std::max(vocab, s->vocab());
    return "shards '" + path_ + "' (" + std::to_string(shards_.size()) + " files, " + std::to_string(size()) +
           " examples, " + std::to_string(tokens) + " tokens, tokenized for a vocabulary of " + std::to_string(vocab) +
           ")";
  }
  // The shards' header checksums (each over its ids and masks), in order.
  std::string contents() const override {
    uint64_t h = kFnv1aBasis;
    for (const auto& s : shards_) h = fnv1a64(hex64(s->entry().checksum), h);
    return hex64(h);
  }

 private:
  std::pair<size_t, uint64_t> locate(uint64_t i) const {
    const size_t s = size_t(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) - 1;
    return {s, i - first_[s]};
  }
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<uint64_t> first_;  // first example of each shard, then the total
  std::string path_;
};

}  // namespace

std::unique_ptr<ExampleSet> make_memory_example_set(std::vector<TokenizedExample> examples, std::string what) {
  return std::make_unique<MemoryExampleSet>(std::move(examples), std::move(what));
}

Result<std::unique_ptr<ExampleSet>> open_shard_example_set(const std::string& path, int vocab) {
  MT_ASSIGN_OR_RETURN(const ShardListing listing, list_shards(path));
  std::vector<std::unique_ptr<TokenShard>> shards;
  for (const auto& listed : listing.shards) {
    MT_ASSIGN_OR_RETURN(auto s, TokenShard::open(listed.path, vocab));
    if (listing.from_manifest) MT_RETURN_IF_ERROR(check_manifest_entry(listed, *s));
    shards.push_back(std::move(s));
  }
  return std::unique_ptr<ExampleSet>(new ShardExampleSet(std::move(shards), path));
}

}  // namespace mt
