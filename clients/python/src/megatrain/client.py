"""A small typed wrapper over the generated megatrain.v1 stubs.

Every call returns the daemon's protobuf message (typed by the generated .pyi) and raises
MegatrainError, carrying the gRPC status code and the daemon's message, when the daemon refuses.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import re
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from megatrain.spec import SpecLike, load_spec
from megatrain.v1 import trainer_pb2 as pb
from megatrain.v1 import trainer_pb2_grpc as pb_grpc

__all__ = ["Client", "MegatrainError", "load_spec"]

TERMINAL = (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED)


class MegatrainError(Exception):
    """The daemon refused a call: `code` is the grpc.StatusCode, `message` the daemon's words.
    From push(): `push_id` is the push's id, to call push() again with (it then sends only what
    the daemon does not hold yet)."""

    def __init__(self, code: grpc.StatusCode, message: str, push_id: Optional[str] = None):
        super().__init__(f"{code.name}: {message}" + (f" (push_id {push_id!r})" if push_id else ""))
        self.code = code
        self.message = message
        self.push_id = push_id

    def __reduce__(self):  # picklable, so it crosses a process pool as itself
        return (type(self), (self.code, self.message, self.push_id))

    @classmethod
    def of(cls, err: grpc.RpcError) -> "MegatrainError":
        return cls(err.code(), err.details() or "")


def _check_address(address: str) -> None:
    """HOST:PORT with a port in 1..65535 (gRPC would wrap 99999 to 34463), or a scheme gRPC reads
    (unix:PATH, dns:..., ipv4:...)."""
    if re.match(r"^[a-z0-9+-]+:(?!\d+$)", address):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"address {address!r} is not HOST:PORT or unix:PATH")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} of {address!r} is not in 1..65535")


def _read_token(token: Optional[str], token_file: Optional[Union[str, "os.PathLike[str]"]]) -> Optional[str]:
    """The bearer token, without the newline a file ends with; one with space or control
    characters inside is refused (gRPC would fail every call with 'Invalid metadata')."""
    if token is not None and token_file is not None:
        raise ValueError("give token or token_file, not both")
    if token_file is not None:
        token = Path(token_file).read_text()
        if not token.strip():
            raise ValueError(f"token_file {str(token_file)!r} is empty")
    if token is None:
        return None
    token = token.strip()
    if not token or any(not 0x21 <= ord(ch) <= 0x7E for ch in token):
        raise ValueError("the token must be printable ASCII without spaces")
    return token


def _state(state: Union[None, str, int]) -> int:
    if state is None:
        return pb.JOB_STATE_UNSPECIFIED
    if isinstance(state, str):
        return pb.JobState.Value("JOB_STATE_" + state.upper())
    return int(state)


class Client:
    """A connection to megatraind.

    address: HOST:PORT (or unix:PATH); token: the bearer token, or token_file: a file holding it
    (as the CLI's --token-file; its newline is dropped), or neither; tls_ca: a PEM file of the CA
    that signed the daemon's certificate (TLS on), or None (plaintext, loopback only).
    timeout: seconds for each unary call. Streams (watch, logs, push) run as long as they need,
    but a daemon that stops answering fails them with UNAVAILABLE: the client pings it every
    keepalive[0] seconds and gives it keepalive[1] to answer (30 and 10, as the CLI does).
    """

    def __init__(self, address: str = "127.0.0.1:50051", token: Optional[str] = None,
                 tls_ca: Optional[Union[str, "os.PathLike[str]"]] = None, timeout: float = 30.0,
                 token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
                 keepalive: tuple = (30.0, 10.0)):
        _check_address(address)
        token = _read_token(token, token_file)
        options = [("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.keepalive_time_ms", int(keepalive[0] * 1000)),
                   ("grpc.keepalive_timeout_ms", int(keepalive[1] * 1000)),
                   ("grpc.http2.ping_timeout_ms", int(keepalive[1] * 1000)),  # else 60 s in this grpcio
                   ("grpc.http2.max_pings_without_data", 0)]  # an idle watch keeps pinging too
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes())
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = pb_grpc.TrainerStub(self._channel)
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self._timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- calls -----------------------------------------------------------------------------

    def _unary(self, rpc: Any, request: Any, timeout: Optional[float] = None) -> Any:
        try:
            return rpc(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise MegatrainError.of(e) from None

    def _stream(self, rpc: Any, request: Any) -> Iterator[Any]:
        call = rpc(request, metadata=self._metadata)
        try:
            yield from call
        except grpc.RpcError as e:
            raise MegatrainError.of(e) from None
        finally:
            call.cancel()  # the caller stopped early: end the stream on the daemon too

    def submit(self, spec: SpecLike) -> pb.Job:
        """Queues a job; returns it as the daemon recorded it (its id in .id)."""
        return self.submit_with_plan(spec)[0]

    def submit_with_plan(self, spec: SpecLike) -> Tuple[pb.Job, pb.MemoryPlan]:
        """Queues a job; returns it and the memory plan it was admitted with (as `megatrain
        submit` prints it)."""
        resp = self._unary(self._stub.SubmitJob, pb.SubmitJobRequest(spec=load_spec(spec)))
        return resp.job, resp.plan

    def plan(self, spec: SpecLike) -> pb.MemoryPlan:
        """The memory plan of a spec against the daemon's budgets (nothing is queued)."""
        return self._unary(self._stub.PlanJob, pb.PlanJobRequest(spec=load_spec(spec))).plan

    def get(self, job_id: str) -> pb.Job:
        return self._unary(self._stub.GetJob, pb.GetJobRequest(job_id=job_id))

    def list_jobs(self, state: Union[None, str, int] = None, name: str = "", page_size: int = 0) -> list:
        """Every job, reading every page (or those in `state`: "queued", "running", ... or a
        pb.JobState, and/or whose name contains `name`). page_size: jobs per RPC (0: the daemon's
        default, 100; at most 1000)."""
        jobs, token = [], ""
        while True:
            req = pb.ListJobsRequest(state=_state(state), name=name, page_size=page_size, page_token=token)
            resp = self._unary(self._stub.ListJobs, req)
            jobs.extend(resp.jobs)
            token = resp.next_page_token
            if not token:
                return jobs

    def cancel(self, job_id: str) -> pb.Job:
        return self._unary(self._stub.CancelJob, pb.CancelJobRequest(job_id=job_id))

    def checkpoint(self, job_id: str, timeout: float = 600) -> pb.CheckpointResponse:
        """A checkpoint now (at the running job's next step boundary)."""
        return self._unary(self._stub.Checkpoint, pb.CheckpointRequest(job_id=job_id), timeout)

    def pause(self, job_id: str, timeout: float = 660) -> pb.Job:
        """Pauses a job: a running one checkpoints at its next step boundary and the reply comes
        then (PAUSED at the step a resume starts from); a queued one leaves the queue."""
        return self._unary(self._stub.PauseJob, pb.PauseJobRequest(job_id=job_id), timeout)

    def resume(self, job_id: str) -> pb.Job:
        """A paused job back in the queue (QUEUED), to go on from its checkpoint."""
        return self._unary(self._stub.ResumeJob, pb.ResumeJobRequest(job_id=job_id))

    def delete(self, job_id: str, keep_checkpoints: bool = False) -> pb.DeleteJobResponse:
        """Removes a job that is not running and its directory; keep_checkpoints: its checkpoints
        move to DATA_ROOT/checkpoints/JOB_ID (where init.from can name them)."""
        req = pb.DeleteJobRequest(job_id=job_id, keep_checkpoints=keep_checkpoints)
        return self._unary(self._stub.DeleteJob, req)

    def longest_context(self, spec: SpecLike) -> pb.PlanJobResponse:
        """The longest seq_len whose plan fits the daemon's budgets (.max_seq_len), with that plan
        (.plan, .seq_len); the spec's other fields as given."""
        req = pb.PlanJobRequest(spec=load_spec(spec), max_seq_len=True)
        return self._unary(self._stub.PlanJob, req)

    def watch(self, job_id: str, from_start: bool = False) -> Iterator[pb.JobEvent]:
        """The job's events: its current state first, then progress; ends after a terminal state.
        from_start: the step and evaluation events the daemon still holds come first (a job
        submitted just before may have stepped before the watch began)."""
        req = pb.WatchJobRequest(job_id=job_id, from_start=from_start)
        for ev in self._stream(self._stub.WatchJob, req):
            yield ev
            if ev.state in TERMINAL:
                return

    def logs(self, job_id: str = "daemon", follow: bool = False, tail: Optional[int] = None,
             since_unix_ms: Optional[int] = None) -> Iterator[pb.LogLine]:
        """A job's log lines ("daemon": the daemon's own). follow: go on until the job ends."""
        req = pb.StreamLogsRequest(job_id=job_id, follow=follow, tail_lines=tail or 0,
                                   since_unix_ms=since_unix_ms or 0)
        for msg in self._stream(self._stub.StreamLogs, req):
            yield from msg.lines

    def list_checkpoints(self, job_id: str) -> list:
        """The job's checkpoints, steps ascending (step, loss, size_bytes, unix_ms, path, latest)."""
        req = pb.ListCheckpointsRequest(job_id=job_id)
        return list(self._unary(self._stub.ListCheckpoints, req).checkpoints)

    def export(self, job_id: str, out_dir: str, dtype: str = "bf16", step: int = 0,
               overwrite: bool = False, timeout: float = 3600) -> pb.ExportModelResponse:
        """A checkpoint (default: the latest) as a Hugging Face directory under the daemon's data root."""
        req = pb.ExportModelRequest(job_id=job_id, out_dir=out_dir, dtype=dtype, step=step, overwrite=overwrite)
        return self._unary(self._stub.ExportModel, req, timeout)

    # ---- pushing data ----------------------------------------------------------------------

    def push(self, job_id: str, tokens: Union[np.ndarray, Iterable[int]], push_id: Optional[str] = None,
             chunk_tokens: int = 32768) -> pb.PushDataResponse:
        """Streams token ids to a `data: {source: push}` job in chunks, exactly once.

        The push has an id and each chunk its offset in it. The daemon is asked first how far this
        push got, and only the rest is sent: calling push() again with the same push_id and the
        same tokens (after an error, a lost answer, a restarted client) spools every token
        exactly once. Without a push_id, an array or a sequence gets one derived from its tokens,
        so that the same call again is exactly-once too (and pushing the same tokens a second time
        sends nothing, as the CLI's default id for the same file does: give another push_id to
        push them again); any other iterable gets a fresh one, which an error carries
        (MegatrainError.push_id) for the retry. A push_id that already holds more tokens than
        `tokens` has names another push, and is refused (ValueError). Returns the daemon's last
        answer (push_committed_tokens: the push's tokens spooled, all tries)."""
        if chunk_tokens < 1:
            raise ValueError("chunk_tokens must be >= 1")
        if isinstance(tokens, (np.ndarray, Sequence)):
            tokens = _checked_array(tokens)  # before anything is sent; an iterable is checked as it goes
            push_id = push_id or _content_push_id(tokens)
        push_id = push_id or uuid.uuid4().hex
        try:
            return self._push(job_id, tokens, push_id, chunk_tokens)
        except MegatrainError as e:
            raise MegatrainError(e.code, e.message, push_id) from None

    def _push(self, job_id: str, tokens: Union[np.ndarray, Iterable[int]], push_id: str,
              chunk_tokens: int) -> pb.PushDataResponse:
        done = self._push_stream(iter([pb.PushDataRequest(job_id=job_id, push_id=push_id)]), self._timeout)
        committed = done.push_committed_tokens
        if isinstance(tokens, np.ndarray) and committed > tokens.size:
            raise ValueError(f"push {push_id!r} already holds {committed} tokens, more than the {tokens.size} "
                             "given: give another push_id")
        bad: list = []  # a ValueError from the tokens, raised as itself (not as the cancelled call)

        def requests() -> Iterator[pb.PushDataRequest]:
            offset = committed
            try:
                for chunk in _chunks(tokens, committed, chunk_tokens):
                    first = offset == committed
                    yield pb.PushDataRequest(job_id=job_id if first else "", push_id=push_id if first else "",
                                             offset=offset, tokens=chunk)
                    offset += len(chunk)
            except ValueError as e:
                bad.append(ValueError(f"push {push_id!r}: {e}"))
                raise

        try:
            sent = self._push_stream(requests())
        except MegatrainError:
            if bad:
                raise bad[0] from None
            raise
        if bad:  # the iterable ended before the tokens the push already holds: nothing was sent
            raise bad[0]
        return sent if sent.chunks_accepted else done

    def _push_stream(self, requests: Iterator[pb.PushDataRequest],
                     timeout: Optional[float] = None) -> pb.PushDataResponse:
        try:
            return self._stub.PushData(requests, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise MegatrainError.of(e) from None


def _content_push_id(arr: np.ndarray) -> str:
    """A push id from the tokens themselves (as uint32, little-endian), hashed a slice at a time."""
    h = hashlib.sha256()
    for start in range(0, arr.size, 1 << 20):
        h.update(arr[start:start + (1 << 20)].astype("<u4").tobytes())
    return f"tokens-{arr.size}-{h.hexdigest()[:32]}"


def _checked_array(tokens: Union[np.ndarray, Sequence]) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError("tokens must be a 1-D array of integers")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFFFFFF):
        raise ValueError(f"tokens hold an id outside 0..2^32-1 (min {int(arr.min())}, max {int(arr.max())})")
    return arr


def _chunks(tokens: Union[np.ndarray, Iterable[int]], skip: int, size: int) -> Iterator[list]:
    """Lists of at most `size` token ids after the first `skip`; every id checked to fit uint32."""
    if isinstance(tokens, (np.ndarray, Sequence)):
        arr = _checked_array(tokens)
        for start in range(skip, arr.size, size):
            yield arr[start:start + size].astype(np.uint32, copy=False).tolist()
        return
    it = iter(tokens)
    held = sum(1 for _ in itertools.islice(it, skip))
    if held < skip:
        raise ValueError(f"it already holds {skip} tokens, more than the {held} given: give another push_id")
    while chunk := list(itertools.islice(it, size)):
        for i, t in enumerate(chunk):
            if not isinstance(t, (int, np.integer)) or not 0 <= int(t) <= 0xFFFFFFFF:
                raise ValueError(f"token {t!r} (chunk position {i}) is not an id in 0..2^32-1")
        yield [int(t) for t in chunk]
