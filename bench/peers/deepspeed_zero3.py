"""Peer (b): DeepSpeed ZeRO-3 with parameters and optimizer state offloaded to the CPU (the
seed's comparison: the published MegaTrain claims 1.84x it at 14B) — bf16, DeepSpeed's CPUAdam,
activation checkpointing, gradient accumulation over the micro-batches, clipping at 1.0 — on
our step bench's shape, random weights and tokens. DeepSpeed is not on the GPU image: carry its
PyPI sdist and its pure-Python dependencies as wheels (docs/PERF.md says which) and install
with `pip install --no-index --find-links DIR deepspeed`; CPUAdam then JIT-builds at first use
(ninja and the CUDA toolkit are there). Without DeepSpeed this prints why and exits 3.

  deepspeed --num_gpus 1 bench/peers/deepspeed_zero3.py --json     (or plain python3: one process)
"""
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    a = common.parse_args("deepspeed_zero3", lambda p: p.add_argument("--local_rank", type=int, default=0))
    torch, AutoModelForCausalLM, dev = common.torch_on_device("deepspeed_zero3")
    try:
        import deepspeed
    except ImportError as e:
        common.fail("deepspeed_zero3", f"cannot import deepspeed: {e}")
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511", "RANK": "0", "WORLD_SIZE": "1",
                 "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(k, v)
    cfg = common.hf_config(a)
    micro = a.global_batch // a.micro_batch
    ds = {
        "train_batch_size": a.global_batch, "train_micro_batch_size_per_gpu": a.micro_batch,
        "gradient_accumulation_steps": micro, "gradient_clipping": 1.0, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.01}},
        "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": True},
                              "offload_optimizer": {"device": "cpu", "pin_memory": True},
                              "overlap_comm": True, "contiguous_gradients": True},
        "activation_checkpointing": {"partition_activations": False},
    }
    torch.manual_seed(0)
    # Built whole on the host, then partitioned by deepspeed.initialize: under zero.Init the
    # parameters are partitioned as each module is built, so transformers' _init_weights sees
    # empty tensors and the weights keep torch's defaults (embeddings N(0, 1): a loss ~10x the
    # other peers'). The step is the same either way.
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.gradient_checkpointing_enable()
    model.train()
    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    try:  # NCCL's one-rank group, the partitioning, CPUAdam's JIT build (ninja, the CUDA toolkit)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
    except Exception as e:  # noqa: BLE001 - the traceback to stderr, the reason to stdout
        traceback.print_exc()
        common.fail("deepspeed_zero3", f"deepspeed.initialize failed: {type(e).__name__}: {e}"[:500])
    data = common.batches(a, cfg.vocab_size, engine.device)

    def step():
        total = 0.0
        for x in data:
            loss = engine(input_ids=x, labels=x).loss
            engine.backward(loss)
            engine.step()  # applies the update at the accumulation boundary
            total += loss.detach() / micro
        return float(total)

    step_s, loss = common.time_steps(a, step, common.start_timing(torch, dev))
    common.emit(a, "deepspeed_zero3", cfg, params, step_s, loss, deepspeed=deepspeed.__version__, attention="sdpa",
                **common.device_report(torch, dev))


if __name__ == "__main__":
    main()
