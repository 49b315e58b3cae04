"""DeepSpeed's CPUAdam, the optimizer peer of `megatrain-bench adamw` (issue 26).

The published MegaTrain runs DeepSpeed's CPUAdam after the backward; ours must be at least as
fast on the same data and threads. This times DeepSpeedCPUAdam (AdamW mode, fp32 parameters,
gradients and moments: the exact layout's 28 bytes a parameter) on --params parameters with
--threads OpenMP threads, the median of --reps steps after one warm-up, and checks its update
against float64 AdamW (largest error over the largest update) so the two benches time the same arithmetic. Prints one JSON line with
the field names of `megatrain-bench adamw --json`.

Needs torch and deepspeed (pip install torch deepspeed ninja); on a machine without a GPU run
with DS_ACCELERATOR=cpu (set here when absent). Its C++ op is built on first use (seconds).
Exit 3 when DeepSpeed cannot run here (missing or its op fails to build), as bench/peers/ do.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def unavailable(e):
    """As bench/peers/common.py fail(): why, as one JSON line on stdout (gpu_check logs its tail), and 3."""
    print(f"deepspeed_cpu_adam: cannot run here: {e}", file=sys.stderr)
    print(json.dumps({"suite": "adamw_peer", "peer": "deepspeed_cpu_adam", "ok": False,
                      "error": f"{type(e).__name__}: {e}"[:500]}), file=common.RESULT, flush=True)
    return 3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=float, default=1e8)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    common.keep_stdout_for_the_result()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    try:
        import torch
        import deepspeed
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as e:  # noqa: BLE001 - a peer that cannot run says why
        return unavailable(e)
    torch.set_num_threads(a.threads)
    n = int(a.params)
    lr, b1, b2, eps, wd = 1e-4, 0.9, 0.95, 1e-8, 0.1  # megatrain-bench adamw's hyperparameters
    g = torch.Generator().manual_seed(1)
    w = torch.nn.Parameter(torch.randn(n, generator=g) * 0.02)
    w.grad = torch.randn(n, generator=g) * 0.01
    w0 = w.detach().clone()
    try:
        opt = DeepSpeedCPUAdam([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, adamw_mode=True)
        opt.step()  # warm-up, and the step the check below recomputes
    except Exception as e:  # noqa: BLE001
        return unavailable(e)

    # Step 1 from zero moments, in float64: the update both optimizers compute.
    g64, w64 = w.grad.double(), w0.double()
    m, v = (1 - b1) * g64, (1 - b2) * g64 * g64
    ref = w64 - lr * ((m / (1 - b1)) / ((v / (1 - b2)).sqrt() + eps) + wd * w64)
    # Relative to the update (lr-sized), not to the weight: the weight's leading digits cancel.
    update_err = float((w.detach().double() - ref).abs().max() / (ref - w64).abs().max())

    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    out = {
        "suite": "adamw_peer",
        "peer": "deepspeed_cpu_adam",
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "params": n,
        "threads": a.threads,
        "layout": "exact",
        "bytes_per_param": 28,
        "params_per_second": n / t,
        "bytes_per_second": 28 * n / t,
        "seconds": t,
        "update_err_vs_float64": update_err,
    }
    print(json.dumps(out) if a.json else "\n".join(f"{k:24} {v}" for k, v in out.items()), file=common.RESULT,
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
