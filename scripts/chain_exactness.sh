#!/usr/bin/env bash
# Chains (#43): placements over a chain of three agents on loopback (this
# process the participant, a middle SERVER with --downstream, a last SERVER)
# against the unsplit model, bit for bit (`optimize: false`, codec none,
# encrypted hops). First every placement of AlexNet (64x64: all 276), then
# RANDOM (default 200) seeded random placements of each traced model in
# MODELS (default "resnet18 densenet121", exported with random weights at
# INPUT, default 3,64,64, by scripts/export_model.py; MODELS= skips them),
# with `optimize: false` (bit for bit) and then optimised (each segment
# frozen and optimised on its own: within 1e-4 of the largest output).
# CI runs a representative subset of the AlexNet test
# (Forward.AChainOfThreeAgentsIsTheUnsplitModelBitForBit).
#   bash scripts/chain_exactness.sh            (needs a build: build/bin/tracr_system_tests)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TESTS:-build/bin/tracr_system_tests}
[ -x "$bin" ] || { echo "chain_exactness: $bin is not built (cmake --build build)" >&2; exit 1; }
models=${MODELS-resnet18 densenet121}
random=${RANDOM_PLACEMENTS:-200}
input=${INPUT:-3,64,64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s%N)
TRACR_ALL_PLACEMENTS=1 "$bin" --gtest_brief=1 \
  --gtest_filter=Forward.AChainOfThreeAgentsIsTheUnsplitModelBitForBit | grep -E '\[ placements \]|FAILED|PASSED'
end=$(date +%s%N)
echo "chain_exactness: alexnet $(( (end - start) / 1000000 )) ms wall"
for m in $models; do
  /usr/bin/python3 scripts/export_model.py "$m" "$tmp/$m.pt" --input-shape "$input" >/dev/null
  for opt in 0 1; do
    start=$(date +%s%N)
    TRACR_CHAIN_MODEL="$tmp/$m.pt" TRACR_CHAIN_INPUT="$input" TRACR_CHAIN_RANDOM="$random" TRACR_CHAIN_OPTIMIZE=$opt \
      "$bin" --gtest_brief=1 --gtest_filter=Forward.RandomPlacementsOfATracedModelAreBitForBit |
      grep -E '\[ placements \]|FAILED|PASSED' | sed "s|$tmp/||"
    end=$(date +%s%N)
    echo "chain_exactness: $m (optimize $opt) $(( (end - start) / 1000000 )) ms wall"
  done
done
