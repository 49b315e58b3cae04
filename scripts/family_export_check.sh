#!/usr/bin/env bash
# Ecosystem check of the model families (not part of scripts/test.sh: it needs torch and
# transformers): for each family fixture (tests/fixtures/families/FAMILY, or a mixture of experts'
# tests/fixtures/moe/FAMILY), trains 3 steps from
# its weights with megatrain, exports the checkpoint, and has transformers' AutoModelForCausalLM
# load the export and score a token file; `megatrain eval` scores the same windows. The two
# mean losses must agree to the 6 decimals printed (scripts/hf_check.py).
#
#   scripts/family_export_check.sh PYTHON [FAMILY ...]   # PYTHON: a python with torch + transformers
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: scripts/family_export_check.sh PYTHON [FAMILY ...]}
shift
FAMILIES=${*:-qwen3 olmo2 gemma3 gemma2 phi3 mistral mixtral qwen2_moe qwen3_moe gpt_oss}
BIN=${BIN:-build/bin}
WORK=$(mktemp -d /tmp/mt-family-check-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$PY" -c 'import numpy; numpy.random.default_rng(7).integers(0, 96, 4096, dtype=numpy.uint16).tofile("'"$WORK"'/tokens.bin")'
status=0
for f in $FAMILIES; do
  dir=tests/fixtures/families/$f
  [ -d "$dir" ] || dir=tests/fixtures/moe/$f
  cat >"$WORK/$f.yaml" <<SPEC
name: $f-export-check
model: {hf_model: $dir}
init: {from: $dir}
data: {source: tokens, path: $WORK/tokens.bin, dtype: uint16}
seq_len: 12
micro_batch: 2
global_batch: 4
steps: 3
optimizer: {lr: 1.0e-3}
checkpoint: {every: 3}
backend: cpu
SPEC
  "$BIN/megatrain" train "$WORK/$f.yaml" --out "$WORK/$f-run" >"$WORK/$f-train.log" 2>&1
  "$BIN/megatrain" export "$WORK/$f-run/checkpoints" "$WORK/$f-export" --dtype fp32 >/dev/null
  ours=$("$BIN/megatrain" eval --model "$WORK/$f-export" --data "$WORK/tokens.bin" --format uint16 --seq-len 12 --json |
    "$PY" -c 'import json, sys; print("%.6f" % json.load(sys.stdin)["loss"])')
  theirs=$("$PY" scripts/hf_check.py "$WORK/$f-export" "$WORK/tokens.bin" 12 2>"$WORK/$f-hf.log" | tail -1) || { tail -5 "$WORK/$f-hf.log"; true; }
  verdict=equal
  [ "$ours" = "$theirs" ] || verdict=DIFFERENT status=1
  echo "$f: megatrain eval $ours, transformers $theirs: $verdict"
done
exit $status
