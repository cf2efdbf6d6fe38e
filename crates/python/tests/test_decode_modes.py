"""JPEG decode modes against PIL and torchvision on files PIL wrote: the default decode is
PIL's exactly, and ``draft=True`` (DCT-scaled decode of large images) stays within 2 levels
of torchvision. (That a crop's region decode gives the whole decode's pixels is
`region_decode_equals_whole_decode_then_crop` in crates/decoder/tests/region.rs.)"""

from __future__ import annotations

from pathlib import Path

import numpy
import pytest
from PIL import Image, ImageFilter

import loader_ml

T = pytest.importorskip("torchvision").transforms


def photo_like(path: Path, size: tuple[int, int], seed: int, **save: object) -> None:
    """A picture with a photo's statistics at the scale a resize keeps: smooth regions,
    edges, texture (Pillow's Mandelbrot set, coloured and softened), saved by PIL."""
    w, h = size
    grey = Image.effect_mandelbrot((w, h), (-2.0 + seed * 0.05, -1.1, 0.7, 1.1), 60)
    noise = Image.effect_noise((w, h), 24)
    rgb = Image.merge("RGB", (grey, noise, grey.transpose(Image.Transpose.FLIP_LEFT_RIGHT)))
    rgb.filter(ImageFilter.GaussianBlur(2)).save(path, quality=90, **save)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    (root / "photos" / "scenes").mkdir(parents=True)  # ImageFolder: a class folder
    kinds = [((2400, 1600), {}), ((2000, 1500), {"progressive": True}),
             ((1800, 1350), {"subsampling": 0}), ((2200, 1400), {"subsampling": 1})]
    for i, (size, save) in enumerate(kinds):
        photo_like(root / "photos" / "scenes" / f"photo_{i}.jpg", size, i, **save)
    return root / "photos"


def levels(ours: object, reference: object) -> float:
    """Mean absolute difference in 8-bit levels between two [3, H, W] tensors in 0..1."""
    return float((ours - reference).abs().mean()) * 255


def native_and_torchvision(photos: Path, spec: object, draft: bool) -> list[float]:
    loader = loader_ml.DataLoader(str(photos), batch_size=1, transform=spec, draft=draft)
    out = []
    for batch in loader:
        reference = spec(Image.open(photos / batch.keys[0]).convert("RGB"))
        out.append(levels(batch.images[0], reference))
    return out


def test_exact_decode_gives_torchvisions_pixels(photos: Path) -> None:
    spec = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
    diffs = native_and_torchvision(photos, spec, draft=False)
    assert max(diffs) <= 0.5, diffs


def test_draft_stays_within_two_levels_of_torchvision(photos: Path) -> None:
    spec = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
    exact = native_and_torchvision(photos, spec, draft=False)
    draft = native_and_torchvision(photos, spec, draft=True)
    assert max(draft) <= 2.0, draft
    # Drafting happened: the pixels moved, a little.
    assert any(d > e for d, e in zip(draft, exact)), (draft, exact)


def test_default_decode_is_pils_on_every_layout(photos: Path) -> None:
    # Baseline 4:2:0, progressive, 4:4:4 and 4:2:2, as PIL wrote them.
    loader = loader_ml.DataLoader(str(photos), batch_size=1, output="numpy")
    for batch in loader:
        reference = numpy.asarray(Image.open(photos / batch.keys[0]).convert("RGB"))
        assert numpy.array_equal(batch.images[0], reference), batch.keys[0]


def test_draft_needs_a_native_transform(photos: Path) -> None:
    with pytest.raises(loader_ml.ConfigError, match="draft"):
        loader_ml.DataLoader(str(photos), batch_size=1, draft=True)
