#!/usr/bin/env python3
"""Training-trajectory parity for mixtures of experts: train_parity.py's check (`megatrain train`
against the same training replayed in PyTorch float64) on tiny MoE models, several steps.

Run by hand, with train_parity.py's venv and a built build/bin/megatrain:

    /tmp/tv/bin/python scripts/train_parity_moe.py [--megatrain build/bin/megatrain] [--keep DIR]
                                                   [--variants] [CONFIG ...]

What a mixture of experts adds to train_parity.py's replay (its data, schedule, clipping, AdamW
and comparison are reused as they are):

  * the model: a tiny random Mixtral (top-2 of 8 softmax experts, renormalised), Qwen3-MoE (the
    same with norm_topk_prob, q/k norms), Qwen2-MoE (not renormalised, a shared expert with its
    gate, q/k/v biases, a dense layer) or gpt-oss (router bias, expert biases, the clamped SwiGLU,
    attention sinks and biases, a sliding layer), each with output_router_logits and
    router_aux_loss_coef in its config.json; transformers' eager experts; a seed each whose
    routing leaves experts idle at most steps, with no near tie in any top-k choice (printed);
  * a micro-batch is one forward over its rows (the load-balancing loss is a mean over the
    micro-batch's tokens), and the step minimises CE_sum / counted + coef * mean over the
    micro-batches of transformers' load_balancing_loss_func (outputs.aux_loss): README, "Mixture
    of experts";
  * each expert is an AdamW parameter of its own, as transformers 4's per-expert modules were:
    transformers 5 stacks a layer's experts in one [E, ...] parameter, which torch.optim.AdamW
    would update whole (zero gradients: moment decay, weight decay, the global step's bias
    correction). So the stacked parameters are not given to the optimizer; each expert's slice of
    each is a leaf tensor of its own in it, whose .grad is set after the backward to the slice of
    the stacked gradient when the step routed a token to that expert in any micro-batch, and to
    None when it routed none (the slice is then checked to be exactly 0). torch.optim.AdamW skips
    a parameter whose .grad is None — no decay, no moment update, no step count — and keeps a
    step count per parameter, so each expert's bias correction uses its own count of updates.
    clip_grad_norm_ skips them too (their gradients are 0: the same norm). After the update the
    slices are copied back into the stacked parameters;
  * compared, besides train_parity.py's loss (MegaTrain's reported `loss` is the cross-entropy
    alone), grad norm (of CE + aux), LR and final weights per tensor — every expert's, by
    MegaTrain's checkpoint names: the per-expert tensors of its model.safetensors — are Adam's
    moments of every tensor (the checkpoint's optimizer.safetensors against the optimizer's
    state: ||m - m_ref|| / ||m_ref||), each expert's update count (trainer_state.json's
    expert_updates against the optimizer's per-parameter step: equal), and per step the
    load-balancing loss (before its coefficient) and the number of experts routed (from
    megatrain train --json's step events, checked against the job's TensorBoard file).

Per step it prints the experts the step left idle. --variants also replays the semantics the
README says MegaTrain does not follow — transformers 5's stacked experts updated whole
(stacked), the load-balancing loss summed over micro-batches as transformers' Trainer does with
num_items_in_batch (aux_sum), no load-balancing loss (no_aux), weight decay on every tensor, the
router bias, expert biases and sinks included (decay_all) — and prints MegaTrain's distance from
each. scripts/make_training_fixtures.py writes these configurations' float64 replays, for
tests/engine/job/training_parity_test.cc.
"""
import json
import os
import re
import struct
import sys

import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM

import train_parity as tp

SEQ = 8  # few tokens a step (2 micro-batches of 1 row): experts go idle
AUX_COEF = 0.1
E, F_EXPERT = 8, 4  # top-2 of 8 experts of width 4 in every MoE layer
COMMON = dict(vocab_size=tp.VOCAB, hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=4,
              max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None,
              pad_token_id=None, output_router_logits=True, router_aux_loss_coef=AUX_COEF, num_hidden_layers=2,
              num_experts_per_tok=2, tie_word_embeddings=True)
