#include "engine/base/json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/base/confined_open.h"

namespace mt {

Json Json::array(Array a) {
  Json j;
  j.type_ = Type::kArray;
  j.arr_ = std::make_shared<Array>(std::move(a));
  return j;
}

Json Json::object(Object o) {
  Json j;
  j.type_ = Type::kObject;
  j.obj_ = std::make_shared<Object>(std::move(o));
  return j;
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : *obj_)
    if (k == key) return &v;
  return nullptr;
}

void Json::set(std::string key, Json value) {
  if (type_ != Type::kObject) *this = object();
  for (auto& [k, v] : *obj_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  obj_->emplace_back(std::move(key), std::move(value));
}

namespace {

void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(size_t(indent * depth), ' ');
}

}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  switch (type_) {
    case Type::kNull: out += "null"; break;
    case Type::kBool: out += bool_ ? "true" : "false"; break;
    case Type::kNumber: {
      char buf[32];
      if (is_int_) std::snprintf(buf, sizeof buf, "%lld", (long long)int_);
      else if (!std::isfinite(num_)) std::snprintf(buf, sizeof buf, "null");
      else std::snprintf(buf, sizeof buf, "%.17g", num_);
      out += buf;
      if (written_real_ && !std::strpbrk(buf, ".eEn")) out += ".0";
      break;
    }
    case Type::kString: dump_string(out, str_); break;
    case Type::kArray: {
      out += '[';
      for (size_t i = 0; i < arr_->size(); ++i) {
        if (i) out += indent < 0 ? "," : ",";
        newline(out, indent, depth + 1);
        (*arr_)[i].dump_to(out, indent, depth + 1);
      }
      if (!arr_->empty()) newline(out, indent, depth);
      out += ']';
      break;
    }
    case Type::kObject: {
      out += '{';
      for (size_t i = 0; i < obj_->size(); ++i) {
        if (i) out += ',';
        newline(out, indent, depth + 1);
        dump_string(out, (*obj_)[i].first);
        out += indent < 0 ? ":" : ": ";
        (*obj_)[i].second.dump_to(out, indent, depth + 1);
      }
      if (!obj_->empty()) newline(out, indent, depth);
      out += '}';
      break;
    }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Result<Json> parse_document() {
    Json v;
    MT_RETURN_IF_ERROR(value(v, 0));
    skip_ws();
    if (pos_ != s_.size()) return error("trailing characters after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 128;

  Status error(const std::string& what) const {
    return invalid_argument("JSON " + what + " at byte " + std::to_string(pos_));
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status value(Json& out, int depth) {
    if (depth > kMaxDepth) return error("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) return error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      std::string str;
      MT_RETURN_IF_ERROR(string(str));
      out = Json(std::move(str));
      return Status::Ok();
    }
    if (consume("true")) { out = Json(true); return Status::Ok(); }
    if (consume("false")) { out = Json(false); return Status::Ok(); }
    if (consume("null")) { out = Json(); return Status::Ok(); }
    return number(out);
  }

  Status number(Json& out) {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size()) {  // the number's extent; parse_number judges its form
      char c = s_[pos_];
      if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') { ++pos_; continue; }
      break;
    }
    std::string_view text = s_.substr(start, pos_ - start);
    if (text.empty() || text == "-") { pos_ = start; return error("invalid value"); }
    auto n = Json::parse_number(text);
    if (!n.ok()) {
      pos_ = start;
      return error(n.status().message());
    }
    out = std::move(*n);
    return Status::Ok();
  }

  Status hex4(uint32_t& cp) {
    if (pos_ + 4 > s_.size()) return error("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= uint32_t(c - 'A' + 10);
      else return error("bad \\u escape");
    }
    return Status::Ok();
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
    else { out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
  }

  Status string(std::string& out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return error("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return error("control character in string");
      if (c != '\\') { out += c; continue; }
      if (pos_ >= s_.size()) return error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          MT_RETURN_IF_ERROR(hex4(cp));
          const size_t after_high = pos_;
          if (cp >= 0xD800 && cp < 0xDC00 && consume("\\u")) {
            uint32_t lo = 0;
            MT_RETURN_IF_ERROR(hex4(lo));
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else pos_ = after_high;  // not its pair: that escape is a character of its own, read next
          }
          append_utf8(out, cp);
          break;
        }
        default: return error("bad escape");
      }
    }
  }

  Status array(Json& out, int depth) {
    ++pos_;
    Json::Array items;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; out = Json::array(); return Status::Ok(); }
    while (true) {
      Json item;
      MT_RETURN_IF_ERROR(value(item, depth + 1));
      items.push_back(std::move(item));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; break; }
      return error("expected ',' or ']'");
    }
    out = Json::array(std::move(items));
    return Status::Ok();
  }

  Status object(Json& out, int depth) {
    ++pos_;
    Json::Object members;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; out = Json::object(); return Status::Ok(); }
    std::map<std::string, int> seen;
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a key string");
      std::string key;
      MT_RETURN_IF_ERROR(string(key));
      if (seen[key]++) return error("duplicate key '" + key + "'");
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
      ++pos_;
      Json v;
      MT_RETURN_IF_ERROR(value(v, depth + 1));
      members.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; break; }
      return error("expected ',' or '}'");
    }
    out = Json::object(std::move(members));
    return Status::Ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<Json> Json::parse(std::string_view text) { return Parser(text).parse_document(); }

