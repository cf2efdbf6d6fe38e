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
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

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


@contextlib.contextmanager
def dataset_url(args: argparse.Namespace,
                make: Callable[[Path], str]) -> Iterator[tuple[str, dict[str, str]]]:
    """The user's `--url` and `--option` settings, or the dataset `make(root)` writes under a
    temporary root (returning its URL), served by `loader serve s3 --rtt` until the block
    ends."""
    if args.url:
        yield args.url, dict(o.split("=", 1) for o in args.option)
        return
    root = Path(tempfile.mkdtemp(prefix="loader-train-"))
    url = make(root)
    server, options = serve_folder(loader_binary(), root, args.rtt)
    try:
        yield url, options
    finally:
        server.terminate()
        server.wait(timeout=10)


def train(loader: loader_ml.DataLoader, loss_of: Callable[[Any], torch.Tensor],
          optimizer: torch.optim.Optimizer, steps: int) -> None:
    """`steps` optimizer steps over `loader`'s epochs, `loss_of(batch)` the loss of one: the
    loss printed every 10 steps, then the share of the time spent waiting for data."""
    step, waited, started, epoch = 0, 0.0, time.perf_counter(), 0
    while step < steps:
        loader.set_epoch(epoch)
        before = time.perf_counter()
        for batch in loader:
            waited += time.perf_counter() - before
            loss = loss_of(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0 or step == 1:
                print(f"step {step:4}  epoch {epoch}  loss {loss.item():.3f}")
            if step == steps:
                break
            before = time.perf_counter()
        epoch += 1
    total = time.perf_counter() - started
    print(f"{step} steps in {total:.1f} s; waiting for data: {100 * waited / total:.1f}% "
          f"of the time")


def arguments(doc: str, steps: int, batch_size: int) -> argparse.ArgumentParser:
    """An example's command line: its steps and batch size, the latency of the generated
    dataset's server, or a dataset of the user's own and its store's options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--rtt", type=int, default=50, help="ms of latency in front of S3")
    parser.add_argument("--url", help="your own dataset instead of the generated one")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    return parser


def main() -> None:
    args = arguments(__doc__, steps=40, batch_size=32).parse_args()

    def make(root: Path) -> str:
        write_dataset(root / "train", max(256, args.steps * args.batch_size // 4), classes=4)
        return "s3://train"

    with dataset_url(args, make) as (url, options):
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
        train(loader, lambda batch: torch.nn.functional.cross_entropy(model(batch[0]), batch[1]),
              optimizer, args.steps)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    main()
