"""Train a small torchvision model on images served over S3 with 50 ms of latency.

    pip install ./crates/python torch torchvision pillow
    cargo build --release -p loader-cli
    python examples/python/train.py [--steps 40] [--rtt 50]

Writes a small learnable dataset (JPEGs by PIL), serves it with `loader serve s3 --rtt 50`
(an S3 server behind a delay proxy), and trains ResNet-18 on it with loader_ml's DataLoader
in a plain training loop (no torch.utils.data), printing the loss and the share of each step
spent waiting for data. Point it at your own bucket with --url and --option KEY=VALUE.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy
import torch
import torchvision
from PIL import Image

import loader_ml

ROOT = Path(__file__).resolve().parents[2]


def target_directory() -> Path:
    """Where cargo builds this workspace (`CARGO_TARGET_DIR` and configs included)."""
    try:
        out = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT,
            check=True, capture_output=True, text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ROOT / "target"
    return Path(json.loads(out)["target_directory"])


def loader_binary() -> str:
    given = os.environ.get("LOADER_BIN_DIR")
    bases = [Path(given)] if given else [target_directory() / b for b in ("release", "debug")]
    for base in bases:
        path = base / "loader"
        if path.exists():
            return str(path)
    found = shutil.which("loader")
    if found is None:
        raise SystemExit("build the CLI first: cargo build --release -p loader-cli")
    return found


def write_dataset(folder: Path, images: int, classes: int) -> None:
    """An ImageFolder of JPEGs (written by PIL) whose classes a model can learn: each class
    has its own hue, under noise, at a random place and size."""
    rng = numpy.random.default_rng(0)
    for i in range(images):
        label = i % classes
        pixels = rng.integers(0, 120, (64, 64, 3), dtype=numpy.uint8)
        size = int(rng.integers(24, 48))
        y, x = rng.integers(0, 64 - size, 2)
        pixels[y:y + size, x:x + size, label % 3] = 255 if label < 3 else 160
        path = folder / f"class_{label}" / f"img_{i:05}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path, quality=90)


def serve_folder(binary: str, root: Path, rtt_ms: int) -> tuple[subprocess.Popen[str],
                                                                 dict[str, str]]:
    """`loader serve s3 ROOT --rtt` (each folder of ROOT a bucket); returns the server and
    the store's options."""
    server = subprocess.Popen([binary, "serve", "s3", str(root), "--rtt", str(rtt_ms)],
                              stdout=subprocess.PIPE, text=True)
    info: dict[str, str] = {}
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("press Ctrl-C"):
            break
        if ": " in line:
            key, value = line.rstrip("\n").split(": ", 1)
            info[key] = value
    options = {"aws_endpoint": info["endpoint"], "aws_access_key_id": info["access key"],
               "aws_secret_access_key": info["secret key"], "aws_region": "us-east-1"}
    return server, options


def serve(rtt_ms: int, images: int) -> tuple[subprocess.Popen[str], dict[str, str], str]:
    """A generated dataset behind `loader serve s3 --rtt`; returns the server, the store's
    options and the dataset URL."""
    root = Path(tempfile.mkdtemp(prefix="loader-train-"))
    write_dataset(root / "train", images, classes=4)
    server, options = serve_folder(loader_binary(), root, rtt_ms)
    return server, options, "s3://train"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rtt", type=int, default=50, help="ms of latency in front of S3")
    parser.add_argument("--url", help="your own dataset instead of the generated one")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    server = None
    if args.url:
        url, options = args.url, dict(o.split("=", 1) for o in args.option)
    else:
        server, options, url = serve(args.rtt, images=max(256, args.steps * args.batch_size // 4))
    try:
        torch.manual_seed(0)
        loader = loader_ml.DataLoader(
            url, batch_size=args.batch_size, shuffle=True, seed=0, storage_options=options,
            transform=[("RandomResizedCrop", 48), ("RandomHorizontalFlip", 0.5), "ToTensor",
                       ("Normalize", [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])],
        )
        classes = len(loader.dataset.classes)
        model = torchvision.models.resnet18(num_classes=classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        print(f"{len(loader.dataset)} images, {classes} classes at {loader.dataset.backend}")
        step, waited, started = 0, 0.0, time.perf_counter()
        epoch = 0
        while step < args.steps:
            loader.set_epoch(epoch)
            before = time.perf_counter()
            for images, labels in loader:
                waited += time.perf_counter() - before
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step % 10 == 0 or step == 1:
                    print(f"step {step:4}  epoch {epoch}  loss {loss.item():.3f}")
                if step == args.steps:
                    break
                before = time.perf_counter()
            epoch += 1
        total = time.perf_counter() - started
        print(f"{step} steps in {total:.1f} s; waiting for data: {100 * waited / total:.1f}% "
              f"of the time")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    main()
