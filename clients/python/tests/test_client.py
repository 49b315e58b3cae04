"""The Python client against a live megatraind (see conftest.py)."""
import json
import struct
import time

import grpc
import numpy as np
import pytest
from conftest import Daemon, tiny_spec

from megatrain import Client, MegatrainError, pb


def test_generated_stubs_match_the_protobuf_runtime():
    # The generated module checks the runtime's version when it is imported; also the new RPCs.
    from google.protobuf import __version__ as runtime
    from megatrain.v1 import trainer_pb2_grpc

    assert int(runtime.split(".")[0]) >= 7
    assert hasattr(trainer_pb2_grpc.TrainerStub, "__init__")
    assert {"StreamLogs", "ListCheckpoints", "ExportModel"} <= set(pb.DESCRIPTOR.services_by_name["Trainer"].methods_by_name)


def test_submit_and_watch_to_success(client):
    job = client.submit(tiny_spec(steps=10))
    assert job.id.startswith("job-")
    events = list(client.watch(job.id, from_start=True))  # the job may step before the watch begins
    assert events[-1].state == pb.JOB_STATE_SUCCEEDED
    step_events = [e for e in events if e.state == pb.JOB_STATE_RUNNING and not e.message and not e.checkpoint
                   and e.step > 0]
    steps = [e.step for e in step_events]
    # Every step, in order; the state event between the replay and the live ones repeats a step.
    assert steps == sorted(steps) and sorted(set(steps)) == list(range(1, 11)), steps
    # Each step's update: its gradient norm before clipping and its learning rate.
    assert all(e.grad_norm > 0 and e.learning_rate > 0 for e in step_events)
    assert all(e.grad_clipped == (e.grad_norm > 1.0) for e in step_events)  # the spec's default grad_clip
    done = client.get(job.id)
    assert done.state == pb.JOB_STATE_SUCCEEDED and done.step == 10
    assert 0 < done.loss < done.first_loss
    assert job.id in [j.id for j in client.list_jobs("succeeded")]
    assert client.plan(tiny_spec()).fits


def test_submit_with_plan_returns_the_plan_it_was_admitted_with(client):
    job, plan = client.submit_with_plan(tiny_spec(steps=1))
    assert job.id.startswith("job-") and plan.fits and plan.host_bytes > 0
    assert plan == client.plan(tiny_spec(steps=1))  # the same spec, the same budgets
    list(client.watch(job.id))


def test_list_jobs_reads_every_page(client):
    ids = [client.submit(tiny_spec(steps=1)).id for _ in range(3)]
    listed = [j.id for j in client.list_jobs(page_size=1)]  # one job per RPC
    assert set(ids) <= set(listed) and len(listed) == len(set(listed))
    assert [j.id for j in client.list_jobs(name="no-such-name")] == []
    for i in ids:
        list(client.watch(i))


def test_submit_a_yaml_file(client, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: from-yaml\nmodel: {preset: tiny}\nsteps: 2\nseq_len: 32\nmicro_batch: 2\n"
                    "global_batch: 2\nbackend: cpu\noptimizer: {lr: 3.0e-3, betas: [0.9, 0.95]}\n")
    job = client.submit(path)
    assert job.name == "from-yaml"
    assert list(client.watch(job.id))[-1].state == pb.JOB_STATE_SUCCEEDED


def test_push_from_numpy_and_an_iterable_exactly_once(client):
    steps, gb, seq = 3, 4, 32
    job = client.submit(tiny_spec(steps=steps, data={"source": "push"}, global_batch=gb))
    tokens = np.random.default_rng(7).integers(0, 256, size=steps * gb * (seq + 1) + 4, dtype=np.int64)
    first = client.push(job.id, (int(t) for t in tokens[:200]), push_id="p1", chunk_tokens=64)
    assert first.push_committed_tokens == 200 and first.chunks_accepted == 4
    # The same push again, whole, from the NumPy array: only the 204 tokens it lacked are sent.
    again = client.push(job.id, tokens, push_id="p1", chunk_tokens=100)
    assert again.push_committed_tokens == tokens.size
    assert again.tokens_accepted == tokens.size - 200
    events = list(client.watch(job.id))
    assert events[-1].state == pb.JOB_STATE_SUCCEEDED, events[-1].reason
    done = client.get(job.id)
    assert done.data_spooled_tokens == tokens.size
    assert done.data_consumed_tokens == steps * gb * (seq + 1)


