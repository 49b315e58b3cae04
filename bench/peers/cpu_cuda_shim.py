"""For a smoke run of the published MegaTrain peer on a machine without a GPU (MT_PEER_DEVICE=cpu):
its CPUMasterModel, seen through a `torch` whose `cuda` namespace runs everything on the host in
program order — streams and events that order nothing (host order already does), pinned memory
that is plain memory, `cuda:N` devices that are the CPU. Its own code, and the way
bench/peers/megatrain_official.py drives it, then run unchanged, so what would break on the GPU
machine for a reason that is not the GPU (its API against transformers, our driver against its
API, DeepSpeed's CPUAdam on its bf16 parameters) breaks here first. Times mean nothing.
"""
import contextlib
import types


class _Event:
    def __init__(self, enable_timing=False, **_):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


class _Stream:
    def __init__(self, device=None, **_):
        pass

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        return event or _Event()

    def synchronize(self):
        pass


def _fake_cuda():
    none = lambda *a, **k: None  # noqa: E731
    return types.SimpleNamespace(
        Event=_Event, Stream=_Stream, current_stream=lambda device=None: _Stream(),
        stream=lambda s: contextlib.nullcontext(), synchronize=none, empty_cache=none,
        reset_peak_memory_stats=none, max_memory_allocated=lambda device=None: 0,
        is_available=lambda: True, device_count=lambda: 1)


class _TorchOnHost(types.ModuleType):
    """torch, except that `cuda` is the fake above, cuda devices are the CPU and nothing is pinned."""

    def __init__(self, torch):
        super().__init__("torch")
        self._torch = torch
        self.cuda = _fake_cuda()

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def device(self, spec, *rest):
        return self._torch.device("cpu") if str(spec).startswith("cuda") else self._torch.device(spec, *rest)

    def empty(self, *shape, pin_memory=False, **kw):
        return self._torch.empty(*shape, **kw)


def install(module, torch):
    """Gives `module` (infinity.model.cpu_master) the host-only torch; Tensor.pin_memory and
    Tensor.record_stream become no-ops for the process (a smoke run only)."""
    module.torch = _TorchOnHost(torch)
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    torch.Tensor.record_stream = lambda self, stream: None
