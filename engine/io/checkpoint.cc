// Checkpoints: ROOT/step-XXXXXXXX/{model,optimizer}.safetensors + trainer_state.json + config.json,
// written into ROOT/.tmp-step-XXXXXXXX, fsynced, renamed into place, then `latest` is replaced
// (temp file + fsync + rename) and old steps are pruned. Any failure before the rename removes
// the temp dir, so the previous checkpoint and `latest` stay as they were.
#include "engine/base/dir_fd.h"
#include "engine/base/disk_usage.h"
#include "engine/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>
#include <tuple>

#include "engine/io/hf_io.h"
#include "engine/base/json.h"
#include "engine/io/safetensors.h"
#include "engine/io/safetensors_parallel.h"
#include "engine/optim/optimizer_shards.h"

namespace mt {

namespace fs = std::filesystem;

bool EvalProgress::record(long at, double value) {
  const bool best = best_step == 0 || value < best_loss;
  step = at;
  loss = value;
  if (best) best_step = at, best_loss = value;
  return best;
}

void eval_progress_to_json(const EvalProgress& e, Json& j) {
  if (e.step <= 0) return;
  j.set("eval_step", int64_t(e.step));
  j.set("eval_loss", e.loss);
  j.set("best_eval_step", int64_t(e.best_step));
  j.set("best_eval_loss", e.best_loss);
}

EvalProgress eval_progress_from_json(const Json& j) {
  EvalProgress e;
  auto step_of = [&](const char* key, long& out) {
    if (const Json* v = j.find(key); v && v->is_integer() && v->as_int() >= 0) out = long(v->as_int());
  };
  auto loss_of = [&](const char* key, double& out) {
    if (const Json* v = j.find(key); v && v->is_number()) out = v->as_double();
  };
  step_of("eval_step", e.step);
  loss_of("eval_loss", e.loss);
  step_of("best_eval_step", e.best_step);
  loss_of("best_eval_loss", e.best_loss);
  return e;
}

namespace {

constexpr const char* kFormat = "megatrain-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kTempPrefix = ".tmp-";          // + a step directory's name, while it is written
constexpr const char* kLatestTemp = ".latest.tmp";    // `latest` while it is written

std::string step_dir_name(long step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step-%08ld", step);
  return buf;
}

}  // namespace

long parse_step_dir(const std::string& name) {
  if (name.size() < 6 || name.rfind("step-", 0) != 0 || name.size() > 5 + 18) return -1;
  long v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

namespace {

std::string join(const std::string& a, const std::string& b) { return (fs::path(a) / b).string(); }

std::string temp_dir(const std::string& root, long step) { return join(root, kTempPrefix + step_dir_name(step)); }

// Rank r's optimizer shard of `ranks` (1-based, as Hugging Face numbers its shards).
std::string optimizer_shard_name(int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-%05d-of-%05d.safetensors", rank + 1, ranks);
  return buf;
}

// ---- trainer_state.json ------------------------------------------------------------------------

std::string state_to_json(const TrainerState& s, const HostStore& store) {
  Json j = Json::object();
  j.set("format", kFormat);
  j.set("version", kVersion);
  j.set("step", int64_t(s.step));
  if (s.data_cursor <= uint64_t(std::numeric_limits<int64_t>::max())) j.set("data_cursor", int64_t(s.data_cursor));
  else j.set("data_cursor", std::to_string(s.data_cursor));
  j.set("spec_hash", s.spec_hash);
  if (s.spec.is_object()) j.set("spec", s.spec);
  j.set("data_source", s.data_source);
  if (!s.tokenizer.empty()) j.set("tokenizer_fingerprint", s.tokenizer);
  j.set("last_loss", s.last_loss);
  j.set("total_steps", int64_t(s.total_steps));
  eval_progress_to_json(s.eval, j);
  j.set("memory_layout", memory_layout_name(store.layout()));
  if (const std::vector<long> counts = store.expert_updates(); !counts.empty()) {
    Json a = Json::array();
    for (long n : counts) a.items().push_back(Json(int64_t(n)));
    j.set("expert_updates", a);
  }
  return j.dump(2) + "\n";
}

Result<TrainerState> state_from_json(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path, 16 << 20));  // a few hundred bytes; init.from may name any file
  auto j = Json::parse(text);
  if (!j.ok()) return data_loss("'" + path + "': " + j.status().message());
  const Json* fmt = j->find("format");
  const Json* step = j->find("step");
  const Json* cursor = j->find("data_cursor");
  if (!fmt || !fmt->is_string() || fmt->as_string() != kFormat || !step || !step->is_integer() || !cursor)
    return data_loss("'" + path + "' is not a MegaTrain trainer state (needs format, step, data_cursor)");
  TrainerState s;
  s.step = long(step->as_int());
  if (cursor->is_integer() && cursor->as_int() >= 0) {
    s.data_cursor = uint64_t(cursor->as_int());
  } else if (cursor->is_string()) {
    s.data_cursor = std::strtoull(cursor->as_string().c_str(), nullptr, 10);
  } else {
    return data_loss("'" + path + "': data_cursor is not a non-negative integer");
  }
  if (const Json* h = j->find("spec_hash"); h && h->is_string()) s.spec_hash = h->as_string();
  if (const Json* sp = j->find("spec"); sp && sp->is_object()) s.spec = *sp;
  if (const Json* d = j->find("data_source"); d && d->is_string()) s.data_source = d->as_string();
  if (const Json* t = j->find("tokenizer_fingerprint"); t && t->is_string()) s.tokenizer = t->as_string();
  if (const Json* l = j->find("last_loss"))
    s.last_loss = l->is_number() ? l->as_double() : std::numeric_limits<double>::quiet_NaN();
  if (const Json* t = j->find("total_steps"); t && t->is_integer()) s.total_steps = long(t->as_int());
  s.eval = eval_progress_from_json(*j);
  if (const Json* e = j->find("expert_updates"); e && e->is_array())
    for (const Json& n : e->items()) {
      if (!n.is_integer() || n.as_int() < 0) return data_loss("'" + path + "': expert_updates holds " + n.dump());
      s.expert_updates.push_back(long(n.as_int()));
    }
  return s;
}

// ---- writing -----------------------------------------------------------------------------------

// A tensor of `part` of unit u on the NVMe tier, `first` bytes into it: read from the drives as
// the file stores it (flush the tier first).
WriteTensor tiered_tensor(std::string name, const std::vector<int64_t>& shape, DType dt, NvmeTier* tier, size_t u,
                          NvmeTier::Part part, uint64_t first) {
  WriteTensor w{std::move(name), shape, dt, nullptr, dt};
  w.read = [tier, u, part, first](uint64_t offset, size_t n, void* dst) {
    return tier->read_part(u, part, first + offset, n, dst);
  };
  return w;
}

// A file's tensors, unit by unit in `order`; ends[k]: how many of them the first k + 1 units make.
struct UnitTensors {
  std::vector<WriteTensor> tensors;
  std::vector<size_t> ends;
};

UnitTensors weight_tensors(const std::vector<ParamSchema>& units, const HostStore& store,
                           const std::vector<size_t>& order) {
  UnitTensors out;
  for (size_t i : order) {
    for (const auto& t : units[i].tensors) {
      if (const float* m = store.unit(i).master) out.tensors.push_back({t.name, t.shape, DType::kF32, m + t.offset, DType::kF32});
      else out.tensors.push_back(tiered_tensor(t.name, t.shape, DType::kF32, store.tier(), i, NvmeTier::Part::kMaster, t.offset * 4));
    }
    out.ends.push_back(out.tensors.size());
  }
  return out;
}

// The Adam state of the units the store holds it for.
UnitTensors moment_tensors(const std::vector<ParamSchema>& units, const HostStore& store,
                           const std::vector<size_t>& order) {
  const bool exact = store.layout() == MemoryLayout::kExact;
  const DType dt = exact ? DType::kF32 : DType::kBF16;
  const size_t es = exact ? 4 : 2;
  UnitTensors out;
  for (size_t i : order) {
    const HostUnit& u = store.unit(i);
    for (const auto& t : units[i].tensors) {
      if (!store.has_moments(i)) break;  // another process's shard
      for (auto [suffix, part, base] : {std::tuple{".exp_avg", NvmeTier::Part::kM, u.m},
                                        std::tuple{".exp_avg_sq", NvmeTier::Part::kV, u.v}}) {
        if (u.tiered) out.tensors.push_back(tiered_tensor(t.name + suffix, t.shape, dt, store.tier(), i, part, t.offset * es));
        else out.tensors.push_back({t.name + suffix, t.shape, dt, static_cast<const char*>(base) + t.offset * es, dt});
      }
    }
    out.ends.push_back(out.tensors.size());
  }
  return out;
}

// Tells `captured` each unit of `order`, in turn, once every file holds its bytes: unit order[k]
// is in file f once f's writer holds its first ends[f][k] tensors.
class UnitCapture {
 public:
  UnitCapture(const std::vector<size_t>& order, const UnitCaptured& captured, std::vector<std::vector<size_t>> ends)
      : order_(order), captured_(captured), ends_(std::move(ends)), held_(ends_.size(), 0) {}
  TensorsCaptured file(size_t f) {
    if (!captured_) return nullptr;
    return [this, f](size_t tensors) { held(f, tensors); };
  }

