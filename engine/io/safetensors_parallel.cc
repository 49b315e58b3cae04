// Safetensors through the parallel aligned I/O (safetensors_parallel.h): the file's bytes made
// piece by piece from the header and the tensors, and tensors read back as pieces of their files.
#include "engine/io/safetensors_parallel.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace mt {

namespace {

// Elements [first, first + n) of t converted from t.src to t.dtype into out (aligned for t.dtype).
void convert_elems(const WriteTensor& t, uint64_t first, size_t n, char* out) {
  if (t.dtype == DType::kBF16) round_to_bf16(reinterpret_cast<bf16*>(out), static_cast<const float*>(t.data) + first, n);
  else widen_bf16(reinterpret_cast<float*>(out), static_cast<const bf16*>(t.data) + first, n);
}

// Bytes [lo, hi) of tensor t as the file stores them, into dst. A piece of the file may start or
// end inside an element, and an element may sit at an address unaligned for its type (after a
// BF16 tensor of odd length): those go through a small aligned buffer.
Status tensor_bytes(const WriteTensor& t, uint64_t lo, uint64_t hi, char* dst) {
  if (t.read) return t.read(lo, size_t(hi - lo), dst);
  if (t.src == t.dtype) {
    std::memcpy(dst, static_cast<const char*>(t.data) + lo, size_t(hi - lo));
    return Status::Ok();
  }
  const uint64_t es = dtype_size(t.dtype);
  alignas(64) char tmp[16384];
  for (uint64_t pos = lo; pos < hi;) {
    char* out = dst + (pos - lo);
    const uint64_t e = pos / es, in = pos % es;
    if (in != 0 || hi - pos < es) {  // part of one element
      convert_elems(t, e, 1, tmp);
      const size_t k = size_t(std::min(es - in, hi - pos));
      std::memcpy(out, tmp + in, k);
      pos += k;
      continue;
    }
    uint64_t n = (hi - pos) / es;
    if (reinterpret_cast<uintptr_t>(out) % es == 0) {
      convert_elems(t, e, size_t(n), out);
    } else {
      n = std::min<uint64_t>(n, sizeof tmp / es);
      convert_elems(t, e, size_t(n), tmp);
      std::memcpy(out, tmp, size_t(n * es));
    }
    pos += n * es;
  }
  return Status::Ok();
}

// The file: the header, then each tensor; ends[i] is where tensor i ends in it.
struct FileLayout {
  const std::string& header;
  const std::vector<WriteTensor>& tensors;
  std::vector<uint64_t> ends;
  uint64_t size() const { return ends.empty() ? header.size() : ends.back(); }
  uint64_t begin(size_t i) const { return i == 0 ? header.size() : ends[i - 1]; }
};

FileLayout layout_of(const std::string& header, const std::vector<WriteTensor>& tensors) {
  FileLayout l{header, tensors, {}};
  uint64_t off = header.size();
  for (const auto& t : tensors) {
    uint64_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= uint64_t(d);  // checked by safetensors_header
    l.ends.push_back(off += n);
  }
  return l;
}

// Bytes [off, off + n) of the file into dst; the first tensor that could not be read fails it.
Status fill_range(const FileLayout& l, uint64_t off, size_t n, char* dst) {
  const uint64_t end = off + n;
  if (off < l.header.size()) std::memcpy(dst, l.header.data() + off, size_t(std::min<uint64_t>(end, l.header.size()) - off));
  for (size_t i = size_t(std::upper_bound(l.ends.begin(), l.ends.end(), off) - l.ends.begin());
       i < l.tensors.size() && l.begin(i) < end; ++i) {
    const uint64_t b = l.begin(i), lo = std::max(off, b), hi = std::min(end, l.ends[i]);
    if (lo < hi) MT_RETURN_IF_ERROR(tensor_bytes(l.tensors[i], lo - b, hi - b, dst + (lo - off)));
  }
  return Status::Ok();
}

// The first bytes of the file the threads have made, as a count of whole tensors: a filled range
// joins the prefix once every byte before it is filled too.
class CaptureMark {
 public:
  CaptureMark(const FileLayout& l, const TensorsCaptured& told) : layout_(l), told_(told) {}
  void filled(uint64_t off, uint64_t end) {
    if (!told_) return;
    std::lock_guard<std::mutex> l(mu_);
    pending_[off] = end;
    for (auto it = pending_.find(mark_); it != pending_.end(); it = pending_.find(mark_)) {
      mark_ = it->second;
      pending_.erase(it);
    }
    const auto& ends = layout_.ends;
    const size_t whole = size_t(std::upper_bound(ends.begin(), ends.end(), mark_) - ends.begin());
    if (whole > said_) told_(said_ = whole);
  }

