"""Control-plane bench: RPC latency (GetJob, ListJobs of N jobs) and WatchJob fan-out (W watchers
on one running job: does the job's step time change?). Starts its own megatraind ($MEGATRAIND) in
a temporary state directory, drives it with the Python client, prints one JSON object.

    scripts/bench_control_plane.sh [--jobs 1000] [--watchers 100] [--steps 60] [--rounds 2]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from megatrain import Client, pb


def start_daemon(state: Path) -> tuple:
    proc = subprocess.Popen([os.environ["MEGATRAIND"], f"--state_dir={state}", "--listen=127.0.0.1:0",
                             "--metrics_listen=", "--host_memory=16G", "--log_level=warning"])
    for _ in range(600):
        try:
            info = json.loads((state / "megatraind.json").read_text())
            if info.get("pid") == proc.pid:
                return proc, f"127.0.0.1:{info['port']}"
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("megatraind did not start")


def spec(steps: int, name: str = "bench") -> dict:
    # The tiny demo's shape (deploy/jobs/tiny-demo.yaml): ~0.1 s steps on a 2-core CPU.
    return {"name": name, "model": {"preset": "tiny"}, "init": {"seed": 1}, "data": {"source": "synthetic", "seed": 1},
            "seq_len": 64, "micro_batch": 8, "global_batch": 16, "steps": steps, "backend": "cpu",
            "checkpoint": {"every": 0, "keep": 1}}


def percentiles(xs: list) -> dict:
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
    return {"n": len(xs), "p50_ms": round(pick(0.5) * 1e3, 3), "p90_ms": round(pick(0.9) * 1e3, 3),
            "p99_ms": round(pick(0.99) * 1e3, 3), "mean_ms": round(statistics.fmean(xs) * 1e3, 3)}


def timed(f, n: int) -> list:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return out


def step_seconds(c: Client, steps: int, watchers: int, address: str) -> dict:
    """Runs one job with `watchers` WatchJob streams open on it (each its own channel, reading
    every event); the job's step times come from its own events (compute-stream spans)."""
    job = c.submit(spec(steps, f"fanout-{watchers}"))
    counts = [0] * watchers
    ready = threading.Barrier(watchers + 1) if watchers else None

    def watch(i: int):
        with Client(address) as w:
            it = w.watch(job.id)
            next(it)  # the first event: the stream is open
            ready.wait()
            counts[i] = 1 + sum(1 for _ in it)

    threads = [threading.Thread(target=watch, args=(i,)) for i in range(watchers)]
    for t in threads:
        t.start()
    if ready:
        ready.wait()
    times = [ev.step_seconds for ev in c.watch(job.id)
             if ev.state == pb.JOB_STATE_RUNNING and ev.step_seconds > 0 and not ev.message and not ev.checkpoint]
    for t in threads:
        t.join()
    final = c.get(job.id)
    assert final.state == pb.JOB_STATE_SUCCEEDED, final.reason
    body = times[2:]  # the first steps warm up
    return {"watchers": watchers, "steps": len(body), "median_step_s": round(statistics.median(body), 5),
            "mean_step_s": round(statistics.fmean(body), 5), "events_per_watcher_min": min(counts) if counts else 0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    state = Path(tempfile.mkdtemp(prefix="mt_cp_bench_"))
    proc, address = start_daemon(state)
    out = {"bench": "control_plane", "jobs": a.jobs, "watchers": a.watchers}
    try:
        with Client(address, timeout=120) as c:
            # Fan-out first, on an idle daemon: rounds of (0 watchers, W watchers), paired.
            out["fanout"] = [step_seconds(c, a.steps, w, address) for _ in range(a.rounds) for w in (0, a.watchers)]
            # N jobs in the table: each submitted (the first runs), then all cancelled.
            t = time.perf_counter()
            ids = [c.submit(spec(100000, f"j{i}")).id for i in range(a.jobs)]
            out["submit_s_per_job"] = round((time.perf_counter() - t) / a.jobs, 5)
            for i in reversed(ids):
                c.cancel(i)
            for i in ids[:1]:
                while c.get(i).state == pb.JOB_STATE_RUNNING:
                    time.sleep(0.1)
            total = len(c.list_jobs())
            out["jobs_listed"] = total
            out["get_job"] = percentiles(timed(lambda: c.get(ids[len(ids) // 2]), 1000))
            # One ListJobs RPC carrying every job (page_size 1000, the largest page), and the
            # default page of 100.
            one_page = pb.ListJobsRequest(page_size=1000)
            out["list_jobs_1000"] = percentiles(timed(lambda: c._stub.ListJobs(one_page, metadata=c._metadata), 30))
            out["list_jobs"] = percentiles(timed(lambda: c._stub.ListJobs(pb.ListJobsRequest(), metadata=c._metadata), 30))
            wire = c._stub.ListJobs(one_page, metadata=c._metadata).SerializeToString()
            out["list_jobs_bytes"] = len(wire)
            # The client's share of a ListJobs: parsing the reply (the rest is the daemon and the wire).
            out["list_jobs_client_parse"] = percentiles(timed(lambda: pb.ListJobsResponse.FromString(wire), 30))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        shutil.rmtree(state, ignore_errors=True)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
