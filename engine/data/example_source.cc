// The data source of tokenized examples (jsonl, shards): rows of an epoch's packing, epoch after
// epoch. cursor = rows served since the start of epoch 0, so seek() finds the epoch and row by
// re-deriving each epoch's layout from (seed, epoch): resume in the middle of an epoch is exact.
#include "engine/data/data_source.h"
#include "engine/data/packing.h"

namespace mt {

namespace {

class ExampleSource final : public DataSource {
 public:
  ExampleSource(std::shared_ptr<const ExampleSet> set, const ExampleSourceOptions& o)
      : set_(std::move(set)), opt_(o) {
    lengths_.resize(set_->size());
    for (uint64_t i = 0; i < lengths_.size(); ++i) lengths_[i] = set_->length(i);
  }

  Status next_batch(int G, int T, Batch& out) override {
    if (G <= 0 || T <= 0) return invalid_argument("next_batch needs num_seqs > 0 and seq_len > 0");
    out.num_seqs = G;
    out.seq_len = T;
    out.inputs.resize(size_t(G) * size_t(T));
    out.targets.resize(out.inputs.size());
    if (opt_.packing.packing) out.positions.resize(out.inputs.size());
    else out.positions.clear();
    uint64_t cursor = cursor_, real = 0;
    for (int g = 0; g < G; ++g) {
      const size_t at = size_t(g) * size_t(T);
      int32_t* pos = opt_.packing.packing ? out.positions.data() + at : nullptr;
      MT_ASSIGN_OR_RETURN(bool have, locate(cursor, T));
      if (!have && g == 0) return exhausted();
      if (!have) {  // the last batch of the last epoch: empty rows
        for (int t = 0; t < T; ++t) {
          out.inputs[at + size_t(t)] = 0, out.targets[at + size_t(t)] = -1;
          if (pos) pos[t] = t;
        }
        continue;
      }
      MT_ASSIGN_OR_RETURN(uint64_t n, fill_row(layout_, cursor - epoch_start_, *set_, out.inputs.data() + at,
                                               out.targets.data() + at, pos));
      real += n;
      ++cursor;
    }
    cursor_ = cursor;
    real_tokens_ += real;
    slots_ += uint64_t(G) * uint64_t(T);
    return Status::Ok();
  }
  uint64_t cursor() const override { return cursor_; }
  Status seek(uint64_t c) override {
    cursor_ = c;
    return Status::Ok();
  }
  std::string describe() const override {
    std::string d = set_->describe() + (opt_.packing.packing ? ", packed" : ", padded") +
                    (opt_.packing.truncate ? ", long examples truncated" : ", long examples split") +
                    ", shuffle seed " + std::to_string(opt_.packing.seed) + ", contents " + set_->contents();
    return d + (opt_.epochs ? ", " + std::to_string(opt_.epochs) + " epochs" : ", epochs unbounded");
  }
  uint64_t num_sequences(int T) const override {
    if (T <= 0) return 0;
    const auto barren = barren_for(T);
    return barren.ok() ? pack_epoch(lengths_, T, opt_.packing, 0, **barren).rows() : 0;
  }
  double packing_efficiency() const override {
    return slots_ ? double(real_tokens_) / double(slots_) : -1;
  }

 private:
  // The pieces left out at rows of T tokens (barren_pieces, which reads every masked example):
  // computed once per T, for num_sequences at a job's start and the layouts after it.
  Result<const std::vector<PieceStart>*> barren_for(int T) const {
    if (T != barren_seq_len_) {
      MT_ASSIGN_OR_RETURN(barren_, barren_pieces(*set_, T, opt_.packing.truncate));
      barren_seq_len_ = T;
    }
    return &barren_;
  }
  // Makes layout_ the epoch holding row `cursor`; false past the last epoch.
  Result<bool> locate(uint64_t cursor, int T) {
    if (set_->size() == 0) return failed_precondition(set_->describe() + " holds no example");
    if (layout_.seq_len != T || cursor < epoch_start_) {
      if (layout_.seq_len != T) MT_RETURN_IF_ERROR(check_trains(T));
      MT_ASSIGN_OR_RETURN(const std::vector<PieceStart>* barren, barren_for(T));
      epoch_ = 0, epoch_start_ = 0;
      layout_ = pack_epoch(lengths_, T, opt_.packing, 0, *barren);
      if (layout_.rows() == 0) {
        layout_ = {};  // asked again, it is laid out (and refused) again
        return failed_precondition(set_->describe() + " has no piece the loss counts a token of");
      }
    }
    while (cursor >= epoch_start_ + layout_.rows()) {
      if (opt_.epochs && epoch_ + 1 >= opt_.epochs) return false;
      epoch_start_ += layout_.rows();
      MT_ASSIGN_OR_RETURN(const std::vector<PieceStart>* barren, barren_for(T));
      layout_ = pack_epoch(lengths_, T, opt_.packing, ++epoch_, *barren);
    }
    return true;
  }
  // The set trains something (open_examples checked); cut to seq_len tokens it may not: every
  // completion past the first seq_len tokens of its example, and every step loss 0, gradient 0.
  Status check_trains(int T) const {
    if (!opt_.packing.truncate) return Status::Ok();
    MT_ASSIGN_OR_RETURN(bool trains, truncation_keeps_a_target(*set_, T));
    if (trains) return Status::Ok();
    return invalid_argument(set_->describe() + " has no token the loss counts among the targets of any example's " +
                            "first row (its tokens 1.." + std::to_string(T) + ", seq_len = " + std::to_string(T) +
                            "), and data.long_examples = truncate drops the rest: every step would train nothing "
                            "(long_examples: split keeps them)");
  }
  Status exhausted() const {
    return Status(StatusCode::kOutOfRange, "the data is exhausted: " + std::to_string(opt_.epochs) +
                                               " epoch(s) of " + set_->describe() + " trained");
  }

  std::shared_ptr<const ExampleSet> set_;
  ExampleSourceOptions opt_;
  std::vector<uint64_t> lengths_;
  mutable std::vector<PieceStart> barren_;  // for barren_seq_len_: pieces left out (barren_for)
  mutable int barren_seq_len_ = 0;
  EpochLayout layout_;
  uint64_t epoch_ = 0, epoch_start_ = 0;  // the epoch layout_ holds and its first row's cursor
  uint64_t cursor_ = 0;
  uint64_t real_tokens_ = 0, slots_ = 0;  // served by this source since it was opened
};

}  // namespace

std::unique_ptr<DataSource> make_example_source(std::shared_ptr<const ExampleSet> set, const ExampleSourceOptions& o) {
  return std::make_unique<ExampleSource>(std::move(set), o);
}

}  // namespace mt
