"""Native augmentation against torchvision on real photos (scikit-image's sample photos,
fetched from the package index): each step's pixels, the policies' draws among
torchvision's own candidates, the tensor steps, and the Python tail after a native head."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy
import pytest
import torch
from PIL import Image

import loader_ml

tv = pytest.importorskip("torchvision")
import torchvision.transforms.v2 as T  # noqa: E402
import torchvision.transforms.v2.functional as F  # noqa: E402
from torchvision.transforms import InterpolationMode as IM  # noqa: E402

PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png"]


def _photo_files() -> Path:
    """The photos of scikit-image's wheel (not installed: only its data is read)."""
    cache = Path(os.environ.get("LOADER_CACHE", Path.home() / ".cache" / "loader")) / "photos"
    if all((cache / name).exists() for name in PHOTOS):
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "scikit-image==0.26.0", "-d", str(cache)],
                   check=True, timeout=600)
    wheel = next(cache.glob("scikit_image-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        for name in PHOTOS:
            (cache / name).write_bytes(z.read(f"skimage/data/{name}"))
    wheel.unlink()
    return cache


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Image.Image]]:
    """An ImageFolder of the photos at about 150 px (by PIL, saved as PNG so both sides
    start from the same pixels), in key order."""
    root = tmp_path_factory.mktemp("photos")
    (root / "a").mkdir()
    images = []
    for i, name in enumerate(PHOTOS):
        im = Image.open(_photo_files() / name).convert("RGB")
        im = im.resize((im.width * 150 // max(im.size), im.height * 150 // max(im.size)),
                       Image.BILINEAR)
        im.save(root / "a" / f"{i}.png")
        images.append(im)
    return str(root), images


def run(url: str, transform, n: int | None = None, seed: int = 0) -> list[numpy.ndarray]:
    loader = loader_ml.DataLoader(url, batch_size=1, transform=transform, seed=seed)
    assert loader.python_tail is None, loader.python_tail
    out = []
    for batch in loader:
        out.append(batch.images[0].numpy())
        if n is not None and len(out) == n:
            break
    return out


def diff(a, b) -> numpy.ndarray:
    return numpy.abs(numpy.asarray(a).astype(numpy.int64) - numpy.asarray(b).astype(numpy.int64))


EXACT = [
    (T.ColorJitter(brightness=(1.4, 1.4)), lambda im: F.adjust_brightness(im, 1.4)),
    (T.ColorJitter(brightness=(0.6, 0.6)), lambda im: F.adjust_brightness(im, 0.6)),
    (T.ColorJitter(contrast=(0.6, 0.6)), lambda im: F.adjust_contrast(im, 0.6)),
    (T.ColorJitter(contrast=(1.7, 1.7)), lambda im: F.adjust_contrast(im, 1.7)),
    (T.ColorJitter(saturation=(0.3, 0.3)), lambda im: F.adjust_saturation(im, 0.3)),
    (T.ColorJitter(saturation=(1.8, 1.8)), lambda im: F.adjust_saturation(im, 1.8)),
    (T.ColorJitter(hue=(0.2, 0.2)), lambda im: F.adjust_hue(im, 0.2)),
    (T.ColorJitter(hue=(-0.3, -0.3)), lambda im: F.adjust_hue(im, -0.3)),
    (T.RandomRotation((30, 30)), lambda im: F.rotate(im, 30)),
    (T.RandomRotation((-20, -20), interpolation=IM.BILINEAR),
     lambda im: F.rotate(im, -20, IM.BILINEAR)),
    (T.RandomRotation((33, 33), expand=True, fill=[10, 20, 30]),
     lambda im: F.rotate(im, 33, expand=True, fill=[10, 20, 30])),
    (T.RandomRotation((90, 90)), lambda im: F.rotate(im, 90)),
    (T.RandomRotation((12, 12), interpolation=IM.BILINEAR, center=[20, 30]),
     lambda im: F.rotate(im, 12, IM.BILINEAR, center=[20, 30])),
    (T.RandomAffine((15, 15), scale=(1.2, 1.2), shear=(5, 5, 3, 3)),
     lambda im: F.affine(im, 15, [0, 0], 1.2, [5, 3])),
    (T.RandomAffine((-7, -7), scale=(0.8, 0.8), shear=(10, 10), interpolation=IM.BILINEAR,
                    fill=128),
     lambda im: F.affine(im, -7, [0, 0], 0.8, [10, 0], IM.BILINEAR, fill=128)),
]


@pytest.mark.parametrize("step,reference", EXACT, ids=[repr(s) for s, _ in EXACT])
def test_colour_and_warp_steps_are_pillows_bytes(photos, step, reference) -> None:
    url, images = photos
    for got, im in zip(run(url, [step]), images, strict=True):
        want = numpy.asarray(reference(im))
        assert got.shape == want.shape
        assert diff(got, want).max() == 0


def test_blur_and_bicubic_resize_match_torchvision(photos) -> None:
    url, images = photos
    for step, reference, worst, mean in [
        (T.GaussianBlur(5, sigma=(1.5, 1.5)), lambda im: F.gaussian_blur(im, [5, 5], [1.5, 1.5]),
         1, 0.01),
        (T.GaussianBlur((3, 7), sigma=(0.8, 0.8)),
         lambda im: F.gaussian_blur(im, [3, 7], [0.8, 0.8]), 1, 0.01),
        # Pillow's bicubic, in fast_image_resize's Catmull-Rom: as close as the bilinear.
        (T.Resize(100, interpolation=IM.BICUBIC), lambda im: F.resize(im, 100, IM.BICUBIC),
         8, 0.5),
        (T.Resize(220, interpolation=IM.BICUBIC), lambda im: F.resize(im, 220, IM.BICUBIC),
         8, 0.5),
    ]:
        for got, im in zip(run(url, [step]), images, strict=True):
            d = diff(got, reference(im))
            assert d.max() <= worst and d.mean() <= mean, (step, d.max(), d.mean())


def _candidates(policy, im: Image.Image, every_bin: bool) -> list[tuple[str, numpy.ndarray]]:
    """Every image one op of `policy` can make of `im`, by torchvision's own code."""
    out = []
    for name, (magnitudes, signed) in policy._AUGMENTATION_SPACE.items():
        table = magnitudes(policy.num_magnitude_bins, im.height, im.width)
        if table is None or table.ndim == 0:
            values = [0.0]
        else:
            bins = range(policy.num_magnitude_bins) if every_bin else [policy.magnitude]
            values = [float(table[i]) for i in bins]
            values += [-v for v in values] if signed else []
        for m in values:
            made = policy._apply_image_or_video_transform(
                im, name, m, interpolation=policy.interpolation, fill=policy._fill)
            out.append((name, numpy.asarray(made)))
    return out


def _repeated(tmp_path: Path, im: Image.Image, n: int) -> str:
    (tmp_path / "a").mkdir()
    for i in range(n):
        im.save(tmp_path / "a" / f"{i:04}.png")
    return str(tmp_path)


@pytest.mark.parametrize("native,policy,every_bin", [
    (T.RandAugment(num_ops=1), T.RandAugment(num_ops=1), False),
    (T.RandAugment(num_ops=1, magnitude=25, interpolation=IM.BILINEAR, fill=[40, 50, 60]),
     T.RandAugment(num_ops=1, magnitude=25, interpolation=IM.BILINEAR, fill=[40, 50, 60]),
     False),
    (T.TrivialAugmentWide(), T.TrivialAugmentWide(), True),
], ids=["RandAugment", "RandAugment-bilinear-fill", "TrivialAugmentWide"])
def test_policies_make_one_of_torchvisions_images(tmp_path, photos, native, policy,
                                                  every_bin) -> None:
    # Each output is exactly one torchvision could make; over the samples every one of
    # the fourteen operations occurs.
    _, images = photos
    im = images[0].resize((48, 48), Image.BILINEAR)
    url = _repeated(tmp_path, im, 120)
    candidates = _candidates(policy, im, every_bin)
    seen = collections.Counter()
    for got in run(url, [native]):
        names = {name for name, c in candidates if c.shape == got.shape and (c == got).all()}
        assert names, "an image torchvision's policy cannot make"
        seen[min(names)] += 1 if len(names) == 1 else 0
    assert len(seen) >= 12, seen


def test_randaugment_draws_its_operations_uniformly(tmp_path, photos) -> None:
    # Chi-square of the operations drawn over 700 samples against the uniform draw
    # (13 degrees of freedom: 34.5 is the 0.1% level).
    _, images = photos
    im = images[1].resize((24, 24), Image.BILINEAR)
    url = _repeated(tmp_path, im, 700)
    candidates = _candidates(T.RandAugment(num_ops=1), im, False)
    counts = collections.Counter()
    for got in run(url, [T.RandAugment(num_ops=1)]):
        names = {n for n, c in candidates if (c == got).all()}
        assert len(names) == 1, names
        counts[names.pop()] += 1
    expected = sum(counts.values()) / 14
    chi2 = sum((counts[n] - expected) ** 2 / expected for n in T.RandAugment._AUGMENTATION_SPACE)
    assert len(counts) == 14 and chi2 < 34.5, (chi2, counts)


def test_colour_jitter_orders_its_factors_at_random(photos) -> None:
    url, images = photos
    jitter = T.ColorJitter(brightness=(1.5, 1.5), contrast=(0.5, 0.5))
    orders = collections.Counter()
    for seed in range(12):
        for got, im in zip(run(url, [jitter], seed=seed), images, strict=True):
            a = numpy.asarray(F.adjust_contrast(F.adjust_brightness(im, 1.5), 0.5))
            b = numpy.asarray(F.adjust_brightness(F.adjust_contrast(im, 0.5), 1.5))
            assert (got == a).all() or (got == b).all()
            orders["bc" if (got == a).all() else "cb"] += 1
    assert min(orders.values()) >= 8, orders


def test_tensor_steps_are_torchvisions(photos) -> None:
    url, images = photos
    crop = T.CenterCrop(96)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    as_image = run(url, [crop, T.ToImage()])
    as_float = run(url, [crop, T.ToImage(), T.ToDtype(torch.float32, scale=True),
                         T.Normalize(mean, std)])
    for a, f, im in zip(as_image, as_float, images, strict=True):
        want = T.ToImage()(crop(im))
        assert a.dtype == numpy.uint8 and (a == want.numpy()).all()
        ref = T.Normalize(mean, std)(T.ToDtype(torch.float32, scale=True)(want))
        assert numpy.abs(f - ref.numpy()).max() < 1e-5
    for spec, says in [
        ([T.ToDtype(torch.float32, scale=True), T.ToImage()], "ToDtype before ToImage"),
        ([T.ToImage(), T.ColorJitter(0.4)], "after ToImage"),
        ([T.ToTensor(), T.ColorJitter(0.4)], "after ToTensor"),
        ([T.ToImage(), T.RandomErasing(value="random")], "uint8"),
        ([T.RandomErasing(), T.ToTensor()], "after ToTensor"),
        ([T.ToImage(), T.Normalize(mean, std)], "ToDtype"),
    ]:
        with pytest.raises(loader_ml.ConfigError, match=says):
            loader_ml.DataLoader(url, transform=spec)


def test_random_erasing_erases_a_rectangle_in_its_ranges(photos) -> None:
    url, _ = photos
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    before = T.Compose([T.CenterCrop(100), T.ToTensor(), T.RandomErasing(p=1.0, value=0.25),
                        T.Normalize(mean, std)])
    after = T.Compose([T.CenterCrop(100), T.ToTensor(), T.Normalize(mean, std),
                       T.RandomErasing(p=1.0, value=(1.0, 2.0, 3.0))])
    plain = run(url, [T.CenterCrop(100), T.ToTensor(), T.Normalize(mean, std)])
    shares = []
    for seed in range(6):
        for spec, values in [(before, [(0.25 - m) / s for m, s in zip(mean, std)]),
                             (after, [1.0, 2.0, 3.0])]:
            for got, clean in zip(run(url, spec, seed=seed), plain, strict=True):
                changed = (got != clean).any(axis=0)
                ys, xs = numpy.nonzero(changed)
                assert len(ys), "p=1 erases every image"
                box = (slice(ys.min(), ys.max() + 1), slice(xs.min(), xs.max() + 1))
                for c, v in enumerate(values):
                    assert numpy.allclose(got[c][box], v, atol=1e-5)
                shares.append(changed[box].size / changed.size)
    assert all(0.015 <= s <= 0.34 for s in shares), shares
    assert max(shares) > 3 * min(shares), "areas drawn from the scale range"


def test_a_python_tail_runs_on_the_native_crop(photos) -> None:
    url, images = photos
    spec = [T.Resize(60), T.CenterCrop(48), T.Grayscale(3), T.ToTensor()]
    loader = loader_ml.DataLoader(url, batch_size=1, transform=spec)
    assert [type(t).__name__ for t in loader.python_tail.steps] == ["Grayscale", "ToTensor"]
    for batch, im in zip(loader, images, strict=True):
        want = T.Compose(spec)(im)
        assert batch.images.shape == (1, 3, 48, 48)
        assert (batch.images[0] - want).abs().mean() < 0.01
    # A tail that starts after a tensor step starts at that step instead: it gets the
    # PIL image, as torchvision's steps before a ToTensor do.
    loader = loader_ml.DataLoader(url, batch_size=2, transform=[
        T.RandomResizedCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.2] * 3),
        T.RandomApply([T.ColorJitter(0.1)], p=0.5)])
    assert [type(t).__name__ for t in loader.python_tail.steps] == [
        "ToTensor", "Normalize", "RandomApply"]
    assert next(iter(loader)).images.shape == (2, 3, 32, 32)
    # Tuples after the tail's start cannot run in Python: said, not dropped.
    with pytest.raises(loader_ml.ConfigError, match="runs in Python"):
        loader_ml.DataLoader(url, transform=[T.Grayscale(3), ("CenterCrop", 32)])


