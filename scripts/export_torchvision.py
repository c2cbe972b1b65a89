#!/usr/bin/python3
"""Convert a PyTorch/torchvision weights file into a tracr state-dict file.

tracr's C++ side reads torchvision state_dict .pth files in PyTorch's zip
format directly. Use this tool (with Debian's python3-torchvision, i.e.
/usr/bin/python3) for everything else torch.load understands: legacy
(pre-1.6) .pth files, whole pickled models, training checkpoints
({"state_dict": ...} / {"model": ...}) and DataParallel "module." prefixes.
The output is a plain {name: tensor} dict saved with torch.save (zip format).

  /usr/bin/python3 scripts/export_torchvision.py resnet18-f37072fd.pth resnet18.pt --arch resnet18

With --arch the keys and shapes are checked against torchvision.models.<arch>
and every missing, unexpected or mis-shaped parameter is reported (exit 1).
"""
import argparse
import collections
import sys

import torch


def extract_state_dict(obj):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, torch.jit.ScriptModule):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if key in obj and isinstance(obj[key], (dict, torch.nn.Module)):
                return extract_state_dict(obj[key])
        return obj
    raise SystemExit(f"error: {type(obj).__name__} is not a state dict, checkpoint or module")


def check_against(arch, sd, num_classes):
    import torchvision

    if not hasattr(torchvision.models, arch):
        raise SystemExit(f"error: torchvision.models has no architecture '{arch}'")
    kwargs = {"num_classes": num_classes} if num_classes else {}
    ref = getattr(torchvision.models, arch)(**kwargs).state_dict()
    problems = []
    for k, v in ref.items():
        if k not in sd:
            problems.append(f"missing {k} {list(v.shape)}")
        elif tuple(sd[k].shape) != tuple(v.shape):
            problems.append(f"mis-shaped {k}: {list(sd[k].shape)}, expected {list(v.shape)}")
    for k in sd:
        if k not in ref:
            problems.append(f"unexpected {k}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", help=".pth / .pt file readable by torch.load")
    ap.add_argument("output", help="plain state dict for tracr (torch.save zip format)")
    ap.add_argument("--arch", help="torchvision architecture to validate against, e.g. resnet18")
    ap.add_argument("--num-classes", type=int, default=0, help="classes of --arch (default 1000)")
    ap.add_argument("--strip-prefix", default="module.", help="prefix removed from every key")
    args = ap.parse_args(argv)

    obj = torch.load(args.input, map_location="cpu")
    sd = extract_state_dict(obj)
    out = collections.OrderedDict()
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            raise SystemExit(f"error: entry '{k}' is a {type(v).__name__}, not a tensor")
        if args.strip_prefix and k.startswith(args.strip_prefix):
            k = k[len(args.strip_prefix):]
        out[k] = v.detach().contiguous().clone()
    if args.arch:
        problems = check_against(args.arch, out, args.num_classes)
        if problems:
            print(f"{args.input}: does not match torchvision {args.arch}:", file=sys.stderr)
            for p in problems:
                print("  " + p, file=sys.stderr)
            return 1
    torch.save(dict(out), args.output)
    print(f"{args.output}: {len(out)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
