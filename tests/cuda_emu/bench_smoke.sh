#!/usr/bin/env bash
# tests/cuda_emu/bench_smoke.sh BENCH OUT_DIR — the benches scripts/gpu_check.sh runs on a lent
# GPU, each with the same suite and flags at a shape the CUDA emulation runs in seconds (tiny
# models, short sequences, the 64-wide peak GEMM), through megatrain-bench built against the
# emulation. A lease is 15 minutes: a bench that crashes, refuses its flags or writes a line
# that is not JSON must do so here first. Every line must parse; `"ok": false` is allowed only
# for cuDNN in a build without its frontend (with it, tests/cuda_emu/cudnn_emu.cc runs the
# graphs). Exit 0 when every bench passed.
set -uo pipefail
B=$1
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
failed=0

# name, then the command's arguments (an optional leading env VAR=value is passed through env).
run() {
  local name=$1
  shift
  local start=$SECONDS
  timeout 300 env "$@" >"$OUT/$name.json" 2>"$OUT/$name.log"
  local rc=$?
  if ! python3 - "$OUT/$name.json" "$rc" <<'EOF'; then
import json, sys
path, rc = sys.argv[1], int(sys.argv[2])
lines = [l for l in open(path) if l.strip()]
if not lines:
    sys.exit("no output")
bad = []
for l in lines:
    j = json.loads(l)  # a line that is not JSON fails here
    # cuDNN may refuse only in a build without it ("cuDNN: not in this build ..."); with the
    # frontend, cudnn_emu.cc runs its graphs and a refusal is a failure.
    built = not j.get("cudnn", "").startswith("cuDNN: not in this build")
    if j.get("ok") is False and (j.get("kernel") != "cudnn" or built):
        bad.append(j.get("error", l[:200]))
    if j.get("suite") == "step" and j.get("attention_kernel") == "cudnn" and built and not j.get("cudnn_attention_calls"):
        bad.append("a step on cuDNN attention made no cuDNN call (it fell back)")
if bad:
    sys.exit("not ok: " + "; ".join(bad))
# cuDNN's lines are the only ones allowed to fail, and only they may make the exit status 1.
cudnn_failed = any(json.loads(l).get("ok") is False for l in lines)
if rc != 0 and not (rc == 1 and cudnn_failed):
    sys.exit(f"exit status {rc}")
EOF
    echo "FAIL $name ($((SECONDS - start)) s): $B ${*:2}" >&2
    tail -5 "$OUT/$name.log" >&2
    failed=1
  else
    echo "ok   $name ($((SECONDS - start)) s)"
  fi
}

STEP=(step --backend cuda --executor streaming --recompute on --peak-n 64 --steps 2 --warmup 1 --json)
TINY=("${STEP[@]}" --preset tiny --seq-len 64 --micro-batch 1 --global-batch 2)
MOE=(--model "$ROOT/tests/fixtures/moe/gpt_oss" --precision bf16 --layout compact)

run attention "$B" attention --kernel all --min-seq 64 --max-seq 128 --heads 4 --kv-heads 2 --head-dim 64 --reps 1 --json
run attention_target "$B" attention --dtype bf16 --kernel all --heads 4 --kv-heads 1 --head-dim 128 --min-seq 64 \
  --max-seq 64 --reps 1 --json
run kernels "$B" kernels --preset tiny --tokens 64 --reps 1 --json
run step_bf16_cudnn MEGATRAIN_ATTENTION=cudnn "$B" "${TINY[@]}" --precision bf16
run step_noclip MEGATRAIN_ATTENTION=cudnn "$B" "${TINY[@]}" --precision bf16 --grad-clip 1e9
run step_speculative MEGATRAIN_ATTENTION=cudnn "$B" "${TINY[@]}" --precision bf16 --grad-clip 1e9 --speculative-updates auto
run step_compact MEGATRAIN_ATTENTION=cudnn "$B" "${TINY[@]}" --precision bf16 --layout compact --layers 2
run step_moe "$B" "${STEP[@]}" "${MOE[@]}" --seq-len 64 --micro-batch 1 --global-batch 4
run step_moe_small_batch "$B" "${STEP[@]}" "${MOE[@]}" --seq-len 8 --micro-batch 1 --global-batch 1
run step_qwen3_moe "$B" "${STEP[@]}" --model "$ROOT/tests/fixtures/moe/qwen3_moe" --precision bf16 --layout compact \
  --seq-len 64 --micro-batch 1 --global-batch 2
run step_packed MEGATRAIN_ATTENTION=cudnn "$B" "${TINY[@]}" --precision bf16 --doc-len 16 --doc-spread on
run gemm "$B" gemm --tokens 16 --reps 1 --json
run link "$B" link --mib 4 --reps 2 --json
run step_fp32 "$B" "${TINY[@]}" --precision fp32
run step_convert "$B" "${TINY[@]}" --precision bf16 --bf16-uploads convert
run pin "$B" pin --gib 1 --chunk-mib 256 --threads 2 --json
run step_checkpoint_stall "$B" "${TINY[@]}" --precision bf16 --checkpoint-stall "$OUT/ckpt"
mkdir -p "$OUT/nvme"
run step_nvme "$B" "${TINY[@]}" --precision bf16 --nvme "$OUT/nvme" --nvme-masters on
run step_long "$B" "${STEP[@]}" --preset tiny --precision bf16 --seq-len 512 --micro-batch 1 --global-batch 1 \
  --device-gib 1
run adamw "$B" adamw --params 1e5 --reps 1 --json
# The report the session after a lease writes PERF.md from (scripts/gpu_report.py) reads every
# line above: each suite's table must come out.
if ! python3 "$ROOT/scripts/gpu_report.py" "$OUT" >"$OUT/report.md" 2>"$OUT/report.log"; then
  echo "FAIL scripts/gpu_report.py $OUT" >&2 && cat "$OUT/report.log" >&2 && failed=1
fi
for section in "## Attention" "## Memory-bound kernels" "## Steps" "| MoE file" "| checkpoint file" "| gemm shape" "## Targets" \
  "| link" "| pin" "| adamw"; do
  grep -qF "$section" "$OUT/report.md" || { echo "FAIL report without '$section'" >&2 && failed=1; }
done
[ "$failed" = 0 ] && echo "ok   report ($(grep -c '^| ' "$OUT/report.md") table lines)"
exit $failed