Result<Json> Json::parse_number(std::string_view text) {
  const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const char* last = text.data() + text.size();
  int64_t i = 0;
  auto [iend, ierr] = std::from_chars(first, last, i);
  if (ierr == std::errc() && iend == last) return Json(i);
  double d = 0;
  auto [dend, derr] = std::from_chars(first, last, d);
  const bool numeric = dend == last && first != last && (derr == std::errc() || derr == std::errc::result_out_of_range);
  if (!numeric || (derr == std::errc() && !std::isfinite(d)))  // not a number, or "inf", "nan"
    return invalid_argument("invalid number '" + std::string(text) + "'");
  if (derr == std::errc::result_out_of_range) {  // from_chars leaves d: strtod tells overflow from underflow
    d = std::strtod(std::string(first, last).c_str(), nullptr);
    if (std::isinf(d)) return Status(StatusCode::kOutOfRange, "number '" + std::string(text) + "' is out of range");
  }
  Json j(d);
  j.written_real_ = true;
  return j;
}

Status check_bool_fields(const Json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  for (const char* k : keys)
    if (const Json* v = obj.find(k); v && !v->is_bool() && !v->is_null())
      return invalid_argument(where + "." + k + " = " + v->dump() + " is not a boolean (true or false)");
  return Status::Ok();
}

namespace {

Result<std::string> read_all(const OwnedFd& file, const std::string& path, uint64_t max_bytes) {
  const int fd = file.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return data_loss("cannot stat '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return invalid_argument("'" + path + "' is a directory, not a file");
  const auto too_large = [&](uint64_t size) {
    return invalid_argument("'" + path + "' is " + std::to_string(size) + " bytes; the limit for this file is " +
                            std::to_string(max_bytes));
  };
  if (max_bytes && S_ISREG(st.st_mode) && uint64_t(st.st_size) > max_bytes) return too_large(uint64_t(st.st_size));
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return data_loss("error reading '" + path + "': " + std::strerror(errno));
    }
    out.append(buf, size_t(n));
    if (max_bytes && out.size() > max_bytes) return too_large(out.size());  // a pipe, or a file that grew
  }
  return out;
}

}  // namespace

Result<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  MT_ASSIGN_OR_RETURN(const OwnedFd file, open_confined_or_status("cannot open", path, O_RDONLY | O_CLOEXEC));
  return read_all(file, path, max_bytes);
}

Result<std::string> read_data_file(const std::string& path, uint64_t max_bytes) {
  MT_ASSIGN_OR_RETURN(const OwnedFd file, open_regular_file("cannot open", path));
  return read_all(file, path, max_bytes);
}

}  // namespace mt