FAMILIES = {
    "mixtral": dict(model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=E,
                    intermediate_size=F_EXPERT, rope_theta=10000.0, router_jitter_noise=0.0, sliding_window=None),
    # the top-k renormalised as Mixtral's, q/k norms; not in the fixtures (Mixtral's routing)
    "qwen3_moe": dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=E,
                      moe_intermediate_size=F_EXPERT, intermediate_size=24, norm_topk_prob=True, rope_theta=20000.0),
    # the top-k not renormalised, a shared expert with its sigmoid gate, q/k/v biases, layer 1 dense
    # (mlp_only_layers); not in the fixtures
    "qwen2_moe": dict(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], num_hidden_layers=3, num_experts=E,
                      moe_intermediate_size=F_EXPERT, intermediate_size=24, shared_expert_intermediate_size=12,
                      norm_topk_prob=False, qkv_bias=True, mlp_only_layers=[1], decoder_sparse_step=1,
                      rope_theta=20000.0),
    # layer 0 sliding (window 4 of 8 positions), layer 1 full; yarn as in make_moe_fixtures.py;
    # swiglu_limit low enough that gate and up values clamp
    "gpt_oss": dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], num_local_experts=E,
                    intermediate_size=F_EXPERT, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                    attention_bias=True,
                    swiglu_limit=0.4, max_position_embeddings=8192,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                     "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 256}),
}
SEEDS = {"mixtral": 16, "qwen3_moe": 44, "qwen2_moe": 55, "gpt_oss": 31}
STACKED = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias)?")


def make_moe_model(out_dir, family):
    torch.manual_seed(SEEDS[family])
    config = AutoConfig.for_model(**{**COMMON, **FAMILIES[family]})
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # away from 1, so decaying them (or not) shows
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif re.search(r"\.(gate|router)\.weight$", name):  # peaked routing: some experts idle
                p.normal_(0.0, 0.6)
            elif name.endswith("sinks"):
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 0.08)
    model.save_pretrained(out_dir)
    return config


# ---------------------------------------------------------------------------------------------
# MegaTrain's names: its checkpoints keep each expert's tensors apart (engine/model/param_schema.cc)


def schema_expert(family, layer, expert, proj, bias, t):
    """One expert's slice of a transformers 5 stacked tensor -> {checkpoint name: tensor}."""
    if family == "gpt_oss":  # [C, 2F] gate/up interleaved -> [2F, C] gate rows then up rows; down [F, C] -> [C, F]
        name = f"model.layers.{layer}.mlp.experts.{expert}.{proj}" + ("_bias" if bias else "")
        if proj == "gate_up_proj":
            t = torch.cat([t[..., 0::2], t[..., 1::2]], dim=-1)
        return {name: t.contiguous() if bias else t.T.contiguous()}
    mixtral = family == "mixtral"
    base = f"model.layers.{layer}.{'block_sparse_moe' if mixtral else 'mlp'}.experts.{expert}."
    gate, up, down = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    if proj == "down_proj":  # [C, F]
        return {base + down + ".weight": t}
    f = t.shape[0] // 2  # [2F, C]: gate rows then up rows
    return {base + gate + ".weight": t[:f].contiguous(), base + up + ".weight": t[f:].contiguous()}


def schema_name(family, name):
    return re.sub(r"\.mlp\.gate\.", ".block_sparse_moe.gate.", name) if family == "mixtral" else name


