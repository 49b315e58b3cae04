#!/usr/bin/env bash
# scripts/gpu_bundle.sh — pack binaries built here for the lent GPU machine, so that its device
# time goes to tests and benches instead of a build. Packs build/bin/{mt_cuda_tests,
# megatrain-bench} and the shared libraries they need that the GPU image lacks (OpenBLAS, oneDNN
# and theirs; CUDA's and the C/C++ runtime's libraries are there) into .gpu_carry/bundle.tar.xz.
# Carry .gpu_carry with the device tool; scripts/gpu_check.sh unpacks it, checks that the test
# binary starts there, and builds from source instead when it does not.
#   scripts/gpu_bundle.sh [BUILD_DIR]     (default build/, configured with CUDA on)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" .gpu_carry
for b in mt_cuda_tests megatrain-bench; do cp "$BUILD/bin/$b" "$STAGE/bin/"; done
# Every resolved library except the CUDA toolkit's, glibc/libstdc++/libgcc/libgomp, and NCCL and
# cuDNN, which the GPU image has in its Python wheels (nvidia-nccl-cu13, nvidia-cudnn-cu13;
# gpu_check.sh puts them on LD_LIBRARY_PATH) and which are far beyond the carry limit.
ldd "$STAGE"/bin/* | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/usr/local/cuda|lib(c|m|dl|pthread|rt|stdc\+\+|gcc_s|gomp|nccl|cudnn[a-z_]*)\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
git rev-parse HEAD >"$STAGE/commit.txt"
tar -C "$STAGE" -cJf .gpu_carry/bundle.tar.xz .
ls -la .gpu_carry/bundle.tar.xz
tar -tJf .gpu_carry/bundle.tar.xz
