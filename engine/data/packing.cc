// Epoch layouts (shuffle, split or truncate, first-fit packing) and filling a row from them.
#include "engine/data/packing.h"

#include <algorithm>
#include <deque>

namespace mt {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The pieces of the shuffled examples, in order, but the barren ones.
std::vector<Piece> pieces_of(const std::vector<uint64_t>& lengths, int T, const PackingOptions& o, uint64_t epoch,
                             const std::vector<PieceStart>& barren) {
  std::vector<Piece> out;
  for (uint64_t e : epoch_order(lengths.size(), o.seed, epoch)) {
    const uint64_t n = o.truncate ? std::min<uint64_t>(lengths[e], uint64_t(T)) : lengths[e];
    for (uint64_t b = 0; b < n; b += uint64_t(T))
      if (!std::binary_search(barren.begin(), barren.end(), PieceStart{e, b}))
        out.push_back({e, b, uint32_t(std::min<uint64_t>(n - b, T))});
  }
  return out;
}

}  // namespace

std::vector<uint64_t> epoch_order(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed ^ (0xd1b54a32d192ed03ull * (epoch + 1));
  for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[splitmix64(state) % i]);
  return order;
}

EpochLayout pack_epoch(const std::vector<uint64_t>& lengths, int T, const PackingOptions& o, uint64_t epoch,
                       const std::vector<PieceStart>& barren) {
  EpochLayout L;
  L.seq_len = T;
  std::vector<std::vector<Piece>> rows;
  std::vector<int> room;     // free slots per row
  std::deque<size_t> open;   // rows a piece may still go into, oldest first
  const size_t window = size_t(std::max(1, o.window));
  for (const Piece& p : pieces_of(lengths, T, o, epoch, barren)) {
    L.tokens += p.length;
    auto fit = std::find_if(open.begin(), open.end(), [&](size_t r) { return room[r] >= int(p.length); });
    if (!o.packing || fit == open.end()) {
      rows.emplace_back();
      room.push_back(T);
      open.push_back(rows.size() - 1);
      if (open.size() > window) open.pop_front();
      fit = open.end() - 1;
    }
    rows[*fit].push_back(p);
    room[*fit] -= int(p.length);
  }
  for (const auto& r : rows) {
    L.pieces.insert(L.pieces.end(), r.begin(), r.end());
    L.row_end.push_back(L.pieces.size());
  }
  return L;
}

Result<std::vector<PieceStart>> barren_pieces(const ExampleSet& set, int T, bool truncate) {
  std::vector<PieceStart> out;
  uint64_t targets = 0;  // every token but each example's first
  for (uint64_t e = 0; e < set.size(); ++e) targets += set.length(e) - 1;
  const bool every_target_counts = set.trained_tokens() == targets;  // pretraining text: masks not read
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
  for (uint64_t e = 0; e < set.size(); ++e) {
    const uint64_t len = set.length(e);
    const uint64_t n = truncate ? std::min<uint64_t>(len, uint64_t(T)) : len;
    if (every_target_counts) {  // only an example's last token alone: after k * seq_len tokens, or all of it
      if ((len - 1) % uint64_t(T) == 0 && len - 1 < n) out.push_back({e, len - 1});
      continue;
    }
    for (uint64_t b = 0; b < n; b += uint64_t(T)) {
      // the piece's targets: the tokens after each of its tokens (fill_row); an example's last
      // token alone (a one-token example, or the piece after k * seq_len tokens) has none
      const uint64_t last = std::min<uint64_t>(b + uint64_t(T), len - 1);
      if (last == b) {
        out.push_back({e, b});
        continue;
      }
      ids.resize(last - b), loss.resize(last - b);
      MT_RETURN_IF_ERROR(set.read(e, b + 1, last - b, ids.data(), loss.data()));
      if (std::find(loss.begin(), loss.end(), uint8_t(1)) == loss.end()) out.push_back({e, b});
    }
  }
  return out;  // sorted: examples, then pieces, in order
}

Result<bool> truncation_keeps_a_target(const ExampleSet& set, int seq_len) {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
  for (uint64_t e = 0; e < set.size(); ++e) {
    const uint64_t n = std::min<uint64_t>(set.length(e), uint64_t(seq_len) + 1);  // the last one a target only
    ids.resize(n), loss.resize(n);
    MT_RETURN_IF_ERROR(set.read(e, 0, n, ids.data(), loss.data()));
    if (std::find(loss.begin() + 1, loss.end(), uint8_t(1)) != loss.end()) return true;
  }
  return false;
}

Result<uint64_t> fill_row(const EpochLayout& L, uint64_t row, const ExampleSet& set, int32_t* in, int32_t* tg,
                          int32_t* pos) {
  const size_t T = size_t(L.seq_len);
  std::vector<int32_t> ids(T + 1);
  std::vector<uint8_t> loss(T + 1);
  size_t at = 0;
  for (uint64_t k = row ? L.row_end[row - 1] : 0; k < L.row_end[row]; ++k) {
    const Piece& p = L.pieces[k];
    const uint64_t more = p.begin + p.length < set.length(p.example) ? 1 : 0;  // the target after the piece
    MT_RETURN_IF_ERROR(set.read(p.example, p.begin, p.length + more, ids.data(), loss.data()));
    for (size_t t = 0; t < p.length; ++t) {
      in[at + t] = ids[t];
      const bool counted = t + 1 < p.length + more && loss[t + 1];
      tg[at + t] = counted ? ids[t + 1] : -1;
      if (pos) pos[at + t] = int32_t(t);
    }
    at += p.length;
  }
  for (size_t t = at; t < T; ++t) {  // padding: one document of its own
    in[t] = 0;
    tg[t] = -1;
    if (pos) pos[t] = int32_t(t - at);
  }
  return uint64_t(at);
}

}  // namespace mt
