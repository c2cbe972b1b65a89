#!/usr/bin/python3
"""Reference outputs from PyTorch/torchvision for tracr's C++ tests.

Run with Debian's /usr/bin/python3 (python3-torchvision). No network: models
are randomly initialised with a fixed seed (BatchNorm statistics and affine
parameters randomised too, so every buffer matters).

  tracr_reference.py model NAME OUT_DIR --size H W [--batch B] [--seed S] [--legacy]
      OUT_DIR/NAME.pth      the model's state_dict, exactly as torch.save writes it
      OUT_DIR/NAME.ref.pt   {"input": x, "output.0": y0, ...} (plain dict)
  tracr_reference.py torchscript OUT_DIR --size H W
      OUT_DIR/seq.ts        scripted (--trace: traced) nested nn.Sequential, OUT_DIR/seq.ref.pt
  tracr_reference.py preset IMAGE OUT --crop N [--resize N] [--interpolation bilinear|bicubic|nearest]
      OUT                   {"output": torchvision ImageClassification(IMAGE)}
  tracr_reference.py image OUT W H SEED   writes an RGB test image (PIL; .jpg or .png)
  tracr_reference.py resize IMAGE OUT SPEC... [--filter bilinear|bicubic|nearest]
      OUT                   {"decoded": IMAGE as PIL decodes it (uint8 H x W x 3),
                             "out.<i>": Image.resize(..., FILTER) for the i-th SPEC}
      SPEC is WxH or WxH@X0,Y0,X1,Y1 (PIL's box, in source pixels)
"""
import argparse
import collections
import sys

import torch
import torch.nn as nn


class ConvBNReLU(nn.Sequential):
    def __init__(self, cin, cout, stride):
        super().__init__(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class TinyFPNDetector(nn.Module):
    """Mirror of experiments/zoo/tiny_detector.cpp."""

    def __init__(self, num_classes=80):
        super().__init__()
        self.backbone = nn.Module()
        self.backbone.stem = ConvBNReLU(3, 16, 2)
        self.backbone.stage1 = ConvBNReLU(16, 32, 2)
        self.backbone.stage2 = nn.Sequential(*ConvBNReLU(32, 64, 2), *ConvBNReLU(64, 64, 1))
        self.backbone.stage3 = nn.Sequential(*ConvBNReLU(64, 128, 2), *ConvBNReLU(128, 128, 1))
        self.backbone.stage4 = nn.Sequential(*ConvBNReLU(128, 256, 2), *ConvBNReLU(256, 256, 1))
        self.neck = nn.Module()
        self.neck.lateral3 = nn.Conv2d(64, 64, 1)
        self.neck.lateral4 = nn.Conv2d(128, 64, 1)
        self.neck.lateral5 = nn.Conv2d(256, 64, 1)
        self.neck.smooth3 = nn.Conv2d(64, 64, 3, padding=1)
        self.neck.smooth4 = nn.Conv2d(64, 64, 3, padding=1)
        self.neck.smooth5 = nn.Conv2d(64, 64, 3, padding=1)
        self.head = nn.ModuleDict({p: nn.Conv2d(64, 5 + num_classes, 1) for p in ("p3", "p4", "p5")})

    def forward(self, x):
        b = self.backbone
        x = b.stage1(b.stem(x))
        c3 = b.stage2(x)
        c4 = b.stage3(c3)
        c5 = b.stage4(c4)
        n = self.neck
        l5 = n.lateral5(c5)
        m4 = n.lateral4(c4) + nn.functional.interpolate(l5, scale_factor=2.0, mode="nearest")
        m3 = n.lateral3(c3) + nn.functional.interpolate(m4, scale_factor=2.0, mode="nearest")
        return (self.head["p3"](n.smooth3(m3)), self.head["p4"](n.smooth4(m4)),
                self.head["p5"](n.smooth5(l5)))


def build(name):
    import torchvision

    if name == "tiny_fpn_detector":
        return TinyFPNDetector()
    return getattr(torchvision.models, name)()


def randomize_norms(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                m.num_batches_tracked.fill_(7)


def outputs_dict(x, out):
    if isinstance(out, torch.Tensor):
        out = (out,)
    d = {"input": x}
    for i, o in enumerate(out):
        d[f"output.{i}"] = o.contiguous()
    return d


def cmd_model(a):
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed + 1)
    model = build(a.name)
    randomize_norms(model, gen)
    model.eval()
    x = torch.randn(a.batch, 3, a.size[0], a.size[1], generator=gen)
    with torch.no_grad():
        out = model(x)
    sd = model.state_dict()
    if a.legacy:
        torch.save(sd, f"{a.out}/{a.name}.pth", _use_new_zipfile_serialization=False)
    else:
        torch.save(sd, f"{a.out}/{a.name}.pth")
    torch.save(outputs_dict(x, out), f"{a.out}/{a.name}.ref.pt")


def cmd_torchscript(a):
    torch.manual_seed(a.seed)
    if a.not_sequential:
        torch.jit.script(nn.Linear(4, 2)).save(f"{a.out}/linear.ts")
        return
    seq = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                      nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 16, 1))),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    randomize_norms(seq, torch.Generator().manual_seed(a.seed + 1))
    seq.eval()
    x = torch.randn(2, 3, a.size[0], a.size[1], generator=torch.Generator().manual_seed(a.seed + 2))
    with torch.no_grad():
        out = seq(x)
    (torch.jit.trace(seq, x) if a.trace else torch.jit.script(seq)).save(f"{a.out}/seq.ts")
    torch.save(outputs_dict(x, out), f"{a.out}/seq.ref.pt")


