// tokenizer.json's post_processor: the single-sequence template's special tokens.
#include "engine/text/post_processor.h"

#include <string>

namespace mt {

namespace {

constexpr size_t kMaxItems = 64;      // items of a template
constexpr size_t kMaxIds = 64;        // ids of one special token
constexpr int kMaxDepth = 4;          // nested Sequences

// One SpecialToken of a template: its ids, from the template's "special_tokens" table.
Status special_ids(const Json* table, const std::string& name, int vocab, std::vector<int32_t>& out) {
  const Json* entry = table && table->is_object() ? table->find(name) : nullptr;
  const Json* ids = entry ? entry->find("ids") : nullptr;
  if (!ids || !ids->is_array() || ids->items().empty() || ids->items().size() > kMaxIds)
    return invalid_argument("post_processor: special token '" + name + "' has no ids in special_tokens");
  for (const Json& id : ids->items()) {
    if (!id.is_integer() || id.as_int() < 0 || id.as_int() >= vocab)
      return invalid_argument("post_processor: special token '" + name + "' has an id outside [0, " +
                              std::to_string(vocab) + ")");
    out.push_back(int32_t(id.as_int()));
  }
  return Status::Ok();
}

// TemplateProcessing's "single": SpecialToken items around the one Sequence "A".
Result<SequenceSpecials> template_single(const Json& spec, int vocab) {
  const Json* single = spec.find("single");
  if (!single || !single->is_array() || single->items().size() > kMaxItems)
    return invalid_argument("post_processor TemplateProcessing has no single template");
  const Json* table = spec.find("special_tokens");
  SequenceSpecials s;
  int sequences = 0;
  for (const Json& item : single->items()) {
    const Json* special = item.is_object() ? item.find("SpecialToken") : nullptr;
    const Json* sequence = item.is_object() ? item.find("Sequence") : nullptr;
    const Json* id = special ? special->find("id") : sequence ? sequence->find("id") : nullptr;
    if (!id || !id->is_string() || item.members().size() != 1)
      return invalid_argument("post_processor TemplateProcessing: a single item is not {\"SpecialToken\": {id}} or "
                              "{\"Sequence\": {id}}");
    if (sequence) {
      if (id->as_string() != "A")
        return invalid_argument("post_processor TemplateProcessing: the single template names sequence '" +
                                id->as_string() + "', not A");
      ++sequences;
      continue;
    }
    MT_RETURN_IF_ERROR(special_ids(table, id->as_string(), vocab, sequences ? s.after : s.before));
  }
  if (sequences != 1)
    return invalid_argument("post_processor TemplateProcessing: the single template holds the sequence " +
                            std::to_string(sequences) + " times, not once");
  return s;
}

// `spec` into `out`: a template wraps what the processors before it in a Sequence produced.
Status parse_into(const Json& spec, int vocab, int depth, SequenceSpecials& out) {
  const Json* type = spec.is_object() ? spec.find("type") : nullptr;
  if (!type || !type->is_string()) return invalid_argument("post_processor has no type");
  const std::string& t = type->as_string();
  if (t == "ByteLevel") return Status::Ok();  // offsets only
  if (t == "Sequence") {
    const Json* list = spec.find("processors");
    if (!list || !list->is_array()) return invalid_argument("post_processor Sequence has no processors list");
    if (depth >= kMaxDepth) return invalid_argument("post_processor Sequence nested too deeply");
    for (const Json& p : list->items()) MT_RETURN_IF_ERROR(parse_into(p, vocab, depth + 1, out));
    return Status::Ok();
  }
  if (t != "TemplateProcessing")
    return unimplemented("post_processor type '" + t + "' is not supported (supported: TemplateProcessing, "
                         "ByteLevel, Sequence)");
  MT_ASSIGN_OR_RETURN(SequenceSpecials s, template_single(spec, vocab));
  out.before.insert(out.before.begin(), s.before.begin(), s.before.end());
  out.after.insert(out.after.end(), s.after.begin(), s.after.end());
  return Status::Ok();
}

}  // namespace

Result<SequenceSpecials> parse_post_processor(const Json* spec, int vocab_size) {
  SequenceSpecials out;
  if (spec && !spec->is_null()) MT_RETURN_IF_ERROR(parse_into(*spec, vocab_size, 0, out));
  return out;
}

}  // namespace mt
