#!/bin/bash
# On the GPU machine (see cuda_check.sh): tracr's graph models on CUDA
# against PyTorch's own paths in the same run, one model at a time, batch 1,
# 224x224, median of 50 synchronised runs after warm-up:
#   eager      the torchvision module
#   optimized  torch.jit.optimize_for_inference(torch.jit.freeze(trace))
#   tracr      tracr_graph_bench speed: the unsplit graph and head + tail at the
#              middle cut (optimize: true)
set -uo pipefail
source scripts/device/prelude.sh cuda_speed
nvidia-smi -L
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRACR_BUILD_TESTS=OFF \
  -DTRACR_DEPS_FILE="$PWD/scripts/device/deps.cmake" -DTRACR_DEPS_DIR="$DEPS" \
  -DTorch_DIR="$TORCH_DIR" -DTORCH_CUDA_ARCH_LIST=9.0 > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
timeout 240 ninja -C "$B" tracr_graph_bench > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
PYTHONUNBUFFERED=1 python3 - "$B/bin/tracr_graph_bench" "$W" <<'PY'
import statistics, subprocess, sys, time, torch, torchvision
torch.set_num_threads(1)
tool, w = sys.argv[1], sys.argv[2]
dev = torch.device("cuda")
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, batch 1, 224x224, median of 50 after 10 warm-up")
print("| model | eager ms | optimize_for_inference ms | tracr unsplit ms | tracr head+tail ms | unsplit/optimized | split/unsplit | cut |")
print("|---|---|---|---|---|---|---|---|")
def med(f, n=50):
    for _ in range(10): f()
    torch.cuda.synchronize()
    t = []
    for _ in range(n):
        a = time.perf_counter(); f(); torch.cuda.synchronize(); t.append((time.perf_counter() - a) * 1e3)
    return statistics.median(t)
for name in ["resnet18", "mobilenet_v2", "vit_b_16", "resnet50"]:
    torch.manual_seed(0)
    m = torchvision.models.get_model(name, weights=None).eval()
    x = torch.rand(1, 3, 224, 224)
    with torch.no_grad():
        tr = torch.jit.trace(m, x, check_trace=False)
        tr.save(f"{w}/{name}.pt")
        m = m.to(dev); xd = x.to(dev)
        eager = med(lambda: m(xd))
        opt = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(m, xd, check_trace=False)))
        o = med(lambda: opt(xd))
    r = subprocess.run([tool, "speed", f"{w}/{name}.pt", "224", "50", "cuda"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"| {name} | {eager:.3f} | {o:.3f} | failed: {r.stderr.strip()[-200:]} |"); continue
    un, sp, k, cut = r.stdout.split("\t")[:4]
    un, sp = float(un), float(sp)
    print(f"| {name} | {eager:.3f} | {o:.3f} | {un:.3f} | {sp:.3f} | {un / o:.2f} | {sp / un:.2f} | {cut.strip()} |  ({r.stderr.strip()})")
PY
