// CudnnAttention (attention_cudnn.cuh) on the cuDNN frontend's graph API: the SDPA forward with
// its statistics and the deterministic SDPA backward, one cached pair of graphs per shape. What
// needs the library (a handle, building and running a graph) goes through cudnn_runtime.h.
#include "kernels/cuda/attention_cudnn.cuh"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "kernels/cuda/attention_ragged.h"
#include "kernels/cuda/cudnn_runtime.h"

namespace mt::cuda {
namespace {

namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// Tensor uids of the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKV, kOffQkv, kOffOut, kOffLse };

// What a graph depends on. Dense: b = B, s = T (T: the lse's head stride). Ragged (one row's
// documents): b and s are the bucketed document count and longest document, T the row length
// (the backward's maximum total of tokens).
struct Key {
  int b, s, T, H, KVH, D;
  bool ragged;
  int window = 0;     // keys per query's band (AttentionOptions::window), 0 = none
  double scale = 0;   // 0 = 1/sqrt(D)
  auto tie() const { return std::tie(b, s, T, H, KVH, D, ragged, window, scale); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

std::atomic<uint64_t> calls{0};
std::atomic<uint64_t> builds{0}, build_nanos{0};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A call's ragged index arrays for a batch of b documents: the lengths, then three offset
// arrays, each on a 16-byte boundary (the frontend declares every tensor 16-byte aligned).
struct MetaLayout {
  size_t seq_bytes, off_bytes;
  explicit MetaLayout(int b)
      : seq_bytes(round_up(size_t(b) * sizeof(int32_t), 16)), off_bytes(round_up(size_t(b + 1) * sizeof(int64_t), 16)) {}
  size_t bytes() const { return round_up(seq_bytes + 3 * off_bytes, 256); }
};
size_t meta_bytes(int b) { return MetaLayout(b).bytes(); }

// The views of one graph: qkv rows [q (H*D) | k (KVH*D) | v (KVH*D)], out rows (H*D), and the
// statistics: dense, our lse [B, H, T] (packed BHSD, which cuDNN < 9.26 requires of a non-ragged
// Stats input); ragged, token-major (attention_ragged.h: stats_index).
struct Views {
  const Key& k;
  int64_t row() const { return int64_t(k.H + 2 * k.KVH) * k.D; }
  int64_t orow() const { return int64_t(k.H) * k.D; }
  std::vector<int64_t> qkv_dim(int heads) const { return {k.b, heads, k.s, k.D}; }
  std::vector<int64_t> qkv_stride() const { return {k.s * row(), k.D, row(), 1}; }
  std::vector<int64_t> out_dim() const { return {k.b, k.H, k.s, k.D}; }
  std::vector<int64_t> out_stride() const { return {k.s * orow(), k.D, orow(), 1}; }
  std::vector<int64_t> lse_dim() const { return {k.b, k.H, k.s, 1}; }
  std::vector<int64_t> lse_stride() const {
    if (k.ragged) return {int64_t(k.H) * k.s, 1, k.H, 1};
    return {int64_t(k.H) * k.T, k.T, 1, 1};
  }
};

fe::graph::Tensor_attributes attrs(const char* name, Uid uid, std::vector<int64_t> dim, std::vector<int64_t> stride) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride));
}

// The ragged inputs of a graph: per-document lengths and the three offset arrays.
struct Ragged {
  Tensor seq_q, seq_kv, off_qkv, off_out, off_lse;
};
Ragged ragged_inputs(fe::graph::Graph& g, const Key& k) {
  auto index = [&](const char* name, Uid uid, int64_t n, fe::DataType_t t) {
    return g.tensor(attrs(name, uid, {n, 1, 1, 1}, {1, 1, 1, 1}).set_data_type(t));
  };
  return {index("seq_q", kSeqQ, k.b, fe::DataType_t::INT32), index("seq_kv", kSeqKV, k.b, fe::DataType_t::INT32),
          index("off_qkv", kOffQkv, k.b + 1, fe::DataType_t::INT64),
          index("off_out", kOffOut, k.b + 1, fe::DataType_t::INT64),
          index("off_lse", kOffLse, k.b + 1, fe::DataType_t::INT64)};
}

// sm: the compute capability the frontend checks the graph for (its nodes copy the graph's
// context when added); 0 asks the current device.
std::shared_ptr<fe::graph::Graph> new_graph(int sm) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm > 0) g->set_sm_version(sm);
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float scale_of(const Key& k) { return float(k.scale > 0 ? k.scale : 1.0 / std::sqrt(double(k.D))); }

