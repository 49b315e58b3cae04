// encode_pieces: segments at special tokens, loss boundaries by token byte ends where decoding
// gives them exactly, else by common prefixes.
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

// Where each token of `ids` ends in `text`, when decoding the tokens one by one gives back `text`
// byte for byte (byte-level BPE without a normaliser that changed it, no token ending inside a
// character); empty otherwise.
std::vector<size_t> token_ends(const Tokenizer& tokenizer, std::string_view text, const std::vector<int32_t>& ids) {
  std::vector<size_t> ends;
  std::string piece;
  size_t at = 0;
  for (const int32_t id : ids) {
    piece.clear();
    if (!tokenizer.decode(&id, 1, piece).ok() || piece.empty() || text.substr(at, piece.size()) != piece) return {};
    at += piece.size();
    ends.push_back(at);
  }
  if (at != text.size()) ends.clear();
  return ends;
}

// The tokens [first, last) that hold a byte of text[c0, c1), c0 < c1. With each token's end known
// that is exact. Without, the tokens an encoding of text[0, c0) shares with `ids` lie before c0 and
// the rest count; a token of only earlier bytes can then count too, where the prefix encodes
// differently before c0 (BPE merges that the following bytes change).
Result<std::pair<size_t, size_t>> tokens_holding(const Tokenizer& tokenizer, std::string_view text, size_t c0,
                                                 size_t c1, const std::vector<int32_t>& ids,
                                                 const std::vector<size_t>& ends) {
  if (!ends.empty()) {
    const size_t first = size_t(std::upper_bound(ends.begin(), ends.end(), c0) - ends.begin());
    const size_t last = size_t(std::lower_bound(ends.begin(), ends.end(), c1) - ends.begin()) + 1;
    return std::pair{first, std::min(last, ids.size())};
  }
  MT_ASSIGN_OR_RETURN(const Boundary first, boundary(tokenizer, text, c0, ids));
  MT_ASSIGN_OR_RETURN(const Boundary last, boundary(tokenizer, text, c1, ids));
  return std::pair{first.token, std::min(ids.size(), last.exact ? last.token : last.token + 1)};
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
  const bool mixed = std::any_of(pieces.begin(), pieces.end(), [&](const TextPiece& p) { return p.trained; }) &&
                     std::any_of(pieces.begin(), pieces.end(), [&](const TextPiece& p) { return !p.trained; });
  const std::vector<size_t> ends = mixed ? token_ends(tokenizer, text, ids) : std::vector<size_t>{};
  for (size_t k = 0; k < pieces.size();) {
    size_t end = k;  // [k, end): a run of pieces with the same loss
    while (end < pieces.size() && pieces[end].trained == pieces[k].trained) ++end;
    const size_t c0 = starts[k], c1 = end < pieces.size() ? starts[end] : text.size();
    if (pieces[k].trained && c1 > c0) {
      MT_ASSIGN_OR_RETURN(const auto span, tokens_holding(tokenizer, text, c0, c1, ids, ends));
      for (size_t t = span.first; t < span.second; ++t) loss[t] = 1;
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
