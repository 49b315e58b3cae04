#!/usr/bin/env python3
"""Fixtures of tests/engine/job/training_parity_test.cc: scripts/train_parity.py's model and data,
the job specs of the configurations that matter, and their float64 PyTorch replays.

Run by hand, from anywhere, with the venv scripts/train_parity.py names (megatrain is not needed):

    /tmp/tv/bin/python scripts/make_training_fixtures.py

It rewrites tests/fixtures/training/; what it writes is what is committed:

    model/                         the Hugging Face model every dense configuration starts from
    model_mixtral/, model_gpt_oss/ the mixtures of experts of scripts/train_parity_moe.py
    tokens.bin, tokens_eod.bin,    the data sets
    sft.jsonl
    specs/CONFIG.json              the job spec train_parity.py passes to `megatrain train`; its
                                   paths are relative to the repository root (run it from there)
    reference/CONFIG.json          the float64 replay's steps (loss, grad_norm before clipping,
                                   learning_rate), and "yardstick": how far PyTorch's own fp32 (CPU
                                   bf16 autocast for a bf16 spec) lands from it, as train_parity.py
                                   measures (loss_rel, gnorm_rel, w_rel: its largest over steps/tensors)
    reference/CONFIG.safetensors   the replay's final weights as fp32 deltas from model/'s, by Hugging
                                   Face name (w_ref - w_init: a delta keeps the precision that an
                                   absolute fp32 weight would lose); a mixture of experts' by
                                   MegaTrain's checkpoint names (each expert's tensors apart)
    reference/M.json, M.safetensors  a mixture of experts' (m_*) also holds per step aux_loss (the
                                   mean over micro-batches of the load-balancing loss, before its
                                   coefficient), experts_routed and idle ([layer, expert] without a
                                   token), expert_updates (each expert's AdamW step count at the end,
                                   trainer_state.json's order), and aux_rel, m_rel in its yardstick
    reference/M.moments.safetensors  the final Adam moments (NAME.exp_avg, NAME.exp_avg_sq) of the
                                   experts the last step left idle (the final weights pin down the
                                   others'; an idle step that decayed these would not show in them)

Only the first configuration of each replay has a reference: a_resident, c_speculative, c_devices2,
f_compact, m_mixtral_resident and m_mixtral_speculative train what a_plain, c_accum_eod or m_mixtral
train (another executor, speculative updates, two devices, the compact layout), so they have a spec
only. Deterministic: a rerun writes the same bytes (on the same torch version). About 10 s on a
2-core machine.
"""
import json
import os
import shutil
import sys

from safetensors.torch import save_file

import train_parity as tp
import train_parity_moe as tpm

CONFIGS = ["a_plain", "a_resident", "b_clip", "c_accum_eod", "c_speculative", "c_devices2", "d_sft", "e_bf16",
           "f_compact", "m_mixtral", "m_mixtral_resident", "m_mixtral_speculative", "m_gpt_oss"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join("tests", "fixtures", "training")  # relative to REPO, and so are the specs' paths


def save_replay(path, record, ref_w, init_w):
    """PATH.json (the record) and PATH.safetensors (the final weights as fp32 deltas from init_w)."""
    with open(path + ".json", "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    save_file({k: (ref_w[k] - init_w[k]).float().contiguous() for k in sorted(ref_w)}, path + ".safetensors")


def write_reference(path, model_dir, spec, batches, init_w):
    """PATH.json and PATH.safetensors: the float64 replay of `spec` and its yardstick."""
    (ref_steps, ref_w), (yard_steps, yard_w) = tp.replays(model_dir, batches, spec)
    yard = tp.diff(yard_steps, yard_w, ref_steps, ref_w, init_w)
    record = {"steps": [{k: s[k] for k in ("loss", "grad_norm", "learning_rate")} for s in ref_steps],
              "yardstick": {k: yard[k] for k in ("loss_rel", "gnorm_rel", "w_rel")}}
    save_replay(path, record, ref_w, init_w)
    print(f"{os.path.basename(path)}: {len(ref_steps)} steps; PyTorch's own "
          + ", ".join(f"{k} {v:.2e}" for k, v in record["yardstick"].items()))


def write_moe_reference(path, model_dir, spec, batches, family):
    """PATH.json, PATH.safetensors and PATH.moments.safetensors of a mixture of experts."""
    ref, yard = tpm.moe_replays(model_dir, batches, spec, family)
    init_w = tpm.initial_weights(model_dir, family)
    d = tpm.distance(yard[0], yard[1], yard[2].moments, ref, init_w)
    ref_steps, ref_w, replay = ref
    keys = ("loss", "grad_norm", "learning_rate", "aux_loss", "experts_routed", "idle")
    record = {"steps": [{k: s[k] for k in keys} for s in ref_steps], "expert_updates": replay.updates,
              "yardstick": {k: d[k] for k in ("loss_rel", "gnorm_rel", "w_rel", "aux_rel", "m_rel")}}
    save_replay(path, record, ref_w, init_w)
    # the moments of the experts the last step left idle: the final weights pin down the others'
    # (their last update used them), not these (an idle step that decayed them would not show)
    idle = tuple(f".layers.{l}.{'block_sparse_moe' if family == 'mixtral' else 'mlp'}.experts.{e}."
                 for l, e in ref_steps[-1]["idle"])
    save_file({k: v.float().contiguous() for k, v in sorted(replay.moments.items()) if any(i in k for i in idle)},
              path + ".moments.safetensors")
    print(f"{os.path.basename(path)}: {len(ref_steps)} steps, idle experts per step "
          f"{[len(s['idle']) for s in ref_steps]}, update counts {replay.updates}; PyTorch's own "
          + ", ".join(f"{k} {v:.2e}" for k, v in record["yardstick"].items()))


def main():
    os.chdir(REPO)
    tp.quiet_deterministic_torch()
    shutil.rmtree(OUT, ignore_errors=True)
    for sub in ("specs", "reference"):
        os.makedirs(os.path.join(OUT, sub))
    model_dir = os.path.join(OUT, "model")
    tp.make_model(model_dir)
    init_w = tp.weights_f64(os.path.join(model_dir, "model.safetensors"))
    replayed = set()
    for name, (spec, batches, _floor, ref_key) in tp.configs(OUT, model_dir).items():
        if name not in CONFIGS:
            continue
        tp.save_spec(os.path.join(OUT, "specs", name + ".json"), spec)
        if ref_key not in replayed:
            replayed.add(ref_key)
            write_reference(os.path.join(OUT, "reference", name), model_dir, spec, batches, init_w)
    moe = tpm.configs(OUT)
    for family in sorted({moe[name][4] for name in moe if name in CONFIGS}):
        tpm.make_moe_model(os.path.join(OUT, "model_" + family), family)
    for name, (spec, batches, _floor, ref_key, family) in moe.items():
        if name not in CONFIGS:
            continue
        tp.save_spec(os.path.join(OUT, "specs", name + ".json"), spec)
        if ref_key not in replayed:
            replayed.add(ref_key)
            write_moe_reference(os.path.join(OUT, "reference", name), spec["model"]["hf_model"], spec, batches, family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