 private:
  void held(size_t f, size_t tensors) {
    std::lock_guard<std::mutex> l(mu_);
    held_[f] = tensors;
    auto in_all = [&](size_t k) {
      for (size_t g = 0; g < ends_.size(); ++g)
        if (held_[g] < ends_[g][k]) return false;
      return true;
    };
    for (; next_ < order_.size() && in_all(next_); ++next_) captured_(order_[next_]);
  }

  const std::vector<size_t>& order_;
  const UnitCaptured& captured_;
  std::vector<std::vector<size_t>> ends_;
  std::mutex mu_;
  std::vector<size_t> held_;
  size_t next_ = 0;
};

// A checkpoint's safetensors file NAME in `dir`: in parallel with O_DIRECT, or as
// checkpoint_io_options() says.
Status write_tensor_file(const std::string& dir, const std::string& name, const std::vector<WriteTensor>& tensors,
                         const Metadata& metadata, const TensorsCaptured& captured = nullptr) {
  MT_ASSIGN_OR_RETURN(DirFd d, DirFd::open(dir, false));
  return write_safetensors_parallel(d, name, tensors, metadata, checkpoint_io_options(), nullptr, captured);
}

Metadata optimizer_metadata(long step, const HostStore& store) {
  return {{"format", "pt"}, {"step", std::to_string(step)}, {"memory_layout", memory_layout_name(store.layout())}};
}

// optimizer.safetensors.index.json: each moment tensor in the shard of its unit's owner among
// `ranks` processes (optimizer_shard_owners).
Status write_optimizer_index(const std::string& dir, const std::vector<ParamSchema>& units, const HostStore& store,
                             int ranks) {
  const std::vector<int> owners = optimizer_shard_owners(units, ranks);
  for (int r = 0; r < ranks; ++r)  // published only with every shard in place
    if (std::error_code ec; !fs::is_regular_file(join(dir, optimizer_shard_name(r, ranks)), ec))
      return data_loss("optimizer shard " + optimizer_shard_name(r, ranks) + " is missing: its process did not write it");
  Json map = Json::object();
  int64_t total = 0;
  for (size_t i = 0; i < units.size(); ++i)
    for (const auto& t : units[i].tensors) {
      const Json file(optimizer_shard_name(owners[i], ranks));
      map.set(t.name + ".exp_avg", file);
      map.set(t.name + ".exp_avg_sq", file);
      total += 2 * int64_t(t.numel * state_elem_bytes(store.layout()));
    }
  Json index = Json::object();
  index.set("metadata", Json::object({{"total_size", Json(total)}}));
  index.set("weight_map", map);
  return write_file_durable(join(dir, "optimizer.safetensors.index.json"), index.dump(2) + "\n");
}

// Everything but the optimizer shards: the optimizer state itself (ranks 0: this store holds all
// of it, written beside the weights by a second thread) or the index of the shards `ranks`
// processes wrote. The trainer state is taken first: the units captured may change after.
Status write_files(const std::string& dir, const ModelConfig& cfg, const std::vector<ParamSchema>& units,
                   const HostStore& store, const TrainerState& state, int ranks, const UnitCaptured& captured) {
  const Metadata meta = {{"format", "pt"}, {"step", std::to_string(state.step)}};
  const std::string trainer_state = state_to_json(state, store);
  if (NvmeTier* tier = store.tier()) MT_RETURN_IF_ERROR(tier->flush());  // the drives hold every update
  if (ranks == 0)
    for (size_t i = 0; i < units.size(); ++i)
      if (!store.has_moments(i))
        return failed_precondition("this store holds a shard of the optimizer state: write it with write_optimizer_shard");
  // The store's update order (every unit once: HostStore::set_update_order checks), so that a
  // checkpoint written while training goes on holds the units in the order the next step's
  // optimizer needs them back.
  const std::vector<size_t> order = store.update_order();
  const UnitTensors weights = weight_tensors(units, store, order);
  const UnitTensors moments = ranks == 0 ? moment_tensors(units, store, order) : UnitTensors{};
  std::vector<std::vector<size_t>> ends{weights.ends};
  if (ranks == 0) ends.push_back(moments.ends);
  UnitCapture capture(order, captured, std::move(ends));
  Status moments_written;
  std::thread second;
  if (ranks == 0)
    second = std::thread([&] {
      moments_written = write_tensor_file(dir, "optimizer.safetensors", moments.tensors,
                                          optimizer_metadata(state.step, store), capture.file(1));
    });
  const Status weights_written = write_tensor_file(dir, "model.safetensors", weights.tensors, meta, capture.file(0));
  if (second.joinable()) second.join();
  MT_RETURN_IF_ERROR(weights_written);
  MT_RETURN_IF_ERROR(moments_written);
  if (ranks > 0) MT_RETURN_IF_ERROR(write_optimizer_index(dir, units, store, ranks));
  MT_RETURN_IF_ERROR(write_file_durable(join(dir, "trainer_state.json"), trainer_state));
  MT_RETURN_IF_ERROR(write_file_durable(join(dir, "config.json"), model_config_to_json(cfg).dump(2) + "\n"));
  return fsync_dir(dir);
}

// Moves the finished temp dir to `final`. An existing `final` (the same step saved again) is
// swapped atomically with renameat2(RENAME_EXCHANGE), so its name never disappears.
Status publish(const std::string& tmp, const std::string& final_dir) {
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
      return data_loss("cannot replace '" + final_dir + "': " + std::strerror(errno));
    fs::remove_all(tmp, ec);  // now holds the replaced checkpoint
    return Status::Ok();
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0)
    return data_loss("cannot rename '" + tmp + "' to '" + final_dir + "': " + std::strerror(errno));
  return Status::Ok();
}