def schema_state(family, named):
    """(transformers 5 name, tensor) pairs -> {checkpoint name: float64 tensor}; a stacked tensor
    by expert. A tied head is not a tensor of its own."""
    out = {}
    for name, t in named:
        if name == "lm_head.weight" and {**COMMON, **FAMILIES[family]}["tie_word_embeddings"]:
            continue
        m = STACKED.fullmatch(name)
        if m:
            for e in range(t.shape[0]):
                out.update(schema_expert(family, int(m.group(1)), e, m.group(2), bool(m.group(3)), t[e]))
        else:
            out[schema_name(family, name)] = t
    return {k: v.detach().to(torch.float64) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# The replay


class MoeReplay(tp.DenseReplay):
    """train_parity.reference()'s model-dependent part for a mixture of experts (module docstring).
    aux: "mean" over the micro-batches (MegaTrain), "sum" (transformers' Trainer), "none";
    stacked: the stacked expert parameters updated whole (transformers 5 as it is)."""
    load_kwargs = {"experts_implementation": "eager"}

    def __init__(self, family, aux="mean", stacked=False):
        self.family, self.aux, self.stacked = family, aux, stacked
        self.experts = []  # (stacked parameter, its name, [one leaf per expert])
        self.step_aux, self.step_routed, self.min_gap = [], {}, float("inf")

    def param_groups(self, model, weight_decay, decay_all):
        k = model.config.num_experts_per_tok
        for layer, r in self.routers(model).items():
            r.register_forward_hook(lambda mod, args, out, layer=layer: self.routed(layer, out, k))
        if self.stacked:
            return super().param_groups(model, weight_decay, decay_all)
        plain = []
        for name, p in model.named_parameters():
            if STACKED.fullmatch(name):
                self.experts.append((p, name, [p.detach()[e].clone().requires_grad_(True) for e in range(p.shape[0])]))
            else:
                plain.append(p)
        leaves = plain + [q for _, _, qs in self.experts for q in qs]
        decay = [p for p in leaves if p.ndim >= 2 or decay_all]  # an expert's biases are vectors: not decayed
        no_decay = [p for p in leaves if not (p.ndim >= 2 or decay_all)]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def clipped(self, model, groups):
        return [p for g in groups for p in g["params"]]

    @staticmethod
    def routers(model):
        return {int(re.search(r"layers\.(\d+)\.", n).group(1)): m for n, m in model.named_modules()
                if re.fullmatch(r"model\.layers\.\d+\.mlp\.(gate|router)", n)}

    def routed(self, layer, out, k):
        logits, _, idx = out
        self.step_routed.setdefault(layer, set()).update(int(e) for e in idx.reshape(-1))
        top = logits.detach().topk(k + 1, dim=-1).values  # softmax is monotonic: a gap in logits
        self.min_gap = min(self.min_gap, float((top[:, k - 1] - top[:, k]).min()))

    def micro_batch(self, model, inp, tgt, pos, denom, nmicro, autocast_bf16):
        assert pos is None and not autocast_bf16
        out = model(input_ids=torch.tensor(inp))
        t = torch.tensor(tgt)
        ce = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), t.reshape(-1), ignore_index=-1,
                             reduction="sum")
        coef = model.config.router_aux_loss_coef * {"mean": 1.0 / nmicro, "sum": 1.0, "none": 0.0}[self.aux]
        (ce / denom + coef * out.aux_loss).backward()
        self.step_aux.append(out.aux_loss.item())
        return [ce.item()]

    def before_update(self, model):
        for p, name, leaves in self.experts:
            layer = int(STACKED.fullmatch(name).group(1))
            for e, q in enumerate(leaves):
                if e in self.step_routed.get(layer, ()):
                    q.grad = p.grad[e].clone()
                else:  # no token, no gradient: PyTorch's AdamW skips it
                    assert not p.grad[e].any(), f"{name}[{e}]: a gradient without a token"
                    q.grad = None

    def after_update(self, model, record):
        with torch.no_grad():
            for p, _, leaves in self.experts:
                for e, q in enumerate(leaves):
                    p[e].copy_(q)
        n = model.config.num_experts
        record["aux_loss"] = sum(self.step_aux) / len(self.step_aux)  # as MegaTrain reports it
        record["idle"] = [[l, e] for l in sorted(self.step_routed) for e in range(n) if e not in self.step_routed[l]]
        record["experts_routed"] = sum(len(s) for s in self.step_routed.values())
        self.step_aux, self.step_routed = [], {}

    def final_state(self, model, opt):
        """The weights by checkpoint name; self.moments likewise (NAME.exp_avg, NAME.exp_avg_sq) and
        self.updates: each expert's AdamW step count, in MegaTrain's unit order (layer, expert)."""
        named = [(n, p) for n, p in model.named_parameters() if self.stacked or not STACKED.fullmatch(n)]
        moments = {}
        for kind in ("exp_avg", "exp_avg_sq"):
            def state(p, kind=kind):
                return opt.state[p][kind] if p in opt.state else torch.zeros_like(p)
            part = schema_state(self.family, [(n, state(p)) for n, p in named])
            for p, name, leaves in self.experts:
                part.update(schema_state(self.family, [(name, torch.stack([state(q) for q in leaves]))]))
            moments.update({k + "." + kind: v for k, v in part.items()})
        self.moments = moments
        counts = {}  # stacked parameters come layer by layer; each of an expert's slices has its count
        for p, name, leaves in self.experts:
            layer = int(STACKED.fullmatch(name).group(1))
            for e, q in enumerate(leaves):
                n = int(opt.state[q]["step"]) if q in opt.state else 0
                assert counts.setdefault((layer, e), n) == n, (name, e)
        self.updates = [counts[k] for k in sorted(counts)]
        return schema_state(self.family, model.state_dict().items())


