// Token shard writer and zero-copy reader. Layout (docs/DATA.md), little-endian:
//   [0, 64)   header: magic "MTSHARD\0", u32 version, u32 width (2 | 4), u32 flags, u32 0,
//             u64 vocab, u64 tokens, u64 documents, u64 body checksum (FNV-1a 64), u64 file size
//   ids       tokens x width bytes, zero-padded to a multiple of 8
//   offsets   (documents + 1) x u64: document d is tokens [offsets[d], offsets[d+1])
//   mask      tokens x u8 (0 | 1), present when flags & kFlagHasMask, zero-padded to 8
#include "engine/data/token_shard.h"

#include <algorithm>
#include <cstring>

#include "engine/base/hash.h"
#include "engine/io/safetensors.h"

namespace mt {

namespace {

uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void store(std::string& s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);
}

uint64_t checksum(const uint8_t* p, size_t n) {
  return fnv1a64(std::string_view(reinterpret_cast<const char*>(p), n));
}

}  // namespace

ShardWriter::ShardWriter(int vocab) : vocab_(vocab), width_(vocab <= 65536 ? 2 : 4) {}

Status ShardWriter::add(const TokenizedExample& ex) {
  if (ex.ids.empty()) return invalid_argument("an example with no token cannot be a document of a shard");
  if (ex.loss.size() != ex.ids.size())
    return invalid_argument("example has " + std::to_string(ex.ids.size()) + " ids but " +
                            std::to_string(ex.loss.size()) + " loss-mask entries");
  if (ex.ids.size() > ShardFormat::kMaxDocumentTokens)
    return invalid_argument("example of " + std::to_string(ex.ids.size()) + " tokens exceeds the shard limit of " +
                            std::to_string(ShardFormat::kMaxDocumentTokens));
  const size_t at = ids_.size();
  ids_.resize(at + ex.ids.size() * width_);
  for (size_t i = 0; i < ex.ids.size(); ++i) {
    const int32_t t = ex.ids[i];
    if (t < 0 || t >= vocab_)
      return invalid_argument("token " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_) + ")");
    if (width_ == 2) store(ids_, at + i * 2, uint16_t(t));
    else store(ids_, at + i * 4, uint32_t(t));
  }
  for (uint8_t m : ex.loss) {
    mask_.push_back(char(m ? 1 : 0));
    trained_ += m ? 1 : 0;
  }
  tokens_ += ex.ids.size();
  offsets_.push_back(tokens_);
  return Status::Ok();
}

Result<ShardEntry> ShardWriter::write(const std::string& path) {
  const bool has_mask = trained_ != tokens_;
  const uint64_t ids_bytes = pad8(ids_.size()), off_bytes = offsets_.size() * 8;
  const uint64_t mask_bytes = has_mask ? pad8(mask_.size()) : 0;
  const uint64_t size = ShardFormat::kHeaderBytes + ids_bytes + off_bytes + mask_bytes;
  std::string out(size, '\0');
  size_t at = ShardFormat::kHeaderBytes;
  std::memcpy(out.data() + at, ids_.data(), ids_.size());
  at += ids_bytes;
  std::memcpy(out.data() + at, offsets_.data(), off_bytes);
  at += off_bytes;
  if (has_mask) std::memcpy(out.data() + at, mask_.data(), mask_.size());
  std::memcpy(out.data(), ShardFormat::kMagic, 8);
  store(out, 8, ShardFormat::kVersion);
  store(out, 12, width_);
  store(out, 16, has_mask ? ShardFormat::kFlagHasMask : 0u);
  store(out, 24, uint64_t(vocab_));
  store(out, 32, tokens_);
  store(out, 40, documents());
  store(out, 56, size);
  const auto* body = reinterpret_cast<const uint8_t*>(out.data()) + ShardFormat::kHeaderBytes;
  const ShardEntry written{path, documents(), tokens_, size, checksum(body, size - ShardFormat::kHeaderBytes)};
  store(out, 48, written.checksum);
  MT_RETURN_IF_ERROR(replace_file_durable(path, path + ".tmp", out));
  *this = ShardWriter(vocab_);
  return written;
}

TokenShard::~TokenShard() = default;

Result<std::unique_ptr<TokenShard>> TokenShard::open(const std::string& path, int max_vocab) {
  std::unique_ptr<TokenShard> s(new TokenShard());
  MT_ASSIGN_OR_RETURN(s->map_, MappedFile::open(path));
  const Status parsed = s->parse();
  MT_RETURN_IF_ERROR(s->intact());  // a shard truncated while parse() read it: say so, not what it saw
  MT_RETURN_IF_ERROR(parsed);
  if (s->vocab_ > uint64_t(std::max(max_vocab, 0)))
    return invalid_argument("token shard '" + path + "' was tokenized for a vocabulary of " +
                            std::to_string(s->vocab_) + " tokens, more than the model's " + std::to_string(max_vocab));
  return s;
}

