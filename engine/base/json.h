// A small JSON reader/writer for config.json, safetensors headers and checkpoint metadata.
// The engine may not depend on third-party JSON libraries (it must build with a compiler and
// CMake alone). Objects keep key order; duplicate keys are reported by the parser.
#pragma once
#include <cstdint>
#include <map>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace mt {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  Json(double d) : type_(Type::kNumber), num_(d), int_(clamp_to_int(d)), is_int_(false) {}
  Json(int64_t i) : type_(Type::kNumber), num_(double(i)), int_(i), is_int_(true) {}
  Json(int i) : Json(int64_t(i)) {}
  Json(std::string s) : type_(Type::kString), str_(std::move(s)) {}
  Json(const char* s) : Json(std::string(s)) {}
  static Json array(Array a = {});
  static Json object(Object o = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_integer() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return bool_; }
  double as_double() const { return num_; }
  int64_t as_int() const { return is_int_ ? int_ : clamp_to_int(num_); }
  const std::string& as_string() const { return str_; }
  const Array& items() const { return *arr_; }
  Array& items() { return *arr_; }
  const Object& members() const { return *obj_; }
  Object& members() { return *obj_; }

  // Object access: find returns nullptr when absent (or when this is not an object).
  const Json* find(std::string_view key) const;
  void set(std::string key, Json value);  // appends or replaces

  std::string dump(int indent = -1) const;
  static Result<Json> parse(std::string_view text);
  // One number as JSON (or YAML) spells it: an integer that fits int64 stays an integer; a larger
  // integer or a fraction becomes a double. Text that is not a whole number is kInvalidArgument;
  // a number beyond a double's range (1e999) is kOutOfRange, never a silent infinity.
  static Result<Json> parse_number(std::string_view text);

 private:
  // double -> int64 without undefined behaviour for out-of-range or NaN values (0 then).
  static int64_t clamp_to_int(double d) { return d >= -9.2e18 && d <= 9.2e18 ? int64_t(d) : 0; }
  void dump_to(std::string& out, int indent, int depth) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double num_ = 0;
  int64_t int_ = 0;
  bool is_int_ = false;
  // A number the parsed text wrote as a fraction or with an exponent ("3.0", "1e4"): dump() keeps
  // it one ("3.0", never "3"), so a config.json round-trips with its float fields floats
  // (transformers validates their types). Numbers built from a double print as before.
  bool written_real_ = false;
  std::string str_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
};

// Reads a whole file into a string; a file larger than max_bytes (when not 0) is refused with
// kInvalidArgument before anything is read, so an untrusted path cannot exhaust memory.
Result<std::string> read_file(const std::string& path, uint64_t max_bytes = 0);
// A data file (text the job trains on): a regular file only, refused by name otherwise (a FIFO
// would hold the open until a writer came, /dev/zero would be read without end). read_file takes
// anything it can open (a secret from <(...), a spec from /dev/stdin).
Result<std::string> read_data_file(const std::string& path, uint64_t max_bytes = 0);

// Refuses any of `keys` that `obj` holds as something other than a boolean or null (a "true"
// string read as false would change what the file means), naming `where` and the key.
Status check_bool_fields(const Json& obj, std::initializer_list<const char*> keys, const std::string& where);

}  // namespace mt