def test_errors_are_exceptions_with_the_status_and_the_daemons_message(client):
    with pytest.raises(MegatrainError) as e:
        client.get("job-999999")
    assert e.value.code == grpc.StatusCode.NOT_FOUND and "job-999999" in e.value.message
    with pytest.raises(MegatrainError) as e:
        client.submit(tiny_spec(model={"preset": "gpt-17"}))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "gpt-17" in e.value.message
    job = client.submit(tiny_spec(steps=1, data={"source": "push"}))
    with pytest.raises(MegatrainError) as e:
        client.push(job.id, np.array([1, 2, 999], dtype=np.uint32))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "out of vocabulary" in e.value.message
    with pytest.raises(ValueError):
        client.push(job.id, np.array([1, -2]))
    with pytest.raises(ValueError):
        client.push(job.id, iter([1, "x"]))
    with pytest.raises(ValueError, match="stepz"):
        client.submit({"stepz": 3})
    client.cancel(job.id)
    assert list(client.watch(job.id))[-1].state == pb.JOB_STATE_CANCELLED
    with pytest.raises(MegatrainError) as e:
        client.cancel(job.id)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_logs_tail_and_follow(client):
    job = client.submit(tiny_spec(steps=12))
    followed = list(client.logs(job.id, follow=True))  # ends when the job does
    assert client.get(job.id).state == pb.JOB_STATE_SUCCEEDED
    steps = [int(line.text.split()[1].split("/")[0]) for line in followed if line.text.startswith("step ")]
    assert steps == list(range(1, 13))
    assert followed[-1].text == "job succeeded: finished"
    assert [l.text for l in client.logs(job.id, tail=2)] == [l.text for l in followed[-2:]]
    assert list(client.logs(job.id, since_unix_ms=int(time.time() * 1000) + 60_000)) == []
    assert any(job.id in l.text for l in client.logs("daemon"))
    # Following the daemon's log never ends by itself; a caller that stops cancels the stream.
    follower = client.logs("daemon", follow=True)
    assert next(follower).text
    follower.close()
    assert client.get(job.id).id == job.id
    with pytest.raises(MegatrainError) as e:
        list(client.logs("job-999999"))
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def safetensors(path):
    """The header and raw bytes of each tensor of a safetensors file."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def test_checkpoints_and_export(client, daemon):
    job = client.submit(tiny_spec(steps=6, checkpoint={"every": 3, "keep": 4}))
    assert list(client.watch(job.id))[-1].state == pb.JOB_STATE_SUCCEEDED
    cks = client.list_checkpoints(job.id)
    assert [c.step for c in cks] == [3, 6] and cks[-1].latest
    for c in cks:
        from pathlib import Path
        assert c.size_bytes == sum(f.stat().st_size for f in Path(c.path).iterdir() if f.is_file())
    out = client.export(job.id, "py-export/fp32", dtype="fp32", step=3)
    assert out.step == 3 and out.dtype == "fp32"
    exported = safetensors(daemon.data_root / "py-export/fp32/model.safetensors")
    checkpoint = safetensors(__import__("pathlib").Path(cks[0].path) / "model.safetensors")
    assert json.loads((daemon.data_root / "py-export/fp32/config.json").read_text())["vocab_size"] == 256
    assert exported.keys() <= checkpoint.keys() and len(exported) > 0
    for name, (dtype, shape, raw) in exported.items():
        assert dtype == "F32" and (dtype, shape, raw) == checkpoint[name], name
    bf16 = client.export(job.id, "py-export/bf16")
    assert bf16.step == 6 and bf16.dtype == "bf16"
    with pytest.raises(MegatrainError) as e:
        client.export(job.id, "../escape")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_token_is_sent_and_required(tmp_path):
    (tmp_path / "token").write_text("py-s3cret-token-0123456789\n")
    state = tmp_path / "state"
    state.mkdir()
    d = Daemon(state, f"--auth_token_file={tmp_path / 'token'}")
    try:
        with Client(d.address) as anonymous, pytest.raises(MegatrainError) as e:
            anonymous.list_jobs()
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
        with Client(d.address, token="py-s3cret-token-0123456789") as c:
            assert c.list_jobs() == []
        with Client(d.address, token_file=tmp_path / "token") as c:  # its newline dropped, as the CLI does
            assert c.list_jobs() == []
    finally:
        d.stop()


def test_tensorboard_reads_a_jobs_curves(client):
    """logging.tensorboard: TensorBoard's own reader (the PyPI tensorboard package) finds every
    scalar at every step, once, in the directory GetJob names."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job = client.submit(tiny_spec(steps=4, logging={"tensorboard": True}))
    assert list(client.watch(job.id))[-1].state == pb.JOB_STATE_SUCCEEDED
    done = client.get(job.id)
    assert done.tensorboard_dir.endswith(job.id + "/tensorboard")
    ea = EventAccumulator(done.tensorboard_dir)
    ea.Reload()
    tags = {"train/loss", "train/grad_norm", "train/learning_rate", "perf/tokens_per_second", "perf/model_tflops",
            "perf/h2d_gbps", "perf/stall_seconds"}
    assert tags <= set(ea.Tags()["scalars"])
    for tag in tags:
        assert [e.step for e in ea.Scalars(tag)] == [1, 2, 3, 4], tag
    assert abs(ea.Scalars("train/loss")[-1].value - done.loss) <= 1e-6 * done.loss  # stored as a float
    assert all(e.value > 0 for e in ea.Scalars("train/grad_norm"))



