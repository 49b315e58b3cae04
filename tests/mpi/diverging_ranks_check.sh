#!/usr/bin/env bash
# Two processes of one run that start from different states: rank 0's --out holds a checkpoint,
# rank 1's (its own, as a node-local path would be) none. They once all-reduced gradients of
# different weights and reported success; both must now refuse before the first step, naming it.
#   diverging_ranks_check.sh MEGATRAIN MPIEXEC SPEC
set -euo pipefail
mt=$1 mpirun=$2 spec=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mt" train "$spec" --out "$dir/out0" --steps 3 >/dev/null 2>&1
cat > "$dir/per_rank.sh" <<SCRIPT
exec "$mt" train "$spec" --out "$dir/out\$OMPI_COMM_WORLD_RANK" --steps 3
SCRIPT
cp -r "$dir/out0/checkpoints" "$dir/before"
bash "$(dirname "$0")/expect_rank_failure.sh" 60 "starts at step 3 of .*another process from another state" -- \
  "$mpirun" --oversubscribe -np 2 bash "$dir/per_rank.sh"
diff -r "$dir/before" "$dir/out0/checkpoints" >/dev/null || { echo "FAIL: rank 0's checkpoints changed"; exit 1; }
[ ! -e "$dir/out1/checkpoints/latest" ] || { echo "FAIL: rank 1 wrote a checkpoint"; exit 1; }
echo "PASS: refused before the first step, nothing written"
