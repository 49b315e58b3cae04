// One micro-batch through the whole model with every unit resident: forward, fused loss, and
// (optionally) backward into per-unit gradient buffers. This is the plain reference path the
// ResidentExecutor runs per micro-batch and the whole-model gradient check differentiates.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/layers.h"
#include "engine/base/status.h"

namespace mt {

template <typename T>
struct ModelPassArgs {
  std::vector<const T*> weights;  // per unit, in schema order (embedding, decoders, head)
  std::vector<T*> grads;          // per unit (accumulated +=); empty for a forward-only pass
  T* tied_head_grad = nullptr;    // tied embeddings: the LM head's share of d(embedding), +=
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;  // < 0: excluded from the loss
  T grad_scale = 1;                  // d(total loss)/d(sum of token losses), e.g. 1/count
  bool recompute = false;            // keep only layer inputs; recompute activations in backward
};

// Elements of workspace model_pass needs for this shape and activation policy.
size_t model_pass_workspace_numel(const LayerShape& s, bool recompute);

// Fails (without touching memory) when workspace_numel is smaller than the pass needs. `ops` is
// a synchronous table over host memory (cpu_ops<T>()): the loss is read right after the head.
template <typename T>
Result<cpu::LmHeadLossResult> model_pass(const Ops<T>& ops, const LayerShape& s, const ModelPassArgs<T>& a,
                                         T* workspace, size_t workspace_numel);

}  // namespace mt