Status write_latest(const std::string& root, const std::string& name) {
  return replace_file_durable(join(root, "latest"), join(root, kLatestTemp), name + "\n");
}

// Keeps the `keep` newest step directories (keep <= 0 keeps all), always `current`, and the
// checkpoint of step `also_keep` (> 0) besides those: one of the newest itself, it takes no
// further place (a defect hunt saw keep 2 + the best at step 10 keep steps 5, 10 and 12).
void prune(const std::string& root, int keep, const std::string& current, long also_keep) {
  if (keep <= 0) return;
  std::vector<std::pair<long, std::string>> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (long s = parse_step_dir(n); s >= 0 && e.is_directory(ec)) steps.emplace_back(s, n);
  }
  std::sort(steps.rbegin(), steps.rend());
  int kept = 1;  // `current`
  for (const auto& [s, n] : steps) {
    if (n == current) continue;
    const bool best = also_keep > 0 && s == also_keep;
    if (kept < keep) ++kept;
    else if (!best) fs::remove_all(join(root, n), ec);
  }
}

Result<std::string> read_latest(const std::string& root) {
  MT_ASSIGN_OR_RETURN(std::string text, read_file(join(root, "latest"), 4096));  // one directory name
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  if (parse_step_dir(text) < 0) return data_loss("'" + join(root, "latest") + "' does not name a step directory: '" + text + "'");
  return text;
}

}  // namespace