// Causal, and with a window of W keys the band's left bound W (the diagonal counted, as
// transformers' sliding window and TransformerEngine's window_size_left + 1).
template <typename Attributes>
void set_mask(Attributes& opt, const Key& k) {
  opt.set_causal_mask(true);
  if (k.window > 0) opt.set_diagonal_band_left_bound(k.window);
}

// Q, K and V of a graph: views of the fused qkv rows, the same in the forward and the backward.
struct Qkv {
  Tensor q, k, v;
};
Qkv qkv_inputs(fe::graph::Graph& g, const Views& v) {
  return {g.tensor(attrs("Q", kQ, v.qkv_dim(v.k.H), v.qkv_stride())),
          g.tensor(attrs("K", kK, v.qkv_dim(v.k.KVH), v.qkv_stride())),
          g.tensor(attrs("V", kV, v.qkv_dim(v.k.KVH), v.qkv_stride()))};
}

std::shared_ptr<fe::graph::Graph> forward_graph(const Key& k, int sm = 0,
                                                CudnnGraphFault fault = CudnnGraphFault::kNone) {
  const Views v{k};
  auto g = new_graph(sm);
  auto [Q, K, V] = qkv_inputs(*g, v);
  auto opt = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(scale_of(k));
  set_mask(opt, k);
  Ragged r;
  if (k.ragged) {
    r = ragged_inputs(*g, k);
    for (const Tensor& t : {Q, K, V}) t->set_ragged_offset(r.off_qkv);
    opt.set_padding_mask(true).set_seq_len_q(r.seq_q).set_seq_len_kv(r.seq_kv);
  }
  auto [O, Stats] = g->sdpa(Q, K, V, opt);
  O->set_output(true).set_uid(kO).set_dim(v.out_dim()).set_stride(v.out_stride());
  if (fault == CudnnGraphFault::kOutputRows) O->set_dim({k.b, k.H, k.s + 1, k.D});
  Stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(v.lse_dim()).set_stride(v.lse_stride());
  if (k.ragged) O->set_ragged_offset(r.off_out), Stats->set_ragged_offset(r.off_lse);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Key& k, int sm = 0) {
  const Views v{k};
  auto g = new_graph(sm);
  auto [Q, K, V] = qkv_inputs(*g, v);
  auto O = g->tensor(attrs("O", kO, v.out_dim(), v.out_stride()));
  auto dO = g->tensor(attrs("dO", kDO, v.out_dim(), v.out_stride()));
  auto Stats = g->tensor(attrs("Stats", kStats, v.lse_dim(), v.lse_stride()).set_data_type(fe::DataType_t::FLOAT));
  auto opt = fe::graph::SDPA_backward_attributes()
                 .set_name("attention_backward")
                 .set_attn_scale(scale_of(k))
                 .set_deterministic_algorithm(true);
  set_mask(opt, k);
  Ragged r;
  if (k.ragged) {
    r = ragged_inputs(*g, k);
    for (const Tensor& t : {Q, K, V}) t->set_ragged_offset(r.off_qkv);
    for (const Tensor& t : {O, dO}) t->set_ragged_offset(r.off_out);
    Stats->set_ragged_offset(r.off_lse);
    // Workspaces sized by the row's tokens rather than b x s (attention_cudnn.cuh).
    opt.set_padding_mask(true).set_seq_len_q(r.seq_q).set_seq_len_kv(r.seq_kv).set_max_total_seq_len_q(k.T)
        .set_max_total_seq_len_kv(k.T);
  }
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opt);
  dQ->set_output(true).set_uid(kDQ).set_dim(v.qkv_dim(k.H)).set_stride(v.qkv_stride());
  dK->set_output(true).set_uid(kDK).set_dim(v.qkv_dim(k.KVH)).set_stride(v.qkv_stride());
  dV->set_output(true).set_uid(kDV).set_dim(v.qkv_dim(k.KVH)).set_stride(v.qkv_stride());
  if (k.ragged)
    for (const Tensor& t : {dQ, dK, dV}) t->set_ragged_offset(r.off_qkv);
  return g;
}

