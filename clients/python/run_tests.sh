#!/usr/bin/env bash
# ctest's Python.Client: builds and installs this package (its stubs generated from proto/ by the
# build hook) into a temporary directory with PYTHON, then runs its pytest suite against the
# megatraind named by $MEGATRAIND. PYTHON is the environment scripts/install_deps.sh makes
# (.venv); if it or a dependency is missing the test fails, it does not skip.
#   clients/python/run_tests.sh PYTHON [pytest args]
set -euo pipefail
python=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$python" ]; then
  echo "run_tests.sh: no Python environment at $python (run scripts/install_deps.sh)" >&2
  exit 1
fi
"$python" -c "import grpc, grpc_tools, google.protobuf, numpy, pytest, yaml, setuptools" || {
  echo "run_tests.sh: the client's dependencies are missing from $python (run scripts/install_deps.sh)" >&2
  exit 1
}
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
"$python" -m pip install --quiet --no-deps --no-build-isolation --target "$target" "$here" >&2
cd "$here/tests"
PYTHONPATH="$target" PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -q -p no:cacheprovider "$@" .
