#!/usr/bin/env bash
# The control-plane bench (bench/control_plane_bench.py): RPC latency and WatchJob fan-out against
# a megatraind it starts itself. Uses the Python client, installed into a temporary directory with
# the environment scripts/install_deps.sh makes (.venv). Arguments go to the bench.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ -x "$py" ] || scripts/install_deps.sh
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
"$py" -m pip install --quiet --no-deps --no-build-isolation --target "$target" clients/python >&2
MEGATRAIND=${MEGATRAIND:-build/bin/megatraind} PYTHONPATH="$target" OMP_WAIT_POLICY=passive \
  "$py" bench/control_plane_bench.py "$@"