def moe_replays(model_dir, batches, spec, family):
    """The float64 oracle and PyTorch's own fp32 as its yardstick: ((steps, weights, replay), ...)."""
    out = []
    for dtype in (torch.float64, torch.float32):
        r = MoeReplay(family)
        steps, w = tp.reference(model_dir, batches, spec, dtype=dtype, replay=r)
        out.append((steps, w, r))
    return out


# ---------------------------------------------------------------------------------------------
# The configurations


def configs(work):
    """name -> (spec, per-step batches, tolerance floors, reference key, family); the models are
    WORK/model_FAMILY (make_moe_model), the data train_parity.py's tokens.bin."""
    tok = tp.markov_tokens(6000, seed=7)
    tok.tofile(os.path.join(work, "tokens.bin"))
    tokens = {"source": "tokens", "path": os.path.join(work, "tokens.bin"), "dtype": "uint16"}
    out = {}
    # train_parity.py's fp32 floors, the load-balancing loss's as the loss's, the moments' ~20x the
    # largest distance measured (PyTorch fp32's: <= 3.7e-5)
    floor = {"loss_rel": 1e-6, "gnorm_rel": 1e-5, "w_rel": 2e-4, "aux_rel": 1e-6, "m_rel": 1e-4}
    for family in FAMILIES:
        name = "m_" + family
        # 8 steps of 2 micro-batches of 1 row of 8 tokens; warmup + cosine, weight decay, clipping
        # at some steps (grad_clip 2.0); eps 1e-6 (train_parity.py's (b): near-zero
        # gradient elements)
        s = tp.base_spec(name, os.path.join(work, "model_" + family), data=tokens, seq_len=SEQ, micro_batch=1,
                         global_batch=2, logging={"tensorboard": True})
        s["optimizer"].update(grad_clip=2.0, eps=1e-6)
        G, n = s["global_batch"], s["steps"]
        inp, tgt = tp.token_file_rows(tok, G * n, SEQ)
        batches = [(inp[k * G:(k + 1) * G], tgt[k * G:(k + 1) * G], None) for k in range(n)]
        out[name] = (s, batches, floor, name, family)
        if family == "mixtral":  # the resident executor and speculative updates skip idle experts in own code
            for variant, kw in (("_resident", {"executor": "resident"}),
                                ("_speculative", {"speculative_updates": "on"})):
                out[name + variant] = (dict(s, name=name + variant, **kw), batches, floor, name, family)
    return out


# ---------------------------------------------------------------------------------------------
# What MegaTrain wrote


