#!/usr/bin/env bash
# OpenMP wait policy under contention (docs/PERF.md): the tiny streaming step with libgomp's
# default wait policy, active and passive, on an idle machine, beside two busy-looping
# processes, and beside a second copy of itself (two OpenMP jobs on one node). One JSON object
# per line on stdout.
#   scripts/bench_omp.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}/bin/megatrain-bench
step=("$b" step --preset tiny --seq-len 64 --micro-batch 8 --global-batch 16 --executor streaming
      --recompute on --steps 20 --warmup 3 --json)

busy=()
stop_load() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; busy=(); }
trap stop_load EXIT

# run POLICY: the step under that policy. "default" is libgomp's own (spin ~300k iterations,
# ~3 ms); "spinN" is libgomp's default policy with GOMP_SPINCOUNT=N; active and passive are
# OMP_WAIT_POLICY's. MEGATRAIN_OMP_WAIT_POLICY=keep stops our binaries from choosing their own.
run() {
  case "$1" in
    default) env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT MEGATRAIN_OMP_WAIT_POLICY=keep "${step[@]}" ;;
    spin*) env -u OMP_WAIT_POLICY MEGATRAIN_OMP_WAIT_POLICY=keep GOMP_SPINCOUNT="${1#spin}" "${step[@]}" ;;
    *) env -u GOMP_SPINCOUNT OMP_WAIT_POLICY="$1" "${step[@]}" ;;
  esac
}
report() {  # load policy json
  python3 -c "import json,sys; d=json.loads(sys.argv[3]); print(json.dumps({'suite':'omp','load':sys.argv[1],\
'wait_policy':sys.argv[2],'step_seconds':d['step_seconds'],'tokens_per_second':d['tokens_per_second']}))" "$@"
}

for load in idle busy2 twin; do
  for policy in ${POLICIES:-default active passive spin1000 spin10000}; do
    if [ $load = busy2 ]; then for i in 1 2; do (while :; do :; done) & busy+=($!); done; fi
    if [ $load = twin ]; then run "$policy" > /dev/null & busy+=($!); fi
    report "$load" "$policy" "$(run "$policy")"
    stop_load
    wait 2>/dev/null || true
  done
done
