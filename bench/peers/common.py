"""What the peer benches share: the model shape (our presets are Hugging Face config.json
files), the synthetic batches, the FLOP counts and the JSON line, with the same field names
as `megatrain-bench step --json` so that docs/PERF.md compares them row by row.

Every peer trains the same thing as our step bench: `--preset` with `--layers` decoder layers,
`--global-batch` sequences of `--seq-len` tokens per optimizer step in micro-batches of
`--micro-batch`, random weights, random tokens, bf16 compute over fp32 master weights.
"""
import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT = sys.stdout  # where the one result line goes: see keep_stdout_for_the_result


def keep_stdout_for_the_result():
    """stdout carries exactly one JSON line (scripts/gpu_check.sh saves it as the peer's .json);
    whatever a library prints there, from Python or C (DeepSpeed's op builds, its logger), goes to
    stderr instead."""
    global RESULT
    sys.stdout.flush()
    RESULT = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def parse_args(peer, extra=None):
    p = argparse.ArgumentParser(description=f"{peer}: one training step timed, as megatrain-bench step")
    p.add_argument("--preset", default="qwen2.5-7b")
    p.add_argument("--layers", type=int, default=4, help="decoder layers (0: the preset's)")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", action="store_true")
    if extra:
        extra(p)
    a = p.parse_args()
    keep_stdout_for_the_result()
    if a.global_batch % a.micro_batch:
        p.error("--global-batch must be a multiple of --micro-batch")
    return a


def hf_config(a):
    """The preset's config.json as a transformers config, with --layers decoder layers."""
    from transformers import AutoConfig

    with open(os.path.join(ROOT, "engine", "model", "presets", a.preset + ".json")) as f:
        d = json.load(f)
    if a.layers:
        d["num_hidden_layers"] = a.layers
        d["max_window_layers"] = min(d.get("max_window_layers", a.layers), a.layers)
    d.pop("architectures", None)
    d.pop("torch_dtype", None)
    return AutoConfig.for_model(d.pop("model_type"), **d)


def batches(a, vocab, device):
    """Random tokens for every step: [micro-batches][micro_batch, seq_len] int64."""
    import torch

    g = torch.Generator().manual_seed(1)
    n = a.global_batch // a.micro_batch
    return [torch.randint(0, vocab, (a.micro_batch, a.seq_len), generator=g).to(device) for _ in range(n)]


def flops_per_token(cfg, seq_len):
    """As bench_step.cc model_flops_per_token: 6 x matmul parameters + causal attention."""
    C, F, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    D = getattr(cfg, "head_dim", None) or C // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * D, cfg.num_key_value_heads * D
    per_layer = (q + 2 * kv) * C + C * q + 3 * F * C
    return 6 * (L * per_layer + cfg.vocab_size * C) + 6.0 * L * seq_len * q


def time_steps(a, step, sync):
    """Median seconds of a.steps timed steps after a.warmup untimed ones."""
    times = []
    for s in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], loss


def emit(a, peer, cfg, params, step_s, loss, **fields):
    tokens = a.global_batch * a.seq_len
    fpt = flops_per_token(cfg, a.seq_len)
    out = {
        "suite": "step", "peer": peer, "preset": a.preset, "layers": cfg.num_hidden_layers,
        "precision": "bf16", "seq_len": a.seq_len, "micro_batch": a.micro_batch,
        "global_batch": a.global_batch, "params": params, "step_seconds": step_s,
        "tokens_per_second": tokens / step_s, "model_flops_per_token": fpt,
        "model_tflops_6nt": 6.0 * params * tokens / step_s / 1e12, "model_tflops": fpt * tokens / step_s / 1e12,
        "loss": float(loss), "python": platform.python_version(),
    }
    out.update(fields)
    print(json.dumps(out) if a.json else "\n".join(f"{k:24} {v}" for k, v in out.items()), file=RESULT, flush=True)


def torch_on_device(peer):
    """torch, transformers' AutoModelForCausalLM and the device to run on, or fail() saying what is
    missing. The device is CUDA unless MT_PEER_DEVICE=cpu asks for a smoke run on the host (a check
    that the script, its model and its library's configuration work before a GPU lease is spent on
    them: bench/peers/cpu_smoke.py; its times mean nothing)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        fail(peer, f"cannot import torch/transformers: {e}")
    device = os.environ.get("MT_PEER_DEVICE", "cuda")
    if device not in ("cuda", "cpu"):
        fail(peer, f"MT_PEER_DEVICE={device}: cuda or cpu")
    if device == "cuda" and not torch.cuda.is_available():
        fail(peer, "no CUDA device")
    return torch, AutoModelForCausalLM, device


def start_timing(torch, device):
    """The synchronisation a timed step needs; on CUDA the peak-memory count starts here."""
    if device == "cpu":
        return lambda: None
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.synchronize


def device_report(torch, device):
    """The JSON fields that depend on the device, read after the timed steps."""
    if device == "cpu":
        return {"device": "cpu", "smoke": True, "torch": torch.__version__}
    return {"device": torch.cuda.get_device_name(), "device_peak_bytes": torch.cuda.max_memory_allocated(),
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}


def fail(peer, why):
    """A peer that cannot run says exactly why, as one JSON line, and exits 3 (not 1: not a crash)."""
    print(json.dumps({"suite": "step", "peer": peer, "ok": False, "error": why}), file=RESULT, flush=True)
    sys.exit(3)
