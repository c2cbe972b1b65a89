#!/usr/bin/python3
"""Export a PyTorch model as the TorchScript file tracr's `model: torchscript:FILE` loads.

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision 0.14).
Nothing is downloaded: weights come from your own file or the model stays
randomly initialised.

  export_model.py MODEL OUT.pt [--weights FILE] [--input-shape SHAPE] [--arg KEY=VALUE ...]

MODEL is one of
  resnet50                 a torchvision model by name (torchvision.models.list_models())
  mypkg.nets:Net           a class importable from the current directory or PYTHONPATH
  path/to/file.py:Net      a class defined in a Python file
--weights FILE is a state dict (also inside a checkpoint {"state_dict": ...} /
{"model": ...}, "module." prefixes removed) or a whole pickled model
(torch.save(model)); every missing, unexpected or mis-shaped key is named.
--input-shape is the shape of one sample without the batch, any rank:
3,224,224 (an image), 4 (four features), 16,64 (16 tokens of 64). The default
is a torchvision model's own crop size; a class of your own needs it.

Writes
  OUT.pt            torch.jit.trace(model.eval(), example).save(OUT.pt), with the
                    input shape it was traced at (extra file tracr/input_shape,
                    tracr's default input_size for the file)
  OUT.preset.yaml   (torchvision models) the preprocessing its weights expect,
                    read from the weights enum's transforms() (--preset picks
                    the enum entry; DEFAULT otherwise): input_size and
                    dataset.resize_size / interpolation / mean / std, to paste
                    into an experiment with dataset.type: imagefolder
  --reference REF   {"input": x, "output.0": y, ...} for a fixed random input
                    (the eager model's output), a plain dict tracr's C++ reads

Tracing records the operations one forward pass ran on the example input:
branches on tensor values (data-dependent control flow) are frozen to the path
taken. The script runs the traced module and the model on two other inputs
and fails when they disagree.
"""
import argparse
import ast
import difflib
import inspect
import importlib
import importlib.util
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_torchvision import extract_state_dict  # noqa: E402  (one reader of checkpoints)


class ExportError(Exception):
    pass


# ----------------------------------------------------------------- building

def parse_args_kv(items):
    """--arg KEY=VALUE pairs as constructor keyword arguments (values as Python literals)."""
    kwargs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ExportError(f"--arg {item}: expected KEY=VALUE, e.g. --arg num_classes=10")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value  # a bare word: a string
    return kwargs


def parse_shape(text):
    try:
        dims = [int(v) for v in text.split(",")]
    except ValueError:
        dims = []
    if not dims or any(d <= 0 for d in dims):
        raise ExportError(f"--input-shape {text}: expected positive sizes like 3,224,224 or 4 or 16,64")
    return dims


def torchvision_names():
    import torchvision.models

    return torchvision.models.list_models()