Status TokenShard::parse() {
  const uint8_t* p = map_->data();
  const uint64_t size = map_->size();
  auto bad = [&](const std::string& what) { return data_loss("token shard '" + map_->path() + "': " + what); };
  if (size < ShardFormat::kHeaderBytes)
    return bad(std::to_string(size) + " bytes, shorter than the 64-byte header");
  if (std::memcmp(p, ShardFormat::kMagic, 8) != 0) return bad("bad magic (not a MegaTrain token shard)");
  if (const auto v = load<uint32_t>(p + 8); v != ShardFormat::kVersion)
    return bad("unsupported version " + std::to_string(v) + " (this build reads version 1)");
  width_ = load<uint32_t>(p + 12);
  flags_ = load<uint32_t>(p + 16);
  vocab_ = load<uint64_t>(p + 24);
  tokens_ = load<uint64_t>(p + 32);
  docs_ = load<uint64_t>(p + 40);
  checksum_ = load<uint64_t>(p + 48);
  if (width_ != 2 && width_ != 4) return bad("token width " + std::to_string(width_) + " is not 2 or 4");
  if (flags_ & ~ShardFormat::kFlagHasMask) return bad("unknown flags " + std::to_string(flags_));
  if (vocab_ == 0 || vocab_ > ShardFormat::kMaxVocab || (width_ == 2 && vocab_ > 65536))
    return bad("vocabulary " + std::to_string(vocab_) + " does not fit " + std::to_string(width_) + "-byte ids");
  if (tokens_ > ShardFormat::kMaxTokens || docs_ > ShardFormat::kMaxDocuments || docs_ > tokens_)
    return bad("header claims " + std::to_string(tokens_) + " tokens in " + std::to_string(docs_) +
               " documents, beyond the format's bounds");
  const bool has_mask = flags_ & ShardFormat::kFlagHasMask;
  ids_at_ = ShardFormat::kHeaderBytes;
  offsets_at_ = ids_at_ + pad8(tokens_ * width_);
  mask_at_ = offsets_at_ + (docs_ + 1) * 8;
  const uint64_t expected = mask_at_ + (has_mask ? pad8(tokens_) : 0);
  if (load<uint64_t>(p + 56) != size || expected != size)
    return bad("header describes " + std::to_string(expected) + " bytes (recorded size " +
               std::to_string(load<uint64_t>(p + 56)) + ") but the file has " + std::to_string(size) +
               " (truncated or corrupt)");
  if (size - ShardFormat::kHeaderBytes <= ShardFormat::kVerifyBodyBytes &&
      checksum(p + ShardFormat::kHeaderBytes, size - ShardFormat::kHeaderBytes) != checksum_)
    return bad("checksum mismatch (the file was modified or corrupted)");
  if (doc_begin(0) != 0 || doc_begin(docs_) != tokens_)
    return bad("document offsets must start at 0 and end at the token count " + std::to_string(tokens_));
  for (uint64_t d = 0; d < docs_; ++d)
    if (doc_begin(d + 1) <= doc_begin(d) || doc_begin(d + 1) - doc_begin(d) > ShardFormat::kMaxDocumentTokens)
      return bad("document " + std::to_string(d) + " has bad bounds [" + std::to_string(doc_begin(d)) + ", " +
                 std::to_string(doc_begin(d + 1)) + ")");
  trained_ = has_mask ? 0 : tokens_;
  if (has_mask)
    for (uint64_t i = 0; i < tokens_; ++i) {
      if (p[mask_at_ + i] > 1) return bad("loss mask of token " + std::to_string(i) + " is not 0 or 1");
      trained_ += p[mask_at_ + i];
    }
  for (uint64_t d = 0; d < docs_; ++d) trained_ -= loss(doc_begin(d));  // a document's first token is no target
  return Status::Ok();
}

uint64_t TokenShard::doc_begin(uint64_t d) const {
  return std::min(load<uint64_t>(map_->data() + offsets_at_ + d * 8), tokens_);
}

uint64_t TokenShard::doc_length(uint64_t d) const {
  const uint64_t begin = doc_begin(d), end = doc_begin(d + 1);
  return end > begin ? end - begin : 1;  // 1 only in a torn shard (parse() refused empty documents)
}

int32_t TokenShard::id(uint64_t i) const {
  const uint8_t* p = map_->data() + ids_at_ + i * width_;
  return width_ == 2 ? int32_t(load<uint16_t>(p)) : int32_t(load<uint32_t>(p));
}

uint8_t TokenShard::loss(uint64_t i) const {
  return (flags_ & ShardFormat::kFlagHasMask) ? map_->data()[mask_at_ + i] : 1;
}

const std::string& TokenShard::path() const { return map_->path(); }

ShardEntry TokenShard::entry() const { return {path(), docs_, tokens_, map_->size(), checksum_}; }

Status TokenShard::intact() const { return map_->intact(); }

}  // namespace mt
