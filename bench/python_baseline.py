#!/usr/bin/python3
"""The Python tracr pipeline, as a baseline for `tracrctl bench protocol`.

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision,
python3-blosc, python3-numpy); nothing from pip.

  python_baseline.py activations OUT_DIR
      Writes real post-ReLU activations as raw little-endian float32:
      OUT_DIR/act_<bytes>.f32 with OUT_DIR/act_<bytes>.shape ("1,64,55,55").
      Input: the first Fashion-MNIST test image (Debian's
      dataset-fashion-mnist), scaled to 224x224, grey to RGB, normalised;
      models from torchvision with torch.manual_seed(0) weights:
        36,864 B    AlexNet features[:13] (pool5 after the last ReLU), 256x6x6
        774,400 B   AlexNet conv1 + ReLU, 64x55x55
        3,211,264 B ResNet-18 conv1 + bn1 + ReLU (eval), 64x112x112
  python_baseline.py baseline DIR [--reps N] [--warmup N]
      For each DIR/act_*.f32, the Python tracr round trip over loopback TCP
      between two processes: the client pickles (tensor, original_size)
      with the highest protocol and compresses it with blosc zstd level 3,
      byte shuffle (python-blosc's defaults otherwise: typesize 8, its
      default thread count), then sends a 4-byte split index, a 4-byte
      length and the data; the server receives it in chunks, decompresses,
      unpickles, and answers with its compressed pickled result behind a
      4-byte length (here a small dict, as tracr's echo server answers with
      its measurements). Prints a line "info,<versions>", then one CSV line per size:
        python,<bytes>,<rtt_median_us>,<rtt_p95_us>,<wire_bytes>,<enc_us>,<dec_us>
      enc_us/dec_us: the client's pickle+compress and the server's
      decompress+unpickle, medians.
"""
import argparse
import gzip
import os
import pickle
import socket
import statistics
import struct
import sys
import time
from multiprocessing import Process

import blosc
import numpy as np
import torch

LENGTH_PREFIX_SIZE = 4
CHUNK_SIZE = 4096  # Python tracr's receive chunk
FMNIST = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def compress_data(data):
    serialized = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    return blosc.compress(serialized, clevel=3, shuffle=blosc.SHUFFLE, cname="zstd")


def decompress_data(data):
    return pickle.loads(blosc.decompress(data))


def recv_exact(conn, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = conn.recv_into(view[got:], min(n - got, CHUNK_SIZE) if n <= CHUNK_SIZE else n - got)
        if r == 0:
            raise ConnectionError("peer closed")
        got += r
    return bytes(buf)


def serve(listener):
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        try:
            hdr = recv_exact(conn, 2 * LENGTH_PREFIX_SIZE)
        except ConnectionError:
            return
        split = int.from_bytes(hdr[:4], "big")
        n = int.from_bytes(hdr[4:], "big")
        payload = recv_exact(conn, n)
        t0 = time.perf_counter_ns()
        tensor, original_size = decompress_data(payload)
        dec_ns = time.perf_counter_ns() - t0
        result = {"split": split, "shape": tuple(tensor.shape), "size": original_size, "dec_ns": dec_ns}
        out = compress_data(result)
        conn.sendall(len(out).to_bytes(LENGTH_PREFIX_SIZE, "big"))
        conn.sendall(out)


def read_fmnist_first():
    with gzip.open(FMNIST, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            raise SystemExit(f"{FMNIST}: not an idx3 image file")
        img = np.frombuffer(f.read(rows * cols), dtype=np.uint8).reshape(1, 1, rows, cols)
    x = torch.from_numpy(img.astype(np.float32) / 255.0)
    x = torch.nn.functional.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False)
    x = x.repeat(1, 3, 1, 1)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (x - mean) / std


def activations(out_dir):
    import torchvision

    os.makedirs(out_dir, exist_ok=True)
    x = read_fmnist_first()
    torch.manual_seed(0)
    alex = torchvision.models.alexnet().eval()
    torch.manual_seed(0)
    res = torchvision.models.resnet18().eval()
    with torch.no_grad():
        acts = [alex.features[:13](x), alex.features[:2](x), res.relu(res.bn1(res.conv1(x)))]
    for a in acts:
        a = a.contiguous()
        nbytes = a.numel() * 4
        base = os.path.join(out_dir, f"act_{nbytes}")
        a.numpy().astype("<f4").tofile(base + ".f32")
        with open(base + ".shape", "w") as f:
            f.write(",".join(str(d) for d in a.shape) + "\n")
        zeros = float((a == 0).float().mean())
        print(f"{base}.f32 {tuple(a.shape)} zeros={zeros:.3f}", file=sys.stderr)


def baseline(d, reps, warmup):
    files = sorted((f for f in os.listdir(d) if f.startswith("act_") and f.endswith(".f32")),
                   key=lambda f: int(f[4:-4]))
    if not files:
        raise SystemExit(f"{d}: no act_*.f32 files (run 'activations' first)")
    print(f"info,python-blosc {blosc.__version__} (c-blosc {blosc.blosclib_version.split()[0]}) with "
          f"{blosc.nthreads} threads,torch {torch.__version__},numpy {np.__version__}", flush=True)
    for name in files:
        base = os.path.join(d, name[:-4])
        with open(base + ".shape") as f:
            shape = [int(s) for s in f.read().strip().split(",")]
        tensor = torch.from_numpy(np.fromfile(base + ".f32", dtype="<f4").reshape(shape))
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        server = Process(target=serve, args=(listener,), daemon=True)
        server.start()
        sock = socket.create_connection(listener.getsockname())
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts, encs, decs = [], [], []
        wire = 0
        for i in range(warmup + reps):
            t0 = time.perf_counter_ns()
            data = compress_data((tensor, (224, 224)))
            t1 = time.perf_counter_ns()
            sock.sendall((3).to_bytes(LENGTH_PREFIX_SIZE, "big") + len(data).to_bytes(LENGTH_PREFIX_SIZE, "big"))
            sock.sendall(data)
            n = int.from_bytes(recv_exact(sock, LENGTH_PREFIX_SIZE), "big")
            result = decompress_data(recv_exact(sock, n))
            t2 = time.perf_counter_ns()
            if result["shape"] != tuple(shape):
                raise SystemExit(f"server decoded shape {result['shape']}, sent {tuple(shape)}")
            if i >= warmup:
                rtts.append((t2 - t0) / 1e3)
                encs.append((t1 - t0) / 1e3)
                decs.append(result["dec_ns"] / 1e3)
            wire = len(data)
        sock.close()
        server.join(5)
        listener.close()
        rtts.sort()
        p95 = rtts[min(len(rtts) - 1, int(0.95 * len(rtts)))]
        print(f"python,{tensor.numel() * 4},{statistics.median(rtts):.1f},{p95:.1f},{wire},"
              f"{statistics.median(encs):.1f},{statistics.median(decs):.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("activations")
    a.add_argument("out_dir")
    b = sub.add_parser("baseline")
    b.add_argument("dir")
    b.add_argument("--reps", type=int, default=100)
    b.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    if args.cmd == "activations":
        activations(args.out_dir)
    else:
        baseline(args.dir, args.reps, args.warmup)


if __name__ == "__main__":
    main()
