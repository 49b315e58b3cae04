// cuDNN on the emulated device (kernels/cuda/cudnn_runtime.h): CudnnAttention's graphs are
// validated by the frontend (for the emulated sm_90) and run by a reference interpreter of the
// frontend's own description of them (Graph::serialize: the SDPA node's attributes and every
// tensor's dims, strides and ragged offsets, as cuDNN receives them), enqueued on the call's
// stream like a kernel. So the cuDNN path's plumbing — the variant packs, the row calls, the
// ragged index arrays and their place in the workspace, the op table's dispatch, the streaming
// executor's use of it — runs on a machine without a GPU, against the CPU reference. It rounds
// where cuDNN's flash attention does (P to bf16 before P @ V and P^T @ dO, dS to bf16 before
// dS @ K and dS^T @ Q; fp32 sums and statistics), so the tests' tolerances meet that rounding
// here before a lease. What this does not check is cuDNN itself: its engines, its workspace
// sizes (reported as 0), the order of its sums. An attribute it does not model (bias, dropout,
// ALiBi, bottom-right alignment) is refused, never ignored.
#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/cudnn_runtime.h"
#include "tests/cuda_emu/streams.h"

namespace mt::cuda::cudnn_runtime {

struct Handle {};

Handle* create(std::string&) { return new Handle; }
void destroy(Handle* h) { delete h; }
fe::error_t build(fe::graph::Graph& g, Handle*) { return g.validate(); }
fe::error_t workspace_size(fe::graph::Graph&, int64_t& bytes) {
  bytes = 0;
  return {fe::error_code_t::OK, ""};
}

namespace {

using json = nlohmann::json;

// One tensor of the graph bound to its device memory: element (b, h, s, d) of a [b, h, s, d] view.
struct View {
  char* base = nullptr;
  bool fp32 = false;
  int64_t dim[4] = {}, stride[4] = {};
  const int64_t* ragged = nullptr;  // per-b element offsets, replacing the batch stride
  int64_t at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return (ragged ? ragged[b] : b * stride[0]) + h * stride[1] + s * stride[2] + d * stride[3];
  }
  float get(int64_t i) const {
    if (fp32) return reinterpret_cast<const float*>(base)[i];
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(base)[i]);
  }
  void put(int64_t i, float v) const {
    if (fp32) reinterpret_cast<float*>(base)[i] = v;
    else reinterpret_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(v);
  }
};

// The SDPA node's semantics, from its JSON.
struct Sdpa {
  bool backward = false;
  float scale = 1;
  bool causal = false;        // right_bound 0, top-left aligned: key j <= query i
  int64_t left_bound = 0;     // > 0: key j > i - left_bound
  bool padding = false;
  const int32_t* seq_q = nullptr;
  const int32_t* seq_kv = nullptr;
  View q, k, v, o, stats, dout, dq, dk, dv;
  bool allowed(int64_t i, int64_t j) const {
    return (!causal || j <= i) && (left_bound <= 0 || i - j < left_bound);
  }
};

float bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

fe::error_t refuse(const std::string& why) {
  return {fe::error_code_t::GRAPH_NOT_SUPPORTED, "emulated cuDNN: " + why};
}

// Binds tensor `uid` of the graph to its pointer in the pack (and its ragged offsets').
fe::error_t bind_tensor(const json& g, int64_t uid, std::unordered_map<int64_t, void*>& pack, View& out) {
  for (const json& t : g["tensors"]) {
    if (t["uid"].get<int64_t>() != uid) continue;
    if (!pack.count(uid)) return refuse("tensor " + std::to_string(uid) + " has no pointer in the pack");
    out.base = static_cast<char*>(pack[uid]);
    out.fp32 = t["data_type"].is_string() && t["data_type"] == "FLOAT";
    if (t["dim"].size() != 4) return refuse("a tensor of " + std::to_string(t["dim"].size()) + " dims");
    for (int i = 0; i < 4; ++i) out.dim[i] = t["dim"][i], out.stride[i] = t["stride"][i];
    if (t.contains("ragged_offset_uid") && !t["ragged_offset_uid"].is_null()) {
      const int64_t r = t["ragged_offset_uid"];
      if (!pack.count(r)) return refuse("ragged offsets " + std::to_string(r) + " have no pointer");
      out.ragged = static_cast<const int64_t*>(pack[r]);
    }
    return {fe::error_code_t::OK, ""};
  }
  return refuse("no tensor of uid " + std::to_string(uid));
}