std::string version_string(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

struct CudnnAttention::Impl {
  struct Plans {
    std::shared_ptr<fe::graph::Graph> fwd, bwd;
    int64_t workspace = 0;  // the larger of the two graphs' workspaces
    std::string refused;    // empty when both built
  };
  cudnn_runtime::Handle* handle = nullptr;
  char* workspace = nullptr;
  size_t workspace_bytes = 0;
  size_t used = 0;
  bool pad_documents = false;  // packed rows' batching (cudnn_pads_documents), fixed at create
  std::map<Key, Plans> plans;
  std::string error;  // the last failure's message (CudaStatus::call points here)

  ~Impl() {
    plans.clear();  // the graphs were built with the handle: released first, as the frontend's samples do
    cudnn_runtime::destroy(handle);
  }

  const Plans& plans_for(const Key& k) {
    auto it = plans.find(k);
    if (it != plans.end()) return it->second;
    Plans p;
    fe::error_t e;
    int64_t wf = 0, wb = 0;
    const auto t0 = std::chrono::steady_clock::now();
    try {  // Graph::sdpa throws when no implementation fits the shape (a cuDNN version that has none)
      p.fwd = forward_graph(k);
      p.bwd = backward_graph(k);
      e = cudnn_runtime::build(*p.fwd, handle);
      if (e.is_good()) e = cudnn_runtime::build(*p.bwd, handle);
      if (e.is_good()) e = cudnn_runtime::workspace_size(*p.fwd, wf);
      if (e.is_good()) e = cudnn_runtime::workspace_size(*p.bwd, wb);
    } catch (const std::exception& x) {
      e = {fe::error_code_t::GRAPH_NOT_SUPPORTED, x.what()};
    }
    builds.fetch_add(1);
    build_nanos.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - t0).count()));
    p.workspace = (std::max(wf, wb) + 255) / 256 * 256;  // the ragged arrays follow, aligned
    if (!e.is_good()) p.refused = "cuDNN cannot run this attention: " + e.get_message();
    return plans.emplace(k, std::move(p)).first->second;
  }

  CudaStatus fail(const std::string& what, fe::error_t e) {
    error = what + ": " + e.get_message();
    return {error.c_str(), int(cudaErrorNotSupported), false};
  }

  // Runs `graph` with `pack` and the graph's workspace `ws` on `stream`.
  CudaStatus run(const char* what, fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& pack, char* ws,
                 cudaStream_t stream) {
    fe::error_t e = cudnn_runtime::execute(graph, handle, pack, ws, stream);
    return e.is_good() ? CudaStatus{} : fail(what, e);
  }
};

