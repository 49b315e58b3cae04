#!/usr/bin/env python3
"""Training-trajectory parity: `megatrain train` against the same training replayed in PyTorch.

Run by hand, like scripts/make_family_fixtures.py; it needs torch, transformers, safetensors and
numpy from PyPI in any venv outside the repository, and a built build/bin/megatrain:

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch transformers safetensors numpy
    /tmp/tv/bin/python scripts/train_parity.py [--megatrain build/bin/megatrain] [--keep DIR]
                                               [--json OUT.json] [CONFIG ...]

It builds a tiny random Llama (2 layers, hidden 16, 4 query and 2 key/value heads, vocab 256,
untied head, fp32; norm weights moved away from 1 so that decaying them or not shows; this small
so that its committed fixtures stay small, see below), saves it as a Hugging Face directory, and
for each configuration writes a small data set, runs `megatrain train` (init.from that directory,
CPU backend) for a few steps, exports the last checkpoint with `megatrain export --dtype fp32`,
and replays the same training in PyTorch:

  * the model: transformers' LlamaForCausalLM loaded from the same directory, in float64 (but
    transformers 5 computes RMSNorm's normalisation, attention probabilities and RoPE's angles in
    fp32 whatever the dtype; lifting that moves this replay by w rel <= 5e-7, 10x below PyTorch
    fp32's distance), eager attention; a packed row is run one document at a time (positions
    restarting at 0), which is what per-document attention masking and restarting RoPE mean;
  * the batches: the same rows MegaTrain's data sources serve (token files: consecutive windows
    of seq_len + 1 at stride seq_len; eod_id: Megatron's reset_position_ids rule; jsonl: the
    splitmix64 shuffle and first-fit packing of engine/data/packing.cc, replicated in
    scripts/train_parity_data.py);
  * the loss: the mean of cross-entropy over every counted target of the whole optimizer step
    (all micro-batches together), as transformers' Trainer does since 4.46 (num_items_in_batch);
  * torch.optim.AdamW, weight decay on matrices and embeddings and not on norms (transformers'
    Trainer's get_decay_parameter_names); torch.nn.utils.clip_grad_norm_; LambdaLR with the
    schedule MegaTrain documents (engine/optim/optimizer.cc LrSchedule::at).

Configurations: a_plain (token file, warmup + cosine to min_lr_ratio, weight decay, clip set but
never reached), a_resident (the same, resident executor), b_clip (clipping at every step),
c_accum_eod (4 micro-batches a step, eod_id documents, linear decay, clipping at some steps),
c_speculative and c_devices2 (the same with speculative updates / 2 devices), d_sft (jsonl
prompt/completion, byte tokenizer, packed, long examples split, unequal counted tokens per
micro-batch, into the second epoch), d_sft_padded (packing: false), e_bf16 (precision bf16),
f_compact (memory.layout compact).

Per configuration it prints MegaTrain's distance from the float64 replay (largest loss difference
over the steps, absolute and relative; grad-norm before clipping, relative; final weights: the
largest |dw| and, worst tensor, ||dw|| / ||w_ref - w_init||) and the same for PyTorch's own fp32
(bf16 autocast for e_bf16) replay: a configuration passes when MegaTrain is within a floor or 20x
PyTorch's own distance, and its per-step learning rates equal the schedule's. --variants also
replays other semantics (per-micro-batch loss means, weight decay on every parameter,
transformers' warmup) and prints MegaTrain's distance from each, to show what the check tells
apart. Exit status 1 when a configuration is outside tolerance. Deterministic (MegaTrain's CPU
runs are bit-identical run to run); about 15 s on a 2-core machine (x1.5 with --variants).

scripts/train_parity_moe.py runs the same check on mixtures of experts. make_training_fixtures.py
writes this model, the data, the specs of the configurations that matter (MoE's too) and their
float64 replays under tests/fixtures/training/, which tests/engine/job/training_parity_test.cc
holds MegaTrain to in every test run, without Python.
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from train_parity_data import VOCAB, example_rows, mark_documents, markov_tokens, sft_examples, token_file_rows

SEQ = 32


# ---------------------------------------------------------------------------------------------
# The model


def make_model(out_dir):
    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None, rope_theta=10000.0)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norms: away from 1, so weight decay on them (or not) is visible
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:  # a wider init than 0.02, so the loss moves visibly in a few steps
                p.normal_(0.0, 0.08)
    model.save_pretrained(out_dir)
    return cfg


# ---------------------------------------------------------------------------------------------
# MegaTrain's documented LR schedule, and transformers' nearest one (for the report only)


def mt_lr(base, step, warmup, total, decay, min_ratio):
    """engine/optim/optimizer.cc LrSchedule::at, 0-based step."""
    if step < warmup:
        return base * (step + 1) / warmup
    span = max(1, total - warmup)
    prog = min(1.0, (step - warmup) / span)
    f = {"cosine": 0.5 * (1 + math.cos(math.pi * prog)), "linear": 1 - prog, "constant": 1.0}[decay]
    return base * (min_ratio + (1 - min_ratio) * f)


def hf_lr(base, step, warmup, total, decay, min_ratio):
    """transformers get_cosine_with_min_lr_schedule_with_warmup (cosine) / linear / constant_with_warmup."""
    if step < warmup:
        return base * step / max(1, warmup)
    prog = (step - warmup) / max(1, total - warmup)
    if decay == "cosine":
        f = 0.5 * (1 + math.cos(math.pi * prog))
        return base * (f * (1 - min_ratio) + min_ratio)
    if decay == "linear":
        return base * max(0.0, (total - step) / max(1, total - warmup))
    return base


# ---------------------------------------------------------------------------------------------
# The PyTorch replay


def documents(posrow):
    starts = [t for t in range(len(posrow)) if posrow[t] == 0] + [len(posrow)]
    return list(zip(starts[:-1], starts[1:]))


class DenseReplay:
    """What reference() does that depends on the model, for a dense decoder (train_parity_moe.py's
    MoeReplay: a mixture of experts, each expert an AdamW parameter of its own)."""
    load_kwargs = {}

    def param_groups(self, model, weight_decay, decay_all):  # decay on matrices and embeddings
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2 or decay_all]
        no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 or decay_all)]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def clipped(self, model, groups):  # what clip_grad_norm_ sums, in its order
        return list(model.parameters())

    def micro_batch(self, model, inp, tgt, pos, denom, nmicro, autocast_bf16):
        """Forward and backward of one micro-batch's rows, each document by itself: accumulates
        d(cross-entropy sum / denom); returns the cross-entropy sums (of each forward)."""
        sums = []
        for r in range(inp.shape[0]):
            for a, b in (documents(pos[r]) if pos is not None else [(0, inp.shape[1])]):
                t = torch.tensor(tgt[r, a:b])
                if not (t >= 0).any():
                    continue
                ids = torch.tensor(inp[r, a:b])[None]
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16):
                    logits = model(input_ids=ids, position_ids=torch.arange(b - a)[None]).logits[0]
                l = F.cross_entropy(logits.float() if autocast_bf16 else logits, t, ignore_index=-1, reduction="sum")
                sums.append(l.item())
                (l / denom).backward()
        return sums

    def before_update(self, model):  # after the step's backward, before clipping
        pass

    def after_update(self, model, record):  # after its update; may add to the step's record
        pass

    def final_state(self, model, opt):
        return {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}


def reference(model_dir, steps, c, dtype=torch.float64, autocast_bf16=False, loss_mode="step_tokens",
              decay_all=False, schedule="megatrain", replay=None):
    """Replays training; returns per-step (loss, grad_norm, lr) and the final state dict (float64).

    dtype/autocast_bf16: float64 is the oracle; float32, and float32 under CPU bf16 autocast, are
    yardsticks (how far PyTorch's own fp32 / bf16 lands from it). The other options replay a
    different semantics, to show that the check tells them apart:
      loss_mode "step_tokens": the mean over the counted targets of the whole step (MegaTrain's
        claim; transformers >= 4.46 with num_items_in_batch); "micro_mean": each micro-batch's
        own mean, averaged over the micro-batches (transformers < 4.46, many hand-written loops);
      decay_all: weight decay on every parameter (torch.optim.AdamW(model.parameters()));
      schedule "hf": transformers' get_*_schedule_with_warmup (lr 0 at the first step).
    replay: a DenseReplay (the default) or train_parity_moe.py's MoeReplay."""
    replay = replay or DenseReplay()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager",
                                                 **replay.load_kwargs)
    model.train()
    o = c["optimizer"]
    groups = replay.param_groups(model, o["weight_decay"], decay_all)
    opt = torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], foreach=False)
    s = c["schedule"]
    lr_fn = mt_lr if schedule == "megatrain" else hf_lr
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: lr_fn(1.0, k, s["warmup_steps"], c["steps"], s["decay"], s["min_lr_ratio"]))
    params = replay.clipped(model, groups)
    mb, out = c["micro_batch"], []
    for inp, tgt, pos in steps:
        model.zero_grad(set_to_none=False)
        counted = int((tgt >= 0).sum())
        loss_sum = 0.0
        nmicro = inp.shape[0] // mb
        for m in range(nmicro):
            rows = slice(m * mb, (m + 1) * mb)
            m_counted = int((tgt[rows] >= 0).sum())
            denom = counted if loss_mode == "step_tokens" else m_counted * nmicro
            for v in replay.micro_batch(model, inp[rows], tgt[rows], None if pos is None else pos[rows], denom,
                                        nmicro, autocast_bf16):
                loss_sum += v
        replay.before_update(model)
        clip = o["grad_clip"]
        norm = float(torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf")))
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        out.append({"loss": loss_sum / counted, "grad_norm": norm, "learning_rate": lr, "counted": counted})
        replay.after_update(model, out[-1])
    return out, replay.final_state(model, opt)


# ---------------------------------------------------------------------------------------------
# The configurations


def base_spec(name, model_dir, **kw):
    spec = {"name": name, "model": {"hf_model": model_dir}, "init": {"from": model_dir},
            "seq_len": SEQ, "micro_batch": 4, "global_batch": 4, "steps": 8,
            "optimizer": {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 0.0},
            "schedule": {"warmup_steps": 3, "decay": "cosine", "min_lr_ratio": 0.1},
            "checkpoint": {"every": 0, "keep": 1}, "precision": "fp32", "backend": "cpu",
            "executor": "streaming"}
    spec.update(kw)
    return spec


def configs(work, model_dir):
    """name -> (spec, per-step batches, tolerance floors, reference key). Configurations with the
    same reference key train the same thing (they differ only in how MegaTrain computes it:
    executor, speculation, devices), so they share one PyTorch replay."""
    out = {}
    tok = markov_tokens(6000, seed=7)
    tok.tofile(os.path.join(work, "tokens.bin"))
    tok_eod = markov_tokens(6000, seed=8, eod=0)
    tok_eod.tofile(os.path.join(work, "tokens_eod.bin"))
    lines, examples = sft_examples(seed=9)
    with open(os.path.join(work, "sft.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")

    def token_steps(t, spec, eod=None):
        G, n = spec["global_batch"], spec["steps"]
        inp, tgt = token_file_rows(t, G * n, SEQ)
        pos = mark_documents(inp, eod) if eod is not None else None
        return [(inp[k * G:(k + 1) * G], tgt[k * G:(k + 1) * G], None if pos is None else pos[k * G:(k + 1) * G])
                for k in range(n)]

    def sft_steps(spec, packed):
        G, n = spec["global_batch"], spec["steps"]
        if packed:
            inp, tgt, pos = example_rows(examples, G * n, SEQ, seed=spec["data"]["seed"])
        else:  # one example (piece) per row, padded: window 1 and no document positions
            inp, tgt, pos = example_rows(examples, G * n, SEQ, seed=spec["data"]["seed"], window=0)
            pos = None
        return [(inp[k * G:(k + 1) * G], tgt[k * G:(k + 1) * G], None if pos is None else pos[k * G:(k + 1) * G])
                for k in range(n)]

    # Floors: MegaTrain may also be 20x as far from float64 as PyTorch fp32 (bf16) is. Adam's
    # m / (sqrt(v) + eps) turns rounding noise in a gradient element near 0 (a sum that cancels)
    # into up to lr of update: with eps 1e-8 and clipped, accumulated gradients PyTorch's own fp32
    # lands ~5e-3 (w rel) from float64 in (c). So (b) and (c) use eps 1e-6 / 1e-5, which also
    # makes eps's placement visible; (a), (d), (e), (f) keep 1e-8.
    fp32 = {"loss_rel": 1e-6, "gnorm_rel": 1e-5, "w_rel": 2e-4}
    tokens = {"source": "tokens", "path": os.path.join(work, "tokens.bin"), "dtype": "uint16"}
    eod = {"source": "tokens", "path": os.path.join(work, "tokens_eod.bin"), "dtype": "uint16", "eod_id": 0}
    sft = {"source": "jsonl", "path": os.path.join(work, "sft.jsonl"), "tokenizer": "byte",
           "format": "prompt_completion", "packing": True, "seed": 3}

    # (a) plain LM on a token file, warmup + cosine to min_lr_ratio, weight decay, clip set but never reached
    s = base_spec("a_plain", model_dir, data=tokens)
    s["optimizer"]["grad_clip"] = 100.0
    out["a_plain"] = (s, token_steps(tok, s), fp32, "a")
    # (a') the same through the resident executor (the oracle)
    s = dict(copy.deepcopy(s), name="a_resident", executor="resident")
    out["a_resident"] = (s, token_steps(tok, s), fp32, "a")
    # (b) clipping active at every step
    s = base_spec("b_clip", model_dir, data=tokens)
    s["optimizer"].update(grad_clip=0.05, eps=1e-6)
    out["b_clip"] = (s, token_steps(tok, s), fp32, "b")
    # (c) gradient accumulation: 4 micro-batches of 2, packed documents (eod_id), linear decay to 0,
    #     clip 1.0 (active at the first steps, not at the last)
    s = base_spec("c_accum_eod", model_dir, micro_batch=2, global_batch=8, data=eod,
                  schedule={"warmup_steps": 2, "decay": "linear", "min_lr_ratio": 0.0})
    s["optimizer"].update(grad_clip=1.0, eps=1e-5)
    out["c_accum_eod"] = (s, token_steps(tok_eod, s, eod=0), fp32, "c")
    # (c') the same with speculative updates (updates during the backward, redone when it clips)
    s = dict(copy.deepcopy(s), name="c_speculative", speculative_updates="on")
    out["c_speculative"] = (s, token_steps(tok_eod, s, eod=0), fp32, "c")
    # (c'') the same over 2 devices of this process (data parallel over one host store)
    s = dict(copy.deepcopy(s), name="c_devices2", speculative_updates="off", devices=2)
    out["c_devices2"] = (s, token_steps(tok_eod, s, eod=0), fp32, "c")
    # (d) SFT jsonl, prompt masked, packed, long examples split, 3 micro-batches with unequal
    #     counted tokens, more rows than one epoch (the second epoch's shuffle)
    s = base_spec("d_sft", model_dir, micro_batch=2, global_batch=6, data=sft)
    out["d_sft"] = (s, sft_steps(s, True), fp32, "d")
    # (d') the same unpacked: one example (piece) per row, padded
    s = base_spec("d_sft_padded", model_dir, micro_batch=2, global_batch=4, data=dict(sft, packing=False))
    out["d_sft_padded"] = (s, sft_steps(s, False), fp32, "d_padded")
    # (e) bf16 compute (fp32 masters and moments): within 20x of PyTorch's CPU bf16 autocast
    s = base_spec("e_bf16", model_dir, data=tokens, precision="bf16")
    out["e_bf16"] = (s, token_steps(tok, s), {"loss_rel": 1e-3, "gnorm_rel": 2e-2, "w_rel": 0.1}, "e")
    # (f) the compact layout (bf16 moments and gradients on the host), fp32 compute: no PyTorch
    #     counterpart, so only the floors (bf16 storage of Adam's moments: ~1e-3 relative per step)
    s = base_spec("f_compact", model_dir, data=tokens, memory={"layout": "compact"})
    s["optimizer"]["grad_clip"] = 100.0
    out["f_compact"] = (s, token_steps(tok, s), {"loss_rel": 1e-4, "gnorm_rel": 1e-3, "w_rel": 0.02}, "a")
    return out


# ---------------------------------------------------------------------------------------------


def save_spec(path, spec):
    """The job spec file `megatrain train` reads (also a committed fixture: make_training_fixtures.py)."""
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
        f.write("\n")


def weights_f64(path):
    """A safetensors file's tensors, by name, in float64."""
    return {k: v.to(torch.float64) for k, v in load_file(path).items()}


def train_megatrain(exe, work, name, spec):  # -> its step events, the run's directory
    spec_path = os.path.join(work, name + ".json")
    save_spec(spec_path, spec)
    out_dir = os.path.join(work, "run_" + name)
    shutil.rmtree(out_dir, ignore_errors=True)
    p = subprocess.run([exe, "train", spec_path, "--out", out_dir, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"megatrain train {name} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("event") == "step"], out_dir


def run_megatrain(exe, work, name, spec):
    steps, out_dir = train_megatrain(exe, work, name, spec)
    exp = os.path.join(work, "export_" + name)
    shutil.rmtree(exp, ignore_errors=True)
    p = subprocess.run([exe, "export", os.path.join(out_dir, "checkpoints"), exp, "--dtype", "fp32"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"megatrain export {name} failed:\n{p.stdout}\n{p.stderr}")
    weights = {}
    for fn in sorted(os.listdir(exp)):
        if fn.endswith(".safetensors"):
            weights.update(weights_f64(os.path.join(exp, fn)))
    return steps, weights


def replays(model_dir, batches, spec):
    """The float64 oracle and the yardstick: PyTorch's own fp32 (CPU bf16 autocast for a bf16 spec)."""
    bf16 = spec["precision"] == "bf16"
    return (reference(model_dir, batches, spec),
            reference(model_dir, batches, spec, dtype=torch.float32, autocast_bf16=bf16))


def diff(x_steps, x_w, y_steps, y_w, init_w):
    """How far trajectory x lies from y: losses, grad norms and LRs per step, final weights per tensor
    (max |dw|, and ||x - y|| / ||y - init||: the difference relative to how far training moved it)."""
    d = {"steps": len(x_steps), "ref_steps": len(y_steps)}
    pairs = list(zip(x_steps, y_steps))
    d["loss_abs"] = max(abs(a["loss"] - b["loss"]) for a, b in pairs)
    d["loss_rel"] = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in pairs)
    d["gnorm_rel"] = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in pairs)
    d["lr_rel"] = max(abs(a["learning_rate"] - b["learning_rate"]) / max(abs(a["learning_rate"]), abs(b["learning_rate"]), 1e-30) for a, b in pairs)
    d["loss_per_step"] = [abs(a["loss"] - b["loss"]) for a, b in pairs]
    d["missing_tensors"] = sorted(set(x_w) ^ set(y_w))
    tens = {}
    for k in sorted(set(x_w) & set(y_w)):
        dw = x_w[k] - y_w[k]
        moved = float((y_w[k] - init_w[k]).norm())  # 0: y never updated it (an expert never routed)
        rel = float(dw.norm()) / moved if moved else 0.0 if not dw.any() else float("inf")
        tens[k] = {"max_abs": float(dw.abs().max()), "rel": rel}
    d["tensors"] = tens
    d["w_abs"] = max(t["max_abs"] for t in tens.values())
    d["w_rel"] = max(t["rel"] for t in tens.values())
    d["w_worst"] = max(tens, key=lambda k: tens[k]["rel"])
    return d


def within(d, yard, floor):
    """MegaTrain's distance from the float64 oracle against the floor and 20x PyTorch's own (fp32
    or bf16) distance from it: rounding is all that may separate them."""
    why = []
    if d["steps"] != d["ref_steps"] or d["missing_tensors"]:
        why.append("steps or tensors differ")
    if d["lr_rel"] > 1e-6:
        why.append(f"lr rel {d['lr_rel']:.1e}")
    for key in ("loss_rel", "gnorm_rel", "w_rel"):
        lim = max(floor[key], 20 * yard[key])
        if d[key] > lim:
            why.append(f"{key} {d[key]:.2e} > {lim:.2e}")
    return why


FMT = "{:<12s} {:>9s} {:>9s} {:>9s} {:>9s} {:>9s}  {}"


def line(label, d):
    return FMT.format(label, f"{d['loss_abs']:.2e}", f"{d['loss_rel']:.2e}", f"{d['gnorm_rel']:.2e}",
                      f"{d['w_abs']:.2e}", f"{d['w_rel']:.2e}", d["w_worst"])


def quiet_deterministic_torch():
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    torch.use_deterministic_algorithms(True)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


# ---------------------------------------------------------------------------------------------
# The driver, shared with train_parity_moe.py


def start(doc, variants_help, prefix):
    """The command line (its arguments) and the work directory, with torch made quiet and deterministic."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--megatrain", default=os.path.join(here, "..", "build", "bin", "megatrain"))
    ap.add_argument("--keep", help="work in this directory and keep it")
    ap.add_argument("--json", help="write the full comparison here")
    ap.add_argument("--variants", action="store_true", help=variants_help)
    ap.add_argument("config", nargs="*")
    a = ap.parse_args()
    quiet_deterministic_torch()
    work = a.keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(work, exist_ok=True)
    return a, work


def record(name, spec, d, yard_key, yard, why, mt_steps, ref_steps):
    """One configuration's entry of --json."""
    return {"config": name, "spec": spec, "megatrain_vs_fp64": d, yard_key: yard, "ok": not why, "why": why,
            "per_step": [{"step": k + 1, "megatrain": m, "fp64": f} for k, (m, f) in enumerate(zip(mt_steps, ref_steps))]}


def finish(a, work, results):
    """Writes --json, removes the work directory unless --keep; the exit status."""
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    failed = [r["config"] for r in results if not r["ok"]]
    if failed:
        print("outside tolerance: " + ", ".join(failed))
        return 1
    return 0


def main():
    a, work = start(__doc__, "also replay other semantics (per-micro-batch means, decay on every parameter, "
                             "transformers' warmup) and say how far MegaTrain is from each", "train_parity.")
    model_dir = os.path.join(work, "model")
    make_model(model_dir)
    init_w = weights_f64(os.path.join(model_dir, "model.safetensors"))
    results = []
    print(FMT.format("", "loss abs", "loss rel", "gnorm rel", "w max abs", "w rel", "(worst tensor by w rel)"))
    cache = {}
    for name, (spec, batches, floor, ref_key) in configs(work, model_dir).items():
        if a.config and name not in a.config:
            continue
        mt_steps, mt_w = run_megatrain(a.megatrain, work, name, spec)
        bf16 = spec["precision"] == "bf16"
        if ref_key not in cache:
            cache[ref_key] = replays(model_dir, batches, spec)
        (ref_steps, ref_w), (y_steps, y_w) = cache[ref_key]
        d, yard = diff(mt_steps, mt_w, ref_steps, ref_w, init_w), diff(y_steps, y_w, ref_steps, ref_w, init_w)
        why = within(d, yard, floor)
        r = record(name, spec, d, "torch_bf16_vs_fp64" if bf16 else "torch_fp32_vs_fp64", yard, why, mt_steps,
                   ref_steps)
        print(f"== {name}: {'ok' if not why else 'OUTSIDE TOLERANCE: ' + '; '.join(why)}")
        print(line("megatrain", d))
        print(line("torch bf16" if bf16 else "torch fp32", yard))
        if a.variants:
            alts = {"micro_mean": dict(loss_mode="micro_mean"), "hf_sched": dict(schedule="hf")}
            if spec["optimizer"]["weight_decay"] > 0:
                alts["decay_all"] = dict(decay_all=True)
            r["variants"] = {}
            for label, kw in alts.items():
                v_steps, v_w = reference(model_dir, batches, spec, **kw)
                r["variants"][label] = v = diff(mt_steps, mt_w, v_steps, v_w, init_w)
                print(line("vs " + label, v))
        results.append(r)
    return finish(a, work, results)


if __name__ == "__main__":
    sys.exit(main())