// The SDPA node's scale, mask and statistics; what it does not model is refused.
fe::error_t describe_node(const json& n, Sdpa& a) {
  a.backward = n["tag"] == "SDPA_BWD";
  if (!a.backward && n["tag"] != "SDPA") return refuse("a " + n["tag"].get<std::string>() + " node");
  if (n.value("alibi_mask", false) || !n["dropout_probability"].is_null()) return refuse("ALiBi or dropout");
  if (n.value("stats_use_log2", false)) return refuse("statistics in log2");
  if (n["diagonal_alignment"] != "TOP_LEFT") return refuse("diagonal alignment other than top-left");
  if (!n["attn_scale_value"].is_string()) return refuse("a scale that is not a value");
  const uint32_t bits = uint32_t(std::stoul(n["attn_scale_value"].get<std::string>(), nullptr, 16));
  std::memcpy(&a.scale, &bits, sizeof bits);
  if (!n["right_bound"].is_null()) {
    if (n["right_bound"] != 0) return refuse("a right bound other than 0");
    a.causal = true;
  }
  if (!n["left_bound"].is_null()) a.left_bound = n["left_bound"];
  a.padding = n.value("padding_mask", false);
  return {fe::error_code_t::OK, ""};
}

// The node and its tensors, bound to the pack's pointers.
fe::error_t describe(const json& g, std::unordered_map<int64_t, void*>& pack, Sdpa& a) {
  if (g["context"]["io_data_type"] != "BFLOAT16") return refuse("inputs and outputs other than bf16");
  if (g["nodes"].size() != 1) return refuse("a graph of " + std::to_string(g["nodes"].size()) + " nodes");
  const json& n = g["nodes"][0];
  if (auto e = describe_node(n, a); !e.is_good()) return e;
  const json& in = n["inputs"];
  const json& out = n["outputs"];
  static const std::set<std::string> kModelled = {"Q", "K", "V", "O", "dO", "Stats", "SEQ_LEN_Q", "SEQ_LEN_KV"};
  for (const auto& [name, uid] : in.items())
    if (!kModelled.count(name)) return refuse("input " + name);
  if (a.padding) {
    if (!in.contains("SEQ_LEN_Q") || !in.contains("SEQ_LEN_KV")) return refuse("a padding mask without lengths");
    a.seq_q = static_cast<const int32_t*>(pack.at(in["SEQ_LEN_Q"].get<int64_t>()));
    a.seq_kv = static_cast<const int32_t*>(pack.at(in["SEQ_LEN_KV"].get<int64_t>()));
  }
  fe::error_t e{fe::error_code_t::OK, ""};
  auto take = [&](const json& ports, const char* port, View& v) {
    if (!e.is_good()) return;
    e = ports.contains(port) ? bind_tensor(g, ports[port], pack, v) : refuse(std::string("no ") + port);
  };
  take(in, "Q", a.q), take(in, "K", a.k), take(in, "V", a.v);
  if (a.backward) {
    take(in, "O", a.o), take(in, "dO", a.dout), take(in, "Stats", a.stats);
    take(out, "dQ", a.dq), take(out, "dK", a.dk), take(out, "dV", a.dv);
  } else {
    take(out, "O", a.o), take(out, "Stats", a.stats);
  }
  return e;
}

// Rows [0, n) of head h of batch entry b, as floats, row after row: [n][D].
std::vector<float> load(const View& t, int64_t b, int64_t h, int64_t n) {
  const int64_t D = t.dim[3];
  std::vector<float> x(static_cast<size_t>(n * D));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) x[size_t(i * D + d)] = t.get(t.at(b, h, i, d));
  return x;
}
// x (rows of D) times `scale` into head h of batch entry b.
void store(const View& t, int64_t b, int64_t h, const std::vector<float>& x, float scale = 1) {
  const int64_t D = t.dim[3];
  for (size_t e = 0; e < x.size(); ++e) t.put(t.at(b, h, int64_t(e) / D, int64_t(e) % D), x[e] * scale);
}
float dot(const float* x, const float* y, int64_t D) {
  float s = 0;
  for (int64_t d = 0; d < D; ++d) s += x[d] * y[d];
  return s;
}

// One batch entry's lengths and one KV head's keys and values, which a group of query heads shares.
struct KvHead {
  int64_t b, hk, sq, skv, D;
  std::vector<float> k, v;
  KvHead(const Sdpa& a, int64_t b_, int64_t hk_)
      : b(b_), hk(hk_), sq(a.padding ? a.seq_q[b_] : a.q.dim[2]), skv(a.padding ? a.seq_kv[b_] : a.k.dim[2]),
        D(a.q.dim[3]), k(load(a.k, b_, hk_, skv)), v(load(a.v, b_, hk_, skv)) {}
  const float* key(int64_t j) const { return &k[size_t(j * D)]; }
  const float* value(int64_t j) const { return &v[size_t(j * D)]; }
};

