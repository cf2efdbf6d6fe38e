"""Iteration, output against the Rust loader and PIL, zero copy, resume."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy
import pytest
import torch
from PIL import Image

import loader_ml
from conftest import CLASSES, PER_CLASS

SAMPLES = CLASSES * PER_CLASS


def keys_of(loader: loader_ml.DataLoader) -> list[str]:
    return [k for batch in loader for k in batch.keys]


def test_a_dataset_is_inspectable(data_root: Path, s3) -> None:
    local = loader_ml.Dataset(str(data_root / "images"))
    remote = loader_ml.Dataset("s3://images", storage_options=s3.options)
    for ds in (local, remote):
        assert len(ds) == SAMPLES
        assert ds.classes == [f"class_{k}" for k in range(CLASSES)]
        assert ds[0] == ("class_0/img_000.jpg", 0)
        assert ds[-1] == (f"class_{CLASSES - 1}/img_{PER_CLASS - 1:03}.jpg", CLASSES - 1)
        with pytest.raises(IndexError):
            ds[SAMPLES]
    assert remote.backend == "s3://images"
    shards = loader_ml.Dataset("s3://shards", storage_options=s3.options)
    assert (len(shards), shards.num_shards, shards[0]) == (SAMPLES, 2, ("sample00000", 0))


def test_local_and_s3_deliver_the_same_batches(data_root: Path, s3) -> None:
    common = dict(batch_size=5, shuffle=True, seed=3, transform="imagenet_eval")
    local = loader_ml.DataLoader(str(data_root / "images"), **common)
    remote = loader_ml.DataLoader("s3://images", storage_options=s3.options, **common)
    assert len(local) == len(remote) == 5  # 24 samples: 4 x 5 + 4
    for a, b in zip(local, remote, strict=True):
        assert isinstance(a.images, torch.Tensor) and a.images.dtype == torch.float32
        assert a.labels.dtype == torch.int64
        assert a.keys == b.keys
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert a.images.shape == (4, 3, 224, 224)


@pytest.mark.parametrize("bucket", ["images", "shards"])
@pytest.mark.parametrize("transform", ["eval", "train", "none"])
def test_tensors_equal_the_rust_loaders(s3, rust_batches, bucket: str, transform: str) -> None:
    rust = rust_batches(f"s3://{bucket}", 7, 11, True, transform, s3.options)
    names = {"eval": "imagenet_eval", "train": "imagenet_train", "none": None}
    loader = loader_ml.DataLoader(f"s3://{bucket}", batch_size=7, shuffle=True, seed=11,
                                  transform=names[transform], storage_options=s3.options,
                                  output="numpy")
    ours = list(loader)
    assert len(ours) == len(rust) == 4
    for batch, (meta, values) in zip(ours, rust, strict=True):
        assert batch.keys == meta["keys"]
        assert batch.labels.tolist() == meta["labels"]
        assert list(batch.images.shape) == meta["shape"] and batch.images.dtype == meta["dtype"]
        assert batch.images.tobytes() == values


def test_pixels_match_pil(data_root: Path) -> None:
    """No transform: uint8 HWC, exactly as PIL decodes the same files (both decode JPEG
    with libjpeg-turbo)."""
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=6, output="numpy")
    for batch in loader:
        assert batch.images.dtype == numpy.uint8 and batch.images.shape[1:] == (40, 56, 3)
        for key, pixels in zip(batch.keys, batch.images):
            reference = numpy.asarray(Image.open(data_root / "images" / key).convert("RGB"))
            assert numpy.array_equal(pixels, reference), key


def test_torchvision_transforms_run_natively(data_root: Path) -> None:
    torchvision = pytest.importorskip("torchvision")
    T = torchvision.transforms
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    spec = T.Compose([T.Resize(48), T.CenterCrop(32), T.ToTensor(), T.Normalize(mean, std)])
    ours = loader_ml.DataLoader(str(data_root / "images"), batch_size=4, transform=spec)
    named = loader_ml.DataLoader(str(data_root / "images"), batch_size=4, transform=[
        ("Resize", 48), ("CenterCrop", 32), "ToTensor", ("Normalize", mean, std)])
    for a, b in zip(ours, named, strict=True):
        assert a.images.shape == (4, 3, 32, 32) and torch.equal(a.images, b.images)
    # The same steps in torchvision on PIL's decode: the same picture, up to the decoders'
    # and resizers' rounding.
    first = next(iter(loader_ml.DataLoader(str(data_root / "images"), batch_size=1,
                                           transform=spec)))
    reference = spec(Image.open(data_root / "images" / first.keys[0]).convert("RGB"))
    assert (first.images[0] - reference).abs().mean() < 0.05
    # A setting the native resize does not run (nearest) runs in torchvision itself.
    nearest = loader_ml.DataLoader(str(data_root / "images"), batch_size=1, transform=[
        T.Resize(48, interpolation=T.InterpolationMode.NEAREST)])
    assert [type(t).__name__ for t in nearest.python_tail.steps] == ["Resize"]


def test_batches_share_the_loaders_memory(data_root: Path) -> None:
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=4,
                                  transform="imagenet_eval")
    native = loader._native
    images, labels, *_ = native.next_batch()
    array = numpy.asarray(images)
    assert array.ctypes.data == images.data_ptr, "numpy views the batch buffer"
    tensor = torch.from_numpy(array)
    assert tensor.data_ptr() == images.data_ptr, "so does torch"
    assert numpy.asarray(labels).ctypes.data == labels.data_ptr
    assert array.flags["WRITEABLE"] and tensor.shape == (4, 3, 224, 224)
    # A tensor keeps its memory however long it lives, whatever the loader does meanwhile.
    kept, copy = tensor, tensor.clone()
    del images, array, tensor
    for _ in range(3):
        native.next_batch()
    assert torch.equal(kept, copy)
    # Let go of it, and the loader fills the same memory again (no fresh allocation).
    address = kept.data_ptr()
    del kept
    gc.collect()
    reused = []
    for _ in range(2):
        raw = native.next_batch()
        if raw is None:
            break
        reused.append(raw[0].data_ptr)
        del raw
    assert address in reused


def test_state_dict_resumes_exactly(s3) -> None:
    def make() -> loader_ml.DataLoader:
        return loader_ml.DataLoader("s3://shards", batch_size=3, shuffle=True, seed=5,
                                    storage_options=s3.options)

    whole = make()
    whole.set_epoch(1)
    expected = keys_of(whole)
    first = make()
    first.set_epoch(1)
    it = iter(first)
    before = [k for _ in range(3) for k in next(it).keys]
    state = first.state_dict()
    source = state["order"]["mixture"]["sources"][0]
    assert (state["epoch"], state["position"], source["samples"]) == (1, 9, SAMPLES)
    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # a training loop's own call continues the epoch
    after = keys_of(resumed)
    assert before + after == expected
    assert sorted(expected) == sorted(set(expected)) and len(expected) == SAMPLES
    assert resumed.state_dict()["epoch"] == 2
    mixture = dict(state["order"]["mixture"], sources=[dict(source, samples=99)])
    other = dict(state, order=dict(state["order"], mixture=mixture))
    with pytest.raises(loader_ml.ConfigError, match="other dataset .99 samples"):
        make().load_state_dict(other)
    # A state_dict of the earlier form (no order, the dataset's size) is still checked.
    with pytest.raises(loader_ml.ConfigError, match="this loader.s has 24"):
        make().load_state_dict({"epoch": 0, "position": 0, "num_samples": 99})


def test_epochs_len_and_numpy_output(data_root: Path) -> None:
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=5, shuffle=True,
                                  drop_last=True, output="numpy")
    assert len(loader) == SAMPLES // 5
    epochs = [keys_of(loader) for _ in range(2)]
    assert all(len(e) == 20 for e in epochs) and epochs[0] != epochs[1]
    loader.set_epoch(0)
    assert keys_of(loader) == epochs[0]
    batch = next(iter(loader))
    images, labels = batch
    assert isinstance(images, numpy.ndarray) and labels.dtype == numpy.int64


def test_a_python_transform_runs_per_sample(data_root: Path) -> None:
    def flip_to_chw(image: numpy.ndarray) -> numpy.ndarray:
        assert image.dtype == numpy.uint8 and image.shape == (40, 56, 3)
        return image[:, ::-1].transpose(2, 0, 1) / 255.0  # float64 becomes float32

    plain = loader_ml.DataLoader(str(data_root / "images"), batch_size=8, output="numpy")
    custom = loader_ml.DataLoader(str(data_root / "images"), batch_size=8,
                                  transform=flip_to_chw, output="numpy")
    for a, b in zip(plain, custom, strict=True):
        assert b.images.dtype == numpy.float32 and b.images.shape == (8, 3, 40, 56)
        expected = a.images[:, :, ::-1].transpose(0, 3, 1, 2) / numpy.float32(255)
        assert numpy.allclose(b.images, expected)


def test_every_native_option_is_a_keyword_documented_with_the_same_default() -> None:
    """One declaration of the options (Rust's ``LoaderOptions``): a new one that the Python
    package forgets fails here, in the table, the signature or the docstring."""
    import inspect

    from loader_ml import _native
    from loader_ml.options import _OPTIONS, _option_text

    keys = {key: default for key, default, _doc in _native.option_keys()}
    assert set(_OPTIONS.values()) == set(keys), set(keys) ^ set(_OPTIONS.values())
    signature = inspect.signature(loader_ml.DataLoader).parameters
    doc = loader_ml.DataLoader.__doc__ or ""
    # An Args entry is ``name: ...`` or ``name, other: ...``.
    documented = {name.strip() for line in doc.splitlines() if ":" in line
                  for name in line.split(":")[0].split(",")}
    for keyword, key in _OPTIONS.items():
        assert keyword in signature, f"{key}: no keyword {keyword}"
        assert keyword in documented, f"{keyword} has no entry in the docstring"
        default = signature[keyword].default
        if default is not None:
            # None defers to the native default; a written one must be the same.
            assert _option_text(default) == keys[key], (key, default, keys[key])
    stub = (Path(_native.__file__).parent / "_native.pyi").read_text()
    assert "def option_keys" in stub and "options: dict[str, str]" in stub


def test_a_dataset_setting_given_twice_or_for_the_loader_is_refused(tmp_path: Path) -> None:
    """A keyword and the same key in ``options=`` would leave one silently unread; a loader
    option given to a Dataset would do nothing there."""
    with pytest.raises(loader_ml.ConfigError, match=r'manifest= and options\["source.manifest"\]'):
        loader_ml.Dataset(str(tmp_path), manifest="a.csv", options={"source.manifest": "b.csv"})
    with pytest.raises(loader_ml.ConfigError, match="source.\\* and storage.\\*"):
        loader_ml.Dataset(str(tmp_path), options={"batch_size": "8"})
