#!/usr/bin/env bash
# Chains (#43): every placement of AlexNet (64x64) over a chain of three
# agents on loopback (this process the participant, a middle SERVER with
# --downstream, a last SERVER) against the unsplit model, bit for bit
# (`optimize: false`, codec none, encrypted hops). CI runs a representative
# subset of the same test (Forward.AChainOfThreeAgentsIsTheUnsplitModelBitForBit);
# this runs all 276 placements and prints the count and the time it took.
#   bash scripts/chain_exactness.sh            (needs a build: build/bin/tracr_system_tests)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TESTS:-build/bin/tracr_system_tests}
[ -x "$bin" ] || { echo "chain_exactness: $bin is not built (cmake --build build)" >&2; exit 1; }
start=$(date +%s%N)
TRACR_ALL_PLACEMENTS=1 "$bin" --gtest_brief=1 \
  --gtest_filter=Forward.AChainOfThreeAgentsIsTheUnsplitModelBitForBit | grep -E '\[ placements \]|FAILED|PASSED'
end=$(date +%s%N)
echo "chain_exactness: $(( (end - start) / 1000000 )) ms wall"
