#!/usr/bin/env bash
# scripts/gpu_prepare.sh — everything a lease needs from this machine, in one command, before the
# device tool's first call: the git-ignored folders scripts/gpu_check.sh reads (GoogleTest's
# source, the published MegaTrain's training code, the cuDNN frontend's headers, DeepSpeed's
# sdist and wheels) and the prebuilt binaries (scripts/gpu_bundle.sh, from a release build at
# HEAD). Checks that they fit the device tool's 64 MiB carry and prints the carry list to pass.
#   [PEERS_PYTHON=/tmp/peers/bin/python] scripts/gpu_prepare.sh
#   then: run(command="GPU_CHECK_PACK=$OUT/gc.tgz scripts/gpu_check.sh /tmp/gc",
#             carry=<the printed list>, timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p third_party_src
say() { echo "gpu_prepare: $*" >&2; }

[ -d third_party_src/googletest ] || { say "GoogleTest's source"; cp -r /usr/src/googletest third_party_src/googletest; }
if [ ! -d third_party_src/megatrain-official ]; then
  say "the published MegaTrain's code (peer c)"
  cp -r ../shared/peers/megatrain-official third_party_src/megatrain-official
fi
if [ ! -f third_party_src/cudnn_frontend/include/cudnn_frontend.h ]; then
  say "the cuDNN frontend's headers (a build there, should the bundle not start)"
  fe=$(compgen -G ".venv/lib/python3*/site-packages/include/cudnn_frontend.h" | head -1 || true)
  [ -n "$fe" ] || { say "no .venv with the frontend: run scripts/install_deps.sh first"; exit 1; }
  mkdir -p third_party_src/cudnn_frontend && cp -r "$(dirname "$fe")" third_party_src/cudnn_frontend/include
fi
compgen -G "third_party_src/wheels/deepspeed-*.tar.gz" >/dev/null || { say "DeepSpeed (peer b)"; bench/peers/fetch_deepspeed_wheels.sh >/dev/null; }

# The peers on this CPU first, when a Python with torch, transformers and deepspeed is named
# (bench/peers/cpu_smoke.py says how to make one): ~90 s, and a peer that fails here would fail there.
if [ -n "${PEERS_PYTHON:-}" ]; then
  say "the peers on this CPU (bench/peers/cpu_smoke.py)"
  "$PEERS_PYTHON" bench/peers/cpu_smoke.py >&2 || { say "a peer failed on the CPU: fix it before the lease"; exit 1; }
fi
say "release build of mt_cuda_tests and megatrain-bench at $(git rev-parse --short HEAD)"
cmake --preset release >"${TMPDIR:-/tmp}/gpu_prepare_configure.log" 2>&1
grep -q "cuDNN attention ON" "${TMPDIR:-/tmp}/gpu_prepare_configure.log" ||
  { say "the build has no cuDNN path (the frontend's headers: scripts/install_deps.sh)"; exit 1; }
cmake --build --preset release -j "$(nproc)" --target mt_cuda_tests megatrain-bench >/dev/null
[ -z "$(git status --porcelain --untracked-files=no)" ] || say "WARNING: uncommitted changes; the bundle says HEAD"
scripts/gpu_bundle.sh >/dev/null

carry=(.gpu_carry third_party_src/googletest third_party_src/megatrain-official third_party_src/wheels
  third_party_src/cudnn_frontend)
du -sh "${carry[@]}" >&2
total=$(du -scb "${carry[@]}" | tail -1 | cut -f1)
[ "$total" -le $((64 << 20)) ] || { say "the carry is $((total >> 20)) MiB, past the tool's 64 MiB"; exit 1; }
say "carry $((total >> 20)) MiB of 64. The device call (timeout_s 600): GPU_CHECK_PACK=\$OUT/gc.tgz scripts/gpu_check.sh /tmp/gc"
say "with carry:"
printf '%s\n' "${carry[@]}" | python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().split()))'
