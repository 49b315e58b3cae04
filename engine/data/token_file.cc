// Token files: raw uint16/uint32 (nanoGPT .bin) and llm.c headered shards, memory-mapped.
// Validation: file shape at open; token range eagerly at open for files of up to
// kEagerScanTokens tokens, and always for the windows next_batch reads (a failed batch leaves
// the cursor where it was).
#include <cstring>

#include "engine/data/data_source.h"
#include "engine/io/mapped_file.h"

namespace mt {

namespace {

constexpr uint64_t kEagerScanTokens = uint64_t(64) << 20;
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

class TokenFileSource final : public DataSource {
 public:
  TokenFileSource(std::unique_ptr<MappedFile> map, std::string dtype, size_t offset, size_t width, uint64_t count,
                  int vocab)
      : map_(std::move(map)),
        sample_(map_->sampled_fingerprint()),
        dtype_(std::move(dtype)),
        offset_(offset),
        width_(width),
        count_(count),
        vocab_(vocab) {}

  uint32_t token(uint64_t i) const {
    const uint8_t* p = map_->data() + offset_ + i * width_;
    if (width_ == 2) {
      uint16_t t;
      std::memcpy(&t, p, 2);
      return t;
    }
    uint32_t t;
    std::memcpy(&t, p, 4);
    return t;
  }

  Status check_range(uint64_t begin, uint64_t end) const {
    for (uint64_t i = begin; i < end; ++i)
      if (const uint32_t t = token(i); t >= uint32_t(vocab_))
        return invalid_argument("token file '" + map_->path() + "': token " + std::to_string(i) + " has value " +
                                std::to_string(t) + ", outside the vocabulary of " + std::to_string(vocab_));
    return Status::Ok();
  }

  Status next_batch(int G, int T, Batch& out) override {
    if (G <= 0 || T <= 0) return invalid_argument("next_batch needs num_seqs > 0 and seq_len > 0");
    if (count_ < uint64_t(T) + 1)
      return failed_precondition("token file '" + map_->path() + "' has " + std::to_string(count_) +
                                 " tokens, fewer than seq_len + 1 = " + std::to_string(T + 1));
    const uint64_t windows = (count_ - 1) / uint64_t(T);
    uint64_t cursor = cursor_;
    out.num_seqs = G;
    out.seq_len = T;
    out.inputs.resize(size_t(G) * size_t(T));
    out.targets.resize(size_t(G) * size_t(T));
    for (int g = 0; g < G; ++g) {
      const uint64_t start = (cursor++ % windows) * uint64_t(T);
      MT_RETURN_IF_ERROR(check_range(start, start + uint64_t(T) + 1));  // also after the eager scan: the file may change
      int32_t* in = out.inputs.data() + size_t(g) * size_t(T);
      int32_t* tg = out.targets.data() + size_t(g) * size_t(T);
      for (int t = 0; t < T; ++t) {
        in[t] = int32_t(token(start + uint64_t(t)));
        tg[t] = int32_t(token(start + uint64_t(t) + 1));
      }
    }
    MT_RETURN_IF_ERROR(map_->intact());
    cursor_ = cursor;
    return Status::Ok();
  }
  uint64_t cursor() const override { return cursor_; }
  Status seek(uint64_t c) override {
    cursor_ = c;
    return Status::Ok();
  }
  uint64_t num_sequences(int T) const override { return T > 0 && count_ > 1 ? (count_ - 1) / uint64_t(T) : 0; }
  std::string describe() const override {
    return "tokens '" + map_->path() + "' (" + dtype_ + ", " + std::to_string(count_) + " tokens, sample " + sample_ + ")";
  }

  Status eager_scan() {
    if (count_ > kEagerScanTokens) return Status::Ok();
    return check_range(0, count_);
  }

 private:
  std::unique_ptr<MappedFile> map_;
  std::string sample_;  // the contents' sampled_fingerprint when opened
  std::string dtype_;
  size_t offset_, width_;
  uint64_t count_;
  int vocab_;
  uint64_t cursor_ = 0;  // sequences consumed
};

// Reads the llm.c header: sets the token width and count after checking them against the size.
Status parse_llmc_header(const MappedFile& m, size_t& width, uint64_t& count) {
  const std::string where = "llm.c token file '" + m.path() + "': ";
  if (m.size() < kLlmcHeaderBytes)
    return data_loss(where + std::to_string(m.size()) + " bytes, shorter than the 1024-byte header");
  int32_t h[3];
  std::memcpy(h, m.data(), sizeof h);
  if (h[0] != kLlmcMagic)
    return data_loss(where + "bad magic " + std::to_string(h[0]) + " (expected " + std::to_string(kLlmcMagic) + ")");
  if (h[1] != 1 && h[1] != 2)
    return data_loss(where + "unsupported version " + std::to_string(h[1]) + " (1 = uint16 tokens, 2 = uint32)");
  if (h[2] <= 0) return data_loss(where + "token count " + std::to_string(h[2]) + " in the header is not positive");
  width = h[1] == 1 ? 2 : 4;
  count = uint64_t(h[2]);
  const uint64_t expected = kLlmcHeaderBytes + count * width;
  if (m.size() != expected)
    return data_loss(where + "header says " + std::to_string(count) + " tokens (" + std::to_string(expected) +
                     " bytes with the header) but the file has " + std::to_string(m.size()) + " bytes");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<DataSource>> make_token_file_source(const std::string& path, const std::string& dtype,
                                                           int vocab) {
  if (vocab <= 0) return invalid_argument("token file source needs vocab_size > 0, got " + std::to_string(vocab));
  if (dtype != "uint16" && dtype != "uint32" && dtype != "llmc")
    return invalid_argument("data.dtype = '" + dtype + "' is not one of uint16, uint32, llmc");
  MT_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  if (map->size() == 0) return invalid_argument("token file '" + path + "' is empty");
  size_t offset = 0, width = dtype == "uint16" ? 2 : 4;
  uint64_t count = 0;
  if (dtype == "llmc") {
    const Status header = parse_llmc_header(*map, width, count);
    MT_RETURN_IF_ERROR(map->intact());  // cut while the header was read: say so, not what it read
    MT_RETURN_IF_ERROR(header);
    offset = kLlmcHeaderBytes;
  } else {
    if (map->size() % width != 0)
      return invalid_argument("token file '" + path + "' has " + std::to_string(map->size()) +
                              " bytes, not a multiple of " + std::to_string(width) + " (" + dtype + " tokens)");
    count = map->size() / width;
  }
  auto src = std::make_unique<TokenFileSource>(std::move(map), dtype, offset, width, count, vocab);
  MT_RETURN_IF_ERROR(src->eager_scan());
  return std::unique_ptr<DataSource>(std::move(src));
}

}  // namespace mt
