// Safetensors: format, header validation and reading. Writing is in safetensors_write.cc.
#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/base/confined_open.h"
#include "engine/base/json.h"

namespace mt {

// ---- dtypes ------------------------------------------------------------------------------------

namespace {

struct DTypeDesc {
  DType d;
  const char* name;
  size_t size;
};
constexpr DTypeDesc kDTypes[] = {
    {DType::kF64, "F64", 8},  {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8},   {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},  {DType::kI8, "I8", 1},     {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1}, {DType::kU16, "U16", 2},   {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},  {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& e : kDTypes)
    if (e.d == d) return e.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& e : kDTypes)
    if (e.d == d) return e.size;
  return 0;
}

Result<DType> parse_dtype(const std::string& name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.d;
  return invalid_argument("unknown dtype '" + name + "'");
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400u)) mant <<= 1, --exp;
    u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

const TensorInfo* SafetensorsHeader::find(const std::string& name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &tensors[it->second];
}

// ---- header parsing ----------------------------------------------------------------------------

namespace {

Status tensor_error(const std::string& source, const std::string& name, const std::string& what) {
  return data_loss("safetensors '" + source + "': tensor '" + name + "': " + what);
}

Status parse_shape(const Json& j, const std::string& source, TensorInfo& t) {
  if (!j.is_array()) return tensor_error(source, t.name, "\"shape\" is not an array");
  for (const Json& d : j.items()) {
    if (!d.is_integer()) return tensor_error(source, t.name, "shape has a non-integer dimension");
    if (d.as_int() < 0) return tensor_error(source, t.name, "negative dimension " + std::to_string(d.as_int()));
    t.shape.push_back(d.as_int());
  }
  return Status::Ok();
}

Status parse_offsets(const Json& j, const std::string& source, TensorInfo& t) {
  if (!j.is_array() || j.items().size() != 2 || !j.items()[0].is_integer() || !j.items()[1].is_integer())
    return tensor_error(source, t.name, "\"data_offsets\" is not a pair of integers");
  const int64_t b = j.items()[0].as_int(), e = j.items()[1].as_int();
  if (b < 0 || e < b)
    return tensor_error(source, t.name, "invalid data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "]");
  t.begin = uint64_t(b);
  t.end = uint64_t(e);
  return Status::Ok();
}

// Checks that shape x dtype matches the byte length, without overflow.
Status check_size(const std::string& source, const TensorInfo& t) {
  uint64_t bytes = dtype_size(t.dtype);
  for (int64_t d : t.shape)
    if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes))
      return tensor_error(source, t.name, "shape " + shape_string(t.shape) + " overflows");
  if (bytes != t.end - t.begin)
    return tensor_error(source, t.name,
                        "shape " + shape_string(t.shape) + " x " + dtype_name(t.dtype) + " needs " +
                            std::to_string(bytes) + " bytes but data_offsets span " + std::to_string(t.end - t.begin));
  return Status::Ok();
}

Status parse_tensor(const std::string& name, const Json& j, const std::string& source, TensorInfo& t) {
  t.name = name;
  if (!j.is_object()) return tensor_error(source, name, "entry is not an object");
  const Json* dtype = j.find("dtype");
  const Json* shape = j.find("shape");
  const Json* offsets = j.find("data_offsets");
  if (!dtype || !shape || !offsets) return tensor_error(source, name, "needs \"dtype\", \"shape\" and \"data_offsets\"");
  if (!dtype->is_string()) return tensor_error(source, name, "\"dtype\" is not a string");
  auto dt = parse_dtype(dtype->as_string());
  if (!dt.ok()) return tensor_error(source, name, dt.status().message());
  t.dtype = *dt;
  MT_RETURN_IF_ERROR(parse_shape(*shape, source, t));
  MT_RETURN_IF_ERROR(parse_offsets(*offsets, source, t));
  return check_size(source, t);
}

Status parse_metadata(const Json& j, const std::string& source, SafetensorsHeader& h) {
  if (!j.is_object()) return data_loss("safetensors '" + source + "': __metadata__ is not an object");
  for (const auto& [k, v] : j.members()) {
    if (!v.is_string())
      return data_loss("safetensors '" + source + "': __metadata__ value of '" + k + "' is not a string");
    h.metadata[k] = v.as_string();
  }
  return Status::Ok();
}

