"""A live megatraind for the tests: the binary named by $MEGATRAIND (ctest sets it), on free
loopback ports, in a temporary state directory, stopped with SIGTERM at the end."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from megatrain import Client


class Daemon:
    def __init__(self, state: Path, *flags: str):
        binary = os.environ.get("MEGATRAIND")
        if not binary or not Path(binary).is_file():
            raise RuntimeError(f"MEGATRAIND = {binary!r}: set it to the built megatraind")
        self.state = state
        self.stderr = open(state.parent / (state.name + ".stderr"), "w")
        self.proc = subprocess.Popen([binary, f"--state_dir={state}", "--listen=127.0.0.1:0", "--metrics_listen=",
                                      "--host_memory=8G", "--log_level=info", *flags], stderr=self.stderr)
        deadline = time.time() + 30
        self.port = 0
        while not self.port:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"megatraind did not start: {(state.parent / (state.name + '.stderr')).read_text()}")
            time.sleep(0.05)
            try:
                info = json.loads((state / "megatraind.json").read_text())
                if info.get("pid") == self.proc.pid:
                    self.port = info["port"]
            except (OSError, ValueError):
                pass
        self.address = f"127.0.0.1:{self.port}"
        self.data_root = state / "data"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    d = Daemon(state)
    yield d
    d.stop()


@pytest.fixture()
def client(daemon):
    with Client(daemon.address) as c:
        yield c


def tiny_spec(steps=8, **extra):
    spec = {"name": "py-test", "model": {"preset": "tiny"}, "init": {"seed": 1}, "data": {"source": "synthetic"},
            "seq_len": 32, "micro_batch": 4, "global_batch": 4, "steps": steps,
            "optimizer": {"lr": 3e-3, "weight_decay": 0.0}, "backend": "cpu"}
    spec.update(extra)
    return spec
