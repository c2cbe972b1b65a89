#!/usr/bin/python3
"""Every torchvision classification model through tracr's graph splitter.

  scripts/graph_models_all.py BUILD_DIR [--side N] [--max-params 150e6] [--only a,b] [--mode both|exact|optimized]

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


def graph_bench_tool(build_dir, who):
    """build_dir's tracr_graph_bench (bin/ or bench/), or exit saying how to build it."""
    for p in (os.path.join(build_dir, "bin", "tracr_graph_bench"), os.path.join(build_dir, "bench", "tracr_graph_bench")):
        if os.path.exists(p):
            return p
    sys.exit(f"{who}: no tracr_graph_bench under {build_dir}/bin or {build_dir}/bench; "
             "build it with: cmake --build BUILD_DIR --target tracr_graph_bench")


def default_side(name):
    if name == "inception_v3":
        return 299
    return 224


def leaves(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [t for e in v for t in leaves(e)]
    if isinstance(v, dict):
        return [t for e in v.values() for t in leaves(e)]
    return []


def pytorch_optimized_diff(traced, side):
    """PyTorch's own torch.jit.optimize_for_inference(freeze(trace)) against the
    trace, on the input check-opt uses: (largest relative difference, class
    equal). Random weights can leave logits near 1e-10, where any reordering
    of floating-point sums moves them by their own size: this is the yardstick."""
    with torch.no_grad():
        torch.manual_seed(1)
        x = torch.rand(1, 3, side, side)
        ref = leaves(traced(x))
        o = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
        o(x)
        got = leaves(o(x))
    rel, same = 0.0, True
    for g, r in zip(got, ref):
        rel = max(rel, ((g.double() - r.double()).abs().max() / (r.double().abs().max() + 1e-12)).item())
        if r.dim() == 2:
            same = same and bool(torch.equal(g.argmax(1), r.argmax(1)))
    return rel, same


def judge_optimized(cells, py):
    """check-opt's row, with PyTorch's own difference beside it: a model whose
    tracr difference exceeds 1e-3 passes "as PyTorch" when PyTorch's own
    optimisation differs at least half as much (and changes the class too
    where tracr's does)."""
    py_rel, py_same = py
    if len(cells) == 4 and cells[3] == "FAIL":
        try:
            rel = float(cells[1])
        except ValueError:
            rel = float("inf")
        if rel <= max(1e-3, 2 * py_rel) and (cells[2] == "equal" or not py_same):
            cells[3] = "pass (as PyTorch)"
    return cells[:3] + [f"{py_rel:.2g}" + ("" if py_same else " (class differs)"), cells[3]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--side", type=int, default=0)
    ap.add_argument("--max-params", type=float, default=150e6)
    ap.add_argument("--only", default="")
    ap.add_argument("--mode", choices=("both", "exact", "optimized"), default="both")
    a = ap.parse_args()
    tool = graph_bench_tool(a.build_dir, "graph_models_all")
    names = torchvision.models.list_models(module=torchvision.models)
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print(f"torchvision {torchvision.__version__}, {len(names)} classification models")
    exact, opt = a.mode in ("both", "exact"), a.mode in ("both", "optimized")
    cols = ["model", "params (M)", "input"]
    if exact:
        cols += ["cuts", "refused", "max abs diff", "result (exact)"]
    if opt:
        cols += ["cuts checked", "max rel diff", "class", "PyTorch's own rel diff", "result (optimized)"]
    blank = " |" * (len(cols) - 3)
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
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
                print(f"| {name} | | |{blank[:-2]} cannot build: {str(e).splitlines()[0]} |")
                continue
            params = sum(p.numel() for p in m.parameters())
            if params > a.max_params:
                print(f"| {name} | {params / 1e6:.1f} | |{blank[:-2]} left out (> {a.max_params / 1e6:.0f} M parameters) |")
                continue
            path = os.path.join(d, name + ".pt")
            try:
                with torch.no_grad():
                    t = torch.jit.trace(m, torch.rand(1, 3, side, side), check_trace=False)
                    t.save(path)
            except Exception as e:  # noqa: BLE001
                print(f"| {name} | {params / 1e6:.1f} | {side} |{blank[:-2]} trace refused: {str(e).splitlines()[0]} |")
                continue
            del m
            py = pytorch_optimized_diff(t, side) if opt else None
            del t
            row = []
            for mode, on in (("check", exact), ("check-opt", opt)):
                if not on:
                    continue
                r = subprocess.run([tool, mode, path, str(side)], capture_output=True, text=True)
                cells = (r.stdout.strip().split("\t") if r.stdout.strip()
                         else ["", "", "", "FAIL " + r.stderr.strip()[-200:]])
                if mode == "check-opt":
                    cells = judge_optimized(cells, py)
                row += cells
            print(f"| {name} | {params / 1e6:.1f} | {side} | " + " | ".join(row) + " |")
            sys.stdout.flush()
            os.remove(path)


if __name__ == "__main__":
    main()
