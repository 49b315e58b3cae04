// read_pieces_parallel (direct_io.h): the pieces of each file sorted and merged into runs, each
// run cut into aligned reads of o.chunk_bytes that the worker threads read into their aligned
// buffers (O_DIRECT where the file system takes it) and copy out to the pieces' destinations.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include "engine/base/confined_open.h"
#include "engine/io/direct_io.h"
#include "engine/io/direct_io_internal.h"

namespace mt {

namespace {

using namespace io_detail;

// One input file: fd through the page cache, direct with O_DIRECT (-1: none or refused).
struct InFile {
  std::string path;
  int fd = -1, direct = -1;
  uint64_t size = 0;
  bool opened_direct = false;
  std::mutex mu;
  std::string fallback;  // why a read went through the page cache after all
  ~InFile() {
    if (direct >= 0) ::close(direct);
    if (fd >= 0) ::close(fd);
  }
  void refused(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!fallback.empty()) return;
      fallback = why;
    }
    note_fallback(path, why);
  }
};

// The path is opened confined (confined_open.h); its O_DIRECT descriptor is that same file opened
// again (never its path looked up again, which a swap could lead elsewhere), kept only if it is
// the same file.
Status open_in(InFile& f, bool want_direct) {
  MT_ASSIGN_OR_RETURN(OwnedFd fd, open_confined_or_status("cannot open", f.path, O_RDONLY | O_CLOEXEC));
  f.fd = fd.release();
  struct stat st {}, st_direct {};
  if (::fstat(f.fd, &st) != 0) return errno_status("cannot stat", f.path, errno);
  f.size = uint64_t(st.st_size);
  if (!want_direct) return Status::Ok();
  f.direct = reopen_direct(f.fd, O_RDONLY);
  if (f.direct >= 0 && (::fstat(f.direct, &st_direct) != 0 || st_direct.st_ino != st.st_ino || st_direct.st_dev != st.st_dev)) {
    ::close(f.direct);
    f.direct = -1;
    errno = ESTALE;  // the path names another file now
  }
  f.opened_direct = f.direct >= 0;
  if (!f.opened_direct) f.refused(std::string("open: ") + std::strerror(errno));
  return Status::Ok();
}

// File bytes [begin, end) (begin aligned) and the pieces [first, last) of the sorted list that
// overlap them.
struct ReadItem {
  size_t file;
  uint64_t begin, end;
  size_t first, last;
};

// Runs of adjacent pieces (gaps under a block are read through), cut into aligned reads.
std::vector<ReadItem> plan_reads(const std::vector<ReadPiece>& sorted, uint64_t chunk) {
  std::vector<ReadItem> items;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i + 1;
    uint64_t end = sorted[i].offset + sorted[i].size;
    while (j < sorted.size() && sorted[j].file == sorted[i].file && sorted[j].offset <= end + kDirectIoAlign)
      end = std::max(end, sorted[j].offset + sorted[j].size), ++j;
    for (uint64_t b = sorted[i].offset / kDirectIoAlign * kDirectIoAlign; b < end; b += chunk) {
      const uint64_t e = std::min(end, b + chunk);  // pieces do not overlap: their ends ascend too
      const auto first = std::partition_point(sorted.begin() + long(i), sorted.begin() + long(j),
                                              [&](const ReadPiece& p) { return p.offset + p.size <= b; });
      const auto last = std::partition_point(first, sorted.begin() + long(j), [&](const ReadPiece& p) { return p.offset < e; });
      items.push_back({sorted[i].file, b, e, size_t(first - sorted.begin()), size_t(last - sorted.begin())});
    }
    i = j;
  }
  return items;
}

