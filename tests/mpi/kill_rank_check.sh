#!/usr/bin/env bash
# A rank of `mpirun -np 2 megatrain train` dies or hangs mid-run (ctest DataParallelMpi.*):
#   kill_rank_check.sh CLI MPIRUN kill   SIGKILL to rank 1 after step 3: the job exits non-zero within
#                                        20 s, naming rank 1 (mpirun reports the dead rank and ends
#                                        rank 0)
#   kill_rank_check.sh CLI MPIRUN hang   SIGSTOP to rank 1: rank 0's collective times out after
#                                        comm_timeout_seconds = 4 and the job exits non-zero within
#                                        30 s, naming rank 1 ("rank 1 did not arrive", or "did not
#                                        complete it" when it stopped inside a collective)
#   kill_rank_check.sh CLI MPIRUN hang-sharded   the same with shard_optimizer: true (the ranks then
#                                        also wait on each other's updates: broadcasts of weights)
set -uo pipefail
cli=$1 mpirun=$2 mode=$3
t=$(mktemp -d)
cleanup() { [ -f "$t/pid1" ] && kill -CONT "$(cat "$t/pid1")" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
cat > "$t/spec.yaml" <<'SPEC'
name: dp-fail
model: {preset: tiny}
data: {source: synthetic}
seq_len: 64
micro_batch: 4
global_batch: 16
steps: 100000
checkpoint: {every: 0}
backend: cpu
comm_timeout_seconds: 4
SPEC
case $mode in *-sharded) echo "shard_optimizer: true" >> "$t/spec.yaml"; mode=${mode%-sharded} ;; esac
cat > "$t/rank.sh" <<EOF2
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && echo \$\$ > "$t/pid1"
exec "\$@"
EOF2
chmod +x "$t/rank.sh"
$mpirun --oversubscribe -np 2 "$t/rank.sh" "$cli" train "$t/spec.yaml" --out "$t/run" --json > "$t/log" 2>&1 &
job=$!
for _ in $(seq 600); do  # up to 60 s for both ranks to pass step 3
  [ "$(grep -c '"step":3,' "$t/log")" -ge 2 ] && break
  sleep 0.1
done
[ -f "$t/pid1" ] && [ "$(grep -c '"step":3,' "$t/log")" -ge 2 ] || { echo "FAIL: the job never reached step 3"; cat "$t/log"; kill -KILL $job; exit 1; }
case $mode in
  kill) kill -KILL "$(cat "$t/pid1")"; bound=20; pattern="rank 1" ;;
  hang) kill -STOP "$(cat "$t/pid1")"; bound=30; pattern="rank 1 did not \(arrive\|complete it\) within 4" ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
start=$(date +%s%N)
for _ in $(seq $((bound * 10 + 100))); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
if kill -0 $job 2>/dev/null; then echo "FAIL: still running after $took_ms ms"; kill -KILL $job; exit 1; fi
wait $job; rc=$?
grep -v '"event":"step"' "$t/log" | tail -15
echo "exit $rc $took_ms ms after the $mode (bound $bound s)"
[ $rc -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
grep -q "$pattern" "$t/log" || { echo "FAIL: nothing names it ('$pattern')"; exit 1; }
[ $took_ms -le $((bound * 1000)) ] || { echo "FAIL: longer than $bound s"; exit 1; }
echo PASS
