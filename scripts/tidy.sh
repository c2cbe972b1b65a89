#!/usr/bin/env bash
# clang-tidy over the floors that build without LibTorch headers (protocol, wire,
# settings, meters, core, store, fleet, analysis, controller), with the
# checks that find defects rather than style: use after move, dangling
# handles, string constructor mistakes, needless copies. Any finding fails.
# Function length is checked separately (scripts/long_functions.py, in ctest).
#   scripts/tidy.sh [BUILD_DIR]   (default build/, which has compile_commands.json)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy.sh: no $build/compile_commands.json; configure the build first (cmake -S . -B $build)" >&2
  exit 2
fi
checks='-*,bugprone-use-after-move,bugprone-dangling-handle,bugprone-string-constructor,performance-unnecessary-copy-initialization'
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run-clang-tidy -p "$build" -j "${JOBS:-2}" -quiet -checks="$checks" \
  "^$PWD/(protocol|wire|settings|meters|core|store|fleet|analysis|controller)/" >"$out" 2>&1 || true
if grep -E "(warning|error): " "$out" | grep -v "^Suppressed" >/dev/null; then
  grep -E -A3 "(warning|error): " "$out" >&2
  echo "tidy.sh: clang-tidy found the above (checks: $checks)" >&2
  exit 1
fi
n=$(grep -cE "\"file\": \"$PWD/(protocol|wire|settings|meters|core|store|fleet|analysis|controller)/" "$build/compile_commands.json" || true)
echo "tidy.sh: $n files, no findings ($checks)"
