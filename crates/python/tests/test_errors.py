"""An exception per kind of failure, each naming the key, the backend and the cause."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy
import pytest

import loader_ml
from conftest import Server, jpeg


def test_not_found(s3, tmp_path: Path) -> None:
    with pytest.raises(loader_ml.NotFoundError) as caught:
        loader_ml.Dataset(str(tmp_path / "missing"))
    assert isinstance(caught.value, FileNotFoundError)
    assert "missing" in caught.value.backend and caught.value.cause
    with pytest.raises(loader_ml.NotFoundError) as caught:
        loader_ml.Dataset("s3://images", manifest="nope.csv", storage_options=s3.options)
    assert caught.value.key == "nope.csv" and caught.value.backend == "s3://images"


def test_permission_denied(s3) -> None:
    wrong = dict(s3.options, aws_secret_access_key="not-the-secret")
    with pytest.raises(loader_ml.PermissionDeniedError) as caught:
        loader_ml.Dataset("s3://images", storage_options=wrong)
    assert isinstance(caught.value, PermissionError)
    assert caught.value.backend == "s3://images"
    assert "not-the-secret" not in str(caught.value)


def test_transient_after_the_retries(data_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "buckets"
    shutil.copytree(data_root / "images", root / "images")
    server = Server(root)
    try:
        loader = loader_ml.DataLoader("s3://images", batch_size=4, max_retries=1,
                                      storage_options=server.options)
    finally:
        server.stop()  # listed; every read now meets a closed port
    with pytest.raises(loader_ml.TransientError) as caught:
        next(iter(loader))
    assert isinstance(caught.value, ConnectionError)
    assert caught.value.key.startswith("class_") and caught.value.backend == "s3://images"


def test_decode_error_names_the_sample(tmp_path: Path) -> None:
    folder = tmp_path / "ds" / "cat"
    folder.mkdir(parents=True)
    (folder / "good.jpg").write_bytes(jpeg(0, 0))
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    loader = loader_ml.DataLoader(str(tmp_path / "ds"), batch_size=2)
    with pytest.raises(loader_ml.DecodeError) as caught:
        next(iter(loader))
    assert caught.value.key == "cat/broken.jpg" and caught.value.cause
    skipping = loader_ml.DataLoader(str(tmp_path / "ds"), batch_size=2, skip_errors=1)
    batch = next(iter(skipping))
    assert batch.keys == ["cat/good.jpg"]
    assert [type(e) for e in batch.skipped] == [loader_ml.DecodeError]
    assert batch.skipped[0].key == "cat/broken.jpg"


def test_config_errors(data_root: Path) -> None:
    url = str(data_root / "images")
    for settings in (dict(batch_size=0), dict(transform="imagenet_tests"),
                     dict(transform=[("Resize", -3)]), dict(shard_order="sideways"),
                     dict(rank=3, world_size=2), dict(rank=1), dict(cache_dir="/tmp/x",
                                                                   cache_policy="mru")):
        with pytest.raises(loader_ml.ConfigError):
            loader_ml.DataLoader(url, **settings)
    with pytest.raises(ValueError):  # a ConfigError is a ValueError
        loader_ml.DataLoader(url, batch_size=0)


class Boom(Exception):
    pass


def test_a_raising_transform_is_skipped_or_raised(data_root: Path) -> None:
    def picky(image: numpy.ndarray) -> numpy.ndarray:
        if image[0, 0, 0] > 150:  # class 0 is red
            raise Boom("no red, please")
        return image

    url = str(data_root / "images")
    with pytest.raises(loader_ml.DecodeError) as caught:
        list(loader_ml.DataLoader(url, batch_size=4, transform=picky))
    assert isinstance(caught.value.__cause__, Boom)
    assert caught.value.key.startswith("class_0/")
    skipped, kept = [], []
    for batch in loader_ml.DataLoader(url, batch_size=4, transform=picky, skip_errors=8):
        skipped += batch.skipped
        kept += batch.keys
    assert len(skipped) == 8 and all(isinstance(e.__cause__, Boom) for e in skipped)
    assert sorted(e.key for e in skipped) == [f"class_0/img_{i:03}.jpg" for i in range(8)]
    assert len(kept) == 16 and not any(k.startswith("class_0/") for k in kept)
    with pytest.raises(loader_ml.DecodeError, match="3 dimensions"):
        next(iter(loader_ml.DataLoader(url, batch_size=2, transform=lambda im: im[0])))
