"""Peer (a): PyTorch with the same layers resident on the GPU — fp32 master weights, bf16 autocast,
SDPA attention, fused AdamW on the device, gradient accumulation over the micro-batches,
clipping at 1.0 — what a user gets when the model fits. Same shape and tokens per step as
`megatrain-bench step`. Optional activation checkpointing (--recompute) as our streaming
executor recomputes.

  python3 bench/peers/torch_resident.py --preset qwen2.5-7b --layers 4 --seq-len 2048 --global-batch 8 --json
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    a = common.parse_args("torch_resident", lambda p: p.add_argument("--recompute", action="store_true"))
    torch, AutoModelForCausalLM, dev = common.torch_on_device("torch_resident")
    cfg = common.hf_config(a)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").float().to(dev)
    if a.recompute:
        model.gradient_checkpointing_enable()
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    data = common.batches(a, cfg.vocab_size, dev)

    def step():
        total = 0.0
        for x in data:
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss / len(data)
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(total)

    step_s, loss = common.time_steps(a, step, common.start_timing(torch, dev))
    common.emit(a, "torch_resident", cfg, params, step_s, loss, recompute=a.recompute, attention="sdpa",
                **common.device_report(torch, dev))


if __name__ == "__main__":
    main()
