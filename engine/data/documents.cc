// Packed documents: positions within documents, from an end-of-document token, and their check.
#include "engine/data/data_source.h"

namespace mt {

namespace {

class DocumentSource final : public DataSource {
 public:
  DocumentSource(std::unique_ptr<DataSource> inner, int32_t eod_id) : inner_(std::move(inner)), eod_id_(eod_id) {}

  Status next_batch(int num_seqs, int seq_len, Batch& out) override {
    MT_RETURN_IF_ERROR(inner_->next_batch(num_seqs, seq_len, out));
    mark_documents(out, eod_id_);
    return Status::Ok();
  }
  uint64_t cursor() const override { return inner_->cursor(); }
  Status seek(uint64_t cursor) override { return inner_->seek(cursor); }
  std::string describe() const override {
    return inner_->describe() + ", documents end at token " + std::to_string(eod_id_);
  }
  double entropy_floor() const override { return inner_->entropy_floor(); }
  uint64_t num_sequences(int seq_len) const override { return inner_->num_sequences(seq_len); }

 private:
  std::unique_ptr<DataSource> inner_;
  int32_t eod_id_;
};

}  // namespace

void mark_documents(Batch& b, int32_t eod_id) {
  const size_t T = size_t(b.seq_len);
  b.positions.resize(b.inputs.size());
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    const bool starts = i % T == 0 || b.inputs[i - 1] == eod_id;
    b.positions[i] = starts ? 0 : b.positions[i - 1] + 1;
  }
}

Status check_positions(const Batch& b) {
  if (b.positions.empty()) return Status::Ok();
  if (b.positions.size() != b.inputs.size())
    return invalid_argument("batch holds " + std::to_string(b.positions.size()) + " positions for " +
                            std::to_string(b.inputs.size()) + " inputs");
  const size_t T = size_t(b.seq_len);
  for (size_t i = 0; i < b.positions.size(); ++i) {
    const int32_t p = b.positions[i];
    const bool ok = i % T == 0 ? p == 0 : (p == 0 || p == b.positions[i - 1] + 1);
    if (!ok)
      return invalid_argument("position " + std::to_string(p) + " at index " + std::to_string(i) +
                              " does not number a document (0 at a row's start and a document's, else previous + 1)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<DataSource>> with_documents(std::unique_ptr<DataSource> inner, int32_t eod_id, int vocab) {
  if (eod_id < 0 || eod_id >= vocab)
    return invalid_argument("data.eod_id = " + std::to_string(eod_id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
  return std::unique_ptr<DataSource>(new DocumentSource(std::move(inner), eod_id));
}

}  // namespace mt
