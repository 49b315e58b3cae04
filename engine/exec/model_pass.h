// One micro-batch through the whole model with every unit resident: forward, fused loss, and
// (optionally) backward into per-unit gradient buffers. This is the plain reference path the
// ResidentExecutor runs per micro-batch and the whole-model gradient check differentiates.
// T is the compute dtype (weights and activations); gradients are acc_t<T> (fp32 for bf16).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/model/layers.h"
#include "engine/base/status.h"

namespace mt {

template <typename T>
struct ModelPassArgs {
  std::vector<const T*> weights;       // per unit, in schema order (embedding, decoders, head)
  std::vector<acc_t<T>*> grads;        // per unit (accumulated +=); empty for a forward-only pass
  acc_t<T>* tied_head_grad = nullptr;  // tied embeddings: the LM head's share of d(embedding), +=
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;  // < 0: excluded from the loss
  acc_t<T> grad_scale = 1;           // d(total loss)/d(sum of token losses), e.g. 1/count
  bool recompute = false;            // keep only layer inputs; recompute activations in backward
  // A mixture of experts: the micro-batches of the step this pass is one of (the load-balancing
  // loss is their mean); per unit, set to 1 for each expert the pass routed a token to (when
  // given); the pass's load-balancing loss, before its coefficient, added (when given).
  int micro_batches = 1;
  std::vector<char>* routed = nullptr;
  double* aux_loss = nullptr;
};

// Bytes of workspace model_pass needs for this shape, dtype and activation policy.
template <typename T>
size_t model_pass_workspace_bytes(const LayerShape& s, bool recompute);

// Fails (without touching memory) when the workspace is smaller than the pass needs; it must be
// kWorkspaceAlign-aligned. `ops` is a synchronous table over host memory (cpu_ops<T>()): the
// loss is read right after the head.
template <typename T>
Result<cpu::LmHeadLossResult> model_pass(const Ops<T>& ops, const LayerShape& s, const ModelPassArgs<T>& a,
                                         void* workspace, size_t workspace_bytes);

// Host memory aligned for a workspace (std::vector does not promise kWorkspaceAlign).
class Workspace {
 public:
  explicit Workspace(size_t bytes = 0) { resize(bytes); }
  void resize(size_t bytes) { buf_.resize((bytes + kWorkspaceAlign) / sizeof(double) + 1); }
  void* data() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(buf_.data());
    return reinterpret_cast<void*>((p + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign);
  }
  size_t bytes() const { return buf_.size() * sizeof(double) - kWorkspaceAlign; }

 private:
  std::vector<double> buf_;
};

}  // namespace mt
