#!/usr/bin/env bash
# scripts/gpu_check.sh — what a lent GPU machine (one H200, ~8 minutes) runs, in one go:
#   1. configure + build the engine, the CUDA kernels, mt_cuda_tests (no daemon: that machine
#      has no gRPC/protobuf/spdlog/prometheus, so -DMEGATRAIN_SERVER=OFF);
#   2. the op table test (issue 27: every op of both CUDA tables against the CPU reference), the
#      MoE kernels' and attention sinks' tests (against the CPU reference, determinism), the
#      cuDNN attention tests (issue 25: cuDNN SDPA against the CPU reference and the
#      simt kernel, dense and ragged, and the streaming executor on it; the device's serialized
#      cuDNN description, cudnn_device_properties.json; the packed ones once more
#      with empty padding documents, informational: what cuDNN < 9.25 does with them), then the issue-18 CUDA
#      tests (points 2-7: faults and DEVICE_LOST, copy accounting from
#      two threads, device binding, device budget, stalls, multi-chunk bf16 copies), then the
#      mixed-precision tests (*Bf16*: the bf16 kernels and the bf16 op table against the CPU bf16
#      table; *MixedPrecision*: the streaming executor in bf16 against the CPU backend) and
#      long attention, then every other CUDA test;
#   3. megatrain-bench attention (cudnn, mma and simt side by side, and the issue-25 target shape
#      T = 4096, 28/4 heads), kernels (the memory-bound ones against a device copy), then step --backend cuda --precision bf16 at a real shape
#      (qwen2.5-7b with 4 of its 28 layers) with MEGATRAIN_ATTENTION=cudnn, the full-depth 7B
#      step (28 layers, 64 Ki tokens) on cuDNN, the peers at the 4-layer shape (bench/peers/:
#      PyTorch resident, the published MegaTrain, DeepSpeed ZeRO-3 offload), gemm / link, the 4-layer step on the default
#      kernel, in fp32 and in bf16 with --bf16-uploads convert, then pin and two small-preset
#      steps, as JSON.
# cuDNN: the binaries link libcudnn.so.9; the GPU image has it in its Python's nvidia-cudnn-cu13
# wheel, which this script puts on LD_LIBRARY_PATH. A build there finds the frontend headers in
# third_party_src/cudnn_frontend/include when carried (cp -r .venv/lib/python3*/site-packages/include
# third_party_src/cudnn_frontend/include); without them it builds without the cuDNN path.
# Everything lands under $OUT (default ./gpu_check_out): summary.txt (one line per step with
# its exit status and elapsed seconds), results.txt, *.log, tests_*.json (GoogleTest), bench_*.json.
# `scripts/gpu_report.py $OUT` turns them into the tables docs/PERF.md records.
# Every step runs under `timeout`; the script stops starting new steps after $BUDGET_S seconds
# (default 450), and no step may run past $HARD_S seconds from the start (default 570: each
# step's limit is cut to what is left), so that the whole run fits in 10 minutes. Exit status:
# 0 when every step that ran passed, 1 otherwise.
#
# GoogleTest is built from source (MEGATRAIN_GTEST_SOURCE). The GPU machine has no
# /usr/src/googletest, so the caller carries a copy inside the repository: before the run,
#   cp -r /usr/src/googletest third_party_src/googletest      (third_party_src/ is git-ignored)
# and pass third_party_src/googletest in the device tool's `carry`. The script looks, in order,
# at $MEGATRAIN_GTEST_SOURCE, third_party_src/googletest, .gtest and /usr/src/googletest.
#
#   scripts/gpu_check.sh /tmp/out                # the whole check (or OUT=/tmp/out scripts/gpu_check.sh)
#   GPU_CHECK_DRY=1 scripts/gpu_check.sh         # print the steps without running them
#   ONLY="tests_rest bench_attention" scripts/gpu_check.sh /tmp/out   # only the steps named
#   ONLY="install_deepspeed peer_torch_resident peer_megatrain_official peer_deepspeed_zero3" \
#     scripts/gpu_check.sh /tmp/peers     # the peers alone, when a first call's budget ended before them
#
# The device tool brings back at most 8 files from its $OUT, and only what is there when the
# command ends or is cut off: with GPU_CHECK_PACK=$OUT/gc.tgz the results directory is packed
# into that one file after every step, so a run stopped at any point returns what it measured.
#   GPU_CHECK_PACK=$OUT/gc.tgz scripts/gpu_check.sh /tmp/gc      # the lease's command
set -uo pipefail

