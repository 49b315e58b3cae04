// Encoding text pieces with a loss mask: the pieces of a rendered chat (or a prompt and its
// completion) become ids and per-token loss such that the ids are those of encoding the whole
// text at once and a token is trained on when any of its bytes is in a trained piece.
#pragma once
#include <span>

#include "engine/base/status.h"
#include "engine/text/chat_template.h"
#include "engine/text/example.h"
#include "engine/text/tokenizer.h"

namespace mt {

// Appends the ids and loss of `pieces` to `out`.
//
// The text is cut into segments, each starting at a special piece (a special token of the
// template's markup), and each segment is encoded on its own. A tokenizer splits its input at
// special tokens before anything else (Hugging Face `tokenizers` matches added tokens first), so
// no token spans a special token, and every segment but the first starts with one, as it does in
// the whole text: encoding the segments one by one gives the ids of encoding the whole text.
// Within a segment, where the loss changes (markup -> assistant content, end token -> "\n", prompt
// -> completion), a token is trained when it holds a byte of a trained piece (a token straddling
// the change counts). Where decoding the segment's tokens one by one gives back its bytes (byte-
// level BPE) each token's bytes are known and the rule is exact. Otherwise the boundary is found by
// encoding the text before it: the tokens both encodings share lie before it, and the rest count,
// so a token of only untrained bytes can count where BPE encodes that prefix differently.
//
// check_special: each special piece must come out as the tokenizer's single token for it
// (kInternal otherwise: the tokenizer does not split at its special tokens as promised).
Status encode_pieces(const Tokenizer& tokenizer, std::span<const TextPiece> pieces, bool check_special,
                     TokenizedExample& out);

}  // namespace mt
