"""The wheel's smoke test, as a user without a Rust toolchain runs it.

`crates/python/test.sh` runs it in a fresh virtualenv holding the wheel and Pillow (to write
and check the images) and nothing else, on a PATH without cargo, cmake or nasm:

    python smoke.py LOADER_BINARY

LOADER_BINARY is `loader`, which serves the images over S3 (`loader serve s3`, a real
socket). A batch must hold PIL's pixels exactly: Pillow decodes JPEGs with libjpeg-turbo, so
equality says the wheel has libjpeg-turbo linked in (zune-jpeg's pixels differ a little).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy
from PIL import Image

import loader_ml


def write_images(root: Path) -> dict[str, int]:
    """Twelve JPEGs in three classes, written by PIL; their keys and labels."""
    labels = {}
    rng = numpy.random.default_rng(7)
    for label in range(3):
        for i in range(4):
            pixels = rng.integers(0, 255, (40, 56, 3), dtype=numpy.uint8)
            key = f"class_{label}/img_{i}.jpg"
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="JPEG", quality=90)
            (root / key).write_bytes(out.getvalue())
            labels[key] = label
    return labels


def serve(binary: str, root: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """`loader serve s3 ROOT` and the storage options that reach it; its first lines are read
    on a thread, so a server that never speaks fails the smoke test after 60 s."""
    server = subprocess.Popen([binary, "serve", "s3", str(root)], stdout=subprocess.PIPE,
                              text=True)
    said: dict[str, str] = {}

    def read() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("press Ctrl-C"):
                return
            name, _, value = line.rstrip("\n").partition(": ")
            said[name] = value

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if "endpoint" not in said or reader.is_alive():
        server.kill()
        raise SystemExit(f"smoke: the S3 server did not start: {said}")
    return server, {"aws_endpoint": said["endpoint"], "aws_access_key_id": said["access key"],
                    "aws_secret_access_key": said["secret key"], "aws_region": "us-east-1"}


def main() -> None:
    binary = sys.argv[1]
    found = [tool for tool in ("cargo", "cmake", "nasm") if shutil.which(tool)]
    assert not found, f"smoke: the PATH must not have {found}"
    package = Path(loader_ml.__file__).resolve()
    assert "site-packages" in package.parts, f"smoke: loader_ml came from {package}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        labels = write_images(root / "images")
        server, options = serve(binary, root)
        try:
            loader = loader_ml.DataLoader("s3://images", batch_size=12, output="numpy",
                                          storage_options=options)
            batches = list(loader)
        finally:
            server.terminate()
            server.wait(timeout=10)
        assert len(batches) == 1, len(batches)
        batch = batches[0]
        assert sorted(batch.keys) == sorted(labels), batch.keys
        for key, pixels, label in zip(batch.keys, batch.images, batch.labels.tolist(),
                                      strict=True):
            reference = numpy.asarray(Image.open(root / "images" / key).convert("RGB"))
            assert numpy.array_equal(pixels, reference), f"smoke: {key}'s pixels differ from PIL's"
            assert label == labels[key], key
    print(f"smoke: loader_ml {loader_ml.__version__} from {package.parent}: 12 images over S3, "
          "pixels equal to PIL's")


if __name__ == "__main__":
    main()