ARG_OUT=${1:-}
[ -n "$ARG_OUT" ] && ARG_OUT=$(mkdir -p "$ARG_OUT" && cd "$ARG_OUT" && pwd)  # relative to the caller
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${ARG_OUT:-${OUT:-$ROOT/gpu_check_out}}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
BUDGET_S=${BUDGET_S:-450}
HARD_S=${HARD_S:-570}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 8)}
DRY=${GPU_CHECK_DRY:-0}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
: >"$OUT/results.txt"
START=$(date +%s)
FAILED=0

elapsed() { echo $(($(date +%s) - START)); }
# The results so far as one file (GPU_CHECK_PACK, see the header), replaced whole after each step.
pack() {
  [ -n "${GPU_CHECK_PACK:-}" ] || return 0
  tar -czf "$GPU_CHECK_PACK.part" --exclude="$(basename "$GPU_CHECK_PACK")*" -C "$OUT" . 2>/dev/null &&
    mv -f "$GPU_CHECK_PACK.part" "$GPU_CHECK_PACK"
}
log() { echo "[gpu_check +$(elapsed)s] $*" | tee -a "$OUT/summary.txt"; }

# step NAME LIMIT_S STDOUT_FILE CMD...: runs CMD under timeout, stdout to STDOUT_FILE (or the
# step's log when "-"), stderr to $OUT/NAME.log; records the status. Skipped past the budget.
step() {
  local name=$1 limit=$2 out=$3
  shift 3
  [ "$out" = "-" ] && out="$OUT/$name.log"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi  # not asked for this run
  local left=$((HARD_S - $(elapsed)))
  if [ "$(elapsed)" -ge "$BUDGET_S" ] || [ "$left" -lt 10 ]; then
    log "SKIP $name (past the ${BUDGET_S}s budget)"
    echo "$name skipped" >>"$OUT/results.txt"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$DRY" = 1 ]; then
    log "DRY $name (limit ${limit}s): $*"
    return 0
  fi
  log "start $name (limit ${limit}s)"
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$out" 2>>"$OUT/$name.log"
  rc=$?
  if [ "$rc" -eq 3 ]; then  # a peer that cannot run here (bench/peers/common.py fail): says why, not ours
    log "UNAVAILABLE $name: $(tail -c 300 "$out" 2>/dev/null)"
  elif [ "$rc" -ne 0 ]; then
    FAILED=1
  fi
  [ "$rc" -eq 124 ] && log "TIMEOUT $name after ${limit}s"
  log "done $name rc=$rc in $(($(date +%s) - t0))s"
  echo "$name $rc" >>"$OUT/results.txt"
  pack
  return "$rc"
}
# record_ldd FILE...: what the dynamic loader finds for each (ldd.txt), and in the summary the
# lines that decide whether cuDNN runs: for our binaries libcudnn, libnvrtc (the frontend's
# runtime-compiled engines) and anything not found; for cuDNN's own engine libraries (which it
# dlopens, so ldd of ours does not list them) what they cannot find.
record_ldd() {
  local f pattern
  for f in "$@"; do
    [ -e "$f" ] || continue
    { echo "== $f"; ldd "$f" 2>&1; } >>"$OUT/ldd.txt"
    pattern='cudnn|nvrtc|not found'
    [[ $(basename "$f") == libcudnn_* ]] && pattern='not found'
    ldd "$f" 2>&1 | grep -E "$pattern" | while read -r l; do log "ldd $(basename "$f"): $l"; done
  done
}
# informational NAME LIMIT_S STDOUT_FILE CMD...: as step, but a failure is recorded (results.txt,
# the log, its JSON) without failing the run: what the run learns about a library, not a check.
informational() {
  local failed=$FAILED
  step "$@"
  FAILED=$failed
}