// Tensors must tile the data section exactly: sorted by offset, no overlaps, no gaps.
Status check_layout(const SafetensorsHeader& h, uint64_t data_size, const std::string& source) {
  std::vector<const TensorInfo*> order;
  for (const auto& t : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : order) {
    const std::string range = "[" + std::to_string(t->begin) + ", " + std::to_string(t->end) + ")";
    if (t->end > data_size)
      return tensor_error(source, t->name,
                          "data_offsets " + range + " out of range: the data section has " + std::to_string(data_size) +
                              " bytes");
    if (t->begin < pos)
      return tensor_error(source, t->name, "data_offsets " + range + " overlap tensor '" + prev->name + "'");
    if (t->begin > pos)
      return tensor_error(source, t->name, "data_offsets " + range + " leave a gap after byte " + std::to_string(pos));
    pos = t->end;
    prev = t;
  }
  if (pos != data_size)
    return data_loss("safetensors '" + source + "': tensors cover " + std::to_string(pos) +
                     " bytes of a data section of " + std::to_string(data_size));
  return Status::Ok();
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  const std::string where = "safetensors '" + source + "': ";
  if (size < 8)
    return data_loss(where + "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxSafetensorsHeaderBytes)
    return data_loss(where + "header length " + std::to_string(n) + " exceeds the limit of " +
                     std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  if (n > size - 8)
    return data_loss(where + "header length " + std::to_string(n) + " is larger than the file (" +
                     std::to_string(size) + " bytes); the file is truncated or not safetensors");
  auto json = Json::parse(std::string_view(reinterpret_cast<const char*>(data) + 8, size_t(n)));
  if (!json.ok()) return data_loss(where + "invalid header: " + json.status().message());
  if (!json->is_object()) return data_loss(where + "header is not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (const auto& [name, entry] : json->members()) {
    if (name == "__metadata__") {
      MT_RETURN_IF_ERROR(parse_metadata(entry, source, h));
      continue;
    }
    TensorInfo t;
    MT_RETURN_IF_ERROR(parse_tensor(name, entry, source, t));
    h.index[name] = h.tensors.size();
    h.tensors.push_back(std::move(t));
  }
  MT_RETURN_IF_ERROR(check_layout(h, uint64_t(size) - h.data_start, source));
  return h;
}

// ---- SafetensorsFile ---------------------------------------------------------------------------

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  MT_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  // The header's pages alone: without this, its first touch of a file not in the page cache
  // reads ahead megabytes of tensors, serially, before any reader starts (20+ ms a checkpoint).
  void* p = const_cast<uint8_t*>(map->data());
  if (p) (void)::madvise(p, map->size(), MADV_RANDOM);
  auto header = parse_safetensors(map->data(), map->size(), path);
  if (p) (void)::madvise(p, map->size(), MADV_NORMAL);  // readers of the mapping read ahead again
  MT_RETURN_IF_ERROR(map->intact());  // cut while the header was read: say so, not what it read
  MT_RETURN_IF_ERROR(header.status());
  f->header_ = std::move(header).value();
  f->base_ = map->data();
  f->source_ = path;
  f->map_ = std::move(map);
  return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_bytes(std::string bytes, const std::string& source) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->owned_ = std::move(bytes);
  f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->source_ = source;
  MT_ASSIGN_OR_RETURN(f->header_, parse_safetensors(f->base_, f->owned_.size(), source));
  return f;
}

const float* SafetensorsFile::f32_view(const TensorInfo& t) const {
  const uint8_t* p = bytes(t);
  if (t.dtype != DType::kF32 || reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<const float*>(p);
}

namespace {

template <typename Out, typename Conv>
void convert16(const uint8_t* p, uint64_t n, Out* out, Conv conv) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = conv(h);
  }
}

}  // namespace

Status SafetensorsFile::read_f32(const TensorInfo& t, float* out) const { return read_f32_range(t, 0, t.numel(), out); }