namespace {

using Impl = CudnnAttention::Impl;

// The rows a call runs as: one dense graph, or one ragged graph per row (attention_ragged.h).
struct RowCall {
  Key key;
  int row, first, count;  // row b (-1: the dense call), its documents starts[first .. first + count)
};
std::vector<RowCall> row_calls(const AttentionShape& s, const DocumentSpans* docs, bool pad) {
  if (!docs) return {{Key{s.B, s.T, s.T, s.H, s.KVH, s.D, false, s.opt.window, s.opt.scale}, -1, 0, 0}};
  std::vector<RowCall> calls;
  for (const ragged::RowCall& r : ragged::row_calls(s.B, s.T, *docs, pad))
    calls.push_back({Key{r.batch, r.seq, s.T, s.H, s.KVH, s.D, true, s.opt.window, s.opt.scale}, r.row, r.first, r.count});
  return calls;
}

// The caller's workspace, carved per call: packed rows' token-major statistics first (the whole
// micro-batch's, at one place for every row call and the transposes), then the graph's own
// workspace, then (ragged calls) the index arrays.
size_t stats_bytes(const AttentionShape& s, const DocumentSpans* docs) {
  return docs ? round_up(size_t(s.B) * size_t(s.T) * size_t(s.H) * sizeof(float), 256) : 0;
}
struct Carved {
  float* stats;  // nullptr for the dense call
  char* graph;
};
Carved carve(Impl& im, const AttentionShape& s, const DocumentSpans* docs) {
  return {docs ? reinterpret_cast<float*>(im.workspace) : nullptr, im.workspace + stats_bytes(s, docs)};
}

// The pack entries of a ragged row call: writes its index arrays after the graph's workspace.
CudaStatus ragged_pack(Impl& im, const RowCall& c, const AttentionShape& s, const DocumentSpans& docs, char* graph_ws,
                       std::unordered_map<int64_t, void*>& pack, cudaStream_t stream) {
  char* meta = graph_ws + im.plans_for(c.key).workspace;
  const MetaLayout m(c.key.b);
  auto* seq = reinterpret_cast<int32_t*>(meta);
  int64_t* off[3];
  for (int j = 0; j < 3; ++j) off[j] = reinterpret_cast<int64_t*>(meta + m.seq_bytes + size_t(j) * m.off_bytes);
  MT_CUDA_TRY(cudnn_ragged_meta(seq, off[0], off[1], off[2], docs.device_starts, c.first, c.count, c.key.b, c.row, s,
                                stream));
  pack[kSeqQ] = seq;
  pack[kSeqKV] = seq;
  pack[kOffQkv] = off[0];
  pack[kOffOut] = off[1];
  pack[kOffLse] = off[2];
  return {};
}

// The three views of fused qkv rows starting at `base` (Q, K, V or dQ, dK, dV) under their uids.
void put_qkv(std::unordered_map<int64_t, void*>& pack, const __nv_bfloat16* base, const AttentionShape& s, Uid q,
             Uid k, Uid v) {
  auto* b = const_cast<__nv_bfloat16*>(base);
  pack[q] = b;
  pack[k] = b + int64_t(s.H) * s.D;
  pack[v] = b + int64_t(s.H + s.KVH) * s.D;
}

// Element offsets of the call's first token in qkv, out and the statistics (the dense call's are 0).
ragged::RowBase row_base(const RowCall& c, const AttentionShape& s) {
  return c.row < 0 ? ragged::RowBase{0, 0, 0} : ragged::row_base(c.row, {s.T, s.H, s.KVH, s.D});
}

}  // namespace

bool cudnn_built() { return true; }

uint64_t cudnn_attention_calls() { return calls.load(); }

CudnnGraphBuilds cudnn_graph_builds() { return {builds.load(), double(build_nanos.load()) * 1e-9}; }

size_t cudnn_runtime_version() { return cudnnGetVersion(); }

namespace {
// MEGATRAIN_CUDNN_PAD_DOCUMENTS: "0" or "1" forces the batching of packed rows; else unset.
std::optional<bool> forced_padding() {
  const char* v = std::getenv("MEGATRAIN_CUDNN_PAD_DOCUMENTS");
  if (v && std::string(v) == "0") return false;
  if (v && std::string(v) == "1") return true;
  return std::nullopt;
}
}  // namespace

bool cudnn_pads_documents() { return forced_padding().value_or(cudnnGetVersion() >= 92500); }

std::string cudnn_describe() {
  const std::string batching = cudnn_pads_documents() ? "padded with empty documents to powers of two"
                                                      : "of exactly their documents, powers of two (no empty ones before 9.25)";
  return "cuDNN " + version_string(cudnnGetVersion()) + " (built against " + version_string(CUDNN_VERSION) +
         ", frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION) +
         "; packed rows in batches " + batching + (forced_padding() ? ", forced by MEGATRAIN_CUDNN_PAD_DOCUMENTS" : "") +
         ")";
}

namespace {
// dP of the deterministic backward (cuDNN < 9.25 on sm_90): the dense call's B rows, or one
// ragged call's (at most a dense row's, ragged::row_calls), reserved twice since the frontend's
// count is a lower bound for ragged layouts. Past kMaxDp nothing is reserved: cuDNN refuses
// those lengths and our own kernels run them.
constexpr uint64_t kMaxDp = uint64_t(48) << 30;
uint64_t dp_bytes(int B, int T, int H) {
  return uint64_t(std::max(B, 2)) * uint64_t(H) * uint64_t(ragged::dp_elems(1, T)) * sizeof(__nv_bfloat16);
}
}  // namespace

