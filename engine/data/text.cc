#include <algorithm>

#include "engine/data/data_source.h"
#include "engine/io/mapped_file.h"

namespace mt {

namespace {

// Byte-level tokenizer: each byte of the UTF-8 text is one token in [0, 256). The file is mapped,
// as token files are, not read into memory: its pages are the page cache's, which the memory
// plan need not count, and a file that shrinks under a run fails the batch (DATA_LOSS).
class TextSource final : public DataSource {
 public:
  explicit TextSource(std::unique_ptr<MappedFile> map) : map_(std::move(map)), sample_(map_->sampled_fingerprint()) {}

  Status next_batch(int G, int T, Batch& out) override {
    const uint8_t* bytes = map_->data();
    const size_t size = map_->size();
    if (size < size_t(T) + 1)
      return failed_precondition("text file '" + map_->path() + "' has " + std::to_string(size) +
                                 " bytes, fewer than seq_len + 1 = " + std::to_string(T + 1));
    out.num_seqs = G;
    out.seq_len = T;
    out.inputs.resize(size_t(G) * T);
    out.targets.resize(size_t(G) * T);
    const uint64_t windows = (size - 1) / uint64_t(T);
    for (int g = 0; g < G; ++g) {
      const size_t start = size_t(cursor_++ % windows) * size_t(T);
      for (int t = 0; t < T; ++t) {
        out.inputs[size_t(g) * T + t] = bytes[start + size_t(t)];
        out.targets[size_t(g) * T + t] = bytes[start + size_t(t) + 1];
      }
    }
    return map_->intact();
  }
  uint64_t cursor() const override { return cursor_; }
  Status seek(uint64_t c) override {
    cursor_ = c;
    return Status::Ok();
  }
  uint64_t num_sequences(int T) const override { return map_->size() > 1 ? (map_->size() - 1) / uint64_t(T) : 0; }
  std::string describe() const override {
    return "text '" + map_->path() + "' (" + std::to_string(map_->size()) + " bytes, byte-level tokens, sample " + sample_ +
           ")";
  }

 private:
  std::unique_ptr<MappedFile> map_;
  std::string sample_;  // the contents' sampled_fingerprint when opened
  uint64_t cursor_ = 0;  // sequences consumed
};

}  // namespace

Result<std::unique_ptr<DataSource>> make_text_source(const std::string& path, int vocab) {
  if (vocab < 256)
    return invalid_argument("data.source = text needs a model vocab_size >= 256 (byte-level tokens), got " +
                            std::to_string(vocab));
  MT_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  return std::unique_ptr<DataSource>(new TextSource(std::move(map)));
}

}  // namespace mt
