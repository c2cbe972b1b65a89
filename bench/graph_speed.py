#!/usr/bin/python3
"""Speed of tracr's TorchScript graph models against PyTorch in the same run.

  bench/graph_speed.py BUILD_DIR [--models alexnet,resnet18,...] [--reps 20] [--side 224] [--rounds 3]

For each torchvision model (random init, seed 0, no downloads): traces it at
batch 1, SIDE x SIDE, saves it, and times at one thread (torch.set_num_threads(1)
here, at::set_num_threads(1) in C++; warm-up runs, then the median of REPS):
  python   torch.jit.optimize_for_inference(torch.jit.freeze(trace(m)))
  unsplit  tracr's graph of the same file, optimize: true, split 0..N
  split    head [0, k) then tail [k, N) at the middle cut k
Python and tracr take turns, --rounds times (default 3): each round times
Python, then runs tracr_graph_bench (which itself alternates unsplit and
split runs), so a drift in the machine's speed falls on both alike. Prints a
markdown table: per side the median over rounds of each round's median, and
the ratios unsplit/python (target <= 1.1) and split/unsplit (target <= 1.15)
as the median of the per-round ratios with their lowest and highest.
Needs BUILD_DIR/bin/tracr_graph_bench.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from graph_models_all import graph_bench_tool  # noqa: E402


def median_ms(f, reps):
    t = []
    for _ in range(reps):
        a = time.perf_counter()
        f()
        t.append((time.perf_counter() - a) * 1e3)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--models", default="alexnet,resnet18,mobilenet_v2,vgg11,vit_b_16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--side", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tool = graph_bench_tool(a.build_dir, "graph_speed")
    torch.set_num_threads(1)
    print(f"one thread, batch 1, {a.side}x{a.side}, median of {a.reps} after warm-up, {a.rounds} rounds of "
          f"Python then tracr; torch {torch.__version__}")
    print("| model | python ms | tracr unsplit ms | unsplit/python [range] | tracr head+tail ms | "
          "split/unsplit [range] | cut |")
    print("|---|---|---|---|---|---|---|")
    med = statistics.median

    def cell(v):
        return f"{med(v):.2f} [{min(v):.2f}, {max(v):.2f}]"

    with tempfile.TemporaryDirectory() as d:
        for name in a.models.split(","):
            torch.manual_seed(0)
            m = torchvision.models.get_model(name, weights=None).eval()
            x = torch.rand(1, 3, a.side, a.side)
            with torch.no_grad():
                t = torch.jit.trace(m, x, check_trace=False)
                path = os.path.join(d, name + ".pt")
                t.save(path)
                o = torch.jit.optimize_for_inference(torch.jit.freeze(t))
                for _ in range(3):
                    o(x)
            del t, m
            py, unsplit, split, cut, failed = [], [], [], "", ""
            for _ in range(a.rounds):
                with torch.no_grad():
                    py.append(median_ms(lambda: o(x), a.reps))
                r = subprocess.run([tool, "speed", path, str(a.side), str(a.reps)], capture_output=True, text=True)
                if r.returncode != 0:
                    failed = r.stderr.strip()
                    break
                u, sp, _, cut = r.stdout.strip().split("\t")
                unsplit.append(float(u))
                split.append(float(sp))
            del o
            if failed:
                print(f"| {name} | {med(py):.2f} | failed: {failed} | | | | |")
                continue
            print(f"| {name} | {med(py):.2f} | {med(unsplit):.2f} | {cell([u / p for u, p in zip(unsplit, py)])} | "
                  f"{med(split):.2f} | {cell([s / u for s, u in zip(split, unsplit)])} | {cut} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
