#!/usr/bin/env bash
# Sets up, builds and runs the main job on a fresh Debian 12 machine.
# Until `tracrctl run` lands (issue #4) the main job is the protocol demo:
# two tracr-agent SERVER processes on loopback, real tensors under every
# codec and cipher, the measured table beside raw ZeroMQ.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"${JOBS:-2}" --target tracrctl tracr-agent
exec ./build/bin/tracrctl demo "$@"