// Reads [it.begin, it.end) into buf: whole blocks with O_DIRECT (short at the end of the file),
// through the page cache where refused.
Status read_item(InFile& f, const ReadItem& it, char* buf) {
  const uint64_t need = it.end - it.begin, ask = align_up(need);
  int fd = f.direct >= 0 ? f.direct : f.fd;
  for (uint64_t got = 0; got < need;) {
    const ssize_t r = ::pread(fd, buf + got, size_t(ask - got), off_t(it.begin + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EINVAL && fd == f.direct) {
      f.refused("a read at byte " + std::to_string(it.begin + got) + ": " + std::strerror(errno));
      fd = f.fd;
      continue;
    }
    if (r < 0) return errno_status("error reading", f.path, errno);
    if (r == 0)
      return data_loss("'" + f.path + "' ends at byte " + std::to_string(it.begin + got) + ", before byte " +
                       std::to_string(it.end) + " (the file shrank while it was read)");
    got += uint64_t(r);
  }
  return Status::Ok();
}

// Copies what each piece holds of [it.begin, it.end) out of buf.
void copy_out(const std::vector<ReadPiece>& sorted, const ReadItem& it, const char* buf) {
  for (size_t k = it.first; k < it.last; ++k) {
    const ReadPiece& p = sorted[k];
    const uint64_t lo = std::max(p.offset, it.begin), hi = std::min(p.offset + p.size, it.end);
    if (lo < hi) std::memcpy(static_cast<char*>(p.dst) + (lo - p.offset), buf + (lo - it.begin), size_t(hi - lo));
  }
}

}  // namespace

Status read_pieces_parallel(const std::vector<std::string>& paths, std::vector<ReadPiece> pieces,
                            const FileIoOptions& o, FileIoReport* report) {
  std::vector<std::unique_ptr<InFile>> files;
  for (const auto& p : paths) {
    files.push_back(std::make_unique<InFile>());
    files.back()->path = p;
    MT_RETURN_IF_ERROR(open_in(*files.back(), o.mode == FileIoMode::kDirect));
  }
  for (const ReadPiece& p : pieces)
    if (p.file >= files.size() || p.offset > files[p.file]->size || p.size > files[p.file]->size - p.offset)
      return invalid_argument("a read of bytes [" + std::to_string(p.offset) + ", +" + std::to_string(p.size) +
                              ") outside " + (p.file < files.size() ? "'" + files[p.file]->path + "'" : "the files"));
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const ReadPiece& p) { return p.size == 0; }), pieces.end());
  std::sort(pieces.begin(), pieces.end(),
            [](const ReadPiece& a, const ReadPiece& b) { return a.file != b.file ? a.file < b.file : a.offset < b.offset; });
  for (size_t k = 1; k < pieces.size(); ++k)
    if (pieces[k].file == pieces[k - 1].file && pieces[k].offset < pieces[k - 1].offset + pieces[k - 1].size)
      return invalid_argument("reads of '" + files[pieces[k].file]->path + "' overlap at byte " +
                              std::to_string(pieces[k].offset));
  const uint64_t chunk = align_up(std::max<size_t>(o.chunk_bytes, 1));
  const std::vector<ReadItem> items = plan_reads(pieces, chunk);
  MT_RETURN_IF_ERROR(run_workers(o.threads, items.size(), size_t(chunk), [&](size_t i, char* buf) {
    MT_RETURN_IF_ERROR(read_item(*files[items[i].file], items[i], buf));
    copy_out(pieces, items[i], buf);
    return Status::Ok();
  }));
  bool all_direct = true;
  std::string fallback;
  for (const auto& f : files) {
    const bool direct = f->opened_direct && f->fallback.empty();
    count_file(direct);
    all_direct = all_direct && direct;
    if (fallback.empty()) fallback = f->fallback;
  }
  if (report)
    *report = {all_direct && !files.empty(),
               int(std::min<size_t>(size_t(std::max(o.threads, 1)), std::max<size_t>(items.size(), 1))),
               o.mode == FileIoMode::kDirect ? fallback : ""};
  return Status::Ok();
}

}  // namespace mt
