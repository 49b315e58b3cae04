// Packing: which examples (or pieces of them) fill which rows of seq_len tokens in one epoch, a
// deterministic function of (lengths, seed, epoch, seq_len), so a cursor (a row index) names a
// position in the data and resume is bit-exact.
//
// Each epoch shuffles the examples (seed, epoch); an example longer than seq_len is split into
// pieces of seq_len (or truncated to its first seq_len tokens). With packing, pieces go first-fit
// into the open rows (a window of the most recent `window` rows); without, each piece gets its
// own row, padded. A piece of n tokens takes n slots: its tokens as inputs, each input's target
// the example's next token (-1 where the loss mask is 0 or the example ends). Pads are input 0,
// target -1; in a packed row every piece, and the padding, is its own document (positions
// restart at 0), so attention never crosses examples.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/status.h"
#include "engine/data/example_set.h"

namespace mt {

struct PackingOptions {
  bool packing = true;
  bool truncate = false;  // an example longer than seq_len: false splits it, true keeps its first seq_len tokens
  uint64_t seed = 1;
  int window = 64;        // open rows a piece may go into (first fit)
};

struct Piece {
  uint64_t example = 0;
  uint64_t begin = 0;  // first token of the example in this piece
  uint32_t length = 0;
};

struct EpochLayout {
  int seq_len = 0;
  std::vector<Piece> pieces;      // row by row
  std::vector<uint64_t> row_end;  // row r holds pieces [r ? row_end[r-1] : 0, row_end[r])
  uint64_t tokens = 0;            // real tokens placed (pads excluded)
  uint64_t rows() const { return row_end.size(); }
  double efficiency() const { return rows() ? double(tokens) / (double(rows()) * seq_len) : 0; }
};

// A piece by its example and first token; `barren`: pieces no row gets (barren_pieces).
using PieceStart = std::pair<uint64_t, uint64_t>;

// The rows of epoch `epoch` for examples of these lengths (length 0: skipped), without the pieces
// in `barren` (sorted).
EpochLayout pack_epoch(const std::vector<uint64_t>& lengths, int seq_len, const PackingOptions& o, uint64_t epoch,
                       const std::vector<PieceStart>& barren = {});

// The pieces whose targets the loss counts none of: a window of a long prompt (split or
// truncated), an example with no counted target (an empty completion; an empty text, which is its
// EOS alone), an example's last token alone (a one-token example, or what follows k * seq_len
// tokens). Trained, each was a row (or part of one) of loss 0 and gradient 0, and a batch of only
// such rows was an optimizer step on nothing (weight decay and the moments still moved the
// weights). They are left out of every epoch. A set whose every target counts is not read:
// only its lone last tokens are barren. Sorted.
Result<std::vector<PieceStart>> barren_pieces(const ExampleSet& set, int seq_len, bool truncate);

// The example order of an epoch: a Fisher-Yates shuffle driven by splitmix64(seed, epoch),
// identical on every platform.
std::vector<uint64_t> epoch_order(uint64_t n, uint64_t seed, uint64_t epoch);

// Whether some example, cut to its first seq_len tokens (long_examples: truncate), keeps a
// target the loss counts: one of its tokens 1..seq_len with loss mask 1. Reads examples until it
// finds one, so a set that trains is answered at its first trained example.
Result<bool> truncation_keeps_a_target(const ExampleSet& set, int seq_len);

// Writes row `row` of `layout` into in/tg/pos (seq_len each; pos may be null when packing is
// off). Returns the real tokens written.
Result<uint64_t> fill_row(const EpochLayout& layout, uint64_t row, const ExampleSet& set, int32_t* in, int32_t* tg,
                          int32_t* pos);

}  // namespace mt
