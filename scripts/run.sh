#!/usr/bin/env bash
# The run command: installs what is missing, builds the release binaries if needed, starts
# megatraind on loopback (free ports, a temporary state directory), submits the default tiny job
# with --watch, shows the loss falling, prints the final loss, the checkpoint and a few lines of
# /metrics, then stops the daemon (always: a trap sends SIGTERM and waits).
#   MEGATRAIN_RUN_SPEC  job spec to submit (default deploy/jobs/tiny-demo.yaml)
#   MEGATRAIN_RUN_KEEP  0: delete the state directory at the end (default 1: keep it)
#   MEGATRAIN_RUN_BIN   a directory with megatraind and megatrain already built (skips the
#                       install and build steps), e.g. an installed prefix's bin/
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
spec=${MEGATRAIN_RUN_SPEC:-deploy/jobs/tiny-demo.yaml}
bin=${MEGATRAIN_RUN_BIN:-$root/build/bin}

if [ -z "${MEGATRAIN_RUN_BIN:-}" ]; then
  scripts/install_deps.sh
  if [ ! -f build/build.ninja ] || ! grep -q '^build bin/megatraind:' build/build.ninja; then
    echo "== configuring (release preset) =="
    cmake --preset release
  fi
  echo "== building megatraind and megatrain (a no-op when up to date) =="
  cmake --build --preset release --target megatraind megatrain
fi

state=$(mktemp -d "${TMPDIR:-/tmp}/megatrain-run.XXXXXX")
log=$state/megatraind.log
daemon_pid="" watch_pid=""

stop_daemon() {
  local rc=$?
  if [ -n "$watch_pid" ] && kill -0 "$watch_pid" 2>/dev/null; then kill -TERM "$watch_pid" 2>/dev/null || true; fi
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    echo "== stopping megatraind (pid $daemon_pid) =="
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$daemon_pid" 2>/dev/null; then
      echo "megatraind did not stop in 30 s; killing it" >&2
      kill -KILL "$daemon_pid" 2>/dev/null || true
    fi
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if [ "${MEGATRAIN_RUN_KEEP:-1}" = "0" ]; then rm -rf "$state"; else echo "state directory kept: $state"; fi
  exit "$rc"
}
trap stop_daemon EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Port 0 lets the kernel pick free ports; the daemon writes the ones it bound to megatraind.json.
echo "== starting megatraind (state $state) =="
"$bin/megatraind" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --state_dir="$state" >"$log" 2>&1 &
daemon_pid=$!
port="" metrics_port=""
for _ in $(seq 1 300); do
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    echo "megatraind exited during start-up:" >&2
    cat "$log" >&2
    exit 3
  fi
  if [ -f "$state/megatraind.json" ] && grep -q "\"pid\":$daemon_pid[,}]" "$state/megatraind.json"; then
    port=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$state/megatraind.json")
    metrics_port=$(sed -n 's/.*"metrics_port":\([0-9]*\).*/\1/p' "$state/megatraind.json")
    [ -n "$port" ] && [ "$port" != 0 ] && break
  fi
  sleep 0.1
done
if [ -z "$port" ] || [ "$port" = 0 ]; then
  echo "megatraind did not become ready in 30 s:" >&2
  cat "$log" >&2
  exit 3
fi
export MEGATRAIN_SERVER=127.0.0.1:$port
echo "megatraind is serving on $MEGATRAIN_SERVER, /metrics on 127.0.0.1:$metrics_port"

echo "== megatrain submit $spec --watch =="
start=$(date +%s)
watch_rc=0
# In the background so that a signal to this script runs its trap at once (bash defers traps
# while a foreground child runs); stdout stays the terminal, so the live progress line works.
"$bin/megatrain" submit "$spec" --watch &
watch_pid=$!
wait "$watch_pid" || watch_rc=$?
watch_pid=""
echo "(the job took $(( $(date +%s) - start )) s)"

# The job's record: first and final loss, last checkpoint (one job in this fresh state dir).
job_json=$("$bin/megatrain" list --json | tail -n 1)
field() { printf '%s\n' "$job_json" | sed -n "s/.*\"$1\":\\(\"[^\"]*\"\\|[^,}]*\\).*/\\1/p" | tr -d '"'; }
echo
echo "== result =="
echo "job:         $(field id) ($(field state))"
LC_NUMERIC=C printf 'loss:        %.4f at step 1 -> %.4f at step %s\n' "$(field first_loss)" "$(field loss)" "$(field step)"
echo "final loss:  $(field loss)"
echo "checkpoint:  $(field last_checkpoint)"
echo "job log:     $state/jobs/$(field id)/"
echo
echo "== a few lines of http://127.0.0.1:$metrics_port/metrics =="
curl -fsS "http://127.0.0.1:$metrics_port/metrics" |
  grep -E '^megatrain_(steps_total|tokens_total|loss|tokens_per_second|step_seconds_(sum|count)|h2d_bytes_total|jobs)[{ ]' |
  head -n 12 || echo "(could not scrape /metrics)"
exit "$watch_rc"