Status begin_checkpoint(const std::string& root, long step) {
  if (step < 0) return invalid_argument("checkpoint step " + std::to_string(step) + " is negative");
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return errno_status("cannot create checkpoint root", root, ec.value());  // a full disk: RESOURCE_EXHAUSTED
  const std::string tmp = temp_dir(root, step);
  fs::remove_all(tmp, ec);  // left over from a crash
  if (!fs::create_directory(tmp, ec))
    return ec ? errno_status("cannot create", tmp, ec.value()) : data_loss("cannot create '" + tmp + "': exists");
  return Status::Ok();
}

std::vector<std::string> remove_stale_checkpoint_temps(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    const bool temp_step = n.rfind(kTempPrefix, 0) == 0 && parse_step_dir(n.substr(std::strlen(kTempPrefix))) >= 0;
    if (!temp_step && n != kLatestTemp) continue;
    std::error_code rec;
    if (fs::remove_all(e.path(), rec) != static_cast<std::uintmax_t>(-1) && !rec) removed.push_back(n);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::string checkpoint_step_dir(const std::string& root, long step) { return join(root, step_dir_name(step)); }

void discard_checkpoint(const std::string& root, long step) {
  std::error_code ec;
  fs::remove_all(temp_dir(root, step), ec);
}

Status write_optimizer_shard(const std::string& root, long step, const ModelConfig& cfg, const HostStore& store,
                             int rank, int ranks) {
  const auto units = build_param_schemas(cfg);
  MT_RETURN_IF_ERROR(check_store_matches(cfg, units, store));
  return write_tensor_file(temp_dir(root, step), optimizer_shard_name(rank, ranks),
                           moment_tensors(units, store, store.update_order()).tensors, optimizer_metadata(step, store))
      .with_context("saving optimizer shard " + std::to_string(rank + 1) + " of " + std::to_string(ranks));
}

namespace {
// Writes the rest of the checkpoint begun in its temp directory and publishes it.
Result<std::string> finish_checkpoint(const std::string& root, const ModelConfig& cfg, const HostStore& store,
                                      const TrainerState& state, int keep, int ranks, long also_keep,
                                      const UnitCaptured& captured = nullptr) {
  const auto units = build_param_schemas(cfg);
  MT_RETURN_IF_ERROR(check_store_matches(cfg, units, store));
  std::error_code ec;
  const std::string name = step_dir_name(state.step);
  const std::string tmp = temp_dir(root, state.step), final_dir = join(root, name);
  Status s = write_files(tmp, cfg, units, store, state, ranks, captured);
  if (s.ok()) s = publish(tmp, final_dir);
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s.with_context("saving checkpoint " + name);
  }
  MT_RETURN_IF_ERROR(fsync_dir(root).with_context("saving checkpoint " + name));
  MT_RETURN_IF_ERROR(write_latest(root, name).with_context("saving checkpoint " + name));
  prune(root, keep, name, also_keep);
  return final_dir;
}
}  // namespace

