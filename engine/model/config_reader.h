// ConfigReader: typed reads of one config.json's fields with errors that name the field and
// the file (engine/model: model_config.cc reads the shared shape, families.cc each family's
// variants).
#pragma once
#include <string>
#include <utility>

#include "engine/base/json.h"
#include "engine/base/status.h"
#include "engine/model/model_config.h"

namespace mt {

class ConfigReader {
 public:
  ConfigReader(const Json& j, std::string source) : j_(j), source_(std::move(source)) {}

  Status fail(const std::string& field, const std::string& why) const {
    return invalid_argument(source_ + ": field '" + field + "' " + why);
  }

  // A positive integer no larger than `max` (ModelLimits).
  Status positive_int(const char* field, int& out, int max, bool required = true) const {
    const Json* v = j_.find(field);
    if (!v || v->is_null()) return required ? fail(field, "is required but missing") : Status::Ok();
    if (!v->is_integer() || v->as_int() <= 0) return fail(field, "must be a positive integer, got " + v->dump());
    if (v->as_int() > max)
      return fail(field, "= " + v->dump() + " exceeds the limit of " + std::to_string(max) +
                             " (the largest real models are far below it; see ModelLimits)");
    out = int(v->as_int());
    return Status::Ok();
  }

  Status number(const char* field, double& out) const {
    const Json* v = j_.find(field);
    if (!v || v->is_null()) return Status::Ok();
    if (!v->is_number() || !(v->as_double() > 0)) return fail(field, "must be a positive number, got " + v->dump());
    out = v->as_double();
    return Status::Ok();
  }

  Status boolean(const char* field, bool& out) const {
    const Json* v = j_.find(field);
    if (!v || v->is_null()) return Status::Ok();
    if (!v->is_bool()) return fail(field, "must be true or false, got " + v->dump());
    out = v->as_bool();
    return Status::Ok();
  }

  const Json* get(const char* field) const { return j_.find(field); }

 private:
  const Json& j_;
  std::string source_;
};

}  // namespace mt