def tensorboard_scalars(path):
    """engine/io/tensorboard.h's event file: [{tag: value} per event with a summary], by step."""
    data, at, out = open(path, "rb").read(), 0, {}

    def fields(buf):
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            f, wire = key >> 3, key & 7
            if wire == 0:
                v, i = varint(buf, i)
            elif wire == 1:
                v, i = buf[i:i + 8], i + 8
            elif wire == 5:
                v, i = buf[i:i + 4], i + 4
            else:
                n, i = varint(buf, i)
                v, i = buf[i:i + n], i + n
            yield f, v

    def varint(buf, i):
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v, i

    while at + 12 <= len(data):
        n = struct.unpack_from("<Q", data, at)[0]
        event = data[at + 12:at + 12 + n]
        at += 12 + n + 4
        step, values = None, {}
        for f, v in fields(event):
            if f == 2:
                step = v
            elif f == 5:
                for vf, value in fields(v):
                    if vf == 1:
                        tv = dict(fields(value))
                        values[tv[1].decode()] = struct.unpack("<f", tv[2])[0]
        if values:
            out[step] = values
    return out


def megatrain_state(run_dir):
    """The last checkpoint's weights, moments (float64, by name) and expert update counts."""
    root = os.path.join(run_dir, "checkpoints")
    last = max((d for d in os.listdir(root) if d.startswith("step-")), key=lambda d: int(d[5:]))
    ckpt = os.path.join(root, last)
    with open(os.path.join(ckpt, "trainer_state.json")) as f:
        updates = json.load(f).get("expert_updates", [])
    return (tp.weights_f64(os.path.join(ckpt, "model.safetensors")),
            tp.weights_f64(os.path.join(ckpt, "optimizer.safetensors")), updates)


def moment_rel(x, y):
    """Per moment tensor ||x - y|| / ||y|| (0 where both are 0: an expert never routed)."""
    out = {}
    for k in sorted(set(x) & set(y)):
        d, ref = float((x[k] - y[k]).norm()), float(y[k].norm())
        out[k] = d / ref if ref else (0.0 if d == 0 else float("inf"))
    return out


def distance(x_steps, x_w, x_m, ref, init_w):
    """train_parity.diff() of trajectory x from the float64 replay `ref` ((steps, weights, replay)),
    and of the load-balancing losses (aux_rel: the largest over the steps) and Adam's moments
    (m_tensors, m_rel: the largest over the tensors)."""
    r_steps, r_w, r = ref
    d = tp.diff(x_steps, x_w, r_steps, r_w, init_w)
    d["aux_rel"] = max(abs(a["aux_loss"] - b["aux_loss"]) / b["aux_loss"] for a, b in zip(x_steps, r_steps))
    d["m_tensors"] = moment_rel(x_m, r.moments)
    d["m_rel"] = max(d["m_tensors"].values())
    d["m_worst"] = max(d["m_tensors"], key=d["m_tensors"].get)
    return d


def compare(mt_steps, mt_w, mt_m, mt_updates, ref, yard, init_w, floor):
    """MegaTrain's distance from the float64 replay `ref`, PyTorch fp32's (`yard`: (steps, weights,
    replay)), and why MegaTrain is outside tolerance (train_parity.within's rule)."""
    r = ref[2]
    d, dy = distance(mt_steps, mt_w, mt_m, ref, init_w), distance(yard[0], yard[1], yard[2].moments, ref, init_w)
    why = tp.within(d, dy, floor)
    for key in ("aux_rel", "m_rel"):
        lim = max(floor[key], 20 * dy[key])
        if d[key] > lim:
            why.append(f"{key} {d[key]:.2e} > {lim:.2e}")
    if set(mt_m) != set(r.moments):
        why.append("moment tensors differ: " + ", ".join(sorted(set(mt_m) ^ set(r.moments))[:4]))
    if mt_updates != r.updates:
        why.append(f"expert_updates {mt_updates} != the replay's {r.updates}")
    routed = [(a["experts_routed"], b["experts_routed"]) for a, b in zip(mt_steps, ref[0])]
    if any(a != b for a, b in routed):
        why.append(f"experts routed per step (megatrain, replay): {routed}")
    return d, dy, why


def initial_weights(model_dir, family):
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
    return schema_state(family, m.state_dict().items())


