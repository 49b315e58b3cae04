#include "client/spec_file.h"

#include <cstdlib>

#ifdef MEGATRAIN_HAVE_YAML
#include <yaml-cpp/yaml.h>
#endif

namespace mt::cli {

#ifdef MEGATRAIN_HAVE_YAML
namespace {

// A YAML scalar becomes the JSON value it spells: integer, number, boolean, null or string.
Json scalar_to_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return Json(s);  // quoted: always a string
  if (s == "true" || s == "True") return Json(true);
  if (s == "false" || s == "False") return Json(false);
  if (s == "null" || s == "~" || s.empty()) return Json();
  char* end = nullptr;
  long long i = std::strtoll(s.c_str(), &end, 10);
  if (*end == 0) return Json(int64_t(i));
  double d = std::strtod(s.c_str(), &end);
  if (*end == 0) return Json(d);
  return Json(s);
}

Result<Json> yaml_to_json(const YAML::Node& n, const std::string& where) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return Json();
    case YAML::NodeType::Scalar: return scalar_to_json(n);
    case YAML::NodeType::Sequence: {
      Json::Array items;
      for (const auto& item : n) {
        MT_ASSIGN_OR_RETURN(Json j, yaml_to_json(item, where + "[]"));
        items.push_back(std::move(j));
      }
      return Json::array(std::move(items));
    }
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : n) {
        const std::string key = kv.first.as<std::string>();
        if (obj.find(key)) return invalid_argument("duplicate key '" + where + key + "'");
        MT_ASSIGN_OR_RETURN(Json j, yaml_to_json(kv.second, where + key + "."));
        obj.set(key, std::move(j));
      }
      return obj;
    }
    default: return invalid_argument("unsupported YAML node at '" + where + "'");
  }
}

}  // namespace
#endif

Result<Json> spec_text_to_json(const std::string& text, const std::string& source) {
#ifdef MEGATRAIN_HAVE_YAML
  try {
    YAML::Node root = YAML::Load(text);
    auto j = yaml_to_json(root, "");
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

Result<JobSpec> load_job_spec(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path));
  MT_ASSIGN_OR_RETURN(Json j, spec_text_to_json(text, path));
  auto spec = job_spec_from_json(j);
  if (!spec.ok()) return spec.status().with_context(path);
  return spec;
}

}  // namespace mt::cli
