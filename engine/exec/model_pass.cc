#include "engine/exec/model_pass.h"

namespace mt {

namespace {

struct Regions {
  size_t resid, acts_one, acts, scratch, head, dresid;  // bytes, in this order
};

template <typename T>
Regions regions(const LayerShape& s, bool recompute) {
  const size_t NC = size_t(s.N()) * s.cfg->hidden_size;
  const size_t L = size_t(s.cfg->num_layers);
  auto aligned = [](size_t b) { return (b + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; };
  const size_t acts_one = decoder_acts_bytes<T>(s);
  return {aligned((L + 1) * NC * sizeof(T)), acts_one, (recompute ? 1 : L) * acts_one, decoder_scratch_bytes<T>(s),
          head_scratch_bytes<T>(s), aligned(NC * sizeof(T))};
}

}  // namespace

template <typename T>
size_t model_pass_workspace_bytes(const LayerShape& s, bool recompute) {
  const Regions r = regions<T>(s, recompute);
  return r.resid + r.acts + r.scratch + r.head + r.dresid;
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
  const bool backward = !a.grads.empty();

  embedding_forward(ops, s, a.weights[0], a.inputs, resid);
  for (int l = 0; l < L; ++l)
    decoder_forward(ops, s, l, bind_decoder<const T>(c, a.weights[size_t(l) + 1]), resid + size_t(l) * NC,
                    resid + size_t(l + 1) * NC, acts(l));

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
    const auto w = bind_decoder<const T>(c, a.weights[size_t(l) + 1]);
    if (a.recompute) decoder_forward<T>(ops, s, l, w, x, nullptr, acts(l));
    decoder_backward(ops, s, l, w, bind_decoder<acc_t<T>>(c, a.grads[size_t(l) + 1]), x, acts(l), dresid, scratch);
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
