#!/usr/bin/python3
"""Bytes that cross each cut of torchvision's segmentation models, as tracr splits them (#46 item 3).

  scripts/shape_crossing_bytes.py TRACRCTL [--side 128] [--models a,b,c] [--wrap] [--markdown]

For each model (default: lraspp_mobilenet_v3_large, fcn_resnet50,
deeplabv3_mobilenet_v3_large; Debian's torchvision 0.14, random weights, no
downloads): exports it with scripts/export_model.py at 3 x SIDE x SIDE, runs
`TRACRCTL profile torchscript:FILE --reps 1 --segments none --json` and reads
each split's crossing bytes (batch 1, before any codec: what a `none` codec
puts on the wire as tensor payload). Prints per model the cuts, the input's
bytes, and the mean, median and largest crossing over the inner cuts 1..N-1,
and how many inner cuts carry at least the input's bytes.

--wrap exports each model wrapped so that forward returns out["out"] (a
tensor) instead of the dict: builds before dict outputs were accepted refuse
the dict, so a before/after comparison runs both builds on wrapped models.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["lraspp_mobilenet_v3_large", "fcn_resnet50", "deeplabv3_mobilenet_v3_large"]

WRAPPER = '''import torch
import torchvision


class Out(torch.nn.Module):
    """A torchvision segmentation model returning out["out"] (a tensor), not its dict."""

    def __init__(self, name):
        super().__init__()
        self.m = torchvision.models.get_model(name, weights=None, weights_backbone=None)

    def forward(self, x):
        return self.m(x)["out"]
'''


def export(name, side, out, wrap, tmp):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "export_model.py")]
    if wrap:
        path = os.path.join(tmp, "seg_wrapper.py")
        with open(path, "w") as f:
            f.write(WRAPPER)
        cmd += [path + ":Out", out, "--arg", f"name={name}"]
    else:
        cmd += [name, out]
    cmd += ["--input-shape", f"3,{side},{side}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: export_model.py failed:\n{r.stdout}{r.stderr}")


def crossing_bytes(tracrctl, path, side, tmp):
    js = os.path.join(tmp, "profile.json")
    cmd = [tracrctl, "profile", "torchscript:" + path, "--input-shape", f"3,{side},{side}", "--reps", "1",
           "--segments", "none", "--json", js]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    with open(js) as f:
        doc = json.load(f)
    splits = sorted(doc["splits"], key=lambda s: s["split"])
    return [s["crossing_bytes"] for s in splits]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tracrctl", help="the tracrctl binary (e.g. build/bin/tracrctl)")
    ap.add_argument("--side", type=int, default=128)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--wrap", action="store_true", help='export forward -> out["out"] instead of the dict')
    a = ap.parse_args()
    print(f"| model | cuts | input B | mean B per inner cut | median B | largest B | inner cuts >= input B |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            path = os.path.join(tmp, name + ".pt")
            export(name, a.side, path, a.wrap, tmp)
            b = crossing_bytes(a.tracrctl, path, a.side, tmp)
            inner = b[1:-1]
            print(f"| {name} | {len(b) - 1} | {b[0]:,} | {statistics.mean(inner):,.0f} | "
                  f"{statistics.median(inner):,.0f} | {max(inner):,} | {sum(x >= b[0] for x in inner)} |",
                  flush=True)
            os.remove(path)


if __name__ == "__main__":
    main()
