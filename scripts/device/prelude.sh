# Sourced first by the scripts of this folder, from the repository root, on
# the GPU machine:  source scripts/device/prelude.sh NAME
# Sets OUT (default /tmp/NAME_out), DEPS (the folder pack_deps.sh wrote,
# default .devsys), B (the CUDA build folder, shared by the scripts), W
# (/tmp/tracr-NAME-work, emptied) and TORCH_DIR (the wheel's LibTorch); puts
# CUDA's bin/ and $DEPS/lib on the paths; copies everything printed to
# $OUT/NAME.log; defines `step TEXT` (a timed heading).
name=$1
OUT=${OUT:-/tmp/${name}_out}; mkdir -p "$OUT"
DEPS=$PWD/${DEPS:-.devsys}
B=/tmp/tracr-cuda-build
W=/tmp/tracr-$name-work; rm -rf "$W"; mkdir -p "$W"
exec > >(tee "$OUT/$name.log") 2>&1
step() { echo; echo "== $(date +%T) $*"; }
TORCH_DIR=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path)")/Torch
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
