// The checkpoint suite: a model's checkpoint written (save_checkpoint) and read back
// (load_checkpoint) with the real checkpoint code, against a sequential baseline of the same
// bytes on the same directory in the same run, as dd does it: one thread, 8 MiB O_DIRECT writes
// then fsync (dd oflag=direct conv=fsync), and 8 MiB O_DIRECT reads (iflag=direct). Before every
// read the files' pages are dropped from the page cache (fsynced, then POSIX_FADV_DONTNEED), so
// each read measures the disk. Each --io mode (direct, buffered, stream: the writer and reader
// from before the parallel path) is measured in turn within every repetition; medians.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "bench/bench.h"
#include "engine/io/checkpoint.h"
#include "engine/io/direct_io.h"
#include "engine/io/safetensors_parallel.h"

namespace mt::bench {

namespace {

namespace fs = std::filesystem;
constexpr size_t kBaselineBlock = size_t(8) << 20;

// Drops a file's (or a directory's files') pages from the page cache.
void drop_cache(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    for (const auto& e : fs::directory_iterator(p, ec)) drop_cache(e.path());
    return;
  }
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// The baseline's 8 MiB buffer of non-zero bytes, in transparent huge pages as the checkpoint's
// buffers are (direct_io.cc): of scattered 4 KiB pages, each request would be cut at the device's
// segment limit, and the baseline would measure that, not the disk.
struct Block {
  char* p = static_cast<char*>(std::aligned_alloc(size_t(2) << 20, kBaselineBlock));
  Block() {
    (void)::madvise(p, kBaselineBlock, MADV_HUGEPAGE);
    for (size_t i = 0; i < kBaselineBlock; ++i) p[i] = char(i * 131 + 7);
  }
  ~Block() { std::free(p); }
};

// dd oflag=direct conv=fsync: `bytes` (a multiple of 4096) in 8 MiB writes, then fsync. Seconds,
// or a negative value on an error. `direct` is cleared where O_DIRECT is refused.
double baseline_write(const std::string& path, uint64_t bytes, const Block& b, bool& direct) {
  ::unlink(path.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0 && direct && errno == EINVAL) direct = false, fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  for (uint64_t off = 0; off < bytes;) {
    const ssize_t w = ::write(fd, b.p, size_t(std::min<uint64_t>(kBaselineBlock, bytes - off)));
    if (w <= 0) return ::close(fd), -1;
    off += uint64_t(w);
  }
  const bool ok = ::fsync(fd) == 0;
  return ::close(fd) == 0 && ok ? seconds_since(t0) : -1;
}

// dd iflag=direct of the whole file in 8 MiB reads.
double baseline_read(const std::string& path, const Block& b, bool direct) {
  drop_cache(path);
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return -1;
  ssize_t r;
  while ((r = ::read(fd, b.p, kBaselineBlock)) > 0) {
  }
  ::close(fd);
  return r == 0 ? seconds_since(t0) : -1;
}

uint64_t safetensors_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") n += e.file_size(ec);
  return n;
}

// The preset with as many layers as bring it nearest `params` (0: as it is).
Result<ModelConfig> model_of(const std::string& preset, double params) {
  MT_ASSIGN_OR_RETURN(ModelConfig cfg, preset_config(preset));
  if (params <= 0) return cfg;
  ModelConfig one = cfg, two = cfg;
  one.set_num_layers(1);
  two.set_num_layers(2);
  const double per_layer = double(two.num_params() - one.num_params()), base = double(one.num_params()) - per_layer;
  cfg.set_num_layers(std::max(1, int(std::lround((params - base) / per_layer))));
  return cfg;
}

void fill(HostStore& s) {
  for (size_t i = 0; i < s.num_units(); ++i) {
    const HostUnit& u = s.unit(i);
    const size_t es = state_elem_bytes(s.layout());
    for (size_t k = 0; k < u.numel; ++k) u.master[k] = float(k % 4093) * 1e-3f - 2.0f;
    for (void* p : {u.m, u.v}) std::memset(p, int(i * 37 + 11), u.numel * es);
  }
}

// The checkpoint's tensor files alone read into the store as load_checkpoint reads them (the
// sets opened, read_tensors_parallel), without its checks and the zeroed gradients: the files'
// part of a resume. Seconds, or a negative value on an error (printed).
double files_read_seconds(const std::string& dir, const ModelConfig& cfg, HostStore& store, const FileIoOptions& o) {
  drop_cache(dir);
  const auto t0 = std::chrono::steady_clock::now();
  auto model = SafetensorsSet::open(dir + "/model.safetensors");
  auto opt = SafetensorsSet::open(dir, "optimizer");
  if (!model.ok() || !opt.ok()) return std::fprintf(stderr, "checkpoint: cannot open '%s'\n", dir.c_str()), -1;
  const DType state = store.layout() == MemoryLayout::kExact ? DType::kF32 : DType::kBF16;
  const size_t es = state_elem_bytes(store.layout());
  std::vector<ReadTensor> reads;
  const auto units = build_param_schemas(cfg);
  for (size_t i = 0; i < units.size(); ++i)
    for (const auto& t : units[i].tensors) {
      const HostUnit& u = store.unit(i);
      const auto *w = (*model)->find(t.name), *m = (*opt)->find(t.name + ".exp_avg"), *v = (*opt)->find(t.name + ".exp_avg_sq");
      if (!w || !m || !v) return std::fprintf(stderr, "checkpoint: '%s' lacks %s\n", dir.c_str(), t.name.c_str()), -1;
      reads.push_back({w->file, w->info, u.master + t.offset, DType::kF32});
      reads.push_back({m->file, m->info, static_cast<char*>(u.m) + t.offset * es, state});
      reads.push_back({v->file, v->info, static_cast<char*>(u.v) + t.offset * es, state});
    }
  if (Status s = read_tensors_parallel(reads, o); !s.ok()) return std::fprintf(stderr, "checkpoint: %s\n", s.to_string().c_str()), -1;
  return seconds_since(t0);
}

struct ModeResult {
  FileIoMode mode;
  std::vector<double> write_s, read_s, files_read_s;
  std::string path = "?", fallback;
  uint64_t bytes = 0;  // of its .safetensors files
};

// One checkpoint written and read in `mode`; false on an error (printed).
bool measure_mode(const std::string& root, const ModelConfig& cfg, HostStore& store, long step, FileIoOptions o,
                  ModeResult& r) {
  set_checkpoint_io_options(o);
  TrainerState st;
  st.step = step;
  const FileIoCounters before = file_io_counters();
  auto t0 = std::chrono::steady_clock::now();
  auto dir = save_checkpoint(root, cfg, store, st, 0);  // keeps all: the previous one is removed untimed below
  if (!dir.ok()) return std::fprintf(stderr, "checkpoint: %s\n", dir.status().to_string().c_str()), false;
  r.write_s.push_back(seconds_since(t0));
  const FileIoCounters after = file_io_counters();
  r.path = o.mode == FileIoMode::kStream ? "stream" : after.buffered > before.buffered ? "buffered" : "direct";
  if (std::string n = take_direct_io_notice(); !n.empty()) r.fallback = n;
  r.bytes = safetensors_bytes(*dir);
  drop_cache(*dir);
  t0 = std::chrono::steady_clock::now();
  auto loaded = load_checkpoint(*dir, cfg, store);
  if (!loaded.ok()) return std::fprintf(stderr, "checkpoint: %s\n", loaded.status().to_string().c_str()), false;
  r.read_s.push_back(seconds_since(t0));
  r.files_read_s.push_back(files_read_seconds(*dir, cfg, store, o));
  if (r.files_read_s.back() < 0) return false;
  std::error_code ec;
  fs::remove_all(*dir, ec);
  return true;
}

Result<std::vector<FileIoMode>> modes_of(const std::string& list) {
  if (list == "all") return std::vector<FileIoMode>{FileIoMode::kDirect, FileIoMode::kBuffered, FileIoMode::kStream};
  std::vector<FileIoMode> out;
  std::stringstream ss(list);
  for (std::string m; std::getline(ss, m, ',');) {
    MT_ASSIGN_OR_RETURN(FileIoMode mode, parse_file_io_mode(m));
    out.push_back(mode);
  }
  return out;
}

// Each repetition's seconds, to the millisecond.
Json seconds_json(const std::vector<double>& s) {
  Json a = Json::array();
  for (double x : s) a.items().push_back(Json(std::round(x * 1000) / 1000));
  return a;
}

}  // namespace