bool cudnn_dp_past_reservation(int B, int T, int H) { return dp_bytes(B, T, H) > kMaxDp; }

size_t cudnn_attention_workspace_bytes(int B, int T, int H, int KVH, int D) {
  const uint64_t tokens = uint64_t(B) * uint64_t(T), qd = tokens * uint64_t(H) * uint64_t(D);
  uint64_t dp = dp_bytes(B, T, H);
  if (dp > kMaxDp) dp = 0;
  // GQA's dK and dV over every query head, summed by cuDNN: the dense call's are virtual [B, H,
  // T, D] (counted as fp32); a ragged call's are the frontend's THD buffers at dK's strides times
  // H / KVH (with max_total_seq_len_kv = T: T fused qkv rows times H / KVH, fp32).
  const uint64_t row = uint64_t(H + 2 * KVH) * uint64_t(D);
  const uint64_t full_heads =
      KVH < H ? 2 * std::max(qd, uint64_t(T) * row * uint64_t(H / KVH)) * sizeof(float) : 0;
  // The fp32 dQ accumulator of a non-deterministic or ordered-dQ backward, and the softmax sums.
  const uint64_t dq_accum = qd * sizeof(float), sums = 2 * tokens * uint64_t(H) * sizeof(float);
  // Packed rows' token-major statistics (stats_bytes), at the workspace's start.
  const uint64_t stats = round_up(tokens * uint64_t(H) * sizeof(float), 256);
  const uint64_t meta = meta_bytes(ragged::pow2_at_least(std::max(T, 1)));
  return size_t(dp + full_heads + dq_accum + sums + stats + meta + (uint64_t(64) << 20));
}

namespace {
// validate(), then the lowering build_operation_graph does before any engine is asked: the
// composite SDPA node expanded (masks, softmax, GQA's full-head dK/dV, the backward's softmax
// sums) and every backend tensor, operation and the operation graph finalized by libcudnn.
// From cuDNN 9.8 an operation graph takes no handle, so none of it needs a device (the next
// step, the engines' heuristics, does); an older library gets validate() only.
std::string validate_and_lower(fe::graph::Graph& g) {
  if (auto e = g.validate(); !e.is_good()) return e.get_message();
  if (CUDNN_VERSION < 90800 || cudnnGetVersion() < 90800) return "";
  fe::error_t e = g.build_operation_graph(nullptr);
  return e.is_good() ? "" : "lowering (build_operation_graph without a handle): " + e.get_message();
}
}  // namespace

