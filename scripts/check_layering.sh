#!/usr/bin/env bash
# The engine's layering, checked: an engine/ folder may include only folders at or below its own
# level (engine/README.md draws the list), kernels/ never includes engine/, and neither includes
# a server library (gRPC, protobuf, prometheus-cpp, spdlog, abseil).
#   scripts/check_layering.sh [ROOT]     check the tree at ROOT (default: this repository)
#   scripts/check_layering.sh --self-test   prove the check fails on planted violations
set -uo pipefail

levels=(base text backend dist model optim io data exec job)  # bottom up

level_of() {
  local i
  for i in "${!levels[@]}"; do [ "${levels[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}

check() {
  local root=$1 bad=0 file dir from to lf lt
  while IFS= read -r file; do
    rel=${file#"$root"/}
    dir=${rel#engine/}; dir=${dir%%/*}
    lf=$(level_of "$dir")
    if [ "$lf" -lt 0 ]; then
      echo "LAYERING: $rel is in no known engine folder (${levels[*]})"; bad=1; continue
    fi
    while IFS= read -r to; do
      lt=$(level_of "$to")
      if [ "$lt" -lt 0 ] || [ "$lt" -gt "$lf" ]; then
        echo "LAYERING: $rel ($dir) includes engine/$to/, which is above it (order: ${levels[*]})"; bad=1
      fi
    done < <(grep -oE '^\s*#\s*include\s*"engine/[^/"]+/' "$file" | sed -E 's#.*"engine/([^/]+)/#\1#')
  done < <(find "$root/engine" -mindepth 2 -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \))
  if find "$root/engine" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cc' \) | grep -q .; then
    echo "LAYERING: source files directly in engine/ (put them in a concern folder)"; bad=1
  fi
  from=$(grep -rlE '^\s*#\s*include\s*"engine/' "$root/kernels" 2>/dev/null)
  [ -n "$from" ] && { echo "LAYERING: kernels/ includes engine/: $from"; bad=1; }
  from=$(grep -rlE '^\s*#\s*include\s*[<"](grpc|grpcpp|google/protobuf|prometheus|spdlog|absl)' \
         "$root/engine" "$root/kernels" 2>/dev/null)
  [ -n "$from" ] && { echo "LAYERING: engine/ or kernels/ includes a server library: $from"; bad=1; }
  return $bad
}

self_test() {
  local t; t=$(mktemp -d); trap 'rm -rf "$t"' RETURN
  mkdir -p "$t/engine/base" "$t/engine/exec" "$t/kernels"
  printf '#include "engine/base/a.h"\n' > "$t/engine/exec/b.h"
  printf '#pragma once\n' > "$t/engine/base/a.h"
  check "$t" > /dev/null || { echo "self-test: a clean tree failed"; return 1; }
  printf '#include "engine/exec/b.h"\n' >> "$t/engine/base/a.h"
  check "$t" > /dev/null && { echo "self-test: an upward include passed"; return 1; }
  printf '#pragma once\n' > "$t/engine/base/a.h"
  printf '#include <grpcpp/grpcpp.h>\n' > "$t/kernels/k.h"
  check "$t" > /dev/null && { echo "self-test: a server include in kernels/ passed"; return 1; }
  rm "$t/kernels/k.h"; printf '#pragma once\n' > "$t/engine/loose.h"
  check "$t" > /dev/null && { echo "self-test: a file directly in engine/ passed"; return 1; }
  echo "self-test: every planted violation was caught"
}

if [ "${1:-}" = "--self-test" ]; then self_test; exit $?; fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
check "$root" && echo "layering: clean (${levels[*]})"