Result<std::string> save_checkpoint(const std::string& root, const ModelConfig& cfg, const HostStore& store,
                                    const TrainerState& state, int keep, long also_keep, const UnitCaptured& captured) {
  MT_RETURN_IF_ERROR(check_store_matches(cfg, build_param_schemas(cfg), store));
  MT_RETURN_IF_ERROR(begin_checkpoint(root, state.step));
  return finish_checkpoint(root, cfg, store, state, keep, 0, also_keep, captured);
}

Result<std::string> finish_sharded_checkpoint(const std::string& root, const ModelConfig& cfg, const HostStore& store,
                                              const TrainerState& state, int keep, int ranks, long also_keep) {
  if (ranks < 1) return invalid_argument("a sharded checkpoint of " + std::to_string(ranks) + " processes");
  return finish_checkpoint(root, cfg, store, state, keep, ranks, also_keep);
}

namespace {

// The newest step directory under `root` with its trainer_state.json ("": none). Each is whole
// once it has its name (written as a temp directory, fsynced, then renamed), so this is the last
// checkpoint published even when `latest` is gone: a kill between the rename and the write of
// `latest`, or a copy of the directory that left it out.
std::string newest_step_dir(const std::string& root) {
  long newest = -1;
  std::string name;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    const long s = parse_step_dir(n);
    if (s > newest && fs::is_regular_file(e.path() / "trainer_state.json", ec)) newest = s, name = n;
  }
  return name;
}

}  // namespace

