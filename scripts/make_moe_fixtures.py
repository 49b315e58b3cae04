#!/usr/bin/env python3
"""Parity fixtures for the mixture-of-experts families (tests/fixtures/moe/).

Run by hand, like scripts/make_family_fixtures.py; it needs torch and transformers (5.x) from
PyPI (any venv: python3 -m venv V && V/bin/pip install torch transformers safetensors):

    V/bin/python scripts/make_moe_fixtures.py tests/fixtures/moe [FAMILY ...]

(FAMILY gpt_oss_mxfp4 alone reads an existing OUT/gpt_oss.) Each family's seed is the first from
its base whose batch leaves an expert without a token in some layer, routes to every expert in
another, and has no near tie in any top-k choice.

For each family (mixtral, qwen2_moe, qwen3_moe, gpt_oss) it builds a tiny random model with that
family's variants switched on and writes, under OUT/FAMILY/:

    config.json, model.safetensors   the model as transformers saves it (fp32): the experts under
                                     their hub names (transformers 5 holds them fused in one
                                     [E, ...] parameter and splits them back on save)
    batch.json                       tokens, targets (-1: not counted), positions [B][T];
                                     loss: the cross-entropy mean over counted targets only;
                                     aux_loss: transformers' load-balancing loss (before its
                                     coefficient); aux_coef; total_loss = loss + aux_coef *
                                     aux_loss (transformers' outputs.loss); count; routing: per MoE
                                     layer, the tokens routed to each expert (each top-k slot
                                     counts); unrouted: [layer, expert] pairs that got no token
    grads.safetensors                d(total_loss)/d(every parameter), under the same names and
                                     shapes as model.safetensors (an unrouted expert's: zeros)
    aux_grads.safetensors            d(aux_coef * aux_loss)/d(each router weight [and gpt-oss
                                     router bias]), the full derivative (through the later
                                     layers' routers too)
    aux_grads_local.safetensors      the same, but with each router's input held constant: the
                                     router's own term, sum_n dAux/dlogits[n] (x) x[n]

The batch is ONE forward over both rows (no packing: the aux loss is a mean over the batch's
tokens), positions 0..T-1 in each row.

OUT/gpt_oss_mxfp4/ is the gpt_oss fixture with its experts quantized to MXFP4 in the hub layout
(model.safetensors: *.experts.{gate_up,down}_proj_{blocks,scales}, config.json with the hub's
quantization_config) and dequantized.safetensors: the fp32 gate_up_proj [E, C, 2F] / down_proj
[E, F, C] that transformers' own dequantization (integrations/mxfp4.py) makes of those bytes.
"""
import json
import os
import re
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

B, T, VOCAB = 2, 12, 96
WINDOW = 4  # shorter than the sequence
AUX_COEF = 0.05
MIN_TOPK_GAP = 5e-3  # no near tie between a token's k-th and (k+1)-th expert: fp32 rounding can't flip the choice

COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None,
              pad_token_id=None, output_router_logits=True, router_aux_loss_coef=AUX_COEF)

FAMILIES = {
    "mixtral": dict(model_type="mixtral", architectures=["MixtralForCausalLM"], num_hidden_layers=2,
                    intermediate_size=16, num_local_experts=4, num_experts_per_tok=2, head_dim=12,
                    sliding_window=WINDOW, tie_word_embeddings=False, rope_theta=30000.0,
                    router_jitter_noise=0.0),
    # layer 1 dense (mlp_only_layers): its MLP has intermediate_size, the MoE layers 0 and 2 have
    # moe_intermediate_size experts plus a shared expert of shared_expert_intermediate_size
    "qwen2_moe": dict(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], num_hidden_layers=3,
                      intermediate_size=40, moe_intermediate_size=16, shared_expert_intermediate_size=24,
                      num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, qkv_bias=True,
                      mlp_only_layers=[1], decoder_sparse_step=1, tie_word_embeddings=False,
                      rope_theta=20000.0),
    "qwen3_moe": dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=2,
                      intermediate_size=40, moe_intermediate_size=16, num_experts=6, num_experts_per_tok=2,
                      norm_topk_prob=True, head_dim=12, tie_word_embeddings=True, rope_theta=25000.0),
    # layer 0 sliding (window 4), layer 1 full; yarn with the family's defaults except a small
    # original_max_position_embeddings (256), so that of the 6 frequencies the first is kept, the
    # second mixed half-way by the ramp and the other 4 divided by the factor, which bends these 12
    # positions; swiglu_limit small enough that gate and up values clamp (both sides for up);
    # intermediate 64 so that down_proj's MXFP4 rows hold two 32-value blocks (gpt_oss_mxfp4)
    "gpt_oss": dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], num_hidden_layers=2,
                    intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, head_dim=12,
                    sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"],
                    attention_bias=True, tie_word_embeddings=False, swiglu_limit=1.25, max_position_embeddings=8192,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                     "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 256}),
}

