#!/usr/bin/env bash
# The CPU numbers recorded in docs/PERF.md: one JSON object per line on stdout.
#   scripts/bench_cpu.sh [BUILD_DIR]   (default build/, built by scripts/test.sh or run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}/bin/megatrain-bench
$b sgemm --json
# Issue-13 point 5: the GEMMs of a real layer (4096 tokens, C = 2048) per CPU GEMM provider,
# fp32 and bf16; then OpenBLAS's generic kernel (what it picks on a CPU it cannot name), once
# left to the provider choice (oneDNN takes over where linked) and once forced.
$b cpu-gemm --tokens 4096 --c 2048 --json
OPENBLAS_CORETYPE=Prescott $b cpu-gemm --tokens 4096 --c 2048 --dtype fp32 --providers chosen --json
OPENBLAS_CORETYPE=Prescott MEGATRAIN_GEMM=openblas $b cpu-gemm --tokens 4096 --c 2048 --dtype fp32 --providers chosen --json
# AdamW against memcpy on 1 and 2 threads, on the widest ISA variant and on the AVX2 baseline.
for t in 1 2; do
  $b adamw --params 100000000 --threads $t --json
  MEGATRAIN_CPU_ISA=avx2 $b adamw --params 100000000 --threads $t --json
done
# Issue-2 target: the resident step of `small` at seq 512 (flops_fraction >= 0.5).
$b step --preset small --seq-len 512 --micro-batch 4 --global-batch 4 --executor resident --recompute off --steps 3 --warmup 1 --json
# Issue-3 targets: streaming vs resident under the same activation policy (recompute from layer
# inputs), a global batch of 16 sequences; then throttled links, from transfer ~ compute
# (0.0125 GB/s) up to where the forward's fetches hide behind its compute.
step="$b step --preset small --seq-len 512 --micro-batch 4 --global-batch 16 --recompute on --steps 3 --warmup 1 --json"
$step --executor resident
$step --executor streaming
for link in ${LINK_GBPS:-0.0125 0.016 0.026 0.034}; do $step --executor streaming --link-gbps "$link"; done
for layout in exact compact; do $b plan --preset dense-120b --layout $layout --json; done