Status SafetensorsFile::read_f32_range(const TensorInfo& t, uint64_t first, uint64_t n, float* out) const {
  if (first > t.numel() || n > t.numel() - first)
    return invalid_argument("safetensors '" + source_ + "': elements [" + std::to_string(first) + ", +" +
                            std::to_string(n) + ") are outside tensor '" + t.name + "' of " + std::to_string(t.numel()));
  const uint8_t* p = bytes(t) + first * (t.dtype == DType::kF32 ? 4 : 2);
  switch (t.dtype) {
    case DType::kF32: std::memcpy(out, p, size_t(n) * 4); return intact();
    case DType::kBF16: convert16(p, n, out, [](uint16_t h) { return bf16_to_float(bf16{h}); }); return intact();
    case DType::kF16: convert16(p, n, out, f16_to_float); return intact();
    default:
      return unimplemented("safetensors '" + source_ + "': tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                           "; only F32, BF16 and F16 convert to fp32");
  }
}

Status SafetensorsFile::read_bf16(const TensorInfo& t, bf16* out) const {
  const uint8_t* p = bytes(t);
  const uint64_t n = t.numel();
  switch (t.dtype) {
    case DType::kBF16: std::memcpy(out, p, size_t(n) * 2); return intact();
    case DType::kF16: convert16(p, n, out, [](uint16_t h) { return float_to_bf16(f16_to_float(h)); }); return intact();
    case DType::kF32:
      for (uint64_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[i] = float_to_bf16(f);
      }
      return intact();
    default:
      return unimplemented("safetensors '" + source_ + "': tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                           "; only F32, BF16 and F16 convert to bf16");
  }
}

// ---- SafetensorsSet ----------------------------------------------------------------------------

namespace fs = std::filesystem;

Status SafetensorsSet::add_file(std::unique_ptr<SafetensorsFile> f) {
  for (const auto& t : f->tensors()) {
    auto [it, fresh] = entries_.emplace(t.name, Entry{f.get(), &t});
    if (!fresh)
      return data_loss("tensor '" + t.name + "' appears in both '" + it->second.file->path() + "' and '" + f->path() + "'");
    names_.push_back(t.name);
  }
  files_.push_back(std::move(f));
  return Status::Ok();
}

const SafetensorsSet::Entry* SafetensorsSet::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::string SafetensorsSet::describe() const {
  std::string s;
  for (const auto& f : files_) s += (s.empty() ? "'" : ", '") + f->path() + "'";
  return s;
}

namespace {

// The shard file names of an index, in first-appearance order, and its weight map.
Status read_index(const std::string& path, std::vector<std::string>& shards,
                  std::vector<std::pair<std::string, std::string>>& weight_map) {
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxSafetensorsHeaderBytes));  // an index is a header's size
  auto j = Json::parse(text);
  if (!j.ok()) return data_loss("index '" + path + "': " + j.status().message());
  const Json* wm = j->find("weight_map");
  if (!wm || !wm->is_object()) return data_loss("index '" + path + "' has no \"weight_map\" object");
  for (const auto& [name, file] : wm->members()) {
    if (!file.is_string()) return data_loss("index '" + path + "': weight_map entry '" + name + "' is not a string");
    const std::string& s = file.as_string();
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      return data_loss("index '" + path + "': shard name '" + s + "' for '" + name + "' is not a plain file name");
    if (std::find(shards.begin(), shards.end(), s) == shards.end()) shards.push_back(s);
    weight_map.emplace_back(name, s);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SafetensorsSet>> SafetensorsSet::open(const std::string& path, const std::string& name) {
  std::error_code ec;
  std::string file = path, index;
  if (fs::is_directory(path, ec)) {
    index = (fs::path(path) / (name + ".safetensors.index.json")).string();
    file = (fs::path(path) / (name + ".safetensors")).string();
    // Both present: the single file, as transformers' from_pretrained chooses.
    if (fs::exists(file, ec) || !fs::exists(index, ec)) index.clear();
    if (index.empty() && !fs::exists(file, ec))
      return not_found("'" + path + "' holds neither " + name + ".safetensors nor " + name + ".safetensors.index.json");
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    index = path;
  }
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  if (index.empty()) {
    MT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(file));
    MT_RETURN_IF_ERROR(set->add_file(std::move(f)));
    return set;
  }
  std::vector<std::string> shards;
  std::vector<std::pair<std::string, std::string>> weight_map;
  MT_RETURN_IF_ERROR(read_index(index, shards, weight_map));
  const fs::path dir = fs::path(index).parent_path();
  for (const auto& s : shards) {
    MT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open((dir / s).string()));
    MT_RETURN_IF_ERROR(set->add_file(std::move(f)));
  }
  for (const auto& [tensor, shard] : weight_map) {
    const Entry* e = set->find(tensor);
    if (!e || fs::path(e->file->path()).filename() != shard)
      return data_loss("index '" + index + "' places '" + tensor + "' in '" + shard + "', which does not hold it");
  }
  return set;
}

}  // namespace mt