# The hub's gpt-oss quantization_config (openai/gpt-oss-20b and -120b config.json).
HUB_MXFP4_CONFIG = {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
    "quant_method": "mxfp4",
}


def batch(gen):
    tokens = torch.randint(0, VOCAB, (B, T), generator=gen)
    targets = torch.randint(0, VOCAB, (B, T), generator=gen)
    targets[0, 3] = -1
    targets[1, 7] = -1
    pos = torch.arange(T).repeat(B, 1)
    return tokens, targets, pos


def randomise(model, gen):
    """Weights far from the init, so every tensor (norms, biases, sinks included) shapes the loss."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))


def routers(model):
    """{layer: router module} for the MoE layers."""
    out = {}
    for name, mod in model.named_modules():
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.(gate|router)", name)
        if m and hasattr(mod, "top_k"):
            out[int(m.group(1))] = mod
    return out


def capture(model):
    """Hooks recording each router's input and its (logits, scores, indices)."""
    seen = {}
    hooks = []
    for layer, r in routers(model).items():
        def hook(mod, args, out, layer=layer):
            seen[layer] = (args[0].detach().reshape(-1, args[0].shape[-1]), out)
        hooks.append(r.register_forward_hook(hook))
    return seen, hooks


def hub_name_split(family, name, tensor):
    """One model parameter (or its gradient) -> {hub name: tensor}, as save_pretrained splits it."""
    m = re.fullmatch(r"(model\.layers\.\d+)\.mlp\.experts\.(gate_up_proj|down_proj)", name)
    if family in ("mixtral", "qwen2_moe", "qwen3_moe") and m:
        prefix, proj = m.groups()
        E = tensor.shape[0]
        out = {}
        for e in range(E):
            if family == "mixtral":
                base = f"{prefix}.block_sparse_moe.experts.{e}"
                if proj == "gate_up_proj":  # [E, 2F, C]: gate rows then up rows
                    f = tensor.shape[1] // 2
                    out[f"{base}.w1.weight"] = tensor[e, :f]
                    out[f"{base}.w3.weight"] = tensor[e, f:]
                else:  # [E, C, F]
                    out[f"{base}.w2.weight"] = tensor[e]
            else:
                base = f"{prefix}.mlp.experts.{e}"
                if proj == "gate_up_proj":
                    f = tensor.shape[1] // 2
                    out[f"{base}.gate_proj.weight"] = tensor[e, :f]
                    out[f"{base}.up_proj.weight"] = tensor[e, f:]
                else:
                    out[f"{base}.down_proj.weight"] = tensor[e]
        return {k: v.contiguous() for k, v in out.items()}
    if family == "mixtral":
        name = re.sub(r"\.mlp\.gate\.", ".block_sparse_moe.gate.", name)
    return {name: tensor.contiguous()}


def hub_dict(family, named):
    out = {}
    for n, t in named:
        out.update(hub_name_split(family, n, t))
    return out


