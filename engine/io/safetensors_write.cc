// Safetensors writing (streamed, bounded conversion buffers), sharded output with an HF index,
// and durable file helpers. Every write, fsync and close is checked; a failed write removes
// its partial file.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/base/json.h"
#include "engine/io/direct_io.h"
#include "engine/io/safetensors.h"

namespace mt {

namespace {

// An output file in a directory held open: open (never through a symlink), write, fsync, close,
// each checked; removes the file unless committed.
class OutFile {
 public:
  OutFile(const DirFd& dir, std::string name) : dir_(dir), name_(std::move(name)), path_(dir.file(name_)) {}
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlinkat(dir_.fd(), name_.c_str(), 0);
  }
  Status open() {
    fd_ = ::openat(dir_.fd(), name_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    return fd_ < 0 ? errno_status("cannot create", path_, errno) : Status::Ok();
  }
  Status write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      if (const int e = injected_write_error(path_, written_)) return errno_status("error writing", path_, e);
      const ssize_t w = ::write(fd_, p, std::min(n, size_t(1) << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return errno_status("error writing", path_, w < 0 ? errno : EIO);
      p += w;
      n -= size_t(w);
      written_ += uint64_t(w);
    }
    return Status::Ok();
  }
  Status commit() {
    if (::fsync(fd_) != 0) return errno_status("error syncing", path_, errno);
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return errno_status("error closing", path_, errno);
    committed_ = true;
    return Status::Ok();
  }

 private:
  const DirFd& dir_;
  std::string name_, path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// The directory holding `path` and its name there.
Result<std::pair<DirFd, std::string>> parent_of(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string parent = p.has_parent_path() ? p.parent_path().string() : ".";
  MT_ASSIGN_OR_RETURN(DirFd dir, DirFd::open(parent, false));
  return std::pair<DirFd, std::string>(std::move(dir), p.filename().string());
}

constexpr size_t kChunkElems = size_t(1) << 20;  // conversion buffer: 4 MiB of fp32

Result<uint64_t> numel_of(const WriteTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return invalid_argument("tensor '" + t.name + "': negative dimension in " + shape_string(t.shape));
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return invalid_argument("tensor '" + t.name + "': shape overflows");
  }
  return n;
}

Status validate(const std::vector<WriteTensor>& tensors) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") return invalid_argument("invalid tensor name '" + t.name + "'");
    if (!seen.insert(t.name).second) return invalid_argument("duplicate tensor name '" + t.name + "'");
    if ((t.dtype != DType::kF32 && t.dtype != DType::kBF16) || (t.src != DType::kF32 && t.src != DType::kBF16))
      return invalid_argument("tensor '" + t.name + "': only F32 and BF16 can be written");
    MT_ASSIGN_OR_RETURN(uint64_t n, numel_of(t));
    if (n > 0 && !t.data && !t.fill && !t.read) return invalid_argument("tensor '" + t.name + "' has no data");
    if (t.read && t.src != t.dtype) return invalid_argument("tensor '" + t.name + "' is read as stored: its src must be its dtype");
  }
  return Status::Ok();
}

// The header bytes (length prefix + JSON padded with spaces so the data starts 8-aligned).
std::string header_bytes(const std::vector<WriteTensor>& tensors, const Metadata& metadata) {
  Json h = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m.set(k, Json(v));
    h.set("__metadata__", m);
  }
  uint64_t off = 0;
  for (const auto& t : tensors) {
    Json shape = Json::array();
    for (int64_t d : t.shape) shape.items().push_back(Json(d));
    const uint64_t bytes = numel_of(t).value() * dtype_size(t.dtype);
    Json e = Json::object();
    e.set("dtype", Json(dtype_name(t.dtype)));
    e.set("shape", shape);
    e.set("data_offsets", Json::array({Json(int64_t(off)), Json(int64_t(off + bytes))}));
    h.set(t.name, e);
    off += bytes;
  }
  std::string json = h.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  return out + json;
}

Status write_tensor(OutFile& f, const WriteTensor& t, std::vector<char>& buf) {
  const uint64_t n = numel_of(t).value();
  if (t.data && t.src == t.dtype) return f.write(t.data, size_t(n * dtype_size(t.dtype)));
  const size_t out_size = dtype_size(t.dtype);
  if (t.read) {  // the stored bytes, a chunk at a time
    const uint64_t bytes = n * out_size;
    buf.resize(kChunkElems * out_size);
    for (uint64_t at = 0; at < bytes; at += buf.size()) {
      const size_t c = size_t(std::min<uint64_t>(buf.size(), bytes - at));
      MT_RETURN_IF_ERROR(t.read(at, c, buf.data()));
      MT_RETURN_IF_ERROR(f.write(buf.data(), c));
    }
    return Status::Ok();
  }
  buf.resize(kChunkElems * out_size);
  std::vector<float> filled(t.fill ? kChunkElems : 0);
  for (uint64_t i = 0; i < n; i += kChunkElems) {
    const size_t c = size_t(std::min<uint64_t>(kChunkElems, n - i));
    if (t.fill) {  // produced in fp32
      t.fill(i, c, filled.data());
      if (t.dtype == DType::kBF16) round_to_bf16(reinterpret_cast<bf16*>(buf.data()), filled.data(), c);
      else std::memcpy(buf.data(), filled.data(), c * sizeof(float));
    } else if (t.dtype == DType::kBF16) {  // F32 -> BF16
      const float* src = static_cast<const float*>(t.data) + i;
      bf16* dst = reinterpret_cast<bf16*>(buf.data());
      round_to_bf16(dst, src, c);
    } else {  // BF16 -> F32
      const bf16* src = static_cast<const bf16*>(t.data) + i;
      float* dst = reinterpret_cast<float*>(buf.data());
      widen_bf16(dst, src, c);
    }
    MT_RETURN_IF_ERROR(f.write(buf.data(), c * out_size));
  }
  return Status::Ok();
}

