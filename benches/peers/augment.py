"""Augmentation side by side, one run, local disk (CPU-bound: what the augmentation costs):
the same torchvision v2 training pipeline with ColorJitter and RandAugment, run
(a) by torch's DataLoader over ImageFolder with num_workers=2,
(b) natively by loader_ml (the transform objects given as they are),
(c) by loader_ml with the pipeline as a Python callable on its decode threads.
Prints img/s and CPU ms per image (this process and its children) for each.

    python benches/peers/augment.py [--images 1200] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch
import torchvision
import torchvision.transforms.v2 as T
from PIL import Image

import loader_ml


def make_dataset(root: Path, n: int, photos: Path) -> None:
    """ImageNet-sized JPEGs (500x375, quality 90) cut from real photos, 10 classes."""
    if (root / ".complete").exists():
        return
    sources = [Image.open(p).convert("RGB") for p in sorted(photos.glob("*.png"))]
    rng = random.Random(0)
    for i in range(n):
        src = sources[i % len(sources)]
        scale = rng.uniform(1.0, 1.6)
        im = src.resize((int(src.width * scale), int(src.height * scale)), Image.BILINEAR)
        x, y = rng.randrange(max(1, im.width - 500)), rng.randrange(max(1, im.height - 375))
        im = im.crop((x, y, x + 500, y + 375))
        folder = root / f"c{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        im.save(folder / f"{i:05}.jpg", quality=90)
    (root / ".complete").touch()


def pipeline() -> T.Compose:
    return T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandAugment(),
        T.ToImage(), T.ToDtype(torch.float32, scale=True),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(name: str, make, images: int) -> dict:
    loader = make()
    it = iter(loader)
    next(it)  # warm: workers or threads started, first batch decoded
    start, c0, seen = time.perf_counter(), cpu(), 0
    for images_, _labels, *_ in it:
        seen += len(images_)
        if seen >= images:
            break
    wall = time.perf_counter() - start
    del it, loader  # torch's workers are joined: their CPU time is counted
    used = cpu() - c0
    return {"loader": name, "images": seen, "img_per_s": round(seen / wall, 1),
            "cpu_ms_per_image": round(1000 * used / seen, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/loader/augment-bench"))
    ap.add_argument("--photos", default=os.path.expanduser("~/.cache/loader/photos"))
    args = ap.parse_args()
    root = Path(args.root)
    make_dataset(root, args.images + 200, Path(args.photos))
    tf = pipeline()
    rows = [
        measure("torch DataLoader, num_workers=2", lambda: torch.utils.data.DataLoader(
            torchvision.datasets.ImageFolder(str(root), transform=tf), batch_size=64,
            shuffle=True, num_workers=2), args.images),
        measure("loader_ml, native", lambda: loader_ml.DataLoader(
            str(root), batch_size=64, shuffle=True, transform=tf), args.images),
        measure("loader_ml, Python callable", lambda: loader_ml.DataLoader(
            str(root), batch_size=64, shuffle=True,
            transform=lambda a: tf(Image.fromarray(a))), args.images),
    ]
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
