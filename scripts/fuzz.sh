#!/usr/bin/env bash
# Builds the libFuzzer target with clang (ASan+UBSan) and runs it for a bounded
# time: scripts/fuzz.sh [seconds]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTRACR_FUZZ=ON -DTRACR_WITH_TORCH=OFF \
  -DTRACR_BUILD_TESTS=OFF -DTRACR_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" >/dev/null
cmake --build build-fuzz -j2 --target fuzz_frame fuzz_seeds
mkdir -p build-fuzz/corpus
# One valid frame per codec (sparse chains included), so the fuzzer reaches
# every payload decoder instead of stopping at the header.
./build-fuzz/bin/fuzz_seeds build-fuzz/corpus
./build-fuzz/bin/fuzz_frame -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1536 \
  -print_final_stats=1 build-fuzz/corpus 2>&1 | tail -n 25