std::string cudnn_validate_graphs(const AttentionShape& s, const DocumentSpans* docs, int sm, bool pad_documents,
                                  CudnnGraphFault fault) {
  try {
    for (const RowCall& c : row_calls(s, docs, pad_documents))
      for (const auto& g : {forward_graph(c.key, sm, fault), backward_graph(c.key, sm)})
        if (std::string why = validate_and_lower(*g); !why.empty()) return why;
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

namespace {
std::string graph_name(const char* pass, const Key& k) {
  return std::string(pass) + " b=" + std::to_string(k.b) + " s=" + std::to_string(k.s) + " T=" + std::to_string(k.T) +
         " H=" + std::to_string(k.H) + "/" + std::to_string(k.KVH) + " D=" + std::to_string(k.D) +
         (k.ragged ? " ragged" : " dense") + (k.window ? " window=" + std::to_string(k.window) : "");
}

// Lowered for the described device (no handle), then cuDNN's heuristics and check_support:
// the steps CudnnAttention's build takes (cudnn_runtime::build) but its last, build_plans.
CudnnEngineCheck check_engines(fe::graph::Graph& g, const std::shared_ptr<fe::DeviceProperties>& device) {
  CudnnEngineCheck r;
  g.set_device_properties(device);
  fe::error_t e = g.validate();
  if (e.is_good()) e = g.build_operation_graph();
  if (!e.is_good()) {
    r.refused = "lowering: " + e.get_message();
    return r;
  }
  e = g.create_execution_plans({fe::HeurMode_t::A});
  if (!e.is_good()) {
    const bool no_driver = e.get_message().find("libcuda == nullptr") != std::string::npos;
    r.refused = std::string(no_driver ? "no libcuda.so.1 (the driver or the CUDA toolkit's stub), so no "
                                        "runtime-compiled engine; " : "") + "heuristics: " + e.get_message();
    return r;
  }
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i)
    if (std::string name; g.get_plan_name_at_index(i, name).is_good()) r.engines.push_back(name);
  e = g.check_support();
  if (!e.is_good()) r.refused = "check_support: " + e.get_message();
  return r;
}
}  // namespace

std::string cudnn_check_engines(const AttentionShape& s, const DocumentSpans* docs, int sm, bool pad_documents,
                                const std::string& device_json, std::map<std::string, CudnnEngineCheck>& checked) {
  if (CUDNN_VERSION < 91100 || cudnnGetVersion() < 91100)
    return "cuDNN " + version_string(cudnnGetVersion()) + ": deviceless heuristics need cuDNN >= 9.11";
  auto device = std::make_shared<fe::DeviceProperties>();
  if (fe::error_t e = device->deserialize(std::vector<uint8_t>(device_json.begin(), device_json.end())); !e.is_good())
    return "the device description: " + e.get_message();
  std::string first;
  try {
    for (const RowCall& c : row_calls(s, docs, pad_documents))
      for (const char* pass : {"forward", "backward"}) {
        const std::string name = graph_name(pass, c.key);
        if (checked.count(name)) continue;
        auto g = pass[0] == 'f' ? forward_graph(c.key, sm) : backward_graph(c.key, sm);
        const CudnnEngineCheck& r = checked[name] = check_engines(*g, device);
        if (first.empty() && !r.refused.empty()) first = name + ": " + r.refused;
      }
  } catch (const std::exception& x) {
    return x.what();
  }
  return first;
}

std::string cudnn_describe_device(int device, std::string& json) {
  if (CUDNN_VERSION < 91100 || cudnnGetVersion() < 91100)
    return "cuDNN " + version_string(cudnnGetVersion()) + ": device properties serialize from cuDNN 9.11";
  fe::DeviceProperties p;
  fe::error_t e = p.set_device_id(device).build();
  std::vector<uint8_t> bytes;
  if (e.is_good()) e = p.serialize(bytes);
  if (!e.is_good()) return "cudnn_frontend::DeviceProperties of device " + std::to_string(device) + ": " + e.get_message();
  json.assign(bytes.begin(), bytes.end());
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return "";
}

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

CudaStatus CudnnAttention::create(std::unique_ptr<CudnnAttention>& out, void* workspace, size_t workspace_bytes,
                                  std::optional<bool> pad_documents) {
  // A CudaStatus holds a C string: the refusal lives in this thread's storage (data-parallel
  // backends are created on several threads at once; a shared static raced).
  thread_local std::string refusal;
  if (cudnnGetVersion() < CUDNN_VERSION) {
    refusal = "cuDNN runtime " + version_string(cudnnGetVersion()) + " is older than the headers it was built with (" +
              version_string(CUDNN_VERSION) + "): put cuDNN >= " + version_string(CUDNN_VERSION) +
              " first on LD_LIBRARY_PATH";
    return {refusal.c_str(), int(cudaErrorInsufficientDriver), false};
  }
  auto impl = std::make_unique<Impl>();
  std::string why;
  impl->handle = cudnn_runtime::create(why);
  if (!impl->handle) {
    refusal = "cudnnCreate: " + why;
    return {refusal.c_str(), int(cudaErrorInitializationError), false};
  }
  impl->workspace = static_cast<char*>(workspace);
  impl->workspace_bytes = workspace_bytes;
  impl->pad_documents = pad_documents.value_or(cudnn_pads_documents());
  out.reset(new CudnnAttention(std::move(impl)));
  return {};
}

bool CudnnAttention::supports(const AttentionShape& s, const DocumentSpans* docs, std::string* why) {
  auto refuse = [&](std::string r) {
    if (why) *why = std::move(r);
    return false;
  };
  if (s.B <= 0 || s.T <= 0 || s.KVH <= 0 || s.H % s.KVH) return refuse("cuDNN attention: bad head geometry");
  if (s.D % 8) return refuse("cuDNN attention needs head_dim a multiple of 8, not " + std::to_string(s.D));
  if (s.opt.softcap > 0) return refuse("cuDNN's SDPA has no score soft-capping (Gemma 2): our own kernel runs it");
  if (docs && (docs->count < s.B || !docs->starts || !docs->device_starts))
    return refuse("cuDNN attention: the documents are not spans of every row");
  // Each packed row's statistics start at row x heads x seq_len floats: cuDNN takes every tensor
  // as 16-byte aligned and checks it for Q/K/V/O only (a misaligned one computes wrong on sm_90).
  if (docs && (int64_t(s.H) * s.T) % 4)
    return refuse("cuDNN attention of packed documents needs heads x seq_len a multiple of 4 (16-byte aligned "
                  "statistics per row), not " + std::to_string(s.H) + " x " + std::to_string(s.T));
  const size_t stats = stats_bytes(s, docs);
  for (const RowCall& c : row_calls(s, docs, impl_->pad_documents)) {
    const Impl::Plans& p = impl_->plans_for(c.key);
    if (!p.refused.empty()) return refuse(p.refused);
    const size_t need = stats + size_t(p.workspace) + (c.key.ragged ? meta_bytes(c.key.b) : 0);
    if (need > impl_->workspace_bytes)
      return refuse("cuDNN attention wants " + std::to_string(need) + " bytes of workspace (" + std::to_string(stats) +
                    " of them token-major statistics), beyond the " + std::to_string(impl_->workspace_bytes) +
                    " reserved");
    impl_->used = std::max(impl_->used, need);
  }
  return true;
}

CudaStatus CudnnAttention::forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& s,
                                   const DocumentSpans* docs, cudaStream_t stream) {
  Impl& im = *impl_;
  const Carved ws = carve(im, s, docs);
  for (const RowCall& c : row_calls(s, docs, im.pad_documents)) {
    const ragged::RowBase at = row_base(c, s);
    std::unordered_map<int64_t, void*> pack = {{kO, out + at.out}, {kStats, (docs ? ws.stats : lse) + at.lse}};
    put_qkv(pack, qkv + at.qkv, s, kQ, kK, kV);
    if (docs) MT_CUDA_TRY(ragged_pack(im, c, s, *docs, ws.graph, pack, stream));
    MT_CUDA_TRY(im.run("cuDNN SDPA forward", *im.plans_for(c.key).fwd, pack, ws.graph, stream));
  }
  if (docs) MT_CUDA_TRY(cudnn_stats_to_head_major(lse, ws.stats, s.B, s.T, s.H, stream));
  calls.fetch_add(1);
  return {};
}

