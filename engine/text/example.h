// A training example as tokens with a loss mask: what a jsonl line becomes (plain text, a prompt
// and its completion, or a chat) and what packing places into sequences.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/text/tokenizer.h"

namespace mt {

struct TokenizedExample {
  std::vector<int32_t> ids;
  // loss[i] == 1: the model is trained to predict ids[i] from ids[0..i); 0: context only (a
  // prompt, a user turn, the template's markup). Same length as ids.
  std::vector<uint8_t> loss;
};

}  // namespace mt