def load_class(spec):
    """The class named by module:Class or path/to/file.py:Class."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ExportError(f"'{spec}': expected a torchvision model name, module:Class or path/to/file.py:Class")
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise ExportError(f"'{spec}': no such file '{where}'")
        name = os.path.splitext(os.path.basename(where))[0]
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))  # its own imports
        mod_spec = importlib.util.spec_from_file_location(name, where)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:  # the user's file: any error it raises
            raise ExportError(f"'{where}' failed to import: {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise ExportError(f"'{spec}': cannot import module '{where}' ({e}); run from the directory that holds "
                              "it, set PYTHONPATH, or give path/to/file.py:Class") from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            modules = sorted(n for n, v in vars(module).items()
                             if isinstance(v, type) and issubclass(v, torch.nn.Module)
                             and v.__module__ == module.__name__)
            raise ExportError(f"'{spec}': '{where}' has no '{attr}'; its nn.Module classes: "
                              f"{', '.join(modules) or 'none'}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)) and not callable(obj):
        raise ExportError(f"'{spec}': {attr} is a {type(obj).__name__}, expected an nn.Module class or a function "
                          "returning one")
    # A model pickled by a script (torch.save(model) in __main__) names its
    # class __main__.<Name>: make it findable there too.
    main = sys.modules.get("__main__")
    if main is not None and isinstance(obj, type) and not hasattr(main, obj.__name__):
        setattr(main, obj.__name__, obj)
    return obj


def build_model(spec, kwargs, has_weights):
    """(model, torchvision name or None)."""
    if ":" not in spec:
        names = torchvision_names()
        if spec not in names:
            close = difflib.get_close_matches(spec.lower(), names, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ExportError(f"unknown torchvision model '{spec}'{hint}; expected one of torchvision 0.14's "
                              f"{len(names)} models (python3 -c 'import torchvision; print(torchvision.models."
                              "list_models())') or module:Class / path/to/file.py:Class for a model of your own")
        import torchvision.models

        if spec in ("googlenet", "inception_v3") and has_weights:
            # torchvision's builder sets this with its own weights (they
            # expect inputs normalised its way): the same for a .pth of them.
            kwargs.setdefault("transform_input", True)
        if spec in ("googlenet", "inception_v3"):
            kwargs.setdefault("init_weights", False)  # no scipy-based init when weights replace it
        if "weights_backbone" in inspect.signature(torchvision.models.get_model_builder(spec)).parameters:
            # segmentation and detection models: torchvision would download ImageNet backbone weights
            kwargs.setdefault("weights_backbone", None)
        try:
            return torchvision.models.get_model(spec, weights=None, **kwargs), spec
        except TypeError as e:
            raise ExportError(f"{spec}: {e} (check the --arg values)") from e
    cls = load_class(spec)
    try:
        model = cls(**kwargs)
    except Exception as e:  # the user's constructor
        raise ExportError(f"'{spec}' could not be constructed with {kwargs or 'no arguments'}: "
                          f"{type(e).__name__}: {e}; pass constructor arguments with --arg KEY=VALUE") from e
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"'{spec}' returned a {type(model).__name__}, expected a torch.nn.Module")
    return model, None


def apply_weights(model, path, strip_prefix="module."):
    """The model with the weights of `path` (a state dict or a whole model)."""
    if not os.path.isfile(path):
        raise ExportError(f"--weights {path}: no such file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch.load on a TorchScript archive says so
            obj = torch.load(path, map_location="cpu")
    except (AttributeError, ModuleNotFoundError) as e:
        raise ExportError(f"--weights {path}: is a pickled model whose class cannot be found ({e}); give that "
                          "class as MODEL (module:Class or path/to/file.py:Class) so it can be unpickled") from e
    except Exception as e:
        raise ExportError(f"--weights {path}: not a PyTorch weights file torch.load reads "
                          f"({type(e).__name__}: {first_line(e)})") from e
    if isinstance(obj, torch.jit.ScriptModule):
        raise ExportError(f"--weights {path}: is already a TorchScript module; give it to tracr directly "
                          f"(model: torchscript:{path})")
    if isinstance(obj, torch.nn.Module):
        return obj  # a whole pickled model: its own class and weights
    try:
        sd = extract_state_dict(obj)
    except SystemExit as e:
        raise ExportError(f"--weights {path}: {str(e).replace('error: ', '')}") from e
    if not isinstance(sd, dict):
        raise ExportError(f"--weights {path}: holds a {type(sd).__name__}, expected a state dict or a model")
    clean = {}
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            raise ExportError(f"--weights {path}: entry '{k}' is a {type(v).__name__}, not a tensor; expected a "
                              "state dict (name -> tensor)")
        clean[k[len(strip_prefix):] if strip_prefix and k.startswith(strip_prefix) else k] = v
    own = model.state_dict()
    problems = [f"missing {k} {list(v.shape)}" for k, v in own.items() if k not in clean]
    problems += [f"unexpected {k} {list(v.shape)}" for k, v in clean.items() if k not in own]
    problems += [f"mis-shaped {k}: {list(clean[k].shape)}, the model has {list(v.shape)}"
                 for k, v in own.items() if k in clean and clean[k].shape != v.shape]
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ExportError(f"--weights {path} does not fit the model ({len(problems)} problem"
                          f"{'s' if len(problems) > 1 else ''}; a different "
                          "architecture or num_classes? set it with --arg num_classes=N):\n  " +
                          "\n  ".join(problems[:20]) + more)
    model.load_state_dict(clean, strict=True)
    return model


# ------------------------------------------------------------------- preset

def torchvision_preset(name, preset):
    """The weights enum entry and its ImageClassification transforms, or (None, None)."""
    import torchvision.models
    from torchvision.transforms._presets import ImageClassification

    try:
        enum = torchvision.models.get_model_weights(name)
    except (ValueError, KeyError):
        return None, None
    if preset:
        if preset not in enum.__members__:
            raise ExportError(f"--preset {preset}: {enum.__name__} has {', '.join(enum.__members__)}")
        w = enum[preset]
    else:
        w = enum.DEFAULT
    t = w.transforms()
    return (w, t) if isinstance(t, ImageClassification) else (w, None)


def preset_yaml(weights, t, shape):
    """The experiment settings for transforms `t` at input `shape` (C, H, W)."""
    crop, resize = t.crop_size[0], t.resize_size[0]
    note = ""
    if shape[1] != crop or shape[2] != crop:
        # Traced at another size: the same resize / crop ratio.
        resize = int(round(min(shape[1], shape[2]) * t.resize_size[0] / crop))
        note = (f"# traced at {shape[1]}x{shape[2]}, not the preset's crop {crop}: resize_size scaled from "
                f"{t.resize_size[0]} in the same ratio\n")
    fmt = lambda v: "[" + ", ".join(f"{x:g}" for x in v) + "]"  # noqa: E731
    return (f"# torchvision 0.14 {weights.__class__.__name__}.{weights.name}: the preprocessing these weights "
            "expect\n# (read from its transforms()). For dataset.type: imagefolder; copy into the experiment.\n"
            f"{note}"
            f"input_size: {fmt(shape)}\n"
            "dataset:\n"
            f"  resize_size: {resize}\n"
            f"  interpolation: {t.interpolation.value}\n"
            f"  mean: {fmt(t.mean)}\n"
            f"  std: {fmt(t.std)}\n")


# ------------------------------------------------------------------ tracing

def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def flat_outputs(out, where="output"):
    """The tensors of a model's output (a tensor, tuples/lists of them, or a dict of them by string key,
    as torchvision's segmentation models return: tracr names each output by its key)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_outputs(o, where)]
    if isinstance(out, dict) and all(isinstance(k, str) for k in out):
        return [t for o in out.values() for t in flat_outputs(o, where)]
    raise ExportError(f"the model's {where} is a {type(out).__name__}; tracr takes tensors, tuples/lists of "
                      "them and dicts of them by string key (wrap the model so forward returns those)")


