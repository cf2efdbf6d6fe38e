#!/usr/bin/env python3
"""The Python package (loader_ml) on the same S3 objects as `loader bench`, with the same
settings as its `async` cell (batch 64, 128 requests in flight, a decode thread per core,
4 batches of prefetch, the ImageNet evaluation transform), timed the same way: the clock
starts after a warm-up. Batches arrive as torch tensors.

  --transform python   the same evaluation transform as a Python callable (torchvision's
                       functional ops on a tensor), run on the decode threads under the GIL;
  --transform crop     decoding natively, then a callable returning a 224 x 224 slice of
                       its input (a view): the per-call cost of a Python transform alone;
  --transform none     decoding and CenterCrop(224) natively, uint8 images (what `crop` is
                       set against).

Prints one JSON object with images/s and CPU time per image.
"""
import argparse
import json
import os
import resource
import time

import torch
from torchvision.transforms import functional as F

import loader_ml

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def eval_in_python(image):
    """torchvision's Resize(256), CenterCrop(224), ToTensor, Normalize, on a HWC uint8 array."""
    x = torch.from_numpy(image).permute(2, 0, 1)
    x = F.resize(x, 256, antialias=True)
    x = F.center_crop(x, 224)
    return F.normalize(x.float().div_(255), MEAN, STD).numpy()


TRANSFORMS = {
    "native": "imagenet_eval",
    "python": eval_in_python,
    "crop": lambda image: image[:224, :224],
    "none": [("CenterCrop", 224)],
}


def cpu_seconds():
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="s3://bench")
    p.add_argument("--endpoint")
    p.add_argument("--access-key")
    p.add_argument("--secret-key")
    p.add_argument("--transform", choices=list(TRANSFORMS), default="native")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-in-flight", type=int, default=128)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--max-images", type=int, default=3000)
    a = p.parse_args()
    torch.set_num_threads(1)
    options = None
    if a.endpoint:
        options = {"aws_endpoint": a.endpoint, "aws_access_key_id": a.access_key,
                   "aws_secret_access_key": a.secret_key, "aws_region": "us-east-1"}
    loader = loader_ml.DataLoader(a.url, batch_size=a.batch_size, shuffle=True,
                                  transform=TRANSFORMS[a.transform], storage_options=options,
                                  max_in_flight=a.max_in_flight, prefetch_factor=4)
    begun, clock, images = time.perf_counter(), None, 0
    done = False
    while not done:
        for images_batch, _ in loader:
            if clock is None:
                if time.perf_counter() - begun >= a.warmup:
                    clock = (time.perf_counter(), cpu_seconds())
                continue
            images += images_batch.shape[0]
            if images >= a.max_images or time.perf_counter() - clock[0] >= a.seconds:
                done = True
                break
    seconds = time.perf_counter() - clock[0]
    used = cpu_seconds() - clock[1]
    suffix = "" if a.transform == "native" else f" ({a.transform} transform)"
    print(json.dumps({
        "system": "loader-ml python" + suffix,
        "images": images,
        "seconds": seconds,
        "images_per_sec": images / seconds,
        "cpu_ms_per_image": 1e3 * used / max(images, 1),
        "cores": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
