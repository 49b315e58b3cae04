// The model families: which architectures load, what transformers assumes for the keys a
// config.json leaves out, and each family's variants of the one decoder (model_config.h),
// read from its own keys. Adding a family is one row of the table in families.cc.
#pragma once
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/model/config_reader.h"
#include "engine/model/model_config.h"

namespace mt {

// Sets c.architecture from "architectures" (one name), refused unless a family has it.
Status read_architecture(const ConfigReader& r, ModelConfig& c);
// The family's defaults for keys a file may leave out, once the heads are known.
void apply_family_defaults(ModelConfig& c);
// The family's variants from its keys (after the shape and RoPE); options it does not implement
// are refused naming the field.
Status read_family_variants(const ConfigReader& r, ModelConfig& c);
// True when the family reads RoPE per layer type (transformers 5's {"full_attention": {...},
// "sliding_attention": {...}} rope_parameters): Gemma 3.
bool family_has_local_rope(const std::string& architecture);
// The family's RoPE object (JSON) when a file has neither rope_scaling nor rope_parameters, as
// transformers fills it in (gpt-oss: YaRN); nullptr: default RoPE.
const char* family_default_rope(const std::string& architecture);
std::vector<std::string> supported_architectures();

}  // namespace mt