def cmd_preset(a):
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms._presets import ImageClassification

    preset = ImageClassification(crop_size=a.crop, resize_size=a.resize,
                                 interpolation=InterpolationMode(a.interpolation))
    img = Image.open(a.image).convert("RGB")
    torch.save({"output": preset(img).contiguous()}, a.out)


def cmd_image(a):
    from PIL import Image

    g = torch.Generator().manual_seed(a.seed)
    # Smooth gradients plus noise: realistic enough for resampling to matter.
    yy, xx = torch.meshgrid(torch.linspace(0, 1, a.h), torch.linspace(0, 1, a.w), indexing="ij")
    base = torch.stack([xx, yy, (xx + yy) / 2]) * 200
    img = (base + torch.rand(3, a.h, a.w, generator=g) * 55).clamp(0, 255).to(torch.uint8)
    Image.fromarray(img.permute(1, 2, 0).numpy()).save(a.out, quality=95)


def _png(path, w, h, depth, ctype, rows, extra=b"", interlace=0):
    """A PNG written byte by byte (PIL cannot write 16-bit colour or 2/4-bit
    gray): rows are the packed samples of each row, without filter bytes."""
    import struct
    import zlib

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw)) +
                chunk(b"IEND", b""))


def _pack(values, depth):
    out, acc, n = bytearray(), 0, 0
    for v in values:
        acc = (acc << depth) | v
        n += depth
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


