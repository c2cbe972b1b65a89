#!/usr/bin/python3
"""Traces a model for tracr's graph tests and benchmarks (Debian's python3-torch
and python3-torchvision; random init, no downloads).

  trace_graph_model.py OUT_DIR NAME[@H] ... [--seed N]

writes OUT_DIR/NAME@H.pt for each NAME (input H x H; default 224, 299 for
inception_v3); one Python start for many models.

NAME is a torchvision classification or segmentation model (resnet50,
vit_b_16, lraspp_mobilenet_v3_large: a dict output, traced with strict=False) or
"yolo_like": a small YOLO-style detector defined here (a multi-scale backbone,
a concatenating FPN/PAN neck and a tuple of three head outputs), or one of the
small test modules below (view_inplace, two_inputs, flatten_int, cat_list, size_late, batch_mean; script_if,
which is scripted, not traced). The model is put in eval mode, traced at batch 1
and saved with torch.jit.save.
Exit status 0 on success; 3 when torch.jit.trace refused a model (the
others are still written).
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torchvision


def conv(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU(inplace=True))


class C2f(nn.Module):
    """Split, bottlenecks with residuals, concatenate (YOLOv8's C2f, small)."""

    def __init__(self, cin, cout, n=1):
        super().__init__()
        self.c = cout // 2
        self.cv1 = conv(cin, 2 * self.c, 1)
        self.m = nn.ModuleList(nn.Sequential(conv(self.c, self.c), conv(self.c, self.c)) for _ in range(n))
        self.cv2 = conv((2 + n) * self.c, cout, 1)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class YoloLike(nn.Module):
    def __init__(self, nc=8):
        super().__init__()
        self.stem = conv(3, 16, 3, 2)
        self.b1 = nn.Sequential(conv(16, 32, 3, 2), C2f(32, 32))
        self.b2 = nn.Sequential(conv(32, 64, 3, 2), C2f(64, 64))   # P3, stride 8
        self.b3 = nn.Sequential(conv(64, 96, 3, 2), C2f(96, 96))   # P4, stride 16
        self.b4 = nn.Sequential(conv(96, 128, 3, 2), C2f(128, 128))  # P5, stride 32
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n4 = C2f(128 + 96, 96)
        self.n3 = C2f(96 + 64, 64)
        self.d3 = conv(64, 64, 3, 2)
        self.p4 = C2f(64 + 96, 96)
        self.d4 = conv(96, 96, 3, 2)
        self.p5 = C2f(96 + 128, 128)
        self.heads = nn.ModuleList(nn.Conv2d(c, 4 + 1 + nc, 1) for c in (64, 96, 128))

    def forward(self, x):
        x = self.b1(self.stem(x))
        p3 = self.b2(x)
        p4 = self.b3(p3)
        p5 = self.b4(p4)
        n4 = self.n4(torch.cat([self.up(p5), p4], 1))
        n3 = self.n3(torch.cat([self.up(n4), p3], 1))
        o4 = self.p4(torch.cat([self.d3(n3), n4], 1))
        o5 = self.p5(torch.cat([self.d4(o4), p5], 1))
        return tuple(h(f) for h, f in zip(self.heads, (n3, o4, o5)))


class Viewer(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


class AddOne(nn.Module):
    def forward(self, x):
        return x.add_(1)


class ViewInplace(nn.Module):
    """A view in one module, an in-place write to it in the next, and the
    viewed tensor read after both (a cut between them must be refused)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.viewer = Viewer()
        self.addone = AddOne()
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        y = self.conv(x)
        v = self.viewer(y)
        w = self.addone(v)
        return self.out(y).flatten(1) + w.sum(1, keepdim=True)


class FlattenInt(nn.Module):
    """A convolution, then y.view(y.size(0), -1) and a linear layer: at node
    granularity the cut between aten::size and the view sends the batch size
    as a 0-dim int64 tensor (PROTOCOL.md 3.4 and its section 9 vector)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return self.fc(y.view(y.size(0), -1))


class SizeLate(nn.Module):
    """A strided convolution, a 1x1 convolution, then a bilinear upsample to
    the input's height and width (LR-ASPP's last step): after the first
    convolution the input is read only for its size, so it crosses as its
    shape, "input:shape" int64 [4] (PROTOCOL.md 3.4 and its section 9 vector)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, 2, 1)
        self.c2 = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        return nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class CatList(nn.Module):
    """Two 1x1 convolutions whose outputs are concatenated, then a third: at
    node granularity the cut between prim::ListConstruct and aten::cat sends
    the list as its elements NAME[0], NAME[1] (PROTOCOL.md 3.4 and its
    section 9 vector)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 2, 1)
        self.b = nn.Conv2d(3, 1, 1)
        self.out = nn.Conv2d(3, 2, 1)

    def forward(self, x):
        return self.out(torch.cat([self.a(x), self.b(x)], 1))


class BatchMean(nn.Module):
    """Each sample's answer depends on the other samples of its batch (half
    the batch's mean is taken away after `conv`): stacking several frames into
    one tail (SERVER batching) changes their answers, which a batching SERVER
    must find out before it answers batched."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        y = self.conv(x).mean(dim=(2, 3))
        return self.fc(y - 0.5 * y.mean(0, keepdim=True))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        return self.conv(x) + y.mean()


class ScriptIf(nn.Module):
    """A branch on a tensor's value in the top-level forward, kept by
    torch.jit.script (tracing would keep one path): both branches call conv c."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3)
        self.b = nn.ReLU()
        self.c = nn.Conv2d(8, 8, 3)
        self.d = nn.Linear(8, 10)

    def forward(self, x):
        y = self.b(self.a(x))
        if y.mean() > 0:
            y = self.c(y)
        else:
            y = self.c(y) * 2
        return self.d(y.mean(dim=(2, 3)))


def build(name, size):
    if name == "yolo_like":
        return YoloLike()
    if name == "view_inplace":
        return ViewInplace()
    if name == "two_inputs":
        return TwoInputs()
    if name == "flatten_int":
        return FlattenInt()
    if name == "cat_list":
        return CatList()
    if name == "size_late":
        return SizeLate()
    if name == "batch_mean":
        return BatchMean()
    if name == "script_if":
        return ScriptIf()
    kwargs = {}
    if name.startswith("vit_"):
        kwargs["image_size"] = size[0]
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = True
    if name in torchvision.models.list_models(module=torchvision.models.segmentation):
        kwargs["weights_backbone"] = None  # nothing is downloaded
    return torchvision.models.get_model(name, weights=None, **kwargs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("names", nargs="+")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    status = 0
    for spec in a.names:
        name, _, h = spec.partition("@")
        side = int(h) if h else (299 if name == "inception_v3" else 224)
        torch.manual_seed(a.seed)
        m = build(name, [side, side]).eval()
        x = torch.rand(1, 3, side, side)
        if name == "two_inputs":
            x = (x, torch.rand(1))
        try:
            with torch.no_grad():
                # strict=False: a segmentation model returns a dict {"out": ...}
                t = (torch.jit.script(m) if name.startswith("script_")
                     else torch.jit.trace(m, x, check_trace=False, strict=False))
        except Exception as e:  # noqa: BLE001 - report any refusal of the tracer
            print(f"{name}: torch.jit.trace refused: {e}".splitlines()[0], file=sys.stderr)
            status = 3
            continue
        out = f"{a.out_dir}/{name}@{side}.pt"
        t.save(f"{out}.{os.getpid()}")  # renamed: concurrent tests never read half a file
        os.replace(f"{out}.{os.getpid()}", out)
    return status


if __name__ == "__main__":
    sys.exit(main())
