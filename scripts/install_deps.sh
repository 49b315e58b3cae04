#!/usr/bin/env bash
# Installs the Debian packages MegaTrain builds and tests with. Idempotent: does nothing when
# everything is present; otherwise runs apt-get as root, or through sudo.
set -euo pipefail

packages=(
  # toolchain and engine (the engine needs only these; BLAS is optional but fast)
  build-essential cmake ninja-build pkg-config ccache googletest
  libopenblas-dev libopenblas0-openmp
  # oneDNN: the CPU GEMM provider when OpenBLAS runs a generic kernel, and the native bf16 GEMM
  libdnnl-dev
  # daemon and CLI
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libspdlog-dev libsystemd-dev libyaml-cpp-dev nlohmann-json3-dev
  # tests of the daemon scrape /metrics over HTTP, check it with promtool and a real prometheus
  curl prometheus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