def trace(model, x, label):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            with torch.no_grad():
                eager = model(x)
            flat_outputs(eager)
            # strict=False: a dict output (torchvision's segmentation models) is traced as one
            traced = torch.jit.trace(model, x, check_trace=False, strict=not isinstance(eager, dict))
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(
                f"torch.jit.trace failed for {label} at input {list(x.shape)}: {type(e).__name__}: {first_line(e)}\n"
                "  Tracing runs forward once on an example tensor and records the tensor operations it performed: "
                "forward must take one tensor (the input shape must be one the model accepts) and return tensors "
                "or tuples/lists of them; branches on tensor values (data-dependent control flow) are removed, "
                "the trace keeps the path taken. Wrap the model, or script it with torch.jit.script.") from e
    notes = {}  # first line and where -> count, in order
    for w in caught:
        if issubclass(w.category, torch.jit.TracerWarning):
            key = f"{str(w.message).splitlines()[0]} ({w.filename}:{w.lineno})"
            notes[key] = notes.get(key, 0) + 1
    return traced, eager, [k + (f" [{n} times]" if n > 1 else "") for k, n in notes.items()]


def check_other_inputs(model, traced, shape, seed, label):
    """Runs both on other inputs (one random, its negation scaled): a frozen
    branch on a tensor value shows up as a difference."""
    g = torch.Generator().manual_seed(seed + 1000)
    x2 = torch.randn(1, *shape, generator=g)
    for x in (x2, -4 * x2):
        check_input(model, traced, x, label)