 private:
  const FileLayout& layout_;
  const TensorsCaptured& told_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> pending_;  // filled ranges past the mark: begin -> end
  uint64_t mark_ = 0;
  size_t said_ = 0;
};

Status convert_from_mapping(const ReadTensor& t) {
  if (t.dtype == DType::kBF16) return t.file->read_bf16(*t.info, static_cast<bf16*>(t.dst));
  return t.file->read_f32(*t.info, static_cast<float*>(t.dst));
}

}  // namespace

Status write_safetensors_parallel(const DirFd& dir, const std::string& name, const std::vector<WriteTensor>& tensors,
                                  const Metadata& metadata, const FileIoOptions& o, FileIoReport* report,
                                  const TensorsCaptured& captured) {
  const bool streamed = o.mode == FileIoMode::kStream ||
                        std::any_of(tensors.begin(), tensors.end(), [](const WriteTensor& t) { return bool(t.fill); });
  if (streamed) {
    if (report) *report = {false, 1, ""};
    MT_RETURN_IF_ERROR(write_safetensors(dir, name, tensors, metadata));
    if (captured && !tensors.empty()) captured(tensors.size());
    return Status::Ok();
  }
  auto header = safetensors_header(tensors, metadata);
  if (!header.ok()) return header.status().with_context("writing '" + dir.file(name) + "'");
  const FileLayout layout = layout_of(*header, tensors);
  std::mutex mu;
  Status failed;  // the first piece whose tensor could not be read: the file is not kept
  CaptureMark mark(layout, captured);
  auto fill = [&](uint64_t off, size_t n, char* dst) {
    if (Status s = fill_range(layout, off, n, dst); !s.ok()) {
      std::lock_guard<std::mutex> l(mu);
      if (failed.ok()) failed = std::move(s);
      return;  // never captured: the writer fails
    }
    mark.filled(off, off + n);
  };
  const Status written = write_file_parallel(dir, name, layout.size(), fill, o, report);
  if (failed.ok()) return written;
  (void)dir.remove(name);
  return failed.with_context("writing '" + dir.file(name) + "'");
}

Status read_tensors_parallel(const std::vector<ReadTensor>& tensors, const FileIoOptions& o, FileIoReport* report) {
  std::vector<std::string> paths;
  std::map<const SafetensorsFile*, size_t> file_index;
  std::vector<ReadPiece> pieces;
  for (const ReadTensor& t : tensors) {
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16)
      return invalid_argument("tensor '" + t.info->name + "' cannot be read as " + dtype_name(t.dtype));
    if (o.mode == FileIoMode::kStream || t.info->dtype != t.dtype || !t.file->on_disk()) {
      MT_RETURN_IF_ERROR(convert_from_mapping(t));
      continue;
    }
    auto [it, fresh] = file_index.emplace(t.file, paths.size());
    if (fresh) paths.push_back(t.file->path());
    pieces.push_back({it->second, t.file->header().data_start + t.info->begin, t.info->end - t.info->begin, t.dst});
  }
  if (report) *report = {false, 1, ""};
  if (pieces.empty()) return Status::Ok();
  return read_pieces_parallel(paths, std::move(pieces), o, report);
}

}  // namespace mt
