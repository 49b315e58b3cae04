#!/usr/bin/env python3
"""Parity fixtures for the model families (tests/engine/model/family_parity_test.cc).

Run by hand, like scripts/make_tokenizer_fixtures.py; it needs torch and transformers from PyPI
(any venv: python3 -m venv V && V/bin/pip install torch transformers safetensors):

    V/bin/python scripts/make_family_fixtures.py tests/fixtures/families [FAMILY ...]

For each family it builds a tiny random model with that family's variants switched on (a
sliding window shorter than the sequence, q/k norms, GQA, head_dim != hidden / heads, tied and
untied heads, Gemma's local/global layers with two RoPE bases and a scaled global table, Gemma
2's soft caps) and
writes, under OUT/FAMILY/:

    config.json, model.safetensors   the model as transformers saves it (fp32)
    batch.json                       tokens, targets (-1: not counted) and document positions
                                     [B][T]; loss (the mean over counted targets) and count
    grads.safetensors                d(loss)/d(every parameter), under its Hugging Face name

Row 0 of the batch is one document; row 1 packs three (positions restart at each), so the
oracle runs each document on its own — what a packed row's attention mask means — and sums.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

B, T, VOCAB = 2, 12, 96
DOCS = [[12], [5, 4, 3]]  # document lengths per row
WINDOW = 4                # shorter than the sequence and than the first packed document

COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)

FAMILIES = {
    "qwen3": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], num_hidden_layers=2, head_dim=12,
                  tie_word_embeddings=True, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
                  rope_theta=20000.0),
    "olmo2": dict(model_type="olmo2", architectures=["Olmo2ForCausalLM"], num_hidden_layers=2,
                  tie_word_embeddings=False, rope_theta=30000.0),
    "gemma3": dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], num_hidden_layers=3, head_dim=12,
                   tie_word_embeddings=True, sliding_window=WINDOW,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   query_pre_attn_scalar=20, hidden_activation="gelu_pytorch_tanh",
                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}}),
    "phi3": dict(model_type="phi3", architectures=["Phi3ForCausalLM"], num_hidden_layers=2,
                 tie_word_embeddings=False, sliding_window=WINDOW, rope_theta=25000.0, resid_pdrop=0.0,
                 embd_pdrop=0.0, attention_dropout=0.0),
    "mistral": dict(model_type="mistral", architectures=["MistralForCausalLM"], num_hidden_layers=2, head_dim=12,
                    tie_word_embeddings=False, sliding_window=WINDOW, rope_theta=15000.0),
    # soft caps small enough to bend these scores and logits
    "gemma2": dict(model_type="gemma2", architectures=["Gemma2ForCausalLM"], num_hidden_layers=3, head_dim=12,
                   tie_word_embeddings=True, sliding_window=WINDOW, query_pre_attn_scalar=10,
                   attn_logit_softcapping=2.0, final_logit_softcapping=3.0, hidden_activation="gelu_pytorch_tanh",
                   rope_theta=12000.0),
}


def batch(gen):
    tokens = torch.randint(0, VOCAB, (B, T), generator=gen)
    targets = torch.randint(0, VOCAB, (B, T), generator=gen)
    targets[0, 3] = -1
    targets[1, 7] = -1
    pos = torch.zeros(B, T, dtype=torch.long)
    for b, lengths in enumerate(DOCS):
        t = 0
        for n in lengths:
            pos[b, t:t + n] = torch.arange(n)
            t += n
    return tokens, targets, pos


def randomise(model, gen):
    """Weights far from the init, so every tensor (norms included) shapes the loss."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))


def loss_of(model, tokens, targets):
    total, count = 0.0, 0
    for b, lengths in enumerate(DOCS):
        t = 0
        for n in lengths:
            logits = model(tokens[b:b + 1, t:t + n]).logits[0]
            tgt = targets[b, t:t + n]
            total = total + torch.nn.functional.cross_entropy(logits, tgt, ignore_index=-1, reduction="sum")
            count += int((tgt >= 0).sum())
            t += n
    return total / count, count


def make(out, name, cfg_kwargs, seed):
    gen = torch.Generator().manual_seed(seed)
    config = AutoConfig.for_model(**{**COMMON, **cfg_kwargs})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    randomise(model, gen)
    tokens, targets, pos = batch(gen)
    loss, count = loss_of(model, tokens, targets)
    loss.backward()
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    grads = {n: p.grad.detach().contiguous() for n, p in model.named_parameters()}
    save_file(grads, os.path.join(d, "grads.safetensors"))
    with open(os.path.join(d, "batch.json"), "w") as f:
        json.dump({"tokens": tokens.tolist(), "targets": targets.tolist(), "pos": pos.tolist(),
                   "loss": float(loss), "count": count}, f)
    print(f"{name}: loss {float(loss):.6f} over {count} targets, {len(grads)} tensors")


def main(out, only):
    for i, (name, kw) in enumerate(FAMILIES.items()):
        if not only or name in only:
            make(out, name, kw, 1234 + i)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