// Query qi's (row i's) scaled scores against the keys the mask allows (-inf elsewhere).
void scores(const Sdpa& a, const KvHead& kv, const float* qi, int64_t i, std::vector<float>& s) {
  s.assign(size_t(kv.skv), -INFINITY);
  for (int64_t j = 0; j < kv.skv; ++j)
    if (a.allowed(i, j)) s[size_t(j)] = dot(qi, kv.key(j), kv.D) * a.scale;
}

void forward_head(const Sdpa& a, const KvHead& kv, int64_t h) {
  const int64_t D = kv.D;
  const std::vector<float> q = load(a.q, kv.b, h, kv.sq);
  std::vector<float> s, o(q.size(), 0.f);
  for (int64_t i = 0; i < kv.sq; ++i) {
    scores(a, kv, &q[size_t(i * D)], i, s);
    float m = -INFINITY, l = 0;
    for (float x : s) m = std::max(m, x);
    for (int64_t j = 0; j < kv.skv; ++j) {
      if (s[size_t(j)] == -INFINITY) continue;
      const float p = std::exp(s[size_t(j)] - m);
      l += p;  // the sum of P in fp32, P @ V of P in bf16
      for (int64_t d = 0; d < D; ++d) o[size_t(i * D + d)] += bf16(p) * kv.value(j)[d];
    }
    for (int64_t d = 0; d < D; ++d) o[size_t(i * D + d)] /= l;
    a.stats.put(a.stats.at(kv.b, h, i, 0), m + std::log(l));
  }
  store(a.o, kv.b, h, o);
}

// Query head h's dQ; its dK and dV added to the group's.
void backward_head(const Sdpa& a, const KvHead& kv, int64_t h, std::vector<float>& dk, std::vector<float>& dv) {
  const int64_t D = kv.D;
  const std::vector<float> q = load(a.q, kv.b, h, kv.sq), o = load(a.o, kv.b, h, kv.sq),
                           dout = load(a.dout, kv.b, h, kv.sq);
  std::vector<float> s, dq(q.size(), 0.f);
  for (int64_t i = 0; i < kv.sq; ++i) {
    const float *qi = &q[size_t(i * D)], *doi = &dout[size_t(i * D)];
    scores(a, kv, qi, i, s);
    const float lse = a.stats.get(a.stats.at(kv.b, h, i, 0)), Di = dot(doi, &o[size_t(i * D)], D);
    for (int64_t j = 0; j < kv.skv; ++j) {
      if (s[size_t(j)] == -INFINITY) continue;
      const float p = std::exp(s[size_t(j)] - lse);
      const float ds = bf16(p * (dot(doi, kv.value(j), D) - Di)), pb = bf16(p);
      for (int64_t d = 0; d < D; ++d) {
        dq[size_t(i * D + d)] += ds * kv.key(j)[d];
        dk[size_t(j * D + d)] += ds * qi[d];
        dv[size_t(j * D + d)] += pb * doi[d];
      }
    }
  }
  store(a.dq, kv.b, h, dq, a.scale);
}

// Every (batch entry, KV head), then the query heads of its group.
void run(const Sdpa& a) {
  const int64_t B = a.q.dim[0], KVH = a.k.dim[1], G = a.q.dim[1] / KVH;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hk = 0; hk < KVH; ++hk) {
      const KvHead kv(a, b, hk);
      std::vector<float> dk(kv.k.size(), 0.f), dv(kv.v.size(), 0.f);  // summed over the group's heads
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        if (a.backward) backward_head(a, kv, h, dk, dv);
        else forward_head(a, kv, h);
      }
      if (!a.backward) continue;
      store(a.dk, b, hk, dk, a.scale);
      store(a.dv, b, hk, dv);
    }
}

}  // namespace

fe::error_t execute(fe::graph::Graph& g, Handle*, std::unordered_map<int64_t, void*>& pack, void*,
                    cudaStream_t stream) {
  auto a = std::make_shared<Sdpa>();
  try {  // a description this does not expect (a field's type) is a refusal, not a crash
    json j;
    g.serialize(j);
    if (auto e = describe(j, pack, *a); !e.is_good()) return e;
  } catch (const std::exception& x) {
    return refuse(x.what());
  }
  // The ragged arrays and the operands are read when the stream gets here, as cuDNN's kernels would.
  mt_emu::enqueue(stream, [a] { run(*a); }, true);
  return {fe::error_code_t::OK, ""};
}

}  // namespace mt::cuda::cudnn_runtime
