#!/usr/bin/env bash
# Runs a command (an mpirun job in which one rank dies or hangs) and checks that it ends non-zero
# within a bound, and that its output names the rank.
#   expect_rank_failure.sh BOUND_SECONDS PATTERN -- COMMAND...
set -uo pipefail
bound=$1 pattern=$2; shift 3
start=$(date +%s%N)
out=$(timeout -s KILL $((bound + 30)) "$@" 2>&1); rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | tail -20
echo "exit $rc after $took_ms ms (bound $bound s)"
[ "$rc" -ne 0 ] || { echo "FAIL: the job succeeded"; exit 1; }
echo "$out" | grep -qE "$pattern" || { echo "FAIL: no line matches '$pattern'"; exit 1; }
(( took_ms <= bound * 1000 )) || { echo "FAIL: took longer than $bound s"; exit 1; }
echo "PASS"