# --- the machine --------------------------------------------------------------------------
{
  echo "date: $(date -u)"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "ulimit -l (RLIMIT_MEMLOCK, KiB): $(ulimit -l)"
  grep -E 'MemTotal|MemAvailable' /proc/meminfo 2>/dev/null
  # The host's NUMA nodes and CPUs (the optimizer's placement: engine/base/numa.h).
  command -v lscpu >/dev/null && lscpu | grep -E 'Model name|Socket|NUMA|^CPU\(s\)|Thread'
  for n in /sys/devices/system/node/node*; do [ -r "$n/cpulist" ] && echo "$(basename "$n") cpus: $(cat "$n/cpulist")"; done
  echo "vm.max_map_count: $(cat /proc/sys/vm/max_map_count 2>/dev/null)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -2
  cmake --version | head -1
} >"$OUT/machine.txt" 2>&1
pack

GTEST_SRC=""
for c in "${MEGATRAIN_GTEST_SOURCE:-}" "$ROOT/third_party_src/googletest" "$ROOT/.gtest" /usr/src/googletest; do
  if [ -n "$c" ] && [ -f "$c/CMakeLists.txt" ]; then
    GTEST_SRC=$c
    break
  fi
done
log "GoogleTest from ${GTEST_SRC:-nowhere (needed only to build: prebuilt binaries need none)}; build in $BUILD with -j$JOBS; budget ${BUDGET_S}s"

GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)