def count_clamps(model):
    """gpt-oss: wraps each experts module's _apply_gate to count the clamped gate / up values."""
    counts = {}
    for name, mod in model.named_modules():
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.experts", name)
        if not m or not hasattr(mod, "limit"):
            continue
        layer = int(m.group(1))
        counts[layer] = dict(gate_above=0, up_above=0, up_below=0, values=0)
        orig = mod._apply_gate

        def wrapped(gate_up, orig=orig, layer=layer, limit=mod.limit):
            g, u = gate_up[..., ::2], gate_up[..., 1::2]
            c = counts[layer]
            c["gate_above"] += int((g > limit).sum())
            c["up_above"] += int((u > limit).sum())
            c["up_below"] += int((u < -limit).sum())
            c["values"] += g.numel()
            return orig(gate_up)
        mod._apply_gate = wrapped
    return counts


def build(name, kw, seed):
    gen = torch.Generator().manual_seed(seed)
    config = AutoConfig.for_model(**{**COMMON, **kw})
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # the per-expert loop: index_add in ascending expert order
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    assert model.config._experts_implementation == "eager", model.config._experts_implementation
    randomise(model, gen)
    tokens, targets, pos = batch(gen)
    return model, tokens, targets, pos


def routing_of(model, tokens):
    """(tokens per expert per MoE layer, the smallest gap between a token's k-th and (k+1)-th router
    logit): the first seed with an unrouted expert somewhere, a layer where every expert got tokens
    and no near tie in any top-k is the fixture's."""
    seen, hooks = capture(model)
    with torch.no_grad():
        model(input_ids=tokens)
    for h in hooks:
        h.remove()
    counts, gap = {}, float("inf")
    for layer in sorted(seen):
        logits, _, idx = seen[layer][1]
        counts[layer] = torch.bincount(idx.reshape(-1), minlength=model.num_experts).tolist()
        top = logits.float().topk(model.config.num_experts_per_tok + 1, dim=-1).values
        gap = min(gap, float((top[:, -2] - top[:, -1]).min()))
    return counts, gap


def suitable(counts, gap):
    return (any(0 in c for c in counts.values()) and any(0 not in c for c in counts.values())
            and gap > MIN_TOPK_GAP)


