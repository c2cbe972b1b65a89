#!/usr/bin/env bash
# Sets up, builds and runs the main job on a fresh Debian 12 machine: the
# quickstart experiment (AlexNet, every split point, two local tracr-agent
# processes on loopback, AES-256-GCM frames, results in results/tracr.db),
# ending with the per-split table read back from SQLite.
# Extra arguments go to `tracrctl run` (e.g. --in-process, --show-config).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"${JOBS:-2}" --target tracrctl tracr-agent
if ! command -v tracrctl >/dev/null; then
  echo "quickstart: tracrctl is build/bin/tracrctl; put it on your PATH with" >&2
  echo "  export PATH=\"$PWD/build/bin:\$PATH\"      # this shell" >&2
  echo "  cmake --install build --prefix ~/.local   # or for good (~/.local/bin)" >&2
fi
exec ./build/bin/tracrctl run config/experiments/quickstart.yaml "$@"
