#!/usr/bin/env bash
# Installs the Debian packages MegaTrain builds and tests with, and the Python client's packages
# (PyPI) into REPO/.venv. Idempotent: does nothing when everything is present; otherwise runs
# apt-get as root, or through sudo, and pip in the virtual environment.
set -euo pipefail

packages=(
  # toolchain and engine (the engine needs only these; BLAS is optional but fast)
  build-essential cmake ninja-build pkg-config ccache googletest
  libopenblas-dev libopenblas0-openmp
  # oneDNN: the CPU GEMM provider when OpenBLAS runs a generic kernel, and the native bf16 GEMM
  libdnnl-dev
  # tokenizer.json: Unicode regexes (PCRE2) and NFC/NFKC normalization (utf8proc)
  libpcre2-dev libutf8proc-dev
  # several processes (engine/dist/): Open MPI's library and mpirun (optional at build time)
  libopenmpi-dev openmpi-bin
  # daemon and CLI
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libspdlog-dev libsystemd-dev libyaml-cpp-dev nlohmann-json3-dev
  # tests of the daemon scrape /metrics over HTTP, check it with promtool and a real prometheus
  curl prometheus
  # the Python client's tests run in a virtual environment (below)
  python3 python3-venv
)

# The Python client (clients/python) and its tests, from PyPI, into REPO/.venv. ctest's
# Python.Client runs there and fails (never skips) when they are missing. grpcio-tools 1.85 bundles
# protoc 35, whose generated code needs the protobuf 7.35+ runtime (clients/python/pyproject.toml).
# tensorboard: its event reader checks the files jobs write with logging.tensorboard.
python_packages=("grpcio>=1.85.1" "grpcio-tools>=1.85.1,<1.86" "protobuf>=7.35.1,<8" numpy pytest pyyaml
                 "setuptools>=77" "tensorboard>=2.21,<3")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
# NCCL (engine/dist/nccl_comm.cc) from PyPI: headers and library under the venv's
# site-packages/nvidia/nccl, found by engine/CMakeLists.txt. Only where CUDA builds.
have_cuda=0
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  have_cuda=1
  python_packages+=(nvidia-nccl-cu13)
fi
nccl_missing() { [[ " ${python_packages[*]} " == *" nvidia-nccl-cu13 "* ]] && ! compgen -G "$venv/lib/python3*/site-packages/nvidia/nccl/include/nccl.h" > /dev/null; }
if ! "$venv/bin/python" -c "import grpc, grpc_tools, google.protobuf, numpy, pytest, yaml, setuptools, tensorboard" 2>/dev/null || nccl_missing; then
  echo "install_deps: Python packages for the client into $venv" >&2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade "${python_packages[@]}"
fi
# The cuDNN frontend (kernels/cuda/attention_cudnn.cc): header-only C++, pinned, without its
# Python dependencies (CUTLASS DSL wheels the headers do not need). Headers land in the venv's
# site-packages/include, found by kernels/cuda/CMakeLists.txt; libcudnn is the CUDA install's.
cudnn_frontend=1.32.0
if [ "$have_cuda" = 1 ] && ! compgen -G "$venv/lib/python3*/site-packages/include/cudnn_frontend.h" > /dev/null; then
  echo "install_deps: cuDNN frontend $cudnn_frontend headers into $venv" >&2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --no-deps "nvidia-cudnn-frontend==$cudnn_frontend"
fi
# scripts/make_chat_fixtures.py renders the official chat templates with jinja2 (regenerating the
# fixtures only; the tests read them without Python).
if ! "$venv/bin/python" -c "import jinja2" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet "jinja2>=3.1"
fi
