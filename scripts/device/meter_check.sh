#!/bin/bash
# On the GPU machine (see cuda_check.sh): does reading the energy meters put
# time into the frame's stages? Builds tracrctl and tracr-agent, sweeps three
# splits of a traced ResNet-18 (CPU PARTICIPANT, CUDA SERVER) with this tree,
# then again with agent/energy.{hpp,cpp} as given in $OLD (meters read at
# every mark), and prints the per-split medians of both runs. The files of
# 2026-11-26's check were those before commit bea87d2:
#   mkdir -p .devsys/old && for f in hpp cpp; do
#     git show bea87d2^:agent/energy.$f > .devsys/old/energy.$f; done
set -uo pipefail
source scripts/device/prelude.sh meter_check
OLD=${OLD:-$DEPS/old}
step environment
nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"
python3 - <<'PY'
import time, pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
t = []
for _ in range(50):
    a = time.perf_counter(); pynvml.nvmlDeviceGetTotalEnergyConsumption(h); t.append(time.perf_counter() - a)
t.sort(); print("pynvml nvmlDeviceGetTotalEnergyConsumption: median %.3f ms, min %.3f, max %.3f over 50" % (t[25]*1e3, t[0]*1e3, t[-1]*1e3))
PY
step build
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRACR_BUILD_TESTS=OFF -DTRACR_BUILD_BENCH=OFF \
  -DTRACR_DEPS_FILE="$PWD/scripts/device/deps.cmake" -DTRACR_DEPS_DIR="$DEPS" \
  -DTorch_DIR="$TORCH_DIR" -DTORCH_CUDA_ARCH_LIST=9.0 > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
timeout 300 ninja -C "$B" tracrctl > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
timeout 120 python3 scripts/export_model.py resnet18 "$W/resnet18.pt" --input-shape 3,224,224 > /dev/null 2>&1 || exit 1
cat > "$W/devices.yaml" <<YAML
devices:
  - {device_type: SERVER, name: gpu-server, transport: local, device: cuda}
  - {device_type: PARTICIPANT, name: cpu-edge, transport: local, device: cpu, threads: 4}
YAML
sweep() {  # $1: database
  cat > "$W/exp.yaml" <<YAML
name: meter_check
model: torchscript:$W/resnet18.pt
input_size: [3, 224, 224]
dataset: {type: synthetic, max_samples: 4}
split: [0, 34, 69]
warmup: 1
repetitions: 3
batch_size: 1
compression: none
encryption: true
record: {layers: false}
output: $1
devices: $W/devices.yaml
seed: 1
YAML
  timeout 150 "$B/bin/tracrctl" run "$W/exp.yaml" --no-progress 2>&1 | tail -8
  python3 - "$1" <<'PY'
import sqlite3, statistics as st, sys
db = sqlite3.connect(sys.argv[1])
for (m,) in db.execute("select message from events where kind = 'agent_log'"): print("  ", m)
print("   split  encode  server  tail  decode  server-tail-decode  total   (median ms, ok frames, warm-up excluded)")
for (s,) in db.execute("select distinct split from frames order by split"):
    rows = db.execute("select encode_ns, server_ns, tail_ns, decode_ns, total_ns from frames where split = ? and ok = 1 and warmup = 0", (s,)).fetchall()
    med = lambda f: st.median(f(r) for r in rows) / 1e6
    print("   %5d  %6.3f  %6.3f  %5.3f  %6.3f  %18.3f  %6.3f  (%d)" % (s, med(lambda r: r[0]), med(lambda r: r[1]), med(lambda r: r[2]),
          med(lambda r: r[3]), med(lambda r: r[1] - r[2] - r[3]), med(lambda r: r[4]), len(rows)))
print("   energy rows by flags:", db.execute("select flags, count(*) from energy group by flags").fetchall())
PY
}
step "sweep with this tree (slow meters sampled in the background)"
sweep "$W/after.db"
step "sweep with meters read at every mark ($OLD)"
cp "$OLD/energy.hpp" agent/energy.hpp && cp "$OLD/energy.cpp" agent/energy.cpp
timeout 200 ninja -C "$B" tracrctl > "$OUT/build_old.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build_old.log" | head -40; exit 1; }
sweep "$W/before.db"
cp "$W/after.db" "$W/before.db" "$OUT/"
step done
