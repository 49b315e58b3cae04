#!/usr/bin/env python3
"""Fixtures of tests/engine/job/training_parity_test.cc: scripts/train_parity.py's model and data,
the job specs of the configurations that matter, and their float64 PyTorch replays.

Run by hand, from anywhere, with the venv scripts/train_parity.py names (megatrain is not needed):

    /tmp/tv/bin/python scripts/make_training_fixtures.py

It rewrites tests/fixtures/training/; what it writes is what is committed:

    model/                         the Hugging Face model every configuration starts from
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
                                   absolute fp32 weight would lose)

Only the first configuration of each replay has a reference: a_resident, c_speculative, c_devices2
and f_compact train what a_plain or c_accum_eod train (another executor, speculative updates, two
devices, the compact layout), so they have a spec only. Deterministic: a rerun writes the same
bytes (on the same torch version). About 5 s on a 2-core machine.
"""
import json
import os
import shutil
import sys

from safetensors.torch import save_file

import train_parity as tp

CONFIGS = ["a_plain", "a_resident", "b_clip", "c_accum_eod", "c_speculative", "c_devices2", "d_sft", "e_bf16",
           "f_compact"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join("tests", "fixtures", "training")  # relative to REPO, and so are the specs' paths


def write_reference(path, model_dir, spec, batches, init_w):
    """PATH.json and PATH.safetensors: the float64 replay of `spec` and its yardstick."""
    (ref_steps, ref_w), (yard_steps, yard_w) = tp.replays(model_dir, batches, spec)
    yard = tp.diff(yard_steps, yard_w, ref_steps, ref_w, init_w)
    record = {"steps": [{k: s[k] for k in ("loss", "grad_norm", "learning_rate")} for s in ref_steps],
              "yardstick": {k: yard[k] for k in ("loss_rel", "gnorm_rel", "w_rel")}}
    with open(path + ".json", "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    save_file({k: (ref_w[k] - init_w[k]).float().contiguous() for k in sorted(ref_w)}, path + ".safetensors")
    print(f"{os.path.basename(path)}: {len(ref_steps)} steps; PyTorch's own "
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
