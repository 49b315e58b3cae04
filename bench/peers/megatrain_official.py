"""Peer (c): the published MegaTrain (github DLYuanGod/MegaTrain, commit 919520f; its training
sources are in ../shared/peers/megatrain-official or wherever --source points), driven the way
its examples/sft/train.py drives it — CPUMasterModel around a Hugging Face model, its
forward_and_backward, clip_grad_norm_ at 1.0, the optimizer on the host, _sync_params_to_gpu —
on random weights and random tokens of our step bench's shape (no checkpoint download, no
dataset: the GPU machine has no network). Its optimizer is DeepSpeed's CPUAdam when DeepSpeed
imports (the published setup), else torch.optim.AdamW on the host (said in the JSON: slower).
Attention is PyTorch SDPA (flash-attn is not on the GPU image). Its step count is its own:
6 * params * tokens, as ours.

  python3 bench/peers/megatrain_official.py --source third_party_src/megatrain-official --json
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def source_dir(a):
    for d in (a.source, os.path.join(common.ROOT, "third_party_src", "megatrain-official"),
              os.path.join(common.ROOT, "..", "shared", "peers", "megatrain-official")):
        if d and os.path.isfile(os.path.join(d, "infinity", "__init__.py")):
            return os.path.abspath(d)
    return None


def main():
    a = common.parse_args("megatrain_official", lambda p: p.add_argument("--source", default=""))
    src = source_dir(a)
    if not src:
        common.fail("megatrain_official", "its sources are not here: copy ../shared/peers/megatrain-official to "
                    "third_party_src/megatrain-official and carry it, or pass --source")
    sys.path.insert(0, src)
    torch, AutoModelForCausalLM, dev = common.torch_on_device("megatrain_official")
    try:
        from infinity import CPUMasterConfig, CPUMasterModel
    except ImportError as e:
        common.fail("megatrain_official", f"cannot import its infinity package from {src}: {e}")
    if dev == "cpu":  # a smoke run: its CUDA calls on the host (cpu_cuda_shim.py)
        import cpu_cuda_shim
        from infinity.model import cpu_master

        cpu_cuda_shim.install(cpu_master, torch)
    cfg = common.hf_config(a)
    torch.manual_seed(0)
    # dataset_path: its __post_init__ refuses a config without one (never read by CPUMasterModel).
    config = CPUMasterConfig(model_name="synthetic", dataset_path="synthetic", max_seq_len=a.seq_len,
                             batch_size=a.global_batch, gradient_accumulation_steps=1,
                             num_steps=a.warmup + a.steps, device=0, dtype=torch.bfloat16,
                             attn_implementation="sdpa", log_interval=1)
    hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
    model = CPUMasterModel(hf, config)
    del hf
    # It hands the [B, T] padding mask straight to each decoder layer, which flash_attention_2 (its
    # configs) takes, but SDPA refuses (int64, not [B, 1, T, T]). No padding here: no mask, so
    # transformers' SDPA runs causal (is_causal), as flash-attn would.
    build_kwargs = model._build_layer_kwargs
    model._build_layer_kwargs = lambda mask, *rest: build_kwargs(None, *rest)
    params = sum(p.numel() for p in model.get_parameters())
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        opt = DeepSpeedCPUAdam(model.get_parameters(), lr=1e-5, weight_decay=0.01, adamw_mode=True)
        optimizer = "deepspeed_cpu_adam"
    except Exception as e:  # ImportError, or CPUAdam failing to build
        opt = torch.optim.AdamW(model.get_parameters(), lr=1e-5, weight_decay=0.01)
        optimizer = f"torch_adamw_host (DeepSpeed CPUAdam unavailable: {type(e).__name__}: {e})"[:300]
    ids = common.batches(a, cfg.vocab_size, "cpu")
    input_ids = torch.cat(ids, dim=0)  # the whole step's batch, as its train.py passes it
    mask = torch.ones_like(input_ids)

    def step():
        loss, _, _ = model.forward_and_backward(input_ids, mask, input_ids.clone())
        torch.nn.utils.clip_grad_norm_(model.get_parameters(), 1.0)
        opt.step()
        model._sync_params_to_gpu()
        model.zero_grad()
        opt.zero_grad()
        return loss

    step_s, loss = common.time_steps(a, step, common.start_timing(torch, dev))
    common.emit(a, "megatrain_official", cfg, params, step_s, loss, optimizer=optimizer, attention="sdpa",
                sequences_per_pass=int(input_ids.shape[0]), **common.device_report(torch, dev))


if __name__ == "__main__":
    main()
