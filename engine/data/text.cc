#include <algorithm>

#include "engine/data/data_source.h"
#include "engine/base/json.h"

namespace mt {

namespace {

// Byte-level tokenizer: each byte of the UTF-8 text is one token in [0, 256).
class TextSource final : public DataSource {
 public:
  TextSource(std::string path, std::string bytes) : path_(std::move(path)), bytes_(std::move(bytes)) {}

  Status next_batch(int G, int T, Batch& out) override {
    if (bytes_.size() < size_t(T) + 1)
      return failed_precondition("text file '" + path_ + "' has " + std::to_string(bytes_.size()) +
                                 " bytes, fewer than seq_len + 1 = " + std::to_string(T + 1));
    out.num_seqs = G;
    out.seq_len = T;
    out.inputs.resize(size_t(G) * T);
    out.targets.resize(size_t(G) * T);
    const uint64_t windows = (bytes_.size() - 1) / uint64_t(T);
    for (int g = 0; g < G; ++g) {
      const size_t start = size_t(cursor_++ % windows) * size_t(T);
      for (int t = 0; t < T; ++t) {
        out.inputs[size_t(g) * T + t] = uint8_t(bytes_[start + size_t(t)]);
        out.targets[size_t(g) * T + t] = uint8_t(bytes_[start + size_t(t) + 1]);
      }
    }
    return Status::Ok();
  }
  uint64_t cursor() const override { return cursor_; }
  Status seek(uint64_t c) override {
    cursor_ = c;
    return Status::Ok();
  }
  uint64_t num_sequences(int T) const override { return bytes_.size() > 1 ? (bytes_.size() - 1) / uint64_t(T) : 0; }
  std::string describe() const override {
    return "text '" + path_ + "' (" + std::to_string(bytes_.size()) + " bytes, byte-level tokens)";
  }

 private:
  std::string path_, bytes_;
  uint64_t cursor_ = 0;  // sequences consumed
};

}  // namespace

Result<std::unique_ptr<DataSource>> make_text_source(const std::string& path, int vocab) {
  if (vocab < 256)
    return invalid_argument("data.source = text needs a model vocab_size >= 256 (byte-level tokens), got " +
                            std::to_string(vocab));
  MT_ASSIGN_OR_RETURN(std::string bytes, read_data_file(path));
  return std::unique_ptr<DataSource>(new TextSource(path, std::move(bytes)));
}

}  // namespace mt
