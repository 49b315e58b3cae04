// encode_pieces: segments at special tokens, loss boundaries by common prefixes.
#include "engine/text/piece_encoding.h"

#include <algorithm>
#include <string>
#include <vector>

namespace mt {

namespace {

// Where char offset `c` of `text` falls among `ids` (the encoding of all of `text`): the number of
// tokens that encoding text[0, c) shares with it, and whether that prefix is exactly those tokens
// (false: the next token straddles c).
struct Boundary {
  size_t token = 0;
  bool exact = true;
};

Result<Boundary> boundary(const Tokenizer& tokenizer, std::string_view text, size_t c, const std::vector<int32_t>& ids) {
  if (c == 0) return Boundary{0, true};
  if (c >= text.size()) return Boundary{ids.size(), true};
  std::vector<int32_t> prefix;
  MT_RETURN_IF_ERROR(tokenizer.encode(text.substr(0, c), prefix));
  const auto mismatch = std::mismatch(prefix.begin(), prefix.end(), ids.begin(), ids.end());
  const size_t shared = size_t(mismatch.first - prefix.begin());
  return Boundary{shared, shared == prefix.size()};
}

Status encode_segment(const Tokenizer& tokenizer, std::span<const TextPiece> pieces, bool check_special,
                      TokenizedExample& out) {
  std::string text;
  std::vector<size_t> starts;
  for (const TextPiece& p : pieces) {
    starts.push_back(text.size());
    text += p.text;
  }
  std::vector<int32_t> ids;
  MT_RETURN_IF_ERROR(tokenizer.encode(text, ids));
  if (check_special && pieces.front().special) {
    const int32_t want = tokenizer.token_id(pieces.front().text);
    if (ids.empty() || ids.front() != want)
      return internal_error("the tokenizer (" + tokenizer.describe() + ") did not encode '" + pieces.front().text +
                            "' as its special token " + std::to_string(want));
  }
  std::vector<uint8_t> loss(ids.size(), 0);
  for (size_t k = 0; k < pieces.size();) {
    size_t end = k;  // [k, end): a run of pieces with the same loss
    while (end < pieces.size() && pieces[end].trained == pieces[k].trained) ++end;
    const size_t c0 = starts[k], c1 = end < pieces.size() ? starts[end] : text.size();
    if (pieces[k].trained && c1 > c0) {
      MT_ASSIGN_OR_RETURN(const Boundary first, boundary(tokenizer, text, c0, ids));
      MT_ASSIGN_OR_RETURN(const Boundary last, boundary(tokenizer, text, c1, ids));
      const size_t t1 = std::min(ids.size(), last.exact ? last.token : last.token + 1);
      for (size_t t = first.token; t < t1; ++t) loss[t] = 1;
    }
    k = end;
  }
  out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  out.loss.insert(out.loss.end(), loss.begin(), loss.end());
  return Status::Ok();
}

}  // namespace

Status encode_pieces(const Tokenizer& tokenizer, std::span<const TextPiece> pieces, bool check_special,
                     TokenizedExample& out) {
  for (size_t b = 0; b < pieces.size();) {
    size_t e = b + 1;
    while (e < pieces.size() && !pieces[e].special) ++e;
    MT_RETURN_IF_ERROR(encode_segment(tokenizer, pieces.subspan(b, e - b), check_special, out));
    b = e;
  }
  return Status::Ok();
}

}  // namespace mt