uint64_t tensor_bytes(const WriteTensor& t) { return numel_of(t).value() * dtype_size(t.dtype); }

std::string shard_name(const std::string& name, size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, n);
  return name + buf;
}

}  // namespace

Result<std::string> safetensors_header(const std::vector<WriteTensor>& tensors, const Metadata& metadata) {
  MT_RETURN_IF_ERROR(validate(tensors));
  std::string header = header_bytes(tensors, metadata);
  if (header.size() - 8 > kMaxSafetensorsHeaderBytes)
    return invalid_argument("header exceeds " + std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  return header;
}

Status write_file_durable(const DirFd& dir, const std::string& name, const std::string& bytes) {
  OutFile f(dir, name);
  MT_RETURN_IF_ERROR(f.open());
  MT_RETURN_IF_ERROR(f.write(bytes.data(), bytes.size()));
  return f.commit();
}

Status write_file_durable(const std::string& path, const std::string& bytes) {
  MT_ASSIGN_OR_RETURN(auto at, parent_of(path));
  return write_file_durable(at.first, at.second, bytes);
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open directory", dir, errno);
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  return rc != 0 ? errno_status("error syncing directory", dir, err) : Status::Ok();
}

Status replace_file_durable(const std::string& path, const std::string& tmp, const std::string& bytes) {
  MT_RETURN_IF_ERROR(write_file_durable(tmp, bytes));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return data_loss("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  return fsync_dir(std::filesystem::path(path).parent_path().string());
}

Status write_safetensors(const DirFd& dir, const std::string& name, const std::vector<WriteTensor>& tensors,
                         const Metadata& metadata) {
  auto header = safetensors_header(tensors, metadata);
  if (!header.ok()) return header.status().with_context("writing '" + dir.file(name) + "'");
  OutFile f(dir, name);
  MT_RETURN_IF_ERROR(f.open());
  MT_RETURN_IF_ERROR(f.write(header->data(), header->size()));
  std::vector<char> buf;
  for (const auto& t : tensors) MT_RETURN_IF_ERROR(write_tensor(f, t, buf));
  return f.commit();
}

Status write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors, const Metadata& metadata) {
  MT_ASSIGN_OR_RETURN(auto at, parent_of(path));
  return write_safetensors(at.first, at.second, tensors, metadata);
}

Result<std::vector<std::string>> write_sharded_safetensors(const DirFd& dir, const std::string& name,
                                                           const std::vector<WriteTensor>& tensors,
                                                           uint64_t max_shard_bytes, const Metadata& metadata) {
  MT_RETURN_IF_ERROR(validate(tensors).with_context("writing '" + dir.path() + "'"));
  std::vector<std::vector<WriteTensor>> shards(1);
  uint64_t cur = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t b = tensor_bytes(t);
    if (max_shard_bytes > 0 && !shards.back().empty() && cur + b > max_shard_bytes) shards.emplace_back(), cur = 0;
    shards.back().push_back(t);
    cur += b;
    total += b;
  }
  std::vector<std::string> written;
  auto cleanup = [&](Status s) {
    for (const auto& w : written) (void)dir.remove(w);
    return s;
  };
  if (shards.size() == 1) {
    const std::string file = name + ".safetensors";
    MT_RETURN_IF_ERROR(write_safetensors(dir, file, tensors, metadata));
    return std::vector<std::string>{file};
  }
  Json weight_map = Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_name(name, i, shards.size());
    Status s = write_safetensors(dir, file, shards[i], metadata);
    if (!s.ok()) return cleanup(s);
    written.push_back(file);
    for (const auto& t : shards[i]) weight_map.set(t.name, Json(file));
  }
  Json index = Json::object();
  index.set("metadata", Json::object({{"total_size", Json(int64_t(total))}}));
  index.set("weight_map", weight_map);
  const std::string index_file = name + ".safetensors.index.json";
  Status s = write_file_durable(dir, index_file, index.dump(2) + "\n");
  if (!s.ok()) return cleanup(s);
  written.push_back(index_file);
  return written;
}

}  // namespace mt