def make(out, name, kw, base_seed):
    for seed in range(base_seed, base_seed + 500):
        model, tokens, targets, pos = build(name, kw, seed)
        counts, gap = routing_of(model, tokens)
        if suitable(counts, gap):
            break
    else:
        raise RuntimeError(f"{name}: no seed in [{base_seed}, {base_seed + 500}) routes as the fixture needs")
    with torch.no_grad():  # transformers' loss, with labels: targets already shifted (-100: not counted)
        shift = targets.masked_fill(targets < 0, -100)
        ref = model(input_ids=tokens, labels=shift, shift_labels=shift)
    clamps = count_clamps(model) if name.startswith("gpt_oss") else {}

    seen, hooks = capture(model)
    outputs = model(input_ids=tokens)
    for h in hooks:
        h.remove()
    logits = outputs.logits
    count = int((targets >= 0).sum())
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1, reduction="sum") / count
    aux = outputs.aux_loss
    total = ce + AUX_COEF * aux

    # transformers' own total on the same logits: outputs.loss = CE mean + coef * aux
    assert torch.allclose(ref.loss, total.detach(), rtol=1e-6, atol=1e-6), (float(ref.loss), float(total))
    assert torch.equal(ref.aux_loss, aux.detach())

    # routing: tokens per expert in each MoE layer (each top-k slot counts)
    E = model.num_experts
    routing, unrouted = [], []
    for layer in sorted(seen):
        idx = seen[layer][1][2]
        counts = torch.bincount(idx.reshape(-1), minlength=E).tolist()
        routing.append({"layer": layer, "counts": counts})
        unrouted += [[layer, e] for e, c in enumerate(counts) if c == 0]
    assert unrouted, f"{name}: every expert got a token"
    assert any(all(c > 0 for c in r["counts"]) for r in routing), f"{name}: no layer with every expert routed"

    params = dict(model.named_parameters())
    rnames = [n for n in params if re.fullmatch(r"model\.layers\.\d+\.mlp\.(gate|router)\.(weight|bias)", n)]
    aux_full = torch.autograd.grad(AUX_COEF * aux, [params[n] for n in rnames], retain_graph=True)
    # local: each router's own term, its input held constant (recompute the aux from the captured
    # inputs with detached copies)
    local_ws = {n: params[n].detach().clone().requires_grad_(True) for n in rnames}
    local_logits = []
    for layer in sorted(seen):
        x = seen[layer][0]
        pre = f"model.layers.{layer}.mlp.{'router' if name.startswith('gpt_oss') else 'gate'}"
        local_logits.append(F.linear(x, local_ws[pre + ".weight"], local_ws.get(pre + ".bias")))
    mod = sys.modules[type(model).__module__]
    aux_local_loss = mod.load_balancing_loss_func(tuple(local_logits), E, model.config.num_experts_per_tok, None)
    assert torch.allclose(aux_local_loss, aux.detach(), rtol=1e-6, atol=0)
    aux_local = torch.autograd.grad(AUX_COEF * aux_local_loss, [local_ws[n] for n in rnames])
    total.backward()

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)

    # the weights: our split of the state dict must be what save_pretrained wrote, bit for bit
    # (a tied head is not written: lm_head.weight is model.embed_tokens.weight)
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    mine = hub_dict(name, [(k, v) for k, v in model.state_dict().items() if k not in tied])
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        saved = {k: f.get_tensor(k) for k in f.keys()}
    assert set(mine) == set(saved), (set(mine) ^ set(saved))
    for k, v in saved.items():
        assert mine[k].dtype == v.dtype and mine[k].shape == v.shape and torch.equal(mine[k], v), k

    # and transformers loads them back into the same parameters
    back = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).state_dict()
    assert set(back) == set(model.state_dict())
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())

    grads = hub_dict(name, [(n, p.grad.detach()) for n, p in model.named_parameters()])
    assert set(grads) == set(saved)
    for k in saved:
        assert grads[k].shape == saved[k].shape, k
    # an expert that got no token: exactly zero gradient (and zero is written)
    for layer, e in unrouted:
        for k, g in grads.items():
            if re.search(rf"^model\.layers\.{layer}\.(mlp|block_sparse_moe)\.experts\.{e}\.", k):
                assert not g.any(), k
        if name.startswith("gpt_oss"):
            for p in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias"):
                assert not grads[f"model.layers.{layer}.mlp.experts.{p}"][e].any()
    save_file(grads, os.path.join(d, "grads.safetensors"))
    save_file(hub_dict(name, [(n, g.detach()) for n, g in zip(rnames, aux_full)]),
              os.path.join(d, "aux_grads.safetensors"))
    save_file(hub_dict(name, [(n, g.detach()) for n, g in zip(rnames, aux_local)]),
              os.path.join(d, "aux_grads_local.safetensors"))

    info = {"tokens": tokens.tolist(), "targets": targets.tolist(), "pos": pos.tolist(), "loss": ce.item(),
            "aux_loss": aux.item(), "aux_coef": AUX_COEF, "total_loss": total.item(), "count": count,
            "routing": routing, "unrouted": unrouted, "seed": seed, "min_topk_gap": gap}
    if clamps:
        info["clamped"] = [{"layer": l, **c} for l, c in sorted(clamps.items())]
    with open(os.path.join(d, "batch.json"), "w") as f:
        json.dump(info, f)
    print(f"{name}: loss {ce.item():.6f} over {count} targets, aux {aux.item():.6f} (coef {AUX_COEF}), "
          f"total {total.item():.6f}, {len(grads)} tensors")
    for r in routing:
        print(f"  layer {r['layer']} tokens per expert {r['counts']}")
    print(f"  unrouted {unrouted}; seed {seed}; smallest gap between a k-th and (k+1)-th router logit {gap:.4g}")
    for l, c in sorted(clamps.items()):
        print(f"  layer {l} clamped: gate>{model.config.swiglu_limit} {c['gate_above']}, up>limit {c['up_above']}, "
              f"up<-limit {c['up_below']} of {c['values']} each")
    if clamps:
        assert all(c["gate_above"] > 0 and c["up_above"] + c["up_below"] > 0 for c in clamps.values())
    return model


FP4_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # E2M1 magnitudes, codes 0-7 (+8: negative)


