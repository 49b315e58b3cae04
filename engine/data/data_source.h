// DataSource: where training tokens come from. A source yields batches of sequences of
// T inputs and T targets (targets are inputs shifted by one; a target < 0 is excluded from
// the loss). Its position is a plain cursor, saved in checkpoints so resume neither loses
// nor repeats data.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/data/packing.h"

namespace mt {

struct Batch {
  int num_seqs = 0;  // G
  int seq_len = 0;   // T
  std::vector<int32_t> inputs;   // [G, T]
  std::vector<int32_t> targets;  // [G, T]
  // Packed documents: [G, T] position of each input in its document (0 where a document
  // starts, +1 per token after it; every row starts a document). Empty: one document per
  // row. RoPE rotates by these positions and attention is masked to each document.
  std::vector<int32_t> positions;
  long counted_targets() const;
};

// Every input in [0, vocab) and every target in [-1, vocab); errors name the index. Positions,
// when present, number every row's documents as above (so the kernels may trust them).
Status validate_batch(const Batch& b, int vocab);

// Sets b.positions from an end-of-document token (Megatron-LM's reset_position_ids rule): the
// token after each eod_id input starts a new document; the eod_id token ends its own.
void mark_documents(Batch& b, int32_t eod_id);
// The positions part of validate_batch (documents.cc).
Status check_positions(const Batch& b);


class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills `out` with the next `num_seqs` sequences of `seq_len` tokens. A source that waits for
  // data (the daemon's push spool) returns UNAVAILABLE while it has none, now and then and when
  // interrupted, so the runner can checkpoint, cancel or yield the device; the runner then calls
  // next_batch again (or stops). Sources that never wait never return UNAVAILABLE.
  virtual Status next_batch(int num_seqs, int seq_len, Batch& out) = 0;
  virtual uint64_t cursor() const = 0;
  virtual Status seek(uint64_t cursor) = 0;
  virtual std::string describe() const = 0;
  // The entropy floor in nats/token when it is known exactly (synthetic data), else < 0.
  virtual double entropy_floor() const { return -1; }
  // Distinct sequences of seq_len a finite source holds before it wraps (0: unbounded).
  virtual uint64_t num_sequences(int seq_len) const { return 0; }
  // Real tokens / slots over the batches served since the source was opened (sources of
  // tokenized examples, which pack or pad them); < 0 where every slot is a real token.
  virtual double packing_efficiency() const { return -1; }
};

struct SyntheticOptions {
  uint64_t seed = 1;
  int vocab = 256;      // tokens are drawn from [0, min(vocab, active_vocab))
  int active_vocab = 64;
  int branching = 4;    // successors per state of the Markov chain
  // Bounds: building the chain takes O(states^2) time and states x branching memory, so a spec
  // cannot make a job (or the daemon running it) spend hours or terabytes on test data.
  static constexpr int kMaxActiveVocab = 16384;
  static constexpr int kMaxBranching = 256;
};
// Checks active_vocab and branching (the spec fields data.active_vocab, data.branching).
Status check_synthetic_options(int active_vocab, int branching);

// A seeded first-order Markov chain with sparse random transitions. Its entropy rate is
// computed exactly from the stationary distribution, so tests know the loss floor.
Result<std::unique_ptr<DataSource>> make_synthetic_source(const SyntheticOptions& opt);

// UTF-8 text through the byte-level tokenizer (token = byte, vocab >= 256), read from a file
// and cut into consecutive windows of seq_len + 1 bytes.
Result<std::unique_ptr<DataSource>> make_text_source(const std::string& path, int vocab);

// Token files, memory-mapped: dtype "uint16" / "uint32" (raw little-endian tokens, as nanoGPT's
// .bin) or "llmc" (llm.c shard: 256 int32 header, magic 20240520, version 1 = uint16 tokens or
// 2 = uint32, header[2] = token count, which must match the file size). Sequences are
// consecutive windows of seq_len + 1 tokens at stride seq_len; cursor = sequences consumed,
// wrapping at the end. Tokens >= vocab are reported (index and value): eagerly at open for
// files of up to 64 Mi tokens, otherwise by next_batch for the windows it reads.
Result<std::unique_ptr<DataSource>> make_token_file_source(const std::string& path, const std::string& dtype,
                                                           int vocab);

// A source whose batches carry the documents that eod_id delimits (mark_documents); cursor,
// seek and the rest are the inner source's, so resume is unchanged. eod_id in [0, vocab).
Result<std::unique_ptr<DataSource>> with_documents(std::unique_ptr<DataSource> inner, int32_t eod_id, int vocab);

// Tokenized examples (packing.h): rows of each epoch's packing; cursor = rows served. With
// epochs > 0, the batch after the last row of the last epoch is OUT_OF_RANGE (the runner ends
// the job there); a batch that runs past it is completed with empty rows (targets -1).
struct ExampleSourceOptions {
  PackingOptions packing;
  uint64_t epochs = 0;  // 0: unbounded
};
std::unique_ptr<DataSource> make_example_source(std::shared_ptr<const ExampleSet> set, const ExampleSourceOptions& o);

}  // namespace mt
