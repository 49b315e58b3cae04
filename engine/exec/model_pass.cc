#include "engine/exec/model_pass.h"

namespace mt {

namespace {

struct Workspace {
  size_t resid, acts, scratch, head, dresid;  // element counts of the regions, in this order
};

Workspace regions(const LayerShape& s, bool recompute) {
  const size_t NC = size_t(s.N()) * s.cfg->hidden_size;
  const size_t L = size_t(s.cfg->num_layers);
  return {(L + 1) * NC, (recompute ? 1 : L) * decoder_acts_numel(s), decoder_scratch_numel(s),
          head_scratch_numel(s), NC};
}

}  // namespace

size_t model_pass_workspace_numel(const LayerShape& s, bool recompute) {
  Workspace w = regions(s, recompute);
  return w.resid + w.acts + w.scratch + w.head + w.dresid;
}

template <typename T>
Result<cpu::LmHeadLossResult> model_pass(const Ops<T>& ops, const LayerShape& s, const ModelPassArgs<T>& a, T* ws,
                                         size_t ws_numel) {
  if (ws_numel < model_pass_workspace_numel(s, a.recompute))
    return invalid_argument("model_pass: workspace of " + std::to_string(ws_numel) + " elements, " +
                            std::to_string(model_pass_workspace_numel(s, a.recompute)) + " needed");
  const ModelConfig& c = *s.cfg;
  const int L = c.num_layers;
  const size_t NC = size_t(s.N()) * c.hidden_size, acts_n = decoder_acts_numel(s);
  const Workspace r = regions(s, a.recompute);
  T* resid = ws;  // layer inputs: resid + l*NC is the input of layer l; resid + L*NC the output
  T* acts_base = resid + r.resid;
  auto acts = [&](int l) { return bind_decoder_acts<T>(s, acts_base + (a.recompute ? 0 : size_t(l) * acts_n)); };
  const auto scratch = bind_decoder_scratch<T>(s, acts_base + r.acts);
  const auto head_sc = bind_head_scratch<T>(s, acts_base + r.acts + r.scratch);
  T* dresid = acts_base + r.acts + r.scratch + r.head;
  const bool backward = !a.grads.empty();

  embedding_forward(ops, s, a.weights[0], a.inputs, resid);
  for (int l = 0; l < L; ++l)
    decoder_forward(ops, s, bind_decoder<const T>(c, a.weights[size_t(l) + 1]), resid + size_t(l) * NC,
                    resid + size_t(l + 1) * NC, acts(l));

  const auto head = bind_head<const T>(c, a.weights[size_t(L) + 1]);
  const T* lm = c.tie_word_embeddings ? a.weights[0] : head.lm;
  T* dnorm = backward ? a.grads[size_t(L) + 1] : nullptr;
  T* dlm = !backward ? nullptr : c.tie_word_embeddings ? a.tied_head_grad : bind_head<T>(c, dnorm).lm;
  double totals[2] = {0, 0};  // the reference op tables run synchronously in host memory
  head_forward_backward(ops, s, head.norm, lm, dnorm, dlm, resid + size_t(L) * NC, a.targets, a.grad_scale,
                        backward ? dresid : nullptr, head_sc, totals);
  const cpu::LmHeadLossResult loss{totals[0], long(totals[1])};
  if (!backward) return loss;

  for (int l = L - 1; l >= 0; --l) {
    const T* x = resid + size_t(l) * NC;
    const auto w = bind_decoder<const T>(c, a.weights[size_t(l) + 1]);
    if (a.recompute) decoder_forward<T>(ops, s, w, x, nullptr, acts(l));
    decoder_backward(ops, s, w, bind_decoder<T>(c, a.grads[size_t(l) + 1]), x, acts(l), dresid, scratch);
  }
  embedding_backward(ops, s, a.grads[0], a.inputs, dresid);
  return loss;
}

template Result<cpu::LmHeadLossResult> model_pass(const Ops<float>&, const LayerShape&, const ModelPassArgs<float>&,
                                                  float*, size_t);
template Result<cpu::LmHeadLossResult> model_pass(const Ops<double>&, const LayerShape&, const ModelPassArgs<double>&,
                                                  double*, size_t);

}  // namespace mt
