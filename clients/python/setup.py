"""Generates megatrain/v1/trainer_pb2{,_grpc}.py(i) from the repository's proto/ while building.

The generated files are never committed: each build makes them from the .proto next to this
package (../../proto, or $MEGATRAIN_PROTO_DIR) with grpcio-tools' own protoc, so the code always
matches the protobuf runtime the package requires.
"""
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO = "megatrain/v1/trainer.proto"


def proto_root() -> Path:
    root = Path(os.environ.get("MEGATRAIN_PROTO_DIR", HERE.parent.parent / "proto"))
    if not (root / PROTO).is_file():
        raise RuntimeError(f"{root / PROTO} not found: build from the MegaTrain repository or set MEGATRAIN_PROTO_DIR")
    return root


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        import importlib.resources

        from grpc_tools import protoc

        out = Path(self.build_lib)
        well_known = importlib.resources.files("grpc_tools") / "_proto"
        args = ["grpc_tools.protoc", f"-I{proto_root()}", f"-I{well_known}", f"--python_out={out}",
                f"--pyi_out={out}", f"--grpc_python_out={out}", str(proto_root() / PROTO)]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + PROTO)
        (out / "megatrain" / "v1" / "__init__.py").write_text('"""Generated gRPC stubs of megatrain.v1."""\n')


setup(cmdclass={"build_py": BuildWithStubs})
