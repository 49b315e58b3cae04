#include "engine/exec/model_pass.h"

#include <vector>

namespace mt {

namespace {

struct Regions {
  size_t resid, acts_one, acts, scratch, head, dresid, moe_one, moe, kept_one, kept;  // bytes, in this order
  size_t kept_h;  // where a layer's kept activation follows its kept gate/up
};

template <typename T>
Regions regions(const LayerShape& s, bool recompute) {
  const size_t NC = size_t(s.N()) * s.cfg->hidden_size;
  const size_t L = size_t(s.cfg->num_layers);
  auto aligned = [](size_t b) { return (b + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; };
  const size_t acts_one = decoder_acts_bytes<T>(s), moe_one = moe_acts_bytes<T>(s);
  const size_t kept = recompute ? 1 : L;  // layers whose activations are kept at once
  // Without recompute an MoE layer keeps its experts' gate/up and activation as a dense layer
  // keeps its MLP's (MoeActs::kept_gu, kept_h): every slot, 3 F values.
  const size_t slots = size_t(s.N()) * size_t(s.cfg->moe.top_k), F = size_t(s.cfg->moe.expert_ffn);
  const bool keep = !recompute && s.cfg->has_experts();
  const size_t kept_h = keep ? aligned(slots * 2 * F * sizeof(T)) : 0;
  const size_t kept_one = keep ? kept_h + aligned(slots * F * sizeof(T)) : 0;
  return {aligned((L + 1) * NC * sizeof(T)), acts_one, kept * acts_one, decoder_scratch_bytes<T>(s),
          head_scratch_bytes<T>(s), aligned(NC * sizeof(T)), moe_one, kept * moe_one, kept_one, L * kept_one, kept_h};
}

// An MoE layer's experts with tokens, in ascending order: forward (into out) or backward.
template <typename T>
void experts_forward(const Ops<T>& ops, const LayerShape& s, int l, const ModelPassArgs<T>& a, const MoeActs<T>& m,
                     T* out, const ExpertScratch<T>& sc) {
  const ModelConfig& c = *s.cfg;
  for (int e = 0; e < c.moe.num_experts; ++e) {
    if (expert_tokens(m, e) == 0) continue;
    const int u = expert_unit(c, l, e);
    expert_forward(ops, s, e, bind_expert(c, a.weights[size_t(u)]), m, out, sc);
    if (a.routed) (*a.routed)[size_t(u)] = 1;
  }
}
template <typename T>
void experts_backward(const Ops<T>& ops, const LayerShape& s, int l, const ModelPassArgs<T>& a, const MoeActs<T>& m,
                      const T* dout, const ExpertScratch<T>& sc) {
  const ModelConfig& c = *s.cfg;
  ops.zero(m.din, size_t(s.N()) * c.hidden_size);
  for (int e = 0; e < c.moe.num_experts; ++e) {
    if (expert_tokens(m, e) == 0) continue;
    const int u = expert_unit(c, l, e);
    expert_backward(ops, s, e, bind_expert(c, a.weights[size_t(u)]), bind_expert(c, a.grads[size_t(u)]), m, dout, sc);
  }
}

}  // namespace

template <typename T>
size_t model_pass_workspace_bytes(const LayerShape& s, bool recompute) {
  const Regions r = regions<T>(s, recompute);
  return r.resid + r.acts + r.scratch + r.head + r.dresid + r.moe + r.kept;
}

template <typename T>
Result<cpu::LmHeadLossResult> model_pass(const Ops<T>& ops, const LayerShape& s, const ModelPassArgs<T>& a, void* ws,
                                         size_t ws_bytes) {
  const size_t need = model_pass_workspace_bytes<T>(s, a.recompute);
  if (ws_bytes < need)
    return invalid_argument("model_pass: workspace of " + std::to_string(ws_bytes) + " bytes, " +
                            std::to_string(need) + " needed");
  const ModelConfig& c = *s.cfg;
  const int L = c.num_layers;
  const size_t NC = size_t(s.N()) * c.hidden_size;
  const Regions r = regions<T>(s, a.recompute);
  char* base = static_cast<char*>(ws);
  T* resid = reinterpret_cast<T*>(base);  // resid + l*NC is the input of layer l; resid + L*NC the output
  char* acts_base = base + r.resid;
  auto acts = [&](int l) { return bind_decoder_acts<T>(s, acts_base + (a.recompute ? 0 : size_t(l) * r.acts_one)); };
  const auto scratch = bind_decoder_scratch<T>(s, acts_base + r.acts);
  const auto head_sc = bind_head_scratch<T>(s, acts_base + r.acts + r.scratch);
  T* dresid = reinterpret_cast<T*>(acts_base + r.acts + r.scratch + r.head);
  char* moe_base = acts_base + r.acts + r.scratch + r.head + r.dresid;
  // A layer's MoE state (its routing kept for the backward unless recomputed), and the pass's
  // load-balancing statistics over every MoE layer.
  std::vector<acc_t<T>> stats(2 * size_t(c.moe.num_experts), 0);
  auto moe = [&](int l, bool forward) {
    MoeActs<T> m = bind_moe_acts<T>(s, moe_base + (a.recompute ? 0 : size_t(l) * r.moe_one));
    m.host_offsets = m.offsets;  // a synchronous table in host memory
    if (r.kept_one) {
      char* kept = moe_base + r.moe + size_t(l) * r.kept_one;
      m.kept_gu = reinterpret_cast<T*>(kept);
      m.kept_h = reinterpret_cast<T*>(kept + r.kept_h);
    }
    m.stats = forward ? stats.data() : nullptr;
    m.counts = forward || c.moe.aux_coef == 0 ? nullptr : stats.data();
    m.aux_scale = acc_t<T>(moe_aux_scale(s, a.micro_batches));
    return m;
  };
  const bool backward = !a.grads.empty();

  embedding_forward(ops, s, a.weights[0], a.inputs, resid);
  for (int l = 0; l < L; ++l) {
    const MoeActs<T> m = moe(l, true);
    T* out = resid + size_t(l + 1) * NC;
    decoder_forward(ops, s, l, bind_decoder<const T>(c, l, a.weights[size_t(l) + 1]), resid + size_t(l) * NC, out,
                    acts(l), c.is_moe_layer(l) ? &m : nullptr);
    if (c.is_moe_layer(l)) experts_forward(ops, s, l, a, m, out, scratch.expert);
  }
  if (a.aux_loss && c.has_experts()) {
    const std::vector<double> st(stats.begin(), stats.end());
    *a.aux_loss += moe_aux_loss(s, st.data());
  }

  const auto head = bind_head<const T>(c, a.weights[size_t(L) + 1]);
  const T* lm = c.tie_word_embeddings ? a.weights[0] : head.lm;
  acc_t<T>* dnorm = backward ? a.grads[size_t(L) + 1] : nullptr;
  acc_t<T>* dlm = !backward ? nullptr : c.tie_word_embeddings ? a.tied_head_grad : bind_head<acc_t<T>>(c, dnorm).lm;
  double totals[2] = {0, 0};  // the reference op tables run synchronously in host memory
  head_forward_backward(ops, s, head.norm, lm, dnorm, dlm, resid + size_t(L) * NC, a.targets, a.grad_scale,
                        backward ? dresid : nullptr, head_sc, totals);
  const cpu::LmHeadLossResult loss{totals[0], long(totals[1])};
  if (!backward) return loss;

  for (int l = L - 1; l >= 0; --l) {
    const T* x = resid + size_t(l) * NC;
    const auto w = bind_decoder<const T>(c, l, a.weights[size_t(l) + 1]);
    const MoeActs<T> m = moe(l, false);
    const MoeActs<T>* mp = c.is_moe_layer(l) ? &m : nullptr;
    if (a.recompute) decoder_forward<T>(ops, s, l, w, x, nullptr, acts(l), mp);
    if (mp) experts_backward(ops, s, l, a, m, dresid, scratch.expert);
    decoder_backward(ops, s, l, w, bind_decoder<acc_t<T>>(c, l, a.grads[size_t(l) + 1]), x, acts(l), dresid, scratch,
                     mp);
  }
  embedding_backward(ops, s, a.grads[0], a.inputs, dresid);
  return loss;
}

#define MT_INSTANTIATE(T)                                                                                      \
  template size_t model_pass_workspace_bytes<T>(const LayerShape&, bool);                                     \
  template Result<cpu::LmHeadLossResult> model_pass(const Ops<T>&, const LayerShape&, const ModelPassArgs<T>&, \
                                                    void*, size_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
MT_INSTANTIATE(bf16)
#undef MT_INSTANTIATE

}  // namespace mt