def check_against_tensorboard(steps, run_dir, experts_total):
    """The step events' load-balancing loss and experts routed are the TensorBoard file's (float32)."""
    tb = tensorboard_scalars(os.path.join(run_dir, "tensorboard", "events.out.tfevents.megatrain"))
    for s in steps:
        assert s["experts_total"] == experts_total, s
        assert abs(s["aux_loss"] - tb[s["step"]]["train/aux_loss"]) <= 1e-6 * abs(s["aux_loss"]), s
        assert s["experts_routed"] == round(tb[s["step"]]["moe/experts_routed_ratio"] * experts_total), s
    return steps


def describe(ref_steps, replay):
    idle = "; ".join(f"{k + 1}: " + " ".join(f"L{l}E{e}" for l, e in s["idle"]) for k, s in enumerate(ref_steps))
    print(f"   idle experts by step (layer, expert): {idle}")
    print(f"   expert update counts {replay.updates}; smallest gap between a k-th and (k+1)-th router logit "
          f"{replay.min_gap:.3g}")


FMT = tp.FMT.replace("  {}", " {:>9s} {:>9s}  {}")


def line(label, d):
    return FMT.format(label, f"{d['loss_abs']:.2e}", f"{d['loss_rel']:.2e}", f"{d['gnorm_rel']:.2e}",
                      f"{d['w_abs']:.2e}", f"{d['w_rel']:.2e}", f"{d['aux_rel']:.2e}" if "aux_rel" in d else "-",
                      f"{d['m_rel']:.2e}" if "m_rel" in d else "-", d["w_worst"])


def main():
    a, work = tp.start(__doc__, "also replay the semantics MegaTrain does not follow", "train_parity_moe.")
    init = {}
    for family in FAMILIES:
        make_moe_model(os.path.join(work, "model_" + family), family)
        init[family] = initial_weights(os.path.join(work, "model_" + family), family)
    print(FMT.format("", "loss abs", "loss rel", "gnorm rel", "w max abs", "w rel", "aux rel", "m rel",
                     "(worst tensor by w rel)"))
    cache, results = {}, []
    for name, (spec, batches, floor, ref_key, family) in configs(work).items():
        if a.config and name not in a.config:
            continue
        model_dir = spec["model"]["hf_model"]
        experts_total = len({m.groups() for k in init[family]
                             if (m := re.search(r"layers\.(\d+)\.\w+\.experts\.(\d+)\.", k))})
        mt_steps, run_dir = tp.train_megatrain(a.megatrain, work, name, spec)
        mt_steps = check_against_tensorboard(mt_steps, run_dir, experts_total)
        mt_w, mt_m, mt_updates = megatrain_state(run_dir)
        if ref_key not in cache:
            cache[ref_key] = moe_replays(model_dir, batches, spec, family)
        ref, yard = cache[ref_key]
        d, dy, why = compare(mt_steps, mt_w, mt_m, mt_updates, ref, yard, init[family], floor)
        print(f"== {name}: {'ok' if not why else 'OUTSIDE TOLERANCE: ' + '; '.join(why)}")
        print(line("megatrain", d))
        print(line("torch fp32", dy))
        describe(ref[0], ref[2])
        r = tp.record(name, spec, d, "torch_fp32_vs_fp64", dy, why, mt_steps, ref[0])
        if a.variants:
            r["variants"] = {}
            for label, kw in {"stacked": dict(stacked=True), "aux_sum": dict(aux="sum"),
                              "no_aux": dict(aux="none"), "decay_all": {}}.items():
                v_steps, v_w = tp.reference(model_dir, batches, spec, decay_all=label == "decay_all",
                                            replay=MoeReplay(family, **kw))
                r["variants"][label] = v = tp.diff(mt_steps, mt_w, v_steps, v_w, init[family])
                print(line("vs " + label, v))
                if label == "decay_all":  # the tensors decay would move most: norms, biases, sinks
                    worst = sorted(v["tensors"], key=lambda k: -v["tensors"][k]["rel"])[:3]
                    print("   " + ", ".join(f"{k} {v['tensors'][k]['rel']:.2g}" for k in worst))
        results.append(r)
    return tp.finish(a, work, results)


if __name__ == "__main__":
    sys.exit(main())