bool is_training_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::path(path) / "latest", ec) || fs::exists(fs::path(path) / "trainer_state.json", ec) ||
         !newest_step_dir(path).empty();
}

std::string checkpoints_of_run(const std::string& path) {
  const std::string root = join(path, "checkpoints");
  return !is_training_checkpoint(path) && is_training_checkpoint(root) ? root : path;
}

Result<std::string> resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(join(path, "trainer_state.json"), ec)) return path;
  if (fs::exists(join(path, "latest"), ec)) {
    MT_ASSIGN_OR_RETURN(std::string name, read_latest(path));
    const std::string dir = join(path, name);
    if (!fs::is_regular_file(join(dir, "trainer_state.json"), ec))
      return not_found("'" + join(path, "latest") + "' names '" + name + "', which is not a complete checkpoint");
    return dir;
  }
  if (const std::string newest = newest_step_dir(path); !newest.empty()) return join(path, newest);
  return not_found("'" + path + "' is neither a checkpoint directory (no trainer_state.json) nor a checkpoint root "
                   "(no latest, no step directory)");
}

Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  auto latest = read_latest(root);
  if (const std::string newest = newest_step_dir(root); !latest.ok() && !newest.empty()) latest = newest;  // as resumed
  long best_step = 0;  // as the latest checkpoint records it
  fs::directory_iterator it(root, ec);
  if (ec) return data_loss("cannot list the checkpoints in '" + root + "': " + ec.message());
  for (const auto& e : it) {
    std::error_code eec;  // a checkpoint pruned while we look is simply not listed
    const std::string name = e.path().filename().string();
    const long step = parse_step_dir(name);
    if (step < 0 || !e.is_directory(eec)) continue;
    auto state = state_from_json(join(e.path().string(), "trainer_state.json"));
    if (!state.ok()) continue;
    CheckpointInfo c{step, state->last_loss, 0, 0, e.path().string(), latest.ok() && *latest == name};
    c.evaluated = state->eval.step == step;
    c.eval_loss = c.evaluated ? state->eval.loss : 0;
    if (c.latest) best_step = state->eval.best_step;
    c.size_bytes = tree_bytes(e.path());
    const auto mtime = fs::last_write_time(e.path() / "trainer_state.json", eec);
    if (!eec)
      c.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::file_clock::to_sys(mtime).time_since_epoch()).count();
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  for (CheckpointInfo& c : out) c.best = best_step > 0 && c.step == best_step;
  return out;
}

Result<TrainerState> read_trainer_state(const std::string& dir) {
  return state_from_json(join(dir, "trainer_state.json"));
}

Status update_trainer_state(const std::string& dir, const TrainerState& state, const HostStore& store) {
  return replace_file_durable(join(dir, "trainer_state.json"), join(dir, "trainer_state.json.tmp"),
                              state_to_json(state, store));
}

}  // namespace mt
