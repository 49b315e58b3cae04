#!/usr/bin/env bash
# `mpirun -np 2 megatrain train SPEC` against one process at the same global batch, and checkpoint
# resume across process counts (ctest DataParallelMpi.*):
#   train_mpi_check.sh CLI MPIRUN same-loss   2 ranks end within 1e-5 relative of 1 process (the
#                                             sum over ranks reassociates the gradient: fp32 rounding)
#   train_mpi_check.sh CLI MPIRUN resume      a checkpoint written by 2 ranks resumes on 1, and one
#                                             written by 1 resumes on 2, each ending within the bound
set -euo pipefail
cli=$1 mpirun=$2 mode=$3
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cat > "$t/spec.yaml" <<'SPEC'
name: dp-check
model: {preset: tiny}
init: {seed: 3}
data: {source: synthetic, seed: 2}
seq_len: 32
micro_batch: 4
global_batch: 16
steps: 12
optimizer: {lr: 3.0e-3, grad_clip: 1.0}
schedule: {warmup_steps: 2, decay: cosine}
checkpoint: {every: 6, keep: 3}
backend: cpu
SPEC
two() { $mpirun --oversubscribe -np 2 "$cli" train "$t/spec.yaml" --json "$@"; }
one() { "$cli" train "$t/spec.yaml" --json "$@"; }
loss() { grep '"event":"summary"' | tail -1 | sed -E 's/.*"final_loss":([^,]*).*/\1/'; }
close() {  # close NAME A B: |A - B| <= 1e-5 |B|
  awk -v a="$2" -v b="$3" -v n="$1" 'BEGIN { d = a - b; if (d < 0) d = -d; r = d / (b < 0 ? -b : b);
    printf "%s: %.17g vs %.17g (relative %.3g)\n", n, a, b, r; exit !(r <= 1e-5) }'
}
back_to_6() {  # the run in $1 as if it had stopped after its step-6 checkpoint
  rm -rf "$1/checkpoints/step-00000012"
  echo step-00000006 > "$1/checkpoints/latest"
}
ref=$(one --out "$t/one" | loss)
case $mode in
  same-loss)
    got=$(two --out "$t/two" | loss)
    close "2 ranks vs 1 process" "$got" "$ref"
    [ -d "$t/two/checkpoints/step-00000012" ] || { echo "FAIL: rank 0 wrote no final checkpoint"; exit 1; }
    ;;
  resume)
    # Written by 2 ranks at step 6, resumed on 1 process.
    two --out "$t/a" > /dev/null
    back_to_6 "$t/a"
    out=$(one --out "$t/a" 2>&1)
    echo "$out" | grep -q "resuming at step 6" || { echo "FAIL: 1 process did not resume at step 6"; echo "$out"; exit 1; }
    close "2 ranks to step 6, then 1 process" "$(echo "$out" | loss)" "$ref"
    # Written by 1 process at step 6, resumed on 2 ranks.
    cp -r "$t/one" "$t/b"
    back_to_6 "$t/b"
    out=$(two --out "$t/b" 2>&1)
    [ "$(echo "$out" | grep -c "resuming at step 6")" -eq 2 ] || { echo "FAIL: 2 ranks did not both resume at step 6"; echo "$out"; exit 1; }
    close "1 process to step 6, then 2 ranks" "$(echo "$out" | loss)" "$ref"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
echo PASS
