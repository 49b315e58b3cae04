#!/usr/bin/env python3
"""scripts/gpu_report.py DIR — what a scripts/gpu_check.sh run wrote under DIR, as the markdown
tables docs/PERF.md records: the machine, the tests (GoogleTest JSON), then every bench line by
its suite (attention, kernels, step, gemm, link, pin, adamw) and the peers beside our step of the
same shape. Lines are read by their "suite", not by file name, so any bench output works
(tests/cuda_emu/bench_smoke.sh checks that on the emulated benches). A lease is 15 minutes and
the session after it has the rest: the numbers go into PERF.md as they came out, not retyped.

Python's standard library only. Exit 0; 1 when DIR holds no JSON at all.
"""
import glob
import json
import os
import sys

GB = 1e9


def lines_of(path):
    """The JSON objects of a file, one a line (a GoogleTest file is one object over many lines)."""
    text = open(path, errors="replace").read()
    try:
        whole = json.loads(text)
        return [whole] if isinstance(whole, dict) else []
    except json.JSONDecodeError:
        pass
    out = []
    for line in text.splitlines():
        try:
            j = json.loads(line)
        except json.JSONDecodeError:
            continue  # a library's message on stdout: not ours to parse
        if isinstance(j, dict):
            out.append(j)
    return out


def f(x, digits=3):
    if x is None or x == "":
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(x)


def table(head, rows):
    if not rows:
        return []
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
           ["| " + " | ".join(f(c) for c in r) + " |" for r in rows] + [""]


def machine(d):
    path = os.path.join(d, "machine.txt")
    if not os.path.exists(path):
        return []
    keep = ("date:", "commit:", "NVIDIA", "Model name", "NUMA node(s)", "MemTotal", "Cuda compilation")
    return ["## Machine", ""] + ["    " + l.rstrip() for l in open(path) if l.startswith(keep) or
                                 any(k in l for k in keep[2:])] + [""]


