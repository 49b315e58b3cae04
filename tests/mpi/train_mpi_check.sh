#!/usr/bin/env bash
# `mpirun -np 2 megatrain train SPEC` against one process at the same global batch, and checkpoint
# resume across process counts (ctest DataParallelMpi.*):
#   train_mpi_check.sh CLI MPIRUN same-loss   2 ranks end within 1e-5 relative of 1 process (the
#                                             sum over ranks reassociates the gradient: fp32 rounding)
#   train_mpi_check.sh CLI MPIRUN resume      a checkpoint written by 2 ranks resumes on 1, and one
#                                             written by 1 resumes on 2, each ending within the bound
#   train_mpi_check.sh CLI MPIRUN sharded     --shard-optimizer: the loss of 2 replicated ranks bit for
#                                             bit (same sums; each unit updated by one rank, its
#                                             weights broadcast), each rank holding the Adam state of
#                                             part of the units, and a checkpoint of 2 shards + index
#   train_mpi_check.sh CLI MPIRUN sharded-resume   sharded checkpoints resume on 1 process and on 2
#                                             replicated ranks; one of 1 process resumes sharded
#   train_mpi_check.sh CLI MPIRUN speculative speculative_updates: on over 2 ranks: the same final
#                                             weights, byte for byte, as the plain schedule (each
#                                             rank speculates on its all-reduced gradients); with
#                                             --shard-optimizer speculation is off, weights equal too
#   train_mpi_check.sh CLI MPIRUN compact     memory.layout compact (bf16 gradients, summed over the
#                                             ranks in fp32): within 1e-4 of 1 process (each rank's
#                                             gradient is rounded to bf16 before the sum, one
#                                             process's after), sharded == replicated bit for bit
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
tol=1e-5
if [ "$mode" = compact ]; then echo "memory: {layout: compact}" >> "$t/spec.yaml"; tol=1e-4; fi
two() { $mpirun --oversubscribe -np 2 "$cli" train "$t/spec.yaml" --json "$@"; }
one() { "$cli" train "$t/spec.yaml" --json "$@"; }
loss() { grep '"event":"summary"' | tail -1 | sed -E 's/.*"final_loss":([^,]*).*/\1/'; }
close() {  # close NAME A B: |A - B| <= tol |B|
  awk -v a="$2" -v b="$3" -v n="$1" -v tol="$tol" 'BEGIN { d = a - b; if (d < 0) d = -d; r = d / (b < 0 ? -b : b);
    printf "%s: %.17g vs %.17g (relative %.3g, bound %s)\n", n, a, b, r, tol; exit !(r <= tol) }'
}
back_to_6() {  # the run in $1 as if it had stopped after its step-6 checkpoint
  rm -rf "$1/checkpoints/step-00000012"
  echo step-00000006 > "$1/checkpoints/latest"
}
ref=$(one --out "$t/one" | loss)
adam_units() {  # the "Adam state of K of U units" of each rank's log, as "K/U" lines
  grep -o 'Adam state of [0-9]* of [0-9]* units' | sed -E 's/Adam state of ([0-9]*) of ([0-9]*) units/\1\/\2/'
}
case $mode in
  same-loss)
    out=$(two --out "$t/two")
    got=$(echo "$out" | loss)
    close "2 ranks vs 1 process" "$got" "$ref"
    summaries=$(echo "$out" | grep -c '"event":"summary"')
    [ "$summaries" -eq 1 ] || { echo "FAIL: $summaries summaries (one, by rank 0, names the published checkpoint)"; exit 1; }
    echo "$out" | grep '"event":"summary"' | grep -q 'step-00000012' || { echo "FAIL: the summary names another checkpoint"; exit 1; }
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
  sharded | compact)
    replicated=$(two --out "$t/rep" | loss)
    out=$(two --out "$t/sh" --shard-optimizer 2>&1)
    got=$(echo "$out" | loss)
    [ "$got" = "$replicated" ] || { echo "FAIL: sharded $got != replicated $replicated"; exit 1; }
    close "2 sharded ranks vs 1 process" "$got" "$ref"
    shares=$(echo "$out" | adam_units | sort)
    echo "Adam state per rank (units): $(echo $shares)"
    [ "$(echo "$shares" | wc -l)" -eq 2 ] || { echo "FAIL: expected 2 ranks' shares"; echo "$out"; exit 1; }
    sum=0; total=0
    for s in $shares; do k=${s%/*}; total=${s#*/}; [ "$k" -lt "$total" ] || { echo "FAIL: a rank holds all $total units"; exit 1; }; sum=$((sum + k)); done
    [ "$sum" -eq "$total" ] || { echo "FAIL: the shares hold $sum of $total units"; exit 1; }
    d=$t/sh/checkpoints/step-00000012
    for f in optimizer-00001-of-00002.safetensors optimizer-00002-of-00002.safetensors optimizer.safetensors.index.json model.safetensors; do
      [ -s "$d/$f" ] || { echo "FAIL: $d/$f missing"; ls -la "$d"; exit 1; }
    done
    [ ! -e "$d/optimizer.safetensors" ] || { echo "FAIL: a sharded checkpoint with a whole optimizer.safetensors"; exit 1; }
    # inspect lists the moments of both shards: as many tensors as the replicated checkpoint shows
    tensors() { "$cli" inspect "$1" --json | grep -c '"event": *"tensor"'; }
    n_sh=$(tensors "$d") n_rep=$(tensors "$t/rep/checkpoints/step-00000012")
    [ "$n_sh" -eq "$n_rep" ] || { echo "FAIL: inspect lists $n_sh tensors of the sharded checkpoint, $n_rep of the replicated"; exit 1; }
    cmp "$d/model.safetensors" "$t/rep/checkpoints/step-00000012/model.safetensors" ||
      { echo "FAIL: sharded and replicated final weights differ"; exit 1; }
    ;;
  sharded-resume)
    # Written by 2 sharded ranks at step 6: resumed on 1 process, and on 2 replicated ranks.
    two --out "$t/a" --shard-optimizer > /dev/null
    back_to_6 "$t/a"
    cp -r "$t/a" "$t/a2"
    out=$(one --out "$t/a" 2>&1)
    echo "$out" | grep -q "resuming at step 6" || { echo "FAIL: 1 process did not resume at step 6"; echo "$out"; exit 1; }
    close "2 sharded ranks to step 6, then 1 process" "$(echo "$out" | loss)" "$ref"
    out=$(two --out "$t/a2" 2>&1)
    [ "$(echo "$out" | grep -c "resuming at step 6")" -eq 2 ] || { echo "FAIL: 2 ranks did not both resume"; echo "$out"; exit 1; }
    close "2 sharded ranks to step 6, then 2 replicated" "$(echo "$out" | loss)" "$ref"
    # Written by 1 process at step 6, resumed on 2 sharded ranks.
    cp -r "$t/one" "$t/b"
    back_to_6 "$t/b"
    out=$(two --out "$t/b" --shard-optimizer 2>&1)
    [ "$(echo "$out" | grep -c "resuming at step 6")" -eq 2 ] || { echo "FAIL: 2 sharded ranks did not both resume"; echo "$out"; exit 1; }
    close "1 process to step 6, then 2 sharded ranks" "$(echo "$out" | loss)" "$ref"
    ;;
  speculative)
    sed 's/^name: dp-check/name: dp-check\nspeculative_updates: on/' "$t/spec.yaml" > "$t/spec-spec.yaml"
    spec2() { $mpirun --oversubscribe -np 2 "$cli" train "$t/spec-spec.yaml" --json "$@"; }
    plain=$(two --out "$t/plain" | loss)
    got=$(spec2 --out "$t/spec" | loss)
    [ "$got" = "$plain" ] || { echo "FAIL: speculative $got != plain $plain"; exit 1; }
    cmp "$t/spec/checkpoints/step-00000012/model.safetensors" "$t/plain/checkpoints/step-00000012/model.safetensors" ||
      { echo "FAIL: speculative and plain final weights differ"; exit 1; }
    cmp "$t/spec/checkpoints/step-00000012/optimizer.safetensors" "$t/plain/checkpoints/step-00000012/optimizer.safetensors" ||
      { echo "FAIL: speculative and plain Adam state differ"; exit 1; }
    sharded_plain=$(two --out "$t/shp" --shard-optimizer | loss)
    sharded_spec=$(spec2 --out "$t/shs" --shard-optimizer | loss)
    [ "$sharded_spec" = "$sharded_plain" ] || { echo "FAIL: sharded speculative $sharded_spec != $sharded_plain"; exit 1; }
    echo "2 ranks: speculative = plain = $plain; sharded: $sharded_plain"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
echo PASS
