#!/usr/bin/env bash
# Peer (b) for a GPU machine without network: DeepSpeed's sdist and the dependencies the GPU
# image lacks (hjson, pydantic and its parts, a typing-extensions new enough for it; msgpack,
# ninja, py-cpuinfo, psutil, einops, nvidia-ml-py, packaging, tqdm and torch are there), as
# files for its Python 3.12, into third_party_src/wheels/ (git-ignored). Carry that folder;
# scripts/gpu_check.sh installs from it offline (pip --no-index) before the peers run.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=third_party_src/wheels
mkdir -p "$dest"
pip=(python3 -m pip download --quiet --no-deps --dest "$dest")
"${pip[@]}" --no-binary :all: "deepspeed==0.18.2"
# With their dependencies resolved for that Python: pydantic pins its pydantic-core exactly.
python3 -m pip download --quiet --dest "$dest" --only-binary :all: --python-version 3.12 --implementation cp \
  --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 hjson "pydantic>=2,<3"
ls -la "$dest"
du -sh "$dest"
