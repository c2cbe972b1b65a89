#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   1. installs missing Debian packages (scripts/setup.sh),
#   2. builds everything (RelWithDebInfo, ccache when present), runs clang-tidy's
#      defect checks on the floors without LibTorch (scripts/tidy.sh), and ctest,
#   3. builds the protocol and agent tests with ASan+UBSan and runs them,
#   4. builds the threaded tests (the server loop and its hostile campaign,
#      frame parallel parts and worker pool, delay relay, energy sampling,
#      control channel, meters) with ThreadSanitizer and runs them,
#   5. runs the libFuzzer frame target for a bounded time (FUZZ_SECONDS, default 60).
# Set TRACR_SKIP_ASAN=1, TRACR_SKIP_TSAN=1 or FUZZ_SECONDS=0 to skip steps 3, 4 or 5 locally.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}

bash scripts/setup.sh

# On CI (root) the SSH and network-namespace suites must run, never skip.
if [ "${CI:-}" = "true" ]; then export TRACR_REQUIRE_SSHD=1; fi

echo "== build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$JOBS"

echo "== clang-tidy (scripts/tidy.sh)"
bash scripts/tidy.sh build

echo "== tests (ctest)"
ctest --test-dir build -j"$JOBS" --output-on-failure --timeout 900

if [ "${TRACR_SKIP_ASAN:-0}" != "1" ]; then
  echo "== protocol tests under ASan+UBSan (build-asan/)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTRACR_SANITIZE=ON -DTRACR_WITH_TORCH=OFF \
    -DTRACR_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$JOBS" --target tracr_protocol_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ./build-asan/bin/tracr_protocol_tests --gtest_brief=1
fi

# libzmq's own queues are suppressed (scripts/tsan.supp: Debian's libzmq is
# not instrumented). The server loop runs under the whole hostile campaign
# (tests/protocol/test_hostile.cpp: floods, non-reading peers, replays).
if [ "${TRACR_SKIP_TSAN:-0}" != "1" ]; then
  echo "== threaded tests under ThreadSanitizer (build-tsan/)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRACR_TSAN=ON -DTRACR_WITH_TORCH=OFF \
    -DTRACR_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan -j"$JOBS" --target tracr_protocol_tests tracr_agent_tests tracr_meters_tests
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
  ./build-tsan/bin/tracr_protocol_tests --gtest_brief=1 \
    --gtest_filter='*Parallel*:*Pool*:*Channel*:*Session*:Hostile.*'
  ./build-tsan/bin/tracr_agent_tests --gtest_brief=1 --gtest_filter='*DelayRelay*:*Energy*:*Control*'
  ./build-tsan/bin/tracr_meters_tests --gtest_brief=1
fi

secs=${FUZZ_SECONDS:-60}
if [ "$secs" != "0" ]; then
  echo "== fuzz smoke run (${secs}s)"
  bash scripts/fuzz.sh "$secs"
fi
echo "== all tests passed"
