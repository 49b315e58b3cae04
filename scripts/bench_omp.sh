#!/usr/bin/env bash
# OpenMP wait policy under contention (docs/PERF.md): the tiny streaming step with the OpenMP
# wait policy unset (libgomp's default), active and passive, on an idle machine and with LOAD
# busy-looping processes beside it. One JSON object per line on stdout.
#   scripts/bench_omp.sh [BUILD_DIR]   (LOADS="0 2 4" by default)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}/bin/megatrain-bench
step="$b step --preset tiny --seq-len 64 --micro-batch 8 --global-batch 16 --executor streaming --recompute on --steps 20 --warmup 3 --json"

busy=()
stop_load() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; busy=(); }
trap stop_load EXIT

for load in ${LOADS:-0 2 4}; do
  for ((i = 0; i < load; ++i)); do (while :; do :; done) & busy+=($!); done
  sleep 1
  for policy in default active passive; do
    if [ "$policy" = default ]; then out=$(env -u OMP_WAIT_POLICY MEGATRAIN_OMP_WAIT_POLICY=keep $step)
    else out=$(OMP_WAIT_POLICY=$policy $step); fi
    echo "$out" | python3 -c "import json,sys; d=json.loads(sys.stdin.readline()); \
print(json.dumps({'suite':'omp','load_processes':$load,'wait_policy':'$policy','step_seconds':d['step_seconds'],'tokens_per_second':d['tokens_per_second']}))"
  done
  stop_load
done