def test_held_out_evaluation_reaches_every_view(client):
    """eval: its own event at steps 2 and 4 (the end), the job's latest and best held-out loss,
    each checkpoint's held-out loss, megatrain_eval_loss's curve in TensorBoard as eval/loss."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = tiny_spec(steps=4, eval={"data": {"source": "synthetic", "seed": 7}, "every": 2, "max_tokens": 256},
                     checkpoint={"every": 2, "keep": 4}, logging={"tensorboard": True})
    job = client.submit(spec)
    events = list(client.watch(job.id, from_start=True))
    assert events[-1].state == pb.JOB_STATE_SUCCEEDED
    evals = [e for e in events if e.HasField("eval_loss")]
    assert [e.step for e in evals] == [2, 4]
    assert all(e.eval_loss > 0 and e.best_eval_loss <= e.eval_loss for e in evals)
    assert evals[0].eval_best and evals[0].best_eval_step == 2
    done = client.get(job.id)
    assert done.eval_step == 4 and done.eval_loss == evals[-1].eval_loss
    assert done.best_eval_loss == min(e.eval_loss for e in evals)
    ckpts = {c.step: c for c in client.list_checkpoints(job.id)}
    assert set(ckpts) == {2, 4}
    assert all(c.HasField("eval_loss") for c in ckpts.values())
    assert ckpts[4].eval_loss == done.eval_loss
    assert sum(c.best for c in ckpts.values()) == 1 and ckpts[done.best_eval_step].best
    ea = EventAccumulator(done.tensorboard_dir)
    ea.Reload()
    curve = ea.Scalars("eval/loss")
    assert [e.step for e in curve] == [2, 4]
    assert abs(curve[-1].value - done.eval_loss) <= 1e-6 * done.eval_loss


def test_pause_resume_and_delete(client):
    job = client.submit(tiny_spec(steps=400, checkpoint={"every": 0, "keep": 2}))
    for ev in client.watch(job.id):
        if ev.step >= 2:
            break
    paused = client.pause(job.id)  # answered once the job stopped at a checkpoint
    assert paused.state == pb.JOB_STATE_PAUSED and paused.last_checkpoint
    assert client.get(job.id).state == pb.JOB_STATE_PAUSED
    assert client.resume(job.id).state == pb.JOB_STATE_QUEUED
    client.cancel(job.id)
    assert list(client.watch(job.id))[-1].state == pb.JOB_STATE_CANCELLED
    gone = client.delete(job.id)
    assert gone.job_id == job.id and gone.freed_bytes > 0
    with pytest.raises(MegatrainError) as e:
        client.get(job.id)
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_longest_context(client):
    r = client.longest_context(tiny_spec())
    assert r.max_seq_len >= 32 and r.seq_len == r.max_seq_len and r.plan.fits


def test_a_push_id_holding_more_tokens_than_given_is_refused(client):
    job = client.submit(tiny_spec(steps=1, data={"source": "push"}))
    tokens = np.arange(1000, dtype=np.uint32) % 256
    assert client.push(job.id, tokens, push_id="day-1").push_committed_tokens == 1000
    with pytest.raises(ValueError, match="already holds 1000 tokens, more than the 100"):
        client.push(job.id, tokens[:100], push_id="day-1")
    with pytest.raises(ValueError, match="already holds 1000 tokens, more than the 100"):
        client.push(job.id, (int(t) for t in tokens[:100]), push_id="day-1")
    # Without a push_id an array's id comes from its tokens: the same call again sends nothing.
    first = client.push(job.id, tokens[:300])
    again = client.push(job.id, tokens[:300])
    assert first.push_committed_tokens == again.push_committed_tokens == 300 and again.tokens_accepted == 0
    assert client.get(job.id).data_spooled_tokens == 1300
    client.cancel(job.id)


def test_errors_carry_the_push_id_and_cross_processes(client):
    import pickle

    with pytest.raises(MegatrainError) as e:
        client.push("job-999999", iter([1, 2, 3]))
    assert e.value.code == grpc.StatusCode.NOT_FOUND and e.value.push_id and e.value.push_id in str(e.value)
    back = pickle.loads(pickle.dumps(e.value))
    assert (back.code, back.message, back.push_id) == (e.value.code, e.value.message, e.value.push_id)


def test_a_silent_daemon_fails_a_watch_even_an_idle_one(tmp_path):
    """A watch of a paused job gets no event for as long as it stays paused: the client's pings
    keep it open (the daemon no longer answers them with GOAWAY 'too many pings'), and notice a
    daemon that stops answering (SIGSTOP: alive, holding its socket, silent)."""
    import os
    import signal
    import threading

    state = tmp_path / "state"
    state.mkdir()
    d = Daemon(state)
    try:
        with Client(d.address, keepalive=(1.0, 5.0)) as c:  # 5 s to answer: a loaded CI machine stalls
            job = c.submit(tiny_spec(steps=100000))
            for ev in c.watch(job.id):
                if ev.step >= 2:
                    break
            assert c.pause(job.id).state == pb.JOB_STATE_PAUSED
            seen, failed = [], []

            def watch():
                try:
                    for ev in c.watch(job.id):
                        seen.append(ev.state)
                except MegatrainError as e:
                    failed.append((e, time.time()))

            t = threading.Thread(target=watch, daemon=True)
            t.start()
            time.sleep(6)  # a dozen pings, no event
            assert t.is_alive() and not failed and seen == [pb.JOB_STATE_PAUSED], (seen, failed)
            os.kill(d.proc.pid, signal.SIGSTOP)
            t0 = time.time()
            t.join(30)
            assert failed and failed[0][0].code == grpc.StatusCode.UNAVAILABLE, failed
            assert failed[0][1] - t0 < 20
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
        d.stop()


def test_specs_mean_what_they_mean_to_the_cli(tmp_path):
    from megatrain.client import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("name: 2026-12-07\nmodel: {preset: tiny}\nspeculative_updates: off\nsteps: 4\n"
                    "optimizer: {lr: 3.0e-3, betas: [0.9, 0.95]}\nbackend: cpu\n")
    spec = load_spec(path)  # PyYAML's YAML 1.1 reads 'off' as false and the name as a date
    assert spec.name == "2026-12-07" and spec.speculative_updates == "off" and spec.steps == 4
    with pytest.raises(ValueError, match="seqLen"):
        load_spec({"seqLen": 64})
    with pytest.raises(ValueError, match="steps must be an integer"):
        load_spec({"steps": 10.0})
    with pytest.raises(ValueError, match="optimizer.betas"):
        load_spec({"optimizer": {"betas": 0.9}})


def test_addresses_and_tokens_are_checked():
    with pytest.raises(ValueError, match="99999"):
        Client("localhost:99999")
    with pytest.raises(ValueError):
        Client("localhost")
    with pytest.raises(ValueError, match="printable"):
        Client("127.0.0.1:1", token="two words")
    Client("unix:/tmp/nowhere.sock").close()
