#include "client/spec_file.h"


#ifdef MEGATRAIN_HAVE_YAML
#include <yaml-cpp/yaml.h>
#endif

namespace mt::cli {

#ifdef MEGATRAIN_HAVE_YAML
namespace {

// A YAML scalar becomes the JSON value it spells: integer, number, boolean, null or string. A
// number beyond a double's range is refused rather than read as infinity.
Result<Json> scalar_to_json(const YAML::Node& n, const std::string& where) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return Json(s);  // quoted: always a string
  if (s == "true" || s == "True") return Json(true);
  if (s == "false" || s == "False") return Json(false);
  if (s == "null" || s == "~" || s.empty()) return Json();
  auto number = Json::parse_number(s);
  if (number.ok()) return number;
  if (number.status().code() == StatusCode::kOutOfRange) {
    const std::string key = where.empty() ? "spec" : where.substr(0, where.size() - 1);  // where ends in '.'
    return invalid_argument(key + ": " + number.status().message());
  }
  return Json(s);
}

// Converts a YAML tree, counting the nodes it visits: an alias is visited once per use, so a
// "billion laughs" document (aliases of aliases) is refused after kMaxSpecNodes instead of
// being expanded until memory runs out.
class YamlConverter {
 public:
  Result<Json> convert(const YAML::Node& n, const std::string& where, int depth) {
    if (++nodes_ > kMaxSpecNodes)
      return invalid_argument("spec has more than " + std::to_string(kMaxSpecNodes) +
                              " values (after expanding aliases); a job spec needs a few dozen");
    if (depth > kMaxSpecDepth)
      return invalid_argument("spec nests deeper than " + std::to_string(kMaxSpecDepth) + " levels at '" + where + "'");
    switch (n.Type()) {
      case YAML::NodeType::Null: return Json();
      case YAML::NodeType::Scalar: return scalar_to_json(n, where);
      case YAML::NodeType::Sequence: return sequence(n, where, depth);
      case YAML::NodeType::Map: return map(n, where, depth);
      default: return invalid_argument("unsupported YAML node at '" + where + "'");
    }
  }

 private:
  Result<Json> sequence(const YAML::Node& n, const std::string& where, int depth) {
    Json::Array items;
    for (const auto& item : n) {
      MT_ASSIGN_OR_RETURN(Json j, convert(item, where + "[]", depth + 1));
      items.push_back(std::move(j));
    }
    return Json::array(std::move(items));
  }
  Result<Json> map(const YAML::Node& n, const std::string& where, int depth) {
    Json obj = Json::object();
    for (const auto& kv : n) {
      if (!kv.first.IsScalar()) return invalid_argument("a key at '" + where + "' is not a plain name");
      const std::string key = kv.first.Scalar();
      if (obj.find(key)) return invalid_argument("duplicate key '" + where + key + "'");
      MT_ASSIGN_OR_RETURN(Json j, convert(kv.second, where + key + ".", depth + 1));
      obj.set(key, std::move(j));
    }
    return obj;
  }

  long nodes_ = 0;
};

}  // namespace
#endif

Result<Json> spec_text_to_json(const std::string& text, const std::string& source) {
  if (text.size() > kMaxSpecBytes)
    return invalid_argument(source + ": spec is " + std::to_string(text.size()) + " bytes; the limit is " +
                            std::to_string(kMaxSpecBytes));
  // YAML forbids NUL in a stream (and yaml-cpp turned one into other bytes, silently): refused.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    return invalid_argument(source + ": a NUL byte at offset " + std::to_string(nul) +
                            "; a YAML or JSON spec holds none (is this a binary file?)");
#ifdef MEGATRAIN_HAVE_YAML
  try {
    YAML::Node root = YAML::Load(text);
    auto j = YamlConverter().convert(root, "", 0);
    if (!j.ok()) return j.status().with_context(source);
    return j;
  } catch (const YAML::Exception& e) {
    return invalid_argument(source + ": " + e.what());
  }
#else
  auto j = Json::parse(text);
  if (!j.ok()) return j.status().with_context(source + " (this build reads JSON specs only)");
  return j;
#endif
}

Result<Json> load_spec_json(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxSpecBytes));
  return spec_text_to_json(text, path);
}

Result<JobSpec> load_job_spec(const std::string& path) {
  MT_ASSIGN_OR_RETURN(Json j, load_spec_json(path));
  auto spec = job_spec_from_json(j);
  if (!spec.ok()) return spec.status().with_context(path);
  return spec;
}

}  // namespace mt::cli