def quantize_mxfp4(w):
    """[..., K] fp32 -> blocks uint8 [..., K/32, 16], scales uint8 [..., K/32] (E8M0, bias 127): each 32
    values share the scale 2^(floor(log2 amax) - 2) (the OCP MX rule, E2M1's emax being 2), each value
    rounds to the nearest E2M1 code (saturating at 6), value 2j in the low nibble of byte j, 2j+1 in
    the high one. transformers dequantizes it as lut[nibble] * 2^(scale - 127)."""
    *prefix, K = w.shape
    assert K % 32 == 0, K
    g = w.reshape(*prefix, K // 32, 32).double()
    amax = g.abs().amax(dim=-1)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(1e-30))) - 2, torch.full_like(amax, -127))
    exp = exp.clamp(-127, 127)
    v = g / torch.pow(2.0, exp).unsqueeze(-1)
    mag = (v.abs().unsqueeze(-1) - FP4_GRID.double()).abs().argmin(dim=-1)  # nearest magnitude code
    code = (mag + 8 * torch.signbit(v)).to(torch.uint8)  # a small negative value: -0 (code 8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.contiguous(), (exp + 127).to(torch.uint8).contiguous()


def make_mxfp4(out, src="gpt_oss", name="gpt_oss_mxfp4"):
    """The gpt_oss fixture's experts as the hub stores gpt-oss: MXFP4 blocks and scales over the input
    dimension of the transposed ([E, out, in]) weights; transformers' dequantization of those bytes."""
    from transformers import GptOssForCausalLM, Mxfp4Config
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    s, d = os.path.join(out, src), os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(s, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = HUB_MXFP4_CONFIG
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    with safe_open(os.path.join(s, "model.safetensors"), "pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}
    quantized, dequantized = {}, {}
    worst = 0.0
    for k, v in weights.items():
        m = re.fullmatch(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)", k)
        if not m:
            quantized[k] = v
            continue
        # model layout: gate_up_proj [E, C, 2F] (x @ W), down_proj [E, F, C]; the hub's blocks are of W^T
        blocks, scales = quantize_mxfp4(v.transpose(1, 2))
        quantized[k + "_blocks"], quantized[k + "_scales"] = blocks, scales
        deq = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
        assert deq.shape == v.shape and deq.dtype == torch.float32, (k, deq.shape, v.shape)
        # idempotent: the dequantized values quantize to the same bytes
        b2, s2 = quantize_mxfp4(deq.transpose(1, 2))
        assert torch.equal(b2, blocks) and torch.equal(s2, scales), k
        # each value within E2M1's largest step (2 units of its block's 2^exp) of the weight: the layout
        # is right even where F == C makes down_proj square
        unit = torch.pow(2.0, scales.double() - 127).repeat_interleave(32, dim=-1).transpose(1, 2)
        assert ((deq.double() - v.double()).abs() <= 2 * unit).all(), k
        dequantized[k] = deq.contiguous()
        worst = max(worst, float((deq - v).abs().max() / v.abs().max()))
        print(f"  {k}: {tuple(v.shape)} -> blocks {tuple(blocks.shape)}, scales {tuple(scales.shape)} "
              f"(scale bytes {sorted(set(scales.flatten().tolist()))})")
    save_file(quantized, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    save_file(dequantized, os.path.join(d, "dequantized.safetensors"))
    print(f"{name}: {len(dequantized)} expert tensors, largest error / largest weight {worst:.3f}")

    # transformers' loader, dequantizing on CPU, makes the same parameters
    model = GptOssForCausalLM.from_pretrained(d, quantization_config=Mxfp4Config(dequantize=True),
                                              dtype=torch.float32)
    loaded = dict(model.state_dict())
    for k, v in dequantized.items():
        assert loaded[k].dtype == torch.float32 and torch.equal(loaded[k], v), k
    for k, v in weights.items():
        if k not in dequantized:
            assert torch.equal(loaded[k], v), k
    print(f"{name}: from_pretrained(quantization_config=Mxfp4Config(dequantize=True)) on CPU: the same tensors")


def main(out, only):
    for i, (name, kw) in enumerate(FAMILIES.items()):
        if not only or name in only:
            make(out, name, kw, 4321 + i)
    if not only or "gpt_oss_mxfp4" in only:
        make_mxfp4(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
