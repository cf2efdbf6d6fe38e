#!/usr/bin/env python3
"""PyTorch's DataLoader on the same S3 objects as `loader bench`, for a side-by-side run.

Variants:
  vanilla   map-style dataset, one boto3 GET + PIL decode + torchvision transforms per
            __getitem__, num_workers = cores (the paper's baseline);
  threaded  the paper's concurrent variant: __getitems__ fetches a batch's items on a pool
            of 16 threads inside each worker.

Prints one JSON object with images/s and CPU time per image.
"""
import argparse
import io
import json
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import torch
from botocore.config import Config
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

TRANSFORM = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])


class S3ImageFolder(Dataset):
    def __init__(self, endpoint, access_key, secret_key, bucket, threads):
        self.args = (endpoint, access_key, secret_key)
        self.bucket = bucket
        self.threads = threads
        self._client = None
        self._pool = None
        keys = []
        paginator = self.client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket):
            keys.extend(o["Key"] for o in page.get("Contents", []) if "/" in o["Key"])
        keys.sort()
        classes = sorted({k.split("/", 1)[0] for k in keys})
        index = {c: i for i, c in enumerate(classes)}
        self.items = [(k, index[k.split("/", 1)[0]]) for k in keys]
        self._client = None  # each worker makes its own (clients do not pickle)

    def client(self):
        if self._client is None:
            endpoint, key, secret = self.args
            self._client = boto3.client(
                "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                region_name="us-east-1",
                config=Config(max_pool_connections=64, s3={"addressing_style": "path"}),
            )
        return self._client

    def __len__(self):
        return len(self.items)

    def load(self, i):
        key, label = self.items[i]
        body = self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return TRANSFORM(Image.open(io.BytesIO(body)).convert("RGB")), label

    def __getitem__(self, i):
        return self.load(i)


class ThreadedS3ImageFolder(S3ImageFolder):
    def __getitems__(self, indices):
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads)
        return list(self._pool.map(self.load, indices))


def cpu_seconds(iterator):
    """User + system CPU of this process and of the loader's live worker processes
    (RUSAGE_CHILDREN would count workers only once they have exited)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for worker in getattr(iterator, "_workers", []):
        try:
            with open(f"/proc/{worker.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key", required=True)
    p.add_argument("--bucket", default="bench")
    p.add_argument("--variant", choices=["vanilla", "threaded"], default="vanilla")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--max-images", type=int, default=1000)
    a = p.parse_args()
    torch.set_num_threads(1)
    cls = ThreadedS3ImageFolder if a.variant == "threaded" else S3ImageFolder
    dataset = cls(a.endpoint, a.access_key, a.secret_key, a.bucket, a.threads)
    loader = DataLoader(dataset, batch_size=a.batch_size, num_workers=a.workers, persistent_workers=False)
    # As `loader bench`: the clock starts after a warm-up (workers started, prefetch filled).
    iterator = iter(loader)
    begun, clock, images = time.perf_counter(), None, 0
    for x, _ in iterator:
        if clock is None:
            if time.perf_counter() - begun >= a.warmup:
                clock = (time.perf_counter(), cpu_seconds(iterator))
            continue
        images += x.shape[0]
        if images >= a.max_images or time.perf_counter() - clock[0] >= a.seconds:
            break
    seconds = time.perf_counter() - clock[0]
    used = cpu_seconds(iterator) - clock[1]
    print(json.dumps({
        "system": "pytorch " + a.variant,
        "workers": a.workers,
        "images": images,
        "seconds": seconds,
        "images_per_sec": images / seconds,
        "cpu_ms_per_image": 1e3 * used / max(images, 1),
    }))


if __name__ == "__main__":
    main()