# cuDNN and NCCL from the image's Python wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13), ahead of
# anything else on the path (the bundle leaves both out: gpu_bundle.sh).
wheel_lib() {  # the first site-packages/nvidia/*/lib holding $1
  python3 -c 'import glob, os, site, sys; d = [p for s in site.getsitepackages() for p in sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib"))) if os.path.exists(os.path.join(p, sys.argv[1]))]; print(d[0] if d else "")' "$1" 2>/dev/null
}
CUDNN_LIB=$(wheel_lib libcudnn.so.9)
NCCL_LIB=$(wheel_lib libnccl.so.2)
for d in "$NCCL_LIB" "$CUDNN_LIB"; do
  [ -n "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
log "cuDNN from ${CUDNN_LIB:-nowhere in the Python wheels (cuDNN attention is refused)}; NCCL from ${NCCL_LIB:-nowhere}"

# --- 1. build: the tests first, so that points 2-7 run within the first minutes ----------
# Binaries built elsewhere (scripts/gpu_bundle.sh, carried in .gpu_carry) are used when they
# start here; otherwise everything is built from source.
PREBUILT=0
if [ -f "$ROOT/.gpu_carry/bundle.tar.xz" ] && [ "$DRY" != 1 ]; then
  mkdir -p "$BUILD/prebuilt" && tar -C "$BUILD/prebuilt" -xJf "$ROOT/.gpu_carry/bundle.tar.xz"
  # The CUDA install's libraries after the wheels' cuDNN and NCCL: a libcudnn there (older, or
  # not there at all) must not shadow the wheel's, which the binaries were checked against.
  export LD_LIBRARY_PATH="$BUILD/prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
  if "$BUILD/prebuilt/bin/mt_cuda_tests" --gtest_list_tests >"$OUT/prebuilt_list.txt" 2>&1; then
    PREBUILT=1
    log "prebuilt binaries of commit $(cat "$BUILD/prebuilt/commit.txt") start here: no build"
  else
    log "prebuilt binaries do not start here (see prebuilt_list.txt): building"
  fi
fi
if [ "$PREBUILT" = 1 ]; then
  T="$BUILD/prebuilt/bin/mt_cuda_tests"
  B="$BUILD/prebuilt/bin/megatrain-bench"
else
  if [ -z "$GTEST_SRC" ] && [ "$DRY" != 1 ]; then
    log "no GoogleTest source to build with: copy /usr/src/googletest to third_party_src/googletest and carry it (see the header)"
    exit 1
  fi
  step configure 120 - cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DMEGATRAIN_CUDA=ON -DMEGATRAIN_SERVER=OFF -DMEGATRAIN_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMEGATRAIN_GTEST_SOURCE="$GTEST_SRC" \
    ${CUDNN_LIB:+-DCUDNN_LIBRARY="$CUDNN_LIB/libcudnn.so.9" -DCUDNN_INCLUDE_DIR="$CUDNN_LIB/../include"} || exit 1
  step build_tests 300 - cmake --build "$BUILD" -j "$JOBS" --target mt_cuda_tests || exit 1
  T="$BUILD/bin/mt_cuda_tests"
  B="$BUILD/bin/megatrain-bench"
fi
ISSUE18='CudaFault.*:CudaBackend.*:CudaPinned.*:*Async*:*DeviceBudget*:*Stall*:*Fault*'
export OMP_WAIT_POLICY=passive
export MEGATRAIN_SOURCE_DIR="$ROOT"  # the tests' fixtures (tests/fixtures/families) in this copy
export MEGATRAIN_REQUIRE_CUDNN=1     # a build without cuDNN fails its cuDNN tests here instead of skipping them

# --- 2. tests ---------------------------------------------------------------------------
# The libraries each binary will load, first: a cuDNN refusal from a missing library is then
# named before any test runs (the bench, when not built yet, after build_bench).
[ "$DRY" = 1 ] || record_ldd "$T" "$B" ${CUDNN_LIB:+"$CUDNN_LIB"/libcudnn_*.so.9}
# The op table test first (issue 27: every Ops<T> method of the fp32 and bf16 tables against the
# CPU reference in double, tests/cuda/ops_table_test.cc); the later filters leave it out.
OPS_TABLE='*OpsTable*'
step tests_ops_table 60 - "$T" --gtest_filter="$OPS_TABLE" --gtest_output="json:$OUT/tests_ops_table.json"
# The mixture-of-experts kernels and attention sinks (tests/cuda/moe_ops_test.cc: each against
# the CPU reference in fp32 and bf16, and bitwise reruns); the later filters leave them out.
MOE='CudaMoe.*'
step tests_moe 60 - "$T" --gtest_filter="$MOE" --gtest_output="json:$OUT/tests_moe.json"
CUDNN_TESTS='*Cudnn*'
# cuDNN's own error log on stderr (the step's log, not its JSON): a refusal names itself.
CUDNN_LOG=(env CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr)
step tests_cudnn 240 - "${CUDNN_LOG[@]}" "$T" --gtest_filter="$CUDNN_TESTS" --gtest_output="json:$OUT/tests_cudnn.json"
# The device's own description for cuDNN's deviceless heuristics (cudnn_frontend::DeviceProperties,
# serialized): its values replace those tests/fixtures/cudnn/sm90_h100_sxm.json was written from
# (the CPU test's heuristics for sm_90). Seconds; informational (cuDNN < 9.11 has none to give).
informational cudnn_device 30 - env MEGATRAIN_CUDNN_DEVICE_JSON="$OUT/cudnn_device_properties.json" "$T" \
  --gtest_filter='CudaAttentionCudnn.DescribesTheDeviceForDevicelessHeuristics'
# Packed rows run in power-of-two batches of exactly their documents below cuDNN 9.25 (NVIDIA gates zero-length
# sequences there). Once more padded with empty documents, to record what this library does with
# them (a few graph pairs: seconds).
informational tests_cudnn_padded 40 - "${CUDNN_LOG[@]}" MEGATRAIN_CUDNN_PAD_DOCUMENTS=1 "$T" \
  --gtest_filter='CudaAttentionCudnn.PackedRowsUnderEitherBatching' --gtest_output="json:$OUT/tests_cudnn_padded.json"
step tests_issue18 150 - "$T" --gtest_filter="$ISSUE18" --gtest_output="json:$OUT/tests_issue18.json"
BF16='*Bf16*:*MixedPrecision*:CudaAttention.*:*AttentionMma*'
step tests_bf16_attention 150 - "$T" --gtest_filter="$BF16-$OPS_TABLE:$MOE" --gtest_output="json:$OUT/tests_bf16_attention.json"
step tests_rest 150 - "$T" --gtest_filter="-$OPS_TABLE:$MOE:$CUDNN_TESTS:$ISSUE18:$BF16" --gtest_output="json:$OUT/tests_rest.json"

# --- 3. benchmarks ------------------------------------------------------------------------
if [ "$PREBUILT" != 1 ]; then
  step build_bench 180 - cmake --build "$BUILD" -j "$JOBS" --target megatrain-bench
  [ "$DRY" = 1 ] || record_ldd "$B"
fi
# Attention first: cuDNN, the tensor-core kernel and simt side by side up to 8K (fp32: simt),
# the issue-25 target shape (T = 4096, 28 query / 4 kv heads, head_dim 128), then cuDNN and the
# tensor-core kernel at long T.
step bench_attention 90 "$OUT/bench_attention.json" "$B" attention --kernel all --max-seq 8192 --reps 2 --json
step bench_attention_target 60 "$OUT/bench_attention_target.json" "$B" attention --dtype bf16 --kernel all \
  --heads 28 --kv-heads 4 --head-dim 128 --min-seq 4096 --max-seq 4096 --reps 3 --json
step bench_attention_long 90 "$OUT/bench_attention_long.json" "$B" attention --dtype bf16 --kernel cudnn \
  --min-seq 16384 --max-seq 32768 --reps 2 --json
# The memory-bound kernels against a device copy of their bytes (issue 25: >= 0.7 of it).
step bench_kernels 60 "$OUT/bench_kernels.json" "$B" kernels --preset qwen2.5-7b --tokens 4096 --reps 10 --json
# The CUDA backend runs the streaming executor only (it recomputes from layer inputs). A real
# layer shape: qwen2.5-7b (hidden 3584, 152064-token vocabulary, untied) with 4 of its 28
# layers, ~2 G parameters (~36 GB of pinned host state in fp32 + shadow), 16 Ki tokens a step.
QWEN=(step --preset qwen2.5-7b --layers 4 --backend cuda --executor streaming --recompute on
  --seq-len 2048 --micro-batch 1 --global-batch 8 --json)
step bench_step_qwen7b_bf16_cudnn 180 "$OUT/bench_step_qwen7b_bf16_cudnn.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" "${QWEN[@]}" --precision bf16 --steps 3 --warmup 1
# Issue 26: the optimizer off the critical path. The same step without clipping (a random
# model clips every step at grad_clip 1), updates after the norm, then speculative (restore
# copies: ~18 GB more of plain host memory); the stall is the difference.
step bench_step_qwen7b_noclip 120 "$OUT/bench_step_qwen7b_noclip.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" "${QWEN[@]}" --precision bf16 --steps 3 --warmup 1 --grad-clip 1e9
step bench_step_qwen7b_speculative 120 "$OUT/bench_step_qwen7b_speculative.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" "${QWEN[@]}" --precision bf16 --steps 3 --warmup 1 --grad-clip 1e9 --speculative-updates auto
# Issue 25's full-depth step, before the peers (our headline numbers first; a peer past the
# budget is recorded as skipped): all 28 layers (7.6 G parameters; compact layout + bf16
# shadow, ~91 GB of pinned host state on a 128 GiB host: `megatrain-bench plan`), 16 x 4096
# tokens. Then gpt-oss-120b's layer at 64 Ki tokens (issue 28).
step bench_step_qwen7b_full_cudnn 300 "$OUT/bench_step_qwen7b_full_cudnn.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" step --preset qwen2.5-7b --backend cuda --executor streaming --recompute on --precision bf16 \
  --layout compact --seq-len 4096 --micro-batch 1 --global-batch 16 --steps 2 --warmup 1 --json
# Issue 28: mixtures of experts at their real layer shapes, bf16, compact. gpt-oss-120b's layer
# (128 experts of 24.9 M, 4 a token) at 64 Ki tokens a step (every expert routed) and at 64 tokens
# (at most 4 x 64 slots: most idle), reported over active parameters (model_tflops_6nt_active)
# with the H2D bytes against the routed experts (h2d_over_routed_ideal); qwen3-30b-a3b's too.
MOE_STEP=(step --backend cuda --executor streaming --recompute on --precision bf16 --layout compact --json)
step bench_step_gpt_oss_120b 150 "$OUT/bench_step_gpt_oss_120b.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" "${MOE_STEP[@]}" --preset gpt-oss-120b --layers 1 --seq-len 4096 --micro-batch 1 --global-batch 16 \
  --steps 2 --warmup 1
# gpt-oss-120b at a small batch and qwen3-30b-a3b come after the peers.
# Peers on the same GPU, same shape, same tokens per step (bench/peers/, the same JSON fields):
# PyTorch resident, the published MegaTrain (its sources carried in third_party_src/), DeepSpeed
# ZeRO-3 offload (when carried and installed: bench/peers/deepspeed_zero3.py says how).
PEER=(--preset qwen2.5-7b --layers 4 --seq-len 2048 --micro-batch 1 --global-batch 8 --steps 3 --warmup 1 --json)
# DeepSpeed from carried files (bench/peers/fetch_deepspeed_wheels.sh), installed offline; its
# CPUAdam then JIT-builds at first use (ninja, nvcc). Also gives peer (c) its CPUAdam.
# Into a folder of ours on PYTHONPATH (the image's venv may be read-only), each package named,
# without dependency resolution: the rest (torch, numpy, ...) is the image's. typing-extensions
# too: the carried pydantic needs >= 4.16, newer than the image may have (a newer one only adds).
# bench/peers/cpu_smoke.py runs the peers on a CPU first (PERF.md says how it was installed).
if [ -d "$ROOT/third_party_src/wheels" ] && ! python3 -c "import deepspeed" 2>/dev/null; then
  export PYTHONPATH="$BUILD/pydeps${PYTHONPATH:+:$PYTHONPATH}"
  step install_deepspeed 150 - env DS_BUILD_OPS=0 python3 -m pip install --no-index --no-build-isolation --no-deps \
    --target "$BUILD/pydeps" --find-links "$ROOT/third_party_src/wheels" deepspeed hjson pydantic pydantic-core \
    annotated-types typing-inspection typing-extensions
fi
step peer_torch_resident 150 "$OUT/peer_torch_resident.json" python3 bench/peers/torch_resident.py "${PEER[@]}"
step peer_megatrain_official 180 "$OUT/peer_megatrain_official.json" python3 bench/peers/megatrain_official.py \
  "${PEER[@]}"
step peer_deepspeed_zero3 180 "$OUT/peer_deepspeed_zero3.json" python3 bench/peers/deepspeed_zero3.py "${PEER[@]}"
step bench_step_gpt_oss_120b_small_batch 90 "$OUT/bench_step_gpt_oss_120b_small_batch.json" "$B" "${MOE_STEP[@]}" \
  --preset gpt-oss-120b --layers 1 --seq-len 64 --micro-batch 1 --global-batch 1 --steps 2 --warmup 1
step bench_step_qwen3_30b_a3b 120 "$OUT/bench_step_qwen3_30b_a3b.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" "${MOE_STEP[@]}" --preset qwen3-30b-a3b --layers 4 --seq-len 4096 --micro-batch 1 --global-batch 8 \
  --steps 2 --warmup 1
# Packed documents on cuDNN (ragged calls, one graph pair per bucket of document count and
# longest document): lengths 1..1023 drawn anew each step, as real packed data has them; the
# JSON's cudnn_graphs_built and cudnn_graph_build_seconds say what building them mid-step costs.
step bench_step_qwen7b_packed_cudnn 90 "$OUT/bench_step_qwen7b_packed_cudnn.json" env MEGATRAIN_ATTENTION=cudnn \
  "$B" step --preset qwen2.5-7b --layers 1 --backend cuda --executor streaming --recompute on --precision bf16 \
  --seq-len 4096 --micro-batch 2 --global-batch 8 --doc-len 512 --doc-spread on --steps 3 --warmup 1 --json
step bench_gemm 90 "$OUT/bench_gemm.json" "$B" gemm --tokens 8192 --reps 5 --json
step bench_link 60 "$OUT/bench_link.json" "$B" link --mib 512 --reps 10 --json
# The same 4-layer shape on the default (simt) attention: the 2026-11-30 baseline, same run.
step bench_step_qwen7b_bf16 180 "$OUT/bench_step_qwen7b_bf16.json" "$B" "${QWEN[@]}" --precision bf16 \
  --steps 3 --warmup 1
# The same shape in fp32 (step time, h2d_bytes ratio), and bf16 converted by the uploader.
step bench_step_qwen7b_fp32 150 "$OUT/bench_step_qwen7b_fp32.json" "$B" "${QWEN[@]}" --precision fp32 \
  --steps 2 --warmup 1
step bench_step_qwen7b_bf16_convert 150 "$OUT/bench_step_qwen7b_bf16_convert.json" "$B" "${QWEN[@]}" \
  --precision bf16 --bf16-uploads convert --steps 2 --warmup 1
step bench_pin 60 "$OUT/bench_pin.json" "$B" pin --gib 8 --chunk-mib 1024 --threads 8 --json
# Issue 29: with it, the pause a 336 MB checkpoint costs the GPU step (between steps and beside
# them), and the same step with the Adam moments and masters on the NVMe tier (this disk).
step bench_step_small 90 "$OUT/bench_step_small.json" "$B" step --preset small --backend cuda --precision bf16 \
  --executor streaming --recompute on --seq-len 512 --micro-batch 4 --global-batch 8 --steps 5 --warmup 2 --json \
  --checkpoint-stall "$BUILD"
mkdir -p "$BUILD/nvme-tier"
step bench_step_small_nvme 90 "$OUT/bench_step_small_nvme.json" "$B" step --preset small --backend cuda \
  --precision bf16 --executor streaming --recompute on --seq-len 512 --micro-batch 4 --global-batch 8 --steps 5 \
  --warmup 2 --json --nvme "$BUILD/nvme-tier" --nvme-masters on
step bench_step_long 90 "$OUT/bench_step_long.json" "$B" step --preset small --backend cuda \
  --executor streaming --recompute on --seq-len 2048 --micro-batch 1 --global-batch 4 --steps 3 --warmup 1 --json
# Long context on the device (issue 14): the measured peak against the plan as T grows, with the
# token chunk and placement the planner picks for a 1 GiB budget, and the 7B layer shape at 32K.
for T in 16384 65536; do
  step bench_long_small_$T 120 "$OUT/bench_long_small_$T.json" "$B" step --preset small --backend cuda \
    --precision bf16 --executor streaming --recompute on --seq-len $T --micro-batch 1 --global-batch 1 \
    --device-gib 1 --steps 1 --warmup 1 --json
done
step bench_long_qwen7b_32k 150 "$OUT/bench_long_qwen7b_32k.json" "$B" step --preset qwen2.5-7b --layers 1 \
  --backend cuda --precision bf16 --executor streaming --recompute on --seq-len 32768 --micro-batch 1 \
  --global-batch 1 --steps 1 --warmup 1 --json
# Issue 26 point 3, last (CPU only, the least to lose if the budget runs out): the fused AdamW on
# this host's cores against DeepSpeed's CPUAdam, the same data (fp32, 28 B a parameter) and
# threads (all cores); CPUAdam's op builds on first use (tens of seconds).
step bench_adamw 60 "$OUT/bench_adamw.json" "$B" adamw --params 1e8 --reps 5 --json
# The same without the NUMA placement (workers unpinned, arrays first touched by whoever): on a
# host of several nodes the difference is what placement gives (machine.txt lists the nodes).
step bench_adamw_unplaced 60 "$OUT/bench_adamw_unplaced.json" env MEGATRAIN_NUMA=off "$B" adamw --params 1e8 --reps 5 --json
step peer_deepspeed_cpu_adam 120 "$OUT/peer_deepspeed_cpu_adam.json" python3 bench/peers/deepspeed_cpu_adam.py \
  --params 1e8 --reps 5 --json

log "finished in $(elapsed)s; failed=$FAILED"
pack
exit "$FAILED"
