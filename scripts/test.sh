#!/usr/bin/env bash
# The test command: install missing packages, release build (CUDA sources compiled where nvcc
# exists, the daemon where its libraries exist), every test (the CUDA ones on the CPU through
# tests/cuda_emu); then the engine and kernel tests, and the CUDA kernels emulated, again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# ccache (CMakeLists.txt) keys on paths relative to the checkout, and on no working directory, so a
# fresh clone elsewhere on the same machine (CI's) reuses what a build in another checkout compiled.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
jobs=$(nproc)

echo "== release build =="
cmake --preset release -DMEGATRAIN_WERROR=$werror
cmake --build --preset release -j "$jobs"
echo "== release tests =="
ctest --preset release -j "$jobs"  # many wait on processes, sockets or timeouts: 186 s at -j2, 329 s serial

echo "== asan build (engine, kernels, the CUDA kernels emulated) =="
cmake --preset asan -DMEGATRAIN_WERROR=$werror
cmake --build --preset asan -j "$jobs" --target mt_kernel_tests mt_engine_tests mt_cuda_emu_tests
echo "== asan tests =="
ctest --preset asan -j "$jobs"
