#!/usr/bin/python3
"""A small CNN of your own, trained in Python on Fashion-MNIST (#44).

The "my model" of the early-exits walkthrough (README, "Early exits"): a
network tracr's zoo does not have (two residual stages), trained here with
Debian's python3-torch on Fashion-MNIST's training images, then exported
with scripts/export_model.py like any model of yours:

  /usr/bin/python3 scripts/small_cnn.py results/small_cnn.pth --epochs 2
  /usr/bin/python3 scripts/export_model.py scripts/small_cnn.py:SmallCNN results/small_cnn.pt \\
      --weights results/small_cnn.pth --input-shape 1,28,28

The images are normalised as tracr's image folder normalises them
(`dataset.mean: 0.2860`, `dataset.std: 0.3530`), so the exported model reads
scripts/fmnist_imagefolder.py's PNGs as it read the training set.
"""
import argparse
import gzip
import sys

import numpy as np
import torch
from torch import nn

MEAN, STD = 0.2860, 0.3530


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.out = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.out(y + self.down(x))


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stage1 = Block(16, 32, 2)   # 14 x 14
        self.stage2 = Block(32, 64, 2)   # 7 x 7
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.stage2(self.stage1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def read_idx(path, header_ints):
    with gzip.open(path, "rb") as f:
        data = f.read()
    return np.frombuffer(data[4 * (1 + header_ints):], dtype=np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the trained state dict (.pth), for export_model.py --weights")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    try:
        x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz", 3).reshape(-1, 1, 28, 28)
        y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz", 1)
        xt = read_idx(f"{a.data}/t10k-images-idx3-ubyte.gz", 3).reshape(-1, 1, 28, 28)
        yt = read_idx(f"{a.data}/t10k-labels-idx1-ubyte.gz", 1)
    except OSError as e:
        sys.exit(f"small_cnn: cannot read Fashion-MNIST under {a.data}: {e} (Debian: dataset-fashion-mnist)")
    norm = lambda v: (torch.from_numpy(v.astype(np.float32) / 255.0) - MEAN) / STD
    x, xt, y, yt = norm(x), norm(xt), torch.from_numpy(y.astype(np.int64)), torch.from_numpy(yt.astype(np.int64))
    m = SmallCNN()
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    for ep in range(a.epochs):
        m.train()
        order = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            idx = order[i:i + 128]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x[idx]), y[idx])
            loss.backward()
            opt.step()
        m.eval()
        with torch.no_grad():
            acc = sum((m(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item() for i in range(0, len(xt), 1000))
        print(f"epoch {ep + 1}: last loss {loss.item():.4f}, test accuracy {acc / len(xt):.4f}")
    torch.save(m.state_dict(), a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
