#!/usr/bin/python3
"""Every torchvision classification model through tracr's graph splitter.

  scripts/graph_models_all.py BUILD_DIR [--side N] [--max-params 150e6] [--only a,b]

For each name in torchvision.models.list_models(module=torchvision.models)
(Debian's python3-torchvision 0.14, random init, no downloads): traces it at
batch 1 (its default input size, or N x N with --side where the model takes
it), then runs `tracr_graph_bench check` on the file: every cut, head then
tail, against the unsplit traced module, bit for bit (optimize: false).
Prints a markdown table: model, params, input, cuts, refused cuts, max abs
diff, pass. Models with more than --max-params parameters are listed as
left out; a model torch.jit.trace refuses is listed with the reason.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import torchvision


def default_side(name):
    if name == "inception_v3":
        return 299
    return 224


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--side", type=int, default=0)
    ap.add_argument("--max-params", type=float, default=150e6)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    tool = next((p for p in (os.path.join(a.build_dir, "bin", "tracr_graph_bench"),
                             os.path.join(a.build_dir, "bench", "tracr_graph_bench")) if os.path.exists(p)), None)
    if tool is None:
        sys.exit(f"graph_models_all: no tracr_graph_bench under {a.build_dir}/bin or {a.build_dir}/bench; "
                 "build it with: cmake --build BUILD_DIR --target tracr_graph_bench")
    names = torchvision.models.list_models(module=torchvision.models)
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print(f"torchvision {torchvision.__version__}, {len(names)} classification models")
    print("| model | params (M) | input | cuts | refused | max abs diff | result |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            side = a.side or default_side(name)
            kwargs = {}
            if name.startswith("vit_") and a.side:
                kwargs["image_size"] = side
            torch.manual_seed(0)
            try:
                m = torchvision.models.get_model(name, weights=None, **kwargs).eval()
            except Exception as e:  # noqa: BLE001
                print(f"| {name} | | | | | | cannot build: {str(e).splitlines()[0]} |")
                continue
            params = sum(p.numel() for p in m.parameters())
            if params > a.max_params:
                print(f"| {name} | {params / 1e6:.1f} | | | | | left out (> {a.max_params / 1e6:.0f} M parameters) |")
                continue
            path = os.path.join(d, name + ".pt")
            try:
                with torch.no_grad():
                    torch.jit.trace(m, torch.rand(1, 3, side, side), check_trace=False).save(path)
            except Exception as e:  # noqa: BLE001
                print(f"| {name} | {params / 1e6:.1f} | {side} | | | | trace refused: {str(e).splitlines()[0]} |")
                continue
            del m
            r = subprocess.run([tool, "check", path, str(side)], capture_output=True, text=True)
            row = r.stdout.strip().split("\t") if r.stdout.strip() else ["", "", "", "FAIL " + r.stderr.strip()[-200:]]
            print(f"| {name} | {params / 1e6:.1f} | {side} | " + " | ".join(row) + " |")
            sys.stdout.flush()
            os.remove(path)


if __name__ == "__main__":
    main()
