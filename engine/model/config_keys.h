// Every key of a config.json is read, known to be harmless, or refused by name: a key that
// changes the model and that we do not read would train the wrong model silently (issue 24.1:
// transformers 5 moved rope_theta into rope_parameters, and such a Llama trained with theta
// 10000). The keys the reader reads are in kReadKeys; the harmless ones (metadata, generation
// defaults, output switches that a forward for training does not consult) in config_keys.cc,
// each group with the reason it is harmless.
#pragma once
#include <string>
#include <string_view>

#include "engine/base/json.h"
#include "engine/base/status.h"

namespace mt {

// INVALID_ARGUMENT "SOURCE: field 'K' ..." for the first key of `config` that is neither read by
// parse_model_config nor known to be harmless, or a harmless key with a value that is not.
Status check_config_keys(const Json& config, const std::string& source);

// True for the keys parse_model_config reads (the ones that can change the model).
bool is_read_config_key(std::string_view key);

}  // namespace mt
