"""PIL + torchvision and torchvision.io.decode_jpeg on the same files as the `decoders`
criterion group, one core: decode and the ImageNet transforms, images/s per set.

    LOADER_PHOTOS=DIR python benches/peers/decode.py   # DIR from benches/scripts/photos.sh
"""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import v2

torch.set_num_threads(1)
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIL_PIPELINES = {
    "train": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(MEAN, STD)]),
    "eval": T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]),
}
TENSOR_PIPELINES = {
    "train": v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "eval": v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224),
                        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
}


def rate(files: list[bytes], one, seconds: float = 2.0) -> float:
    for b in files:
        one(b)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for b in files:
            one(b)
            n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    root = Path(os.environ.get("LOADER_PHOTOS") or sys.argv[1])
    print("| files | PIL decode | PIL + torchvision train | PIL + torchvision eval | "
          "decode_jpeg | decode_jpeg + v2 train | decode_jpeg + v2 eval |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in sorted(p for p in root.iterdir() if p.is_dir()):
        files = [f.read_bytes() for f in sorted(kind.iterdir())]
        pil = lambda b: Image.open(io.BytesIO(b)).convert("RGB")
        cells = [rate(files, lambda b: pil(b).load())]
        for name in ("train", "eval"):
            cells.append(rate(files, lambda b, p=PIL_PIPELINES[name]: p(pil(b))))
        tensor = lambda b: decode_jpeg(torch.frombuffer(bytearray(b), dtype=torch.uint8),
                                       mode=ImageReadMode.RGB)
        try:
            cells.append(rate(files, tensor))
            for name in ("train", "eval"):
                cells.append(rate(files, lambda b, p=TENSOR_PIPELINES[name]: p(tensor(b))))
        except RuntimeError as e:  # a layout decode_jpeg refuses
            cells += [float("nan")] * 3
            print(f"<!-- {kind.name}: decode_jpeg: {e} -->")
        shown = " | ".join(f"{c:,.0f}" if c >= 100 else f"{c:.1f}" for c in cells)
        print(f"| {kind.name} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
