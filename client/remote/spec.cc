#include <google/protobuf/util/json_util.h>

#include "client/remote/commands.h"
#include "client/spec_file.h"

namespace mt::cli {

namespace {

// Protobuf says "(optimizer) wieght_decay: Cannot find field."; say "unknown key
// 'optimizer.wieght_decay'". Other messages ("(seq_len): invalid value ...") pass unchanged.
std::string explain(std::string msg) {
  const std::string tail = ": Cannot find field.";
  if (msg.size() <= tail.size() || msg.compare(msg.size() - tail.size(), tail.size(), tail) != 0) return msg;
  std::string key = msg.substr(0, msg.size() - tail.size()), path;
  if (key.size() > 1 && key[0] == '(') {
    const size_t close = key.find(") ");
    if (close != std::string::npos) {
      path = key.substr(1, close - 1) + ".";
      key = key.substr(close + 2);
    }
  }
  return "unknown key '" + path + key + "' (keys are the snake_case field names of megatrain.v1.JobSpec)";
}

}  // namespace

Result<v1::JobSpec> load_proto_spec(const std::string& path) {
  MT_ASSIGN_OR_RETURN(Json json, load_spec_json(path));
  if (!json.is_object()) return invalid_argument(path + ": a job spec is a mapping of keys to values");
  // The engine's reader first: the same refusals, in the same words, as a local run (an
  // out-of-range number is named before protobuf's JSON mapping would round or reject it).
  if (auto engine = job_spec_from_json(json); !engine.ok()) return engine.status().with_context(path);
  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions opt;
  opt.ignore_unknown_fields = false;  // a misspelt key is an error that names it
  auto st = google::protobuf::util::JsonStringToMessage(json.dump(), &spec, opt);
  if (!st.ok()) return invalid_argument(path + ": " + explain(std::string(st.message())));
  return spec;
}

}  // namespace mt::cli
