#include "engine/job/job_spec.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <type_traits>

#include "engine/base/hash.h"
#include "engine/data/data_source.h"
#include "engine/exec/executor.h"
#include "engine/model/init.h"

namespace mt {

namespace {
constexpr size_t kMaxNvmePaths = 16;  // memory.nvme_paths


// The shortest text that reads back as `v` ("1e+300", not "1.0000000000000001e+300").
template <typename F>
std::string shortest(F v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

template <typename F>
Status to_number(const Json& v, const std::string& field, F& out) {
  if (!v.is_number() || !std::isfinite(v.as_double()))
    return invalid_argument(field + " must be a number, got " + v.dump());
  if (std::abs(v.as_double()) > double(std::numeric_limits<F>::max()))
    return invalid_argument(field + " = " + shortest(v.as_double()) + " is out of range for a " +
                            std::to_string(8 * sizeof(F)) + "-bit float (magnitude at most " +
                            shortest(std::numeric_limits<F>::max()) + ")");
  out = F(v.as_double());
  return Status::Ok();
}

// Reads the members of one JSON object, remembering which keys were read so that any other
// key is reported as unknown (a misspelt key never silently falls back to a default).
class ObjectReader {
 public:
  ObjectReader(const Json* j, std::string path) : j_(j), path_(std::move(path)) {}

  Status check_object() const {
    if (j_ && !j_->is_object()) return invalid_argument(where("") + " must be an object, got " + j_->dump());
    return Status::Ok();
  }
  Status str(const char* key, std::string& out) {
    const Json* v = get(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return invalid_argument(where(key) + " must be a string, got " + v->dump());
    out = v->as_string();
    return Status::Ok();
  }
  // An integer that fits I; protobuf's JSON writes int64 as a string. Out of range is refused
  // naming the field, never clamped.
  template <typename I>
  Status integer(const char* key, I& out) {
    const Json* v = get(key);
    if (!v) return Status::Ok();
    if (v->is_string()) return integer_text(key, v->as_string(), out);
    const bool huge = v->is_number() && !v->is_integer() && std::abs(v->as_double()) >= 9.2e18;  // integral, past int64
    if (!v->is_integer() && !huge) return invalid_argument(where(key) + " must be an integer, got " + v->dump());
    const int64_t x = v->as_int();
    out = I(x);
    if (huge || int64_t(out) != x || (x < 0 && std::is_unsigned_v<I>)) return out_of_range<I>(key, v->dump());
    return Status::Ok();
  }
  // protobuf's JSON writes 64-bit integers as strings: read them straight into I (uint64 seeds
  // past INT64_MAX included).
  template <typename I>
  Status integer_text(const char* key, const std::string& t, I& out) {
    I x{};
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
    if (ec == std::errc::result_out_of_range) return out_of_range<I>(key, t);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size())
      return invalid_argument(where(key) + " must be an integer, got \"" + t + "\"");
    out = x;
    return Status::Ok();
  }
  template <typename I>
  Status out_of_range(const char* key, const std::string& value) const {
    return invalid_argument(where(key) + " = " + value + " is out of range (" +
                            std::to_string(std::numeric_limits<I>::min()) + " .. " +
                            std::to_string(std::numeric_limits<I>::max()) + ")");
  }
  // A number that fits F: a double beyond float's range would become an infinity in training.
  template <typename F>
  Status number(const char* key, F& out) {
    const Json* v = get(key);
    if (!v) return Status::Ok();
    return to_number(*v, where(key), out);
  }
  Status boolean(const char* key, bool& out) {
    const Json* v = get(key);
    if (!v) return Status::Ok();
    if (!v->is_bool()) return invalid_argument(where(key) + " must be true or false, got " + v->dump());
    out = v->as_bool();
    return Status::Ok();
  }
  ObjectReader child(const char* key) { return ObjectReader(get(key), where(key)); }
  const Json* get(const char* key) {
    known_.insert(key);
    const Json* v = j_ ? j_->find(key) : nullptr;
    return v && !v->is_null() ? v : nullptr;
  }
  Status finish() const {
    if (!j_) return Status::Ok();
    for (const auto& [k, v] : j_->members())
      if (!known_.count(k)) return invalid_argument("unknown key '" + where(k.c_str()) + "' in job spec");
    return Status::Ok();
  }

 private:
  std::string where(const char* key) const {
    if (!*key) return path_.empty() ? "job spec" : path_;
    return path_.empty() ? key : path_ + "." + key;
  }
  const Json* j_;
  std::string path_;
  std::set<std::string> known_;
};

Status read_nvme(ObjectReader& mem, JobSpec& s);

Status read_model(ObjectReader r, ModelSpec& m) {
  MT_RETURN_IF_ERROR(r.check_object());
  MT_RETURN_IF_ERROR(r.str("preset", m.preset));
  MT_RETURN_IF_ERROR(r.str("hf_config", m.hf_config));
  MT_RETURN_IF_ERROR(r.str("hf_model", m.hf_model));
  return r.finish();
}

Status read_data(ObjectReader r, DataSpec& d) {
  MT_RETURN_IF_ERROR(r.check_object());
  MT_RETURN_IF_ERROR(r.str("source", d.source));
  MT_RETURN_IF_ERROR(r.str("path", d.path));
  MT_RETURN_IF_ERROR(r.str("dtype", d.dtype));
  MT_RETURN_IF_ERROR(r.integer("seed", d.seed));
  MT_RETURN_IF_ERROR(r.integer("active_vocab", d.active_vocab));
  MT_RETURN_IF_ERROR(r.integer("branching", d.branching));
  MT_RETURN_IF_ERROR(r.integer("eod_id", d.eod_id));
  MT_RETURN_IF_ERROR(r.str("tokenizer", d.tokenizer));
  MT_RETURN_IF_ERROR(r.str("format", d.format));
  MT_RETURN_IF_ERROR(r.str("chat_template", d.chat_template));
  MT_RETURN_IF_ERROR(r.boolean("packing", d.packing));
  MT_RETURN_IF_ERROR(r.str("long_examples", d.long_examples));
  MT_RETURN_IF_ERROR(r.integer("epochs", d.epochs));
  return r.finish();
}

Status read_optimizer(ObjectReader r, OptimizerConfig& o) {
  MT_RETURN_IF_ERROR(r.check_object());
  MT_RETURN_IF_ERROR(r.number("lr", o.lr));
  if (const Json* b = r.get("betas")) {
    if (!b->is_array() || b->items().size() != 2)
      return invalid_argument("optimizer.betas must be a list of two numbers, got " + b->dump());
    MT_RETURN_IF_ERROR(to_number(b->items()[0], "optimizer.betas[0]", o.beta1));
    MT_RETURN_IF_ERROR(to_number(b->items()[1], "optimizer.betas[1]", o.beta2));
  }
  MT_RETURN_IF_ERROR(r.number("eps", o.eps));
  MT_RETURN_IF_ERROR(r.number("weight_decay", o.weight_decay));
  MT_RETURN_IF_ERROR(r.number("grad_clip", o.grad_clip));
  return r.finish();
}

Status read_schedule(ObjectReader r, LrSchedule& s) {
  MT_RETURN_IF_ERROR(r.check_object());
  MT_RETURN_IF_ERROR(r.integer("warmup_steps", s.warmup_steps));
  std::string decay = lr_decay_name(s.decay);
  MT_RETURN_IF_ERROR(r.str("decay", decay));
  MT_ASSIGN_OR_RETURN(s.decay, parse_lr_decay(decay));
  MT_RETURN_IF_ERROR(r.number("min_lr_ratio", s.min_lr_ratio));
  return r.finish();
}

Status read_top(ObjectReader& r, JobSpec& s) {
  MT_RETURN_IF_ERROR(r.str("name", s.name));
  MT_RETURN_IF_ERROR(read_model(r.child("model"), s.model));
  ObjectReader init = r.child("init");
  MT_RETURN_IF_ERROR(init.check_object());
  MT_RETURN_IF_ERROR(init.integer("seed", s.init.seed));
  MT_RETURN_IF_ERROR(init.str("from", s.init.from));
  MT_RETURN_IF_ERROR(init.boolean("weights_only", s.init.weights_only));
  MT_RETURN_IF_ERROR(init.finish());
  MT_RETURN_IF_ERROR(read_data(r.child("data"), s.data));
  MT_RETURN_IF_ERROR(r.integer("seq_len", s.train.seq_len));
  MT_RETURN_IF_ERROR(r.integer("micro_batch", s.train.micro_batch));
  s.train.global_batch = s.train.micro_batch;
  MT_RETURN_IF_ERROR(r.integer("global_batch", s.train.global_batch));
  MT_RETURN_IF_ERROR(r.integer("steps", s.steps));
  MT_RETURN_IF_ERROR(read_optimizer(r.child("optimizer"), s.train.optimizer));
  MT_RETURN_IF_ERROR(read_schedule(r.child("schedule"), s.train.schedule));
  ObjectReader ck = r.child("checkpoint");
  MT_RETURN_IF_ERROR(ck.check_object());
  MT_RETURN_IF_ERROR(ck.integer("every", s.checkpoint.every));
  MT_RETURN_IF_ERROR(ck.integer("keep", s.checkpoint.keep));
  MT_RETURN_IF_ERROR(ck.boolean("keep_best", s.checkpoint.keep_best));
  MT_RETURN_IF_ERROR(ck.finish());
  if (r.get("eval")) {
    ObjectReader ev = r.child("eval");
    MT_RETURN_IF_ERROR(ev.check_object());
    s.eval.enabled = true;
    if (!ev.get("data")) return invalid_argument("eval.data is required: the held-out set, as any data spec");
    MT_RETURN_IF_ERROR(read_data(ev.child("data"), s.eval.data));
    MT_RETURN_IF_ERROR(ev.integer("every", s.eval.every));
    MT_RETURN_IF_ERROR(ev.integer("max_tokens", s.eval.max_tokens));
    MT_RETURN_IF_ERROR(ev.finish());
  }
  ObjectReader lg = r.child("logging");
  MT_RETURN_IF_ERROR(lg.check_object());
  MT_RETURN_IF_ERROR(lg.boolean("tensorboard", s.logging.tensorboard));
  MT_RETURN_IF_ERROR(lg.finish());
  MT_RETURN_IF_ERROR(r.str("precision", s.precision));
  MT_RETURN_IF_ERROR(r.str("backend", s.backend));
  MT_RETURN_IF_ERROR(r.str("executor", s.executor));
  MT_RETURN_IF_ERROR(r.integer("slots", s.slots));
  MT_RETURN_IF_ERROR(r.integer("expert_slots", s.expert_slots));
  MT_RETURN_IF_ERROR(r.number("link_gbps", s.link_gbps));
  MT_RETURN_IF_ERROR(r.str("checkpoint_placement", s.checkpoint_placement));
  MT_RETURN_IF_ERROR(r.str("speculative_updates", s.speculative_updates));
  MT_RETURN_IF_ERROR(r.integer("devices", s.devices));
  MT_RETURN_IF_ERROR(r.number("comm_timeout_seconds", s.comm_timeout_seconds));
  MT_RETURN_IF_ERROR(r.boolean("shard_optimizer", s.shard_optimizer));
  MT_RETURN_IF_ERROR(r.boolean("recompute", s.train.recompute));
  MT_RETURN_IF_ERROR(r.integer("token_chunk", s.train.token_chunk));
  MT_RETURN_IF_ERROR(r.integer("priority", s.priority));
  ObjectReader mem = r.child("memory");
  MT_RETURN_IF_ERROR(mem.check_object());
  std::string layout = memory_layout_name(s.train.layout);
  MT_RETURN_IF_ERROR(mem.str("layout", layout));
  MT_ASSIGN_OR_RETURN(s.train.layout, parse_memory_layout(layout));
  MT_RETURN_IF_ERROR(read_nvme(mem, s));
  return mem.finish();
}

// memory.offload and the NVMe tier's settings.
Status read_nvme(ObjectReader& mem, JobSpec& s) {
  MT_RETURN_IF_ERROR(mem.str("offload", s.offload));
  MT_RETURN_IF_ERROR(mem.boolean("nvme_masters", s.nvme.masters));
  MT_RETURN_IF_ERROR(mem.integer("nvme_window", s.nvme.window));
  MT_RETURN_IF_ERROR(mem.integer("nvme_io_threads", s.nvme.io_threads));
  MT_RETURN_IF_ERROR(mem.integer("nvme_grad_window", s.nvme.grad_window));
  MT_RETURN_IF_ERROR(mem.number("nvme_gbps", s.nvme_gbps));
  const Json* paths = mem.get("nvme_paths");
  if (!paths) return Status::Ok();
  if (!paths->is_array() || paths->items().size() > kMaxNvmePaths)
    return invalid_argument("memory.nvme_paths must be a list of at most " + std::to_string(kMaxNvmePaths) +
                            " directories, got " + paths->dump().substr(0, 200));
  for (const Json& p : paths->items()) {
    if (!p.is_string() || p.as_string().empty() || p.as_string().size() > 4096)
      return invalid_argument("memory.nvme_paths holds " + p.dump().substr(0, 200) + ": each must be a directory's path");
    s.nvme.paths.push_back(p.as_string());
  }
  return Status::Ok();
}

Status one_of(const char* field, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return invalid_argument(std::string(field) + " = '" + v + "' is not one of " + list);
}

// A key its source does not read is refused, not ignored: a tokenizer on a text source trained a
// 50k-token model on byte ids, and said nothing. (A key set to its default cannot be told apart;
// `seed` is not checked: a source without a shuffle serves the same rows whatever it says.)
Status check_keys_apply(const std::string& f, const DataSpec& d) {
  const DataSpec def;
  const bool jsonl = d.source == "jsonl", examples = jsonl || d.source == "shards";
  struct Key {
    const char* name;
    bool set, read;
    const char* readers;  // who reads it, as the refusal says
  };
  const Key keys[] = {
      {"path", !d.path.empty(), d.source != "synthetic" && d.source != "push", "text, tokens, jsonl and shards read it"},
      {"tokenizer", !d.tokenizer.empty(), jsonl,
       d.source == "text" ? "jsonl reads it (a text source feeds bytes 0..255; for a tokenizer, give the text as jsonl "
                            "lines {\"text\": ...})"
                          : "jsonl reads it (shards hold the ids megatrain tokenize made)"},
      {"format", d.format != def.format, jsonl, "jsonl reads it"},
      {"chat_template", d.chat_template != def.chat_template, jsonl && (d.format == "auto" || d.format == "messages"),
       "jsonl reads it, for messages rows (format messages or auto): text and prompt_completion rows have no chat"},
      {"packing", d.packing != def.packing, examples, "jsonl and shards read it"},
      {"long_examples", d.long_examples != def.long_examples, examples, "jsonl and shards read it"},
      {"epochs", d.epochs != def.epochs, examples, "jsonl and shards read it"},
      {"dtype", d.dtype != def.dtype, d.source == "tokens", "tokens reads it"},
      {"active_vocab", d.active_vocab != def.active_vocab, d.source == "synthetic", "synthetic reads it"},
      {"branching", d.branching != def.branching, d.source == "synthetic", "synthetic reads it"},
  };
  for (const Key& k : keys)
    if (k.set && !k.read)
      return invalid_argument(f + k.name + " does not apply to " + f + "source = " + d.source + ": only " + k.readers);
  return Status::Ok();
}

// `d` as the spec field `field` (data, or eval.data) names it.
Status validate_data(const std::string& field, const DataSpec& d) {
  const std::string f = field + ".";
  MT_RETURN_IF_ERROR(one_of((f + "source").c_str(), d.source, {"synthetic", "text", "tokens", "push", "jsonl", "shards"}));
  if (d.source != "synthetic" && d.source != "push" && d.path.empty())
    return invalid_argument(f + "path is required for " + f + "source = " + d.source);
  MT_RETURN_IF_ERROR(check_keys_apply(f, d));
  MT_RETURN_IF_ERROR(one_of((f + "dtype").c_str(), d.dtype, {"uint16", "uint32", "llmc"}));
  if (d.source == "synthetic") MT_RETURN_IF_ERROR(check_synthetic_options(d.active_vocab, d.branching));
  if (d.eod_id < -1 || d.eod_id >= ModelLimits::kVocabSize)
    return invalid_argument(f + "eod_id = " + std::to_string(d.eod_id) + " must be a token id (or -1: none)");
  if (d.eod_id >= 0 && (d.source == "jsonl" || d.source == "shards"))
    return invalid_argument(f + "eod_id does not apply to " + f + "source = " + d.source + ": its examples are the documents");
  MT_RETURN_IF_ERROR(one_of((f + "format").c_str(), d.format, {"auto", "text", "prompt_completion", "messages"}));
  MT_RETURN_IF_ERROR(one_of((f + "long_examples").c_str(), d.long_examples, {"split", "truncate"}));
  return Status::Ok();
}

Status validate_eval(const JobSpec& s) {
  const EvalSpec& e = s.eval;
  MT_RETURN_IF_ERROR(validate_data("eval.data", e.data));
  if (e.data.source == "push")
    return invalid_argument("eval.data.source = push: a held-out set is read once when the job starts; use jsonl, "
                            "shards, tokens or text");
  if (e.data.epochs > 1)
    return invalid_argument("eval.data.epochs = " + std::to_string(e.data.epochs) + ": the held-out set is one pass");
  if (e.every < 0) return invalid_argument("eval.every = " + std::to_string(e.every) + " must be >= 0 (0: at the end only)");
  if (e.max_tokens < 1 || e.max_tokens > EvalSpec::kMaxTokens)
    return invalid_argument("eval.max_tokens = " + std::to_string(e.max_tokens) + " must be in 1.." +
                            std::to_string(EvalSpec::kMaxTokens));
  return Status::Ok();
}

}  // namespace

Status check_unset_tokenizer(const std::string& field, const DataSpec& d, int vocab) {
  if (d.source != "jsonl" || !d.tokenizer.empty() || vocab == 256) return Status::Ok();
  return invalid_argument(field + " is not set: the byte tokenizer would feed this model (a vocabulary of " +
                          std::to_string(vocab) + " tokens) byte ids 0..255; name its tokenizer (a model directory or "
                          "a tokenizer.json), or set tokenizer: byte");
}

namespace {
Status check_source_fits_model(const std::string& field, const DataSpec& d, int vocab) {
  MT_RETURN_IF_ERROR(check_unset_tokenizer(field + ".tokenizer", d, vocab));
  if (d.eod_id < vocab) return Status::Ok();
  return invalid_argument(field + ".eod_id = " + std::to_string(d.eod_id) + " is outside the model's vocabulary of " +
                          std::to_string(vocab) + " tokens");
}
}  // namespace

Status check_data_fits_model(const JobSpec& s, int vocab) {
  MT_RETURN_IF_ERROR(check_source_fits_model("data", s.data, vocab));
  return s.eval.enabled ? check_source_fits_model("eval.data", s.eval.data, vocab) : Status::Ok();
}

Result<JobSpec> job_spec_from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("job spec must be an object");
  JobSpec s;
  ObjectReader r(&j, "");
  MT_RETURN_IF_ERROR(read_top(r, s));
  MT_RETURN_IF_ERROR(r.finish());
  s.train.schedule.total_steps = s.steps;
  MT_RETURN_IF_ERROR(validate(s));
  return s;
}

Status validate_nvme(const JobSpec& s);  // below

Status validate(const JobSpec& s) {
  const int sources = !s.model.preset.empty() + !s.model.hf_config.empty() + !s.model.hf_model.empty();
  if (sources != 1) return invalid_argument("model must name exactly one of preset, hf_config, hf_model");
  if (s.steps < 1) return invalid_argument("steps = " + std::to_string(s.steps) + " must be >= 1");
  if (s.checkpoint.every < 0) return invalid_argument("checkpoint.every = " + std::to_string(s.checkpoint.every) + " must be >= 0");
  if (s.checkpoint.keep < 1) return invalid_argument("checkpoint.keep = " + std::to_string(s.checkpoint.keep) + " must be >= 1");
  if (s.slots < 2 || s.slots > kMaxSlots)
    return invalid_argument("slots = " + std::to_string(s.slots) + " must be in 2.." + std::to_string(kMaxSlots));
  if (s.expert_slots < 1 || s.expert_slots > kMaxSlots)
    return invalid_argument("expert_slots = " + std::to_string(s.expert_slots) + " must be in 1.." + std::to_string(kMaxSlots));
  // The CPU backend sleeps out each copy's emulated time, uninterruptibly: at 1e-6 GB/s a tiny
  // model's step outlived a cancel and the shutdown timeout (a defect hunt), and 1e-300 overflowed.
  if (s.link_gbps != 0 && !(s.link_gbps >= JobSpec::kMinLinkGbps && s.link_gbps <= JobSpec::kMaxLinkGbps))
    return invalid_argument("link_gbps = " + std::to_string(s.link_gbps) +
                            " must be 0 (no emulated link) or in 0.001..10000 GB/s (the CPU backend's emulated link; "
                            "0.001 is 1 MB/s)");
  if (s.init.weights_only && s.init.from.empty())
    return invalid_argument("init.weights_only needs init.from: the checkpoint or model directory whose weights to take");
  MT_RETURN_IF_ERROR(validate_data("data", s.data));
  if (s.eval.enabled) MT_RETURN_IF_ERROR(validate_eval(s));
  if (s.checkpoint.keep_best && !s.eval.enabled)
    return invalid_argument("checkpoint.keep_best needs an eval section: the best checkpoint is the lowest held-out loss");
  MT_RETURN_IF_ERROR(one_of("precision", s.precision, {"auto", "bf16", "fp32"}));
  MT_RETURN_IF_ERROR(one_of("backend", s.backend, {"auto", "cpu", "cuda"}));
  MT_RETURN_IF_ERROR(one_of("executor", s.executor, {"streaming", "resident"}));
  MT_RETURN_IF_ERROR(one_of("checkpoint_placement", s.checkpoint_placement, {"auto", "device", "host"}));
  MT_RETURN_IF_ERROR(one_of("speculative_updates", s.speculative_updates, {"off", "auto", "on"}));
  if (!(s.comm_timeout_seconds > 0 && s.comm_timeout_seconds <= 86400))
    return invalid_argument("comm_timeout_seconds = " + std::to_string(s.comm_timeout_seconds) + " must be in (0, 86400]");
  MT_RETURN_IF_ERROR(check_devices(s.devices, s.train));
  if (s.shard_optimizer && s.executor != "streaming") return invalid_argument("shard_optimizer needs executor = streaming");
  MT_RETURN_IF_ERROR(validate_nvme(s));
  ModelConfig dummy;
  return validate(s.train, dummy);
}

Status validate_nvme(const JobSpec& s) {
  MT_RETURN_IF_ERROR(one_of("memory.offload", s.offload, {"none", "nvme"}));
  if (s.offload == "none") {
    if (!s.nvme.paths.empty() || s.nvme.masters || s.nvme.grad_window != 0)
      return invalid_argument("memory.nvme_paths, memory.nvme_masters and memory.nvme_grad_window need memory.offload = nvme");
    return Status::Ok();
  }
  if (s.executor != "streaming") return invalid_argument("memory.offload = nvme needs executor = streaming");
  if (s.shard_optimizer) return invalid_argument("memory.offload = nvme holds the whole optimizer's state: shard_optimizer is off with it");
  if (s.nvme.window < 1 || s.nvme.window > 64)
    return invalid_argument("memory.nvme_window = " + std::to_string(s.nvme.window) + " must be in 1..64");
  if (s.nvme.io_threads < 1 || s.nvme.io_threads > 64)
    return invalid_argument("memory.nvme_io_threads = " + std::to_string(s.nvme.io_threads) + " must be in 1..64");
  if (s.nvme.grad_window < 0 || s.nvme.grad_window > 64)
    return invalid_argument("memory.nvme_grad_window = " + std::to_string(s.nvme.grad_window) + " must be in 0..64");
  if (s.nvme.grad_window > 0 && s.train.optimizer.grad_clip > 0)
    return invalid_argument("memory.nvme_grad_window needs optimizer.grad_clip = 0: with clipping every gradient is "
                            "held until the step's norm is known");
  if (s.nvme.grad_window > 0 && s.devices > 1)
    return invalid_argument("memory.nvme_grad_window trains on one device (devices: 1)");
  if (!(s.nvme_gbps >= 0 && s.nvme_gbps <= 1e4))
    return invalid_argument("memory.nvme_gbps = " + std::to_string(s.nvme_gbps) + " must be in [0, 10000]");
  if (s.nvme.masters && s.precision == "fp32")
    return invalid_argument("memory.nvme_masters needs precision bf16: the uploads then read the bf16 shadow in "
                            "memory, never the masters on the drives");
  return Status::Ok();
}

namespace {
// A uint64 as JSON: an integer while it fits int64, else the decimal string (as protobuf writes
// 64-bit integers), which the reader takes back exactly.
Json unsigned_json(uint64_t v) {
  return v <= uint64_t(std::numeric_limits<int64_t>::max()) ? Json(int64_t(v)) : Json(std::to_string(v));
}

// The fields of `d` its source reads.
Json data_json(const DataSpec& d) {
  Json data = Json::object({{"source", d.source}, {"path", d.path}, {"dtype", d.dtype},
                            {"seed", unsigned_json(d.seed)}, {"active_vocab", d.active_vocab},
                            {"branching", d.branching}});
  if (d.eod_id >= 0) data.set("eod_id", d.eod_id);  // absent = none, as before the field existed
  if (d.source == "jsonl") {  // absent for the older sources: their hashes stay
    data.set("tokenizer", d.tokenizer);
    data.set("format", d.format);
    data.set("chat_template", d.chat_template);
  }
  if (d.source == "jsonl" || d.source == "shards") {
    data.set("packing", d.packing);
    data.set("long_examples", d.long_examples);
    data.set("epochs", unsigned_json(d.epochs));
  }
  return data;
}

// Every field but the priority (which only orders the daemon's queue). token_chunk changes the
// weight gradients' summation order, so it is part of the trajectory; absent when 0, so the
// hashes of specs written before it existed do not change.
Json job_spec_trajectory_json(const JobSpec& s) {
  Json model = Json::object();
  if (!s.model.preset.empty()) model.set("preset", s.model.preset);
  if (!s.model.hf_config.empty()) model.set("hf_config", s.model.hf_config);
  if (!s.model.hf_model.empty()) model.set("hf_model", s.model.hf_model);
  Json init = Json::object({{"seed", unsigned_json(s.init.seed)}});
  if (!s.init.from.empty()) init.set("from", s.init.from);
  if (s.init.weights_only) init.set("weights_only", true);  // absent when false: hashes unchanged
  const OptimizerConfig& o = s.train.optimizer;
  const LrSchedule& sc = s.train.schedule;
  Json j = Json::object({
      {"name", s.name},
      {"model", model},
      {"init", init},
      {"data", data_json(s.data)},
      {"seq_len", s.train.seq_len},
      {"micro_batch", s.train.micro_batch},
      {"global_batch", s.train.global_batch},
      {"steps", int64_t(s.steps)},
      {"optimizer", Json::object({{"lr", double(o.lr)}, {"betas", Json::array({double(o.beta1), double(o.beta2)})},
                                  {"eps", double(o.eps)}, {"weight_decay", double(o.weight_decay)},
                                  {"grad_clip", double(o.grad_clip)}})},
      {"schedule", Json::object({{"warmup_steps", sc.warmup_steps}, {"decay", lr_decay_name(sc.decay)},
                                 {"min_lr_ratio", double(sc.min_lr_ratio)}})},
      {"checkpoint", Json::object({{"every", int64_t(s.checkpoint.every)}, {"keep", s.checkpoint.keep}})},
      {"precision", s.precision},
      {"backend", s.backend},
      {"executor", s.executor},
      {"slots", s.slots},
      {"link_gbps", s.link_gbps},
      {"checkpoint_placement", s.checkpoint_placement},
      {"recompute", s.train.recompute},
      {"memory", Json::object({{"layout", memory_layout_name(s.train.layout)}})},
  });
  if (s.train.token_chunk != 0) j.set("token_chunk", s.train.token_chunk);
  return j;
}
}  // namespace

Json job_spec_to_json(const JobSpec& s) {
  Json j = job_spec_trajectory_json(s);
  // How the run is spread: absent at their defaults, as before the fields existed.
  if (s.devices != 1) j.set("devices", s.devices);
  if (s.comm_timeout_seconds != 300) j.set("comm_timeout_seconds", s.comm_timeout_seconds);
  if (s.shard_optimizer) j.set("shard_optimizer", true);
  if (s.priority != 0) j.set("priority", s.priority);  // absent when 0, as before it existed
  if (s.expert_slots != 2) j.set("expert_slots", s.expert_slots);  // absent at its default: spec hashes unchanged
  if (s.speculative_updates != "off") j.set("speculative_updates", s.speculative_updates);
  if (s.offload != "none") {  // absent without the tier, as before it existed
    Json mem = *j.find("memory");
    Json::Array paths;
    for (const std::string& p : s.nvme.paths) paths.push_back(Json(p));
    mem.set("offload", s.offload);
    mem.set("nvme_paths", Json::array(paths));
    mem.set("nvme_masters", s.nvme.masters);
    mem.set("nvme_window", s.nvme.window);
    mem.set("nvme_io_threads", s.nvme.io_threads);
    if (s.nvme.grad_window > 0) mem.set("nvme_grad_window", s.nvme.grad_window);
    if (s.nvme_gbps > 0) mem.set("nvme_gbps", s.nvme_gbps);
    j.set("memory", mem);
  }
  if (s.logging.tensorboard) j.set("logging", Json::object({{"tensorboard", true}}));
  if (s.checkpoint.keep_best) {  // absent when false, as before the field existed
    Json ck = *j.find("checkpoint");
    ck.set("keep_best", true);
    j.set("checkpoint", ck);
  }
  if (s.eval.enabled)
    j.set("eval", Json::object({{"data", data_json(s.eval.data)},
                                {"every", int64_t(s.eval.every)},
                                {"max_tokens", int64_t(s.eval.max_tokens)}}));
  return j;
}

Json job_spec_hashed_json(const JobSpec& s) {
  // Fields that change the trajectory; name, steps, checkpoint policy and executor do not, nor
  // (beyond fp32 rounding) how the run is spread over devices and processes, so a checkpoint
  // resumes on another count. Those are not in the trajectory JSON at all; "devices" and
  // "comm_timeout_seconds" are nulled here only so that hashes stay what they were.
  JobSpec canonical = s;  // an unset jsonl tokenizer is byte (the only model it runs): hashed as before
  if (canonical.data.tokenizer.empty()) canonical.data.tokenizer = "byte";  // eval is not hashed
  Json j = job_spec_trajectory_json(canonical);
  for (const char* k : {"name", "steps", "checkpoint", "executor", "slots", "link_gbps", "checkpoint_placement", "backend",
                        "devices", "comm_timeout_seconds"})
    j.set(k, Json());
  return j;
}

namespace {
void collect_differences(const Json& was, const Json& now, const std::string& at, std::vector<std::string>& out) {
  if (was.is_object() && now.is_object()) {
    for (const auto& [k, v] : was.members()) {
      const Json* n = now.find(k);
      collect_differences(v, n ? *n : Json(), at.empty() ? k : at + "." + k, out);
    }
    for (const auto& [k, v] : now.members())
      if (!was.find(k)) collect_differences(Json(), v, at.empty() ? k : at + "." + k, out);
    return;
  }
  if (was.is_number() && now.is_number() && was.as_double() == now.as_double()) return;  // 8.0 is 8
  const std::string a = was.dump(), b = now.dump();
  if (a != b) out.push_back(at + " " + a + " -> " + b);
}
}  // namespace

std::string spec_differences(const Json& was, const Json& now, size_t max) {
  std::vector<std::string> diffs;
  collect_differences(was, now, "", diffs);
  std::string out;
  for (size_t i = 0; i < diffs.size() && i < max; ++i) out += (i ? ", " : "") + diffs[i];
  if (diffs.size() > max) out += ", and " + std::to_string(diffs.size() - max) + " more";
  return out;
}

std::string job_spec_hash(const JobSpec& s) {
  const std::string text = job_spec_hashed_json(s).dump();
  uint64_t h = 0;
  for (size_t i = 0; i < text.size(); i += 8) {
    uint64_t w = 0;
    for (size_t k = 0; k < 8 && i + k < text.size(); ++k) w |= uint64_t(uint8_t(text[i + k])) << (8 * k);
    h = mix64(h ^ w);
  }
  return hex64(h);
}

}  // namespace mt