def check_input(model, traced, x, label):
    with torch.no_grad():
        want = flat_outputs(model(x))
        got = flat_outputs(traced(x))
    if len(want) != len(got):
        raise ExportError(f"{label}: the trace returns {len(got)} tensors on another input, the model {len(want)}: "
                          "tracing removed data-dependent control flow; the trace is one path")
    for i, (a, b) in enumerate(zip(want, got)):
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
            diff = (a - b).abs().max().item() if a.shape == b.shape else f"shapes {list(a.shape)} vs {list(b.shape)}"
            raise ExportError(f"{label}: output {i} of the trace differs from the model's on another input "
                              f"(max difference {diff}): forward branches on tensor values and tracing keeps only "
                              "the path the example took; make the branch static or use torch.jit.script")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", metavar="MODEL", help="torchvision name, module:Class or path/to/file.py:Class")
    ap.add_argument("out", metavar="OUT.pt", help="TorchScript file to write")
    ap.add_argument("--weights", help="state dict / checkpoint / whole pickled model (.pth)")
    ap.add_argument("--input-shape", help="one sample's shape without the batch, e.g. 3,224,224 or 4 or 16,64")
    ap.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                    help="constructor argument (repeatable), e.g. num_classes=10")
    ap.add_argument("--preset", help="torchvision weights enum entry for the preset, e.g. IMAGENET1K_V1 "
                    "(default: the enum's DEFAULT)")
    ap.add_argument("--batch", type=int, default=1, help="batch of the example input (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the example input and of random init")
    ap.add_argument("--reference", metavar="REF.pt", help="also write {input, output.<i>} for the example input")
    a = ap.parse_args(argv)
    try:
        torch.manual_seed(a.seed)
        kwargs = parse_args_kv(a.arg)
        shape = parse_shape(a.input_shape) if a.input_shape else None
        model, tv_name = build_model(a.model, kwargs, bool(a.weights))
        if a.weights:
            model = apply_weights(model, a.weights)
        model.eval()
        weights, preset = torchvision_preset(tv_name, a.preset) if tv_name else (None, None)
        if shape is None:
            if preset is None:
                raise ExportError(f"{a.model}: no default input shape; give --input-shape (e.g. 3,224,224, or 4 "
                                  "for four features)")
            shape = [3, preset.crop_size[0], preset.crop_size[0]]
        g = torch.Generator().manual_seed(a.seed)
        x = torch.randn(a.batch, *shape, generator=g)
        traced, eager, notes = trace(model, x, a.model)
        for n in notes:
            print(f"warning: tracing records one path; data-dependent control flow is removed: {n}", file=sys.stderr)
        check_other_inputs(model, traced, shape, a.seed, a.model)
        # The size it was traced at, for tracr's default input (an experiment without input_size,
        # `tracrctl profile` without --input-shape): a file inside the archive, ignored by PyTorch.
        traced.save(a.out, _extra_files={"tracr/input_shape": ",".join(map(str, shape))})
        print(f"wrote {a.out} ({a.model}, input [{', '.join(map(str, shape))}], "
              f"{sum(p.numel() for p in model.parameters())} parameters, "
              f"{'weights ' + a.weights if a.weights else 'random weights'})")
        if a.reference:
            d = {"input": x}
            for i, o in enumerate(flat_outputs(eager)):
                d[f"output.{i}"] = o.contiguous()
            torch.save(d, a.reference)
            print(f"wrote {a.reference}")
        if preset is not None and len(shape) == 3:
            base = a.out[:-3] if a.out.endswith(".pt") else a.out
            text = preset_yaml(weights, preset, shape)
            with open(base + ".preset.yaml", "w") as f:
                f.write(text)
            print(f"wrote {base}.preset.yaml:\n{text}", end="")
        return 0
    except ExportError as e:
        print(f"export_model.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