def test_v1_transforms_map_as_v2_ones_do(photos) -> None:
    v1 = tv.transforms
    url, _ = photos
    for old, new in [
        (v1.ColorJitter(0.4, 0.3, 0.2, 0.1), T.ColorJitter(0.4, 0.3, 0.2, 0.1)),
        (v1.RandAugment(), T.RandAugment()),
        (v1.TrivialAugmentWide(), T.TrivialAugmentWide()),
        (v1.GaussianBlur(5, (0.5, 1.5)), T.GaussianBlur(5, (0.5, 1.5))),
        (v1.RandomRotation(20, fill=7), T.RandomRotation(20, fill=7)),
        (v1.RandomAffine(10, (0.1, 0.2), (0.9, 1.1), 5), T.RandomAffine(10, (0.1, 0.2), (0.9, 1.1), 5)),
        (v1.RandomResizedCrop(40, interpolation=IM.BICUBIC),
         T.RandomResizedCrop(40, interpolation=IM.BICUBIC)),
    ]:
        a, b = run(url, [old]), run(url, [new])
        assert all((x == y).all() for x, y in zip(a, b, strict=True)), old
    for old, new in [
        ([v1.ToTensor(), v1.RandomErasing(p=1, value="random")],
         [T.ToTensor(), T.RandomErasing(p=1, value="random")]),
        ([v1.PILToTensor()], [T.PILToTensor()]),
    ]:
        a, b = run(url, old), run(url, new)
        assert all((x == y).all() for x, y in zip(a, b, strict=True)), old
