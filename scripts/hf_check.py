#!/usr/bin/env python3
"""Ecosystem check (not part of scripts/test.sh: it needs torch + transformers from PyPI).

Loads a `megatrain export` directory with Hugging Face transformers' AutoModelForCausalLM and
prints the mean loss per token over a uint16 token file, using the same windows as
`megatrain eval --seq-len T` (consecutive windows of T+1 tokens, stride T). The two numbers
must agree to the printed 6 decimals:

    build/bin/megatrain export RUN/checkpoints OUT --dtype fp32
    build/bin/megatrain eval --model OUT --data tokens.bin --format uint16 --seq-len 256
    python3 scripts/hf_check.py OUT tokens.bin 256
"""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main(model_dir: str, data: str, T: int) -> None:
    tokens = np.fromfile(data, dtype=np.uint16).astype(np.int64)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    n = (len(tokens) - 1) // T
    total = 0.0
    with torch.no_grad():
        for i in range(n):
            w = torch.tensor(tokens[i * T : i * T + T + 1])[None]
            logits = model(w[:, :-1]).logits[0]
            total += torch.nn.functional.cross_entropy(logits, w[0, 1:], reduction="sum").item()
    print(f"{total / (n * T):.6f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
