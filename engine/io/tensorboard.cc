// TensorBoard event files (tensorboard.h): protobuf wire format and TFRecord framing by hand.
#include "engine/io/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/base/dir_fd.h"

namespace mt {
namespace {

// ---- protobuf wire format: the few pieces an Event needs ----------------------------------
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out.push_back(char(v | 0x80)), v >>= 7;
  out.push_back(char(v));
}
void key(std::string& out, int field, int wire) { varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
template <typename T>
void fixed(std::string& out, int field, T v) {  // double: wire 1, float: wire 5 (little-endian)
  key(out, field, sizeof(T) == 8 ? 1 : 5);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void bytes(std::string& out, int field, const std::string& s) {
  key(out, field, 2);
  varint(out, s.size());
  out += s;
}

std::string event(double wall_time, long step, const std::string* version, const Scalars* values) {
  std::string e;
  fixed(e, 1, wall_time);
  if (step != 0) key(e, 2, 0), varint(e, uint64_t(int64_t(step)));
  if (version) bytes(e, 3, *version);
  if (values) {
    std::string summary;
    for (const auto& [tag, v] : *values) {
      std::string value;
      bytes(value, 1, tag);
      fixed(value, 2, float(v));
      bytes(summary, 1, value);
    }
    bytes(e, 5, summary);
  }
  return e;
}

// Reads protobuf fields of [p, end): calls f(field, wire, varint value, bytes) for each; false
// when the bytes are not a well-formed message.
struct Reader {
  const unsigned char *p, *end;
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const unsigned char b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  template <typename F>
  bool fields(F f) {
    while (p < end) {
      uint64_t k = 0, v = 0;
      if (!varint(k)) return false;
      const int field = int(k >> 3), wire = int(k & 7);
      const unsigned char* data = p;
      size_t n = 0;
      if (wire == 0) {
        if (!varint(v)) return false;
      } else if (wire == 1 || wire == 5) {
        n = wire == 1 ? 8 : 4;
      } else if (wire == 2) {
        if (!varint(v) || v > uint64_t(end - p)) return false;
        data = p, n = size_t(v);
      } else {
        return false;
      }
      if (n > size_t(end - p)) return false;
      p += n;
      f(field, wire, v, data, n);
    }
    return true;
  }
};

bool decode_event(const unsigned char* p, size_t n, TensorBoardEvent& e) {
  bool ok = true;
  Reader r{p, p + n};
  ok &= r.fields([&](int field, int wire, uint64_t v, const unsigned char* d, size_t len) {
    if (field == 1 && wire == 1) std::memcpy(&e.wall_time, d, 8);
    if (field == 2 && wire == 0) e.step = long(int64_t(v));
    if (field == 3 && wire == 2) e.file_version.assign(reinterpret_cast<const char*>(d), len);
    if (field != 5 || wire != 2) return;
    Reader summary{d, d + len};
    ok &= summary.fields([&](int sf, int sw, uint64_t, const unsigned char* sd, size_t sl) {
      if (sf != 1 || sw != 2) return;
      std::string tag;
      float value = 0;
      Reader val{sd, sd + sl};
      ok &= val.fields([&](int vf, int vw, uint64_t, const unsigned char* vd, size_t vl) {
        if (vf == 1 && vw == 2) tag.assign(reinterpret_cast<const char*>(vd), vl);
        if (vf == 2 && vw == 5) std::memcpy(&value, vd, 4);
      });
      e.scalars.emplace_back(tag, double(value));
    });
  });
  return ok;
}

// ---- TFRecord framing ----------------------------------------------------------------------
std::string record(const std::string& data) {
  std::string out;
  char len[8];
  const uint64_t n = data.size();
  std::memcpy(len, &n, 8);
  const uint32_t len_crc = masked_crc32c(len, 8), data_crc = masked_crc32c(data.data(), data.size());
  out.append(len, 8);
  out.append(reinterpret_cast<const char*>(&len_crc), 4);
  out += data;
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = crc_table();
  uint32_t c = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

Result<TensorBoardFile> read_tensorboard_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TensorBoardFile f;
  f.size = s.size();
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t at = 0; at + 12 <= s.size();) {  // stop at the first record that is not whole and sound
    uint64_t n = 0;
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&n, b + at, 8);
    std::memcpy(&len_crc, b + at + 8, 4);
    if (len_crc != masked_crc32c(b + at, 8) || n > s.size() - at - 12 || s.size() - at - 12 - n < 4) break;
    std::memcpy(&data_crc, b + at + 12 + n, 4);
    TensorBoardEvent e;
    if (data_crc != masked_crc32c(b + at + 12, n) || !decode_event(b + at + 12, n, e)) break;
    at += 12 + n + 4;
    f.events.push_back(std::move(e));
    f.ends.push_back(at);
  }
  return f;
}

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir, long keep_through) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("cannot create " + dir + ": " + ec.message());
  const std::string path = dir + "/" + kTensorBoardFile;
  uint64_t keep = 0;  // bytes of the existing file that stay
  if (std::filesystem::exists(path)) {
    MT_ASSIGN_OR_RETURN(TensorBoardFile f, read_tensorboard_file(path));
    for (size_t i = 0; i < f.events.size() && (i == 0 || f.events[i].step <= keep_through); ++i) keep = f.ends[i];
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno_status("open", path, errno);
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(fd, path));
  if (::ftruncate(fd, off_t(keep)) != 0 || ::lseek(fd, off_t(keep), SEEK_SET) < 0) return errno_status("truncate", path, errno);
  w->end_ = keep;
  if (keep == 0) {  // stamped now, as TensorFlow's writers do: TensorBoard takes it for the run's start
    const std::string version = "brain.Event:2";
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    MT_RETURN_IF_ERROR(w->append(event(now, 0, &version, nullptr)));
  }
  return w;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status TensorBoardWriter::append(const std::string& data) {
  const std::string r = record(data);
  for (size_t done = 0; done < r.size();) {
    const ssize_t n = ::write(fd_, r.data() + done, r.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // a full disk, say: back to the last whole record, so that a later write goes on from it
      const Status failed = errno_status("write", path_, n < 0 ? errno : EIO);
      if (::ftruncate(fd_, off_t(end_)) != 0 || ::lseek(fd_, off_t(end_), SEEK_SET) < 0) broken_ = true;
      return failed;
    }
    done += size_t(n);
  }
  end_ += r.size();
  return Status::Ok();
}

Status TensorBoardWriter::scalars(long step, double wall_time, const Scalars& values) {
  if (broken_) return data_loss("'" + path_ + "': a failed write could not be undone; no further events are written");
  return append(event(wall_time, step, nullptr, &values));
}

Status TensorBoardWriter::sync() { return ::fsync(fd_) == 0 ? Status::Ok() : errno_status("fsync", path_, errno); }

}  // namespace mt