int run_checkpoint(const Flags& f) {
  const FileIoOptions def = checkpoint_io_options();
  const std::string root = f.str("dir", (fs::temp_directory_path() / ("megatrain-bench-ckpt-" + std::to_string(::getpid()))).string());
  const std::string preset = f.str("preset", "small"), layout_name = f.str("layout", "exact");
  auto params = f.num("params", 0), threads = f.num("threads", def.threads), reps = f.num("reps", 3);
  auto chunk_mib = f.num("chunk-mib", double(def.chunk_bytes >> 20));
  auto modes = modes_of(f.str("io", "direct,stream"));
  auto layout = parse_memory_layout(layout_name);
  auto cfg = model_of(preset, params.ok() ? *params : 0);
  if (!params.ok() || !threads.ok() || !reps.ok() || !chunk_mib.ok() || !modes.ok() || !layout.ok() || !cfg.ok() ||
      !f.check_all_used().ok() || *threads < 1 || *reps < 1 || *chunk_mib < 1) {
    std::fprintf(stderr, "checkpoint: bad flags (known: --dir --preset --params --layout exact|compact --threads --chunk-mib "
                         "--reps --io direct,buffered,stream|all)\n");
    return 2;
  }
  auto store = HostStore::create(build_param_schemas(*cfg), *layout, false, default_host_allocator());
  if (!store.ok()) return std::fprintf(stderr, "checkpoint: %s\n", store.status().to_string().c_str()), 1;
  fill(**store);
  std::error_code ec;
  fs::create_directories(root, ec);
  const std::string ckpt_root = (fs::path(root) / "checkpoints").string(), base_file = (fs::path(root) / "baseline.bin").string();
  std::vector<ModeResult> results;
  for (FileIoMode m : *modes) results.push_back(ModeResult{m, {}, {}, {}, "?", "", 0});
  std::vector<double> base_w, base_r;
  bool base_direct = true, ok = true;
  const Block block;
  uint64_t bytes = 0;
  for (int rep = 0; rep < int(*reps) && ok; ++rep) {
    for (ModeResult& r : results) {
      FileIoOptions o{r.mode, int(*threads), size_t(*chunk_mib) << 20};
      ok = ok && measure_mode(ckpt_root, *cfg, **store, rep * long(results.size()) + long(&r - results.data()) + 1, o, r);
      bytes = r.bytes;
    }
    if (!ok) break;
    const uint64_t base_bytes = bytes / kDirectIoAlign * kDirectIoAlign;
    base_w.push_back(baseline_write(base_file, base_bytes, block, base_direct));
    base_r.push_back(baseline_read(base_file, block, base_direct));
    ok = base_w.back() > 0 && base_r.back() > 0;

    if (!ok) std::fprintf(stderr, "checkpoint: the baseline on '%s' failed: %s\n", base_file.c_str(), std::strerror(errno));
  }
  set_checkpoint_io_options(def);
  fs::remove_all(ckpt_root, ec);
  fs::remove(base_file, ec);
  if (!f.has("dir")) fs::remove_all(root, ec);
  if (!ok) return 1;
  const double gb = double(bytes) / 1e9, bw = gb / median(base_w), br = gb / median(base_r);
  Json out = Json::object({{"suite", "checkpoint"}, {"dir", root}, {"preset", preset}, {"layout", layout_name},
                           {"params", int64_t(cfg->num_params())}, {"bytes", int64_t(bytes)},
                           {"threads", int64_t(*threads)}, {"chunk_mib", int64_t(*chunk_mib)}, {"reps", int64_t(*reps)},
                           {"baseline_direct", base_direct}, {"baseline_write_gbps", bw}, {"baseline_read_gbps", br}});
  Json all = Json::array();
  for (const ModeResult& r : results) {
    const double w = gb / median(r.write_s), rd = gb / median(r.read_s), fr = gb / median(r.files_read_s);
    Json m = Json::object({{"io", file_io_mode_name(r.mode)}, {"path", r.path}, {"write_gbps", w}, {"read_gbps", rd},
                           {"files_read_gbps", fr}, {"write_ratio", w / bw}, {"read_ratio", rd / br},
                           {"files_read_ratio", fr / br}, {"write_s", seconds_json(r.write_s)},
                           {"read_s", seconds_json(r.read_s)}, {"files_read_s", seconds_json(r.files_read_s)}});
    if (!r.fallback.empty()) m.set("fallback", r.fallback);
    if (&r == &results.front())
      for (const auto& [k, v] : m.members()) out.set(k, v);
    all.items().push_back(m);
  }
  out.set("baseline_write_s", seconds_json(base_w));
  out.set("baseline_read_s", seconds_json(base_r));
  out.set("modes", all);
  emit(out, f.json());
  return 0;
}

}  // namespace mt::bench
