"""Python client for megatraind: submit, watch, push data, follow logs, list and export checkpoints.

    from megatrain import Client
    with Client("127.0.0.1:50051") as c:
        job = c.submit({"name": "demo", "model": {"preset": "tiny"}, "steps": 50, "backend": "cpu"})
        for ev in c.watch(job.id):
            print(ev.step, ev.loss)
"""
from megatrain.client import Client, MegatrainError
from megatrain.v1 import trainer_pb2 as pb

__all__ = ["Client", "MegatrainError", "pb"]