def cmd_modes(a):
    """Images in every PNG mode and a truncated JPEG and PNG, with what
    PIL's Image.open(f).convert('RGB') gives for each (torchvision's loader),
    or refused.<name> where PIL raises."""
    import os
    import struct
    import zlib

    import numpy as np
    from PIL import Image

    rng = np.random.RandomState(a.seed)
    w, h = 13, 7
    files = {}

    def put(name):
        files[name] = os.path.join(a.dir, name)
        return files[name]

    Image.fromarray(rng.randint(0, 256, (h, w, 4), dtype=np.uint8), "RGBA").save(put("rgba.png"))
    Image.fromarray(rng.randint(0, 256, (h, w, 2), dtype=np.uint8), "LA").save(put("la.png"))
    Image.fromarray(rng.randint(0, 256, (h, w), dtype=np.uint8), "L").save(put("l.png"))
    Image.fromarray(rng.randint(0, 256, (h, w, 3), dtype=np.uint8), "RGB").save(put("interlaced.png"), interlace=1)
    p = Image.fromarray(rng.randint(0, 16, (h, w), dtype=np.uint8), "P")
    p.putpalette(list(rng.randint(0, 256, 48)))
    p.save(put("palette.png"))
    p.save(put("palette_trns.png"), transparency=bytes(rng.randint(0, 256, 16).astype(np.uint8)))
    Image.fromarray((rng.randint(0, 65536, (h, w))).astype(np.uint16)).save(put("gray16.png"))
    small = rng.randint(0, 256, (h, w)).astype(np.uint16)  # 16-bit gray under 256: kept as is
    Image.fromarray(small).save(put("gray16_low.png"))
    rgb16 = rng.randint(0, 65536, (h, w, 3)).astype(">u2")
    _png(put("rgb16.png"), w, h, 16, 2, [rgb16[y].tobytes() for y in range(h)])
    rgba16 = rng.randint(0, 65536, (h, w, 4)).astype(">u2")
    _png(put("rgba16.png"), w, h, 16, 6, [rgba16[y].tobytes() for y in range(h)])
    for depth in (1, 2, 4):
        g = rng.randint(0, 1 << depth, (h, w))
        _png(put("gray%d.png" % depth), w, h, depth, 0, [_pack(g[y], depth) for y in range(h)])
    # Gray with a tRNS colour key: the key is dropped like any alpha.
    g = rng.randint(0, 256, (h, w)).astype(np.uint8)
    trns = struct.pack(">I", 2) + b"tRNS" + struct.pack(">H", int(g[0, 0]))
    trns += struct.pack(">I", zlib.crc32(b"tRNS" + struct.pack(">H", int(g[0, 0]))) & 0xFFFFFFFF)
    _png(put("gray_trns.png"), w, h, 8, 0, [g[y].tobytes() for y in range(h)], extra=trns)
    # Truncated: a JPEG and a PNG cut to two thirds.
    Image.fromarray(rng.randint(0, 256, (64, 64, 3), dtype=np.uint8), "RGB").save(put("whole.jpg"), quality=90)
    for src, dst in (("whole.jpg", "truncated.jpg"), ("rgba.png", "truncated.png")):
        data = open(files[src], "rb").read()
        open(put(dst), "wb").write(data[: len(data) * 2 // 3])
    out = {}
    for name, path in sorted(files.items()):
        try:
            out[name] = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy())
        except OSError:
            out["refused." + name] = torch.ones(1)
    torch.save(out, a.out)


PIL_FILTERS = {"nearest": 0, "bilinear": 2, "bicubic": 3}  # Image.Resampling values


def cmd_resize(a):
    import numpy as np
    from PIL import Image

    img = Image.open(a.image).convert("RGB")
    out = {"decoded": torch.from_numpy(np.asarray(img).copy())}
    for i, spec in enumerate(a.specs):
        size, _, box = spec.partition("@")
        w, h = (int(v) for v in size.split("x"))
        box = tuple(float(v) for v in box.split(",")) if box else None
        r = img.resize((w, h), PIL_FILTERS[a.filter], box=box)
        out[f"out.{i}"] = torch.from_numpy(np.asarray(r).copy())
    torch.save(out, a.out)


def main(argv=None):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("name")
    m.add_argument("out")
    m.add_argument("--size", type=int, nargs=2, default=[224, 224])
    m.add_argument("--batch", type=int, default=2)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--legacy", action="store_true", help="legacy (pre-1.6) .pth format")
    t = sub.add_parser("torchscript")
    t.add_argument("out")
    t.add_argument("--size", type=int, nargs=2, default=[32, 32])
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--trace", action="store_true", help="torch.jit.trace instead of script")
    t.add_argument("--not-sequential", action="store_true", help="write linear.ts (an nn.Linear)")
    p = sub.add_parser("preset")
    p.add_argument("image")
    p.add_argument("out")
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--interpolation", choices=sorted(PIL_FILTERS), default="bilinear")
    i = sub.add_parser("image")
    i.add_argument("out")
    i.add_argument("w", type=int)
    i.add_argument("h", type=int)
    i.add_argument("seed", type=int)
    r = sub.add_parser("resize")
    r.add_argument("image")
    r.add_argument("out")
    r.add_argument("specs", nargs="+")
    r.add_argument("--filter", choices=sorted(PIL_FILTERS), default="bilinear")
    md = sub.add_parser("modes")
    md.add_argument("dir")
    md.add_argument("out")
    md.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    {"model": cmd_model, "torchscript": cmd_torchscript, "preset": cmd_preset,
     "image": cmd_image, "resize": cmd_resize, "modes": cmd_modes}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