CudaStatus CudnnAttention::backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                    const __nv_bfloat16* out, const float* lse, const AttentionShape& s,
                                    const DocumentSpans* docs, cudaStream_t stream) {
  Impl& im = *impl_;
  const Carved ws = carve(im, s, docs);
  if (docs) MT_CUDA_TRY(cudnn_stats_to_token_major(ws.stats, lse, s.B, s.T, s.H, stream));
  float* stats = docs ? ws.stats : const_cast<float*>(lse);
  for (const RowCall& c : row_calls(s, docs, im.pad_documents)) {
    const ragged::RowBase at = row_base(c, s);
    std::unordered_map<int64_t, void*> pack = {{kO, const_cast<__nv_bfloat16*>(out) + at.out},
                                               {kDO, const_cast<__nv_bfloat16*>(dout) + at.out},
                                               {kStats, stats + at.lse}};
    put_qkv(pack, qkv + at.qkv, s, kQ, kK, kV);
    put_qkv(pack, dqkv + at.qkv, s, kDQ, kDK, kDV);
    if (docs) MT_CUDA_TRY(ragged_pack(im, c, s, *docs, ws.graph, pack, stream));
    MT_CUDA_TRY(im.run("cuDNN SDPA backward", *im.plans_for(c.key).bwd, pack, ws.graph, stream));
  }
  calls.fetch_add(1);
  return {};
}

size_t CudnnAttention::workspace_used() const { return impl_->used; }
bool CudnnAttention::pads_documents() const { return impl_->pad_documents; }

}  // namespace mt::cuda
