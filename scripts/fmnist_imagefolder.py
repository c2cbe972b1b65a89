#!/usr/bin/python3
"""Write Fashion-MNIST images as an image folder with class subfolders.

A labelled image folder from Debian's own data (dataset-fashion-mnist), for
trying `dataset.type: imagefolder` end to end: every image is a real
Fashion-MNIST test (or training) image saved as an 8-bit grayscale PNG, in a
subfolder named after its class. The subfolders are numbered ("0_T-shirt_top",
"1_Trouser", ...) so that their sorted order, which is how an image folder
numbers its classes, is Fashion-MNIST's own label order: a model trained on
Fashion-MNIST (fmnist_cnn) keeps its meaning.

  /usr/bin/python3 scripts/fmnist_imagefolder.py results/fmnist_images --per-class 20

Needs Debian's python3-numpy and python3-pil (scripts/setup.sh installs them).
"""
import argparse
import gzip
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(path, magic, header_ints):
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit(f"fmnist_imagefolder: cannot read {path}: {e}")
    head = np.frombuffer(data[:4 * (1 + header_ints)], dtype=">u4")
    if head[0] != magic:
        sys.exit(f"fmnist_imagefolder: {path}: not an IDX file (magic {head[0]:#x}, expected {magic:#x})")
    return head[1:], np.frombuffer(data[4 * (1 + header_ints):], dtype=np.uint8)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the image folder to write (created; existing files are replaced)")
    p.add_argument("--per-class", type=int, default=20, help="images per class (default 20)")
    p.add_argument("--split", choices=["test", "train"], default="test")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="the IDX files' directory")
    a = p.parse_args()
    if a.per_class <= 0:
        sys.exit("fmnist_imagefolder: --per-class: expected a count > 0")
    prefix = "t10k" if a.split == "test" else "train"
    (n, h, w), pixels = read_idx(os.path.join(a.data, f"{prefix}-images-idx3-ubyte.gz"), 2051, 3)
    (nl,), labels = read_idx(os.path.join(a.data, f"{prefix}-labels-idx1-ubyte.gz"), 2049, 1)
    if n != nl or pixels.size != n * h * w:
        sys.exit(f"fmnist_imagefolder: {a.data}: {n} images but {nl} labels")
    images = pixels.reshape(n, h, w)
    written = [0] * len(CLASSES)
    for i in range(n):
        c = int(labels[i])
        if written[c] >= a.per_class:
            continue
        folder = os.path.join(a.out, f"{c}_{CLASSES[c].replace('/', '_').replace(' ', '_')}")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(images[i], mode="L").save(os.path.join(folder, f"{prefix}{i:05d}.png"))
        written[c] += 1
        if min(written) >= a.per_class:
            break
    print(f"wrote {sum(written)} {a.split} images in {len(CLASSES)} class folders under {a.out}")


if __name__ == "__main__":
    main()
