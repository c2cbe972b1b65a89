#!/bin/bash
# The CUDA check, run on a machine with a CUDA PyTorch (pip wheel) and none
# of Debian's packages, from the repository root, with the folder written
# by scripts/device/pack_deps.sh beside it (.devsys):
#   1. builds tracr-agent and tracr_graph_bench against the wheel's LibTorch;
#   2. exports torchvision models with scripts/export_model.py and checks
#      head-then-tail against the unsplit module at every cut, on CUDA and CPU;
#   3. times the unsplit graph and head + tail at the middle cut on CUDA;
#   4. builds tracrctl and sweeps every split of a traced ResNet-18 with a
#      CPU PARTICIPANT and a CUDA SERVER (local agents, loopback, encrypted
#      frames), then reads the results database.
# Everything it prints also goes to $OUT/cuda_check.log.
set -uo pipefail
source scripts/device/prelude.sh cuda_check
step environment
nvidia-smi -L; g++ --version | head -1; cmake --version | head -1; ldd --version | head -1; nproc
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'torchvision', torchvision.__version__)"
step configure
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRACR_BUILD_TESTS=OFF \
  -DTRACR_DEPS_FILE="$PWD/scripts/device/deps.cmake" -DTRACR_DEPS_DIR="$DEPS" \
  -DTorch_DIR="$TORCH_DIR" -DTORCH_CUDA_ARCH_LIST=9.0 > "$OUT/configure.log" 2>&1
rc=$?; tail -25 "$OUT/configure.log"
if [ $rc -ne 0 ]; then echo "configure failed"; exit 1; fi
step build agent and graph bench
timeout 330 ninja -C "$B" -k 0 tracr-agent tracr_graph_bench > "$OUT/build.log" 2>&1
rc=$?; grep -E "error|FAILED" "$OUT/build.log" | head -60; tail -3 "$OUT/build.log"
if [ $rc -ne 0 ]; then
  echo "build failed ($rc): packing LibTorch's headers for a local check"
  tdir=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))")
  tar -C "$tdir" -cf - include | xz -T16 -4 | split -b 15M - "$OUT/torch_include.tar.xz."
  ls -la "$OUT"; exit 1
fi
"$B/bin/tracr-agent" --version
step export models
for m in resnet18 mobilenet_v2 vit_b_16; do
  timeout 120 python3 scripts/export_model.py "$m" "$W/$m.pt" --input-shape 3,224,224 2>&1 | tail -2
done
step every cut, head-then-tail vs unsplit: cuts refused maxdiff verdict
for m in resnet18 mobilenet_v2 vit_b_16; do
  for d in cuda cpu; do
    printf '%s %s\t' "$m" "$d"; timeout 150 "$B/bin/tracr_graph_bench" check "$W/$m.pt" 224 "$d" 2>&1 | tail -1
  done
done
step speed on cuda, optimize true: unsplit_ms split_ms middle_cut
for m in resnet18 mobilenet_v2 vit_b_16; do
  printf '%s cuda\t' "$m"; timeout 120 "$B/bin/tracr_graph_bench" speed "$W/$m.pt" 224 50 cuda 2>&1 | tail -1
done
step build tracrctl
timeout 240 ninja -C "$B" -k 0 tracrctl > "$OUT/build_ctl.log" 2>&1
rc=$?; grep -E "error|FAILED" "$OUT/build_ctl.log" | head -40; tail -2 "$OUT/build_ctl.log"
[ $rc -eq 0 ] || exit 1
step sweep: CPU PARTICIPANT, CUDA SERVER, every split of ResNet-18
cat > "$W/devices.yaml" <<YAML
devices:
  - {device_type: SERVER, name: gpu-server, transport: local, device: cuda}
  - {device_type: PARTICIPANT, name: cpu-edge, transport: local, device: cpu, threads: 4}
YAML
cat > "$W/exp.yaml" <<YAML
name: cuda_split
model: torchscript:$W/resnet18.pt
input_size: [3, 224, 224]
dataset: {type: synthetic, max_samples: 3}
split: all
warmup: 1
repetitions: 2
batch_size: 1
compression: none
encryption: true
output: $W/run.db
devices: $W/devices.yaml
seed: 1
YAML
timeout 240 "$B/bin/tracrctl" run "$W/exp.yaml" --no-progress 2>&1 | tail -40
step results database
python3 - "$W/run.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
q = lambda s: db.execute(s).fetchall()
print("runs", q("select id, status from runs"))
print("frames ok/total", q("select sum(ok), count(*) from frames"))
print("splits", q("select count(distinct split) from frames"))
print("devices", q("select * from devices"))
print("agent_ready", q("select message from events where kind = 'agent_ready'"))
cols = [r[1] for r in q("pragma table_info(frames)")]
print("frame columns", cols)
PY
cp "$W/run.db" "$OUT/run.db" 2>/dev/null
step done