def tests(objs):
    rows, failures = [], []
    for name, j in objs:
        n = j.get("tests", 0)
        fails = j.get("failures", 0)
        skipped = sum(1 for s in j.get("testsuites", []) for t in s.get("testsuite", [])
                      if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN")
        rows.append((name, n, n - fails - skipped, fails, skipped))
        for s in j.get("testsuites", []):
            for t in s.get("testsuite", []):
                for fl in t.get("failures", []):
                    first = fl.get("failure", "").strip().splitlines()
                    failures.append(f"- `{s['name']}.{t['name']}` ({name}): {first[0] if first else ''}"[:300])
                    break
    return (["## Tests", ""] + table(["file", "tests", "passed", "failed", "skipped"], rows) + failures +
            ([""] if failures else []))


def attention(js):
    rows = [(j["_file"], j.get("kernel", "simt"), j.get("dtype"), j.get("seq"),
             f"{j.get('heads')}/{j.get('kv_heads', j.get('heads'))}",
             j.get("head_dim"), j.get("fwd_tflops") if j.get("ok", True) else "refused",
             j.get("bwd_tflops") if j.get("ok", True) else j.get("error", "")[:80]) for j in js]
    return ["## Attention (TFLOP/s)", ""] + table(["file", "kernel", "dtype", "T", "heads", "D", "forward",
                                                   "backward"], rows)


def kernels(js):
    rows = [(j.get("kernel"), j.get("tokens"), j.get("gbps"), j.get("copy_gbps"), j.get("of_copy")) for j in js]
    return ["## Memory-bound kernels (against a device copy of their bytes)", ""] + \
        table(["kernel", "tokens", "GB/s", "copy GB/s", "of copy"], rows)


def tokens(j):
    return j.get("global_batch", 0) * j.get("seq_len", 0)


def tflops_6nt(j):
    """The published system's count, 6 x params x tokens a second (older JSONs lack the field)."""
    return j.get("model_tflops_6nt", 6.0 * j.get("params", 0) * tokens(j) / j["step_seconds"] / 1e12)


def step_rows(js):
    rows = []
    for j in js:
        attn = j.get("attention_kernel", "simt")
        if attn == "cudnn" and not j.get("cudnn_attention_calls"):
            attn = "**cudnn asked, 0 calls: fell back**"
        elif j.get("cudnn_attention_calls"):
            attn += f" ({j['cudnn_attention_calls']} cuDNN calls, {j.get('cudnn_graphs_built', 0)} graphs, " \
                    f"{f(j.get('cudnn_graph_build_seconds'))} s)"
        peak = f"{f(j.get('device_peak_bytes', 0) / GB)} / {f(j.get('plan_device_bytes', 0) / GB)}"
        rows.append((j["_file"], j.get("preset", "").split("/")[-1], j.get("layers"), tokens(j), j.get("precision"),
                     attn, j.get("step_seconds"), j.get("compute_seconds"), j.get("stall_seconds"),
                     j.get("optimizer_seconds"), tflops_6nt(j), j.get("model_tflops", j.get("achieved_flops", 0) / 1e12),
                     peak))
    return rows


def steps(js):
    out = ["## Steps", ""] + table(["file", "model", "layers", "tokens", "precision", "attention", "step s",
                                    "compute s", "stall s", "optimizer s", "TFLOP/s 6NT", "TFLOP/s +attn",
                                    "device peak / plan GB"], step_rows(js))
    moe = [(j["_file"], j.get("experts_routed"), j.get("experts_total"), j.get("expert_h2d_fraction"),
            j.get("h2d_over_routed_ideal"), j.get("model_tflops_6nt_active")) for j in js if "num_experts" in j]
    out += table(["MoE file", "experts routed", "of", "expert H2D / dense", "H2D / routed ideal",
                  "TFLOP/s 6·active·T"], moe)
    ckpt = [(j["_file"], j.get("checkpoint_bytes"), j.get("checkpoint_write_gbps"), j.get("checkpoint_stall_between_s"),
             j.get("checkpoint_stall_beside_s")) for j in js if "checkpoint_bytes" in j]
    out += table(["checkpoint file", "bytes", "write GB/s", "stall between s", "stall beside s"], ckpt)
    return out


def same_shape(ours, peer):
    """Our step of the peer's model, layers, tokens and precision, doing only what the peer does
    (not packed documents, not the NVMe tier, no checkpoint beside it)."""
    keys = ("layers", "seq_len", "global_batch", "precision")
    extra = ours.get("doc_len") or "nvme_paths" in ours or "checkpoint_bytes" in ours
    return not extra and ours.get("preset", "").split("/")[-1] == peer.get("preset") and \
        all(ours.get(k) == peer.get(k) for k in keys)


def fastest_of_ours(ours, peer):
    """Our fastest step of the peer's shape (same_shape), or None."""
    mine = [o for o in ours if same_shape(o, peer)]
    return min(mine, key=lambda o: o["step_seconds"]) if mine else None


def cpuadam_rate(by):
    """DeepSpeed CPUAdam's parameters a second in this run, or None."""
    rates = [j["params_per_second"] for j in by.get("adamw_peer", []) if j.get("params_per_second")]
    return rates[0] if rates else None


def peers(ours, theirs):
    rows = []
    for p in theirs:
        if p.get("ok") is False:
            rows.append((p.get("peer"), "unavailable: " + p.get("error", "")[:100], "", "", "", ""))
            continue
        best = fastest_of_ours(ours, p)
        rows.append((p.get("peer"), p.get("step_seconds"), p.get("model_tflops_6nt"), p.get("tokens_per_second"),
                     best["_file"] if best else "no step of ours this shape",
                     p["step_seconds"] / best["step_seconds"] if best else ""))
    return ["## Peers (same shape and tokens per step)", ""] + \
        table(["peer", "step s", "TFLOP/s 6NT", "tokens/s", "our fastest step", "peer s / ours"], rows)


def host(by):
    out = table(["gemm shape", "M", "N", "K", "TFLOP/s", "vs cuBLAS", "dW vs cuBLAS"],
                [(j.get("shape"), j.get("M"), j.get("N"), j.get("K"), j.get("tflops"), j.get("vs_cublas"),
                  j.get("dweight_vs_cublas")) for j in by.get("gemm", [])])
    out += table(["link", "H2D GB/s", "D2H GB/s", "duplex GB/s", "H2D vs memcpy", "D2H vs memcpy"],
                 [(j["_file"], j.get("h2d_gbps"), j.get("d2h_gbps"), j.get("duplex_gbps"), j.get("h2d_vs_baseline"),
                   j.get("d2h_vs_baseline")) for j in by.get("link", [])])
    out += table(["pin", "GB", "threads", "1 thread GB/s", "parallel GB/s"],
                 [(j["_file"], j.get("bytes", 0) / GB, j.get("threads"), j.get("one_thread_gbps"),
                   j.get("parallel_gbps")) for j in by.get("pin", [])])
    exact = cpuadam_rate(by)
    rows = []
    for j in by.get("adamw", []):
        rows.append((j["_file"], j.get("threads"), j.get("numa", ""), j.get("params_per_second", 0) / GB,
                     j.get("bandwidth_fraction"), exact / GB if exact else "–",
                     j["params_per_second"] / exact if exact else "–"))
    out += table(["adamw", "threads", "placement", "G params/s", "of copy", "CPUAdam G params/s", "ours / CPUAdam"],
                 rows)
    return (["## GEMM, link, pinning, AdamW", ""] + out) if out else []


# The issues' targets (25: attention, kernels, the full-depth step, the peers; 26: the stall,
# AdamW; 28: the H2D of an MoE step) and the first lease's (link, GEMM), for the lines present.
PEER_TARGET = {"torch_resident": 1.0, "deepspeed_zero3": 2.5, "megatrain_official": 1.5}


TARGET_ATTENTION = ("cudnn", 4096, 28, 4, 128)  # kernel, T, heads, KV heads, head_dim


def kernel_targets(by, check):
    for j in by.get("attention", []):
        if (j.get("kernel"), j.get("seq"), j.get("heads"), j.get("kv_heads"), j.get("head_dim")) != TARGET_ATTENTION:
            continue
        ok = j.get("ok", True)
        check("cuDNN attention forward, T 4096, 28/4 heads, D 128", j.get("fwd_tflops") if ok else "refused",
              ">= 450 TFLOP/s", ok and j["fwd_tflops"] >= 450)
        check("cuDNN attention backward, same", j.get("bwd_tflops") if ok else "refused", ">= 350 TFLOP/s",
              ok and j["bwd_tflops"] >= 350)
    for j in by.get("kernels", []):
        check(f"{j.get('kernel')} against a device copy", j.get("of_copy"), ">= 0.7", (j.get("of_copy") or 0) >= 0.7)


def transfer_and_gemm_targets(by, check):
    for j in by.get("link", []):
        check("link H2D against plain cudaMemcpyAsync", j.get("h2d_vs_baseline"), ">= 0.9",
              (j.get("h2d_vs_baseline") or 0) >= 0.9)
    for j in by.get("gemm", []):
        check(f"GEMM {j.get('shape')} against cuBLAS", j.get("vs_cublas"), ">= 0.85", (j.get("vs_cublas") or 0) >= 0.85)


def step_targets(ours, check):
    for j in ours:
        name, tf = j["_file"], tflops_6nt(j)
        if j.get("preset") == "qwen2.5-7b" and j.get("layers") == 28:
            check(f"{name}: model TFLOP/s (6·N·T)", tf, ">= 450", tf >= 450)
            device = tf * j["step_seconds"] / j["compute_seconds"] if j.get("compute_seconds") else 0
            check(f"{name}: device compute alone (6·N·T)", device, ">= 500", device >= 500)
        if j.get("speculative_updates") not in (None, "off") and j.get("preset") == "qwen2.5-7b":
            frac = j.get("stall_seconds", 0) / j["step_seconds"]
            check(f"{name}: stall / step", frac, "<= 0.05", frac <= 0.05)
        if "h2d_over_routed_ideal" in j:
            check(f"{name}: H2D / (routed experts + dense)", j["h2d_over_routed_ideal"], "<= 1.1",
                  j["h2d_over_routed_ideal"] <= 1.1)


def peer_and_host_targets(by, ours, check):
    for p in by.get("peer", []):
        best = fastest_of_ours(ours, p)
        if p.get("ok") is False or not best or p.get("peer") not in PEER_TARGET:
            continue
        ratio = best["tokens_per_second"] / p["tokens_per_second"]
        want = PEER_TARGET[p["peer"]]
        check(f"tokens/s against {p['peer']}", ratio, f">= {want}x", ratio >= want)
    exact = cpuadam_rate(by)
    for j in by.get("adamw", []):
        check(f"{j['_file']}: AdamW against an all-thread copy of its bytes", j.get("bandwidth_fraction"), ">= 0.8",
              (j.get("bandwidth_fraction") or 0) >= 0.8)
        if exact:
            check(f"{j['_file']}: AdamW against DeepSpeed's CPUAdam", j["params_per_second"] / exact, ">= 1.0x",
                  j["params_per_second"] >= exact)


def targets(by, ours):
    rows = []

    def check(what, value, want, ok):
        rows.append((what, value, want, "met" if ok else "**not met**"))

    kernel_targets(by, check)
    step_targets(ours, check)
    peer_and_host_targets(by, ours, check)
    transfer_and_gemm_targets(by, check)
    return (["## Targets", ""] + table(["what", "measured", "target", ""], rows)) if rows else []


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[0])
    d = sys.argv[1]
    by, gtests = {}, []
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        name = os.path.splitext(os.path.basename(path))[0]
        for j in lines_of(path):
            if "testsuites" in j:
                gtests.append((name, j))
            elif "suite" in j:
                j["_file"] = name
                by.setdefault("peer" if "peer" in j and j["suite"] == "step" else j["suite"], []).append(j)
    if not by and not gtests:
        print(f"gpu_report: no JSON under {d}", file=sys.stderr)
        return 1
    out = [f"# gpu_check run: {os.path.abspath(d)}", ""] + machine(d)
    out += tests(gtests) if gtests else []
    out += attention(by["attention"]) if "attention" in by else []
    out += kernels(by["kernels"]) if "kernels" in by else []
    ours = [j for j in by.get("step", []) if j.get("step_seconds")]
    out += steps(ours) if ours else []
    out += peers(ours, by["peer"]) if "peer" in by else []
    out += host(by)
    out += targets(by, ours)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
