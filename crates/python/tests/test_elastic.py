"""Mixtures and elastic resume from Python: weights, stop rules, a mixture changed at resume
(a new segment), padding that says so, and torchrun with 3 ranks then 2, resuming from a
`torch.save`d checkpoint, every sample of the epoch exactly once."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest

import loader_ml
from conftest import CLASSES, gather_and_save, jpeg, phases, torchrun

SAMPLES = 24


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another ImageFolder with the same classes as `images` (12 samples), written by PIL."""
    root = tmp_path_factory.mktemp("second")
    for label in range(CLASSES):
        (root / f"class_{label}").mkdir()
        for i in range(4):
            (root / f"class_{label}" / f"extra_{i}.jpg").write_bytes(jpeg(label, 100 + i))
    return root


def reads(loader: loader_ml.DataLoader) -> list[tuple[int, str]]:
    """One pass: (source, key) of each sample, padding left out."""
    out = []
    for batch in loader:
        real = len(batch.keys) - batch.padding
        out += list(zip(batch.sources[:real], batch.keys[:real]))
    return out


def test_a_mixture_keeps_its_weights_in_every_prefix(data_root: Path, second: Path) -> None:
    loader = loader_ml.DataLoader([str(data_root / "images"), str(second)], weights=[0.75, 0.25],
                                  batch_size=4, shuffle=True, seed=2, stop="all_exhausted")
    assert isinstance(loader.dataset, list) and len(loader.datasets) == 2
    got = reads(loader)
    # all_exhausted: the smaller source (12 at a quarter) ends the epoch at 48 positions,
    # the larger wrapping into a new permutation after its 24.
    assert len(got) == 48 and len(loader) == 12
    counts = Counter()
    for n, (source, _) in enumerate(got, 1):
        counts[source] += 1
        assert abs(counts[1] - n / 4) < 1, (n, counts)
    assert len({k for s, k in got if s == 1}) == 12
    firsts = [k for s, k in got if s == 0]
    assert sorted(firsts[:24]) == sorted(set(firsts[:24])), "no repeat inside a permutation"


def test_stop_rules_and_an_endless_epoch(data_root: Path, second: Path) -> None:
    urls = [str(data_root / "images"), str(second)]
    first = loader_ml.DataLoader(urls, batch_size=4, shuffle=True)
    got = reads(first)
    # first_exhausted: the epoch ends where the smaller source would need a 13th sample
    # (position 25 of the interleave 0, 1, 0, 1, ...), as interleave_datasets stops.
    assert Counter(s for s, _ in got)[1] == 12 and len(got) == 25
    fixed = loader_ml.DataLoader(urls, batch_size=4, shuffle=True, stop=10)
    assert len(reads(fixed)) == 10 and len(fixed) == 3
    once = loader_ml.DataLoader(urls, batch_size=4, stop="all_exhausted_without_replacement")
    got = reads(once)
    assert len(got) == 36 and len(set(got)) == 36
    endless = loader_ml.DataLoader(urls, batch_size=4, shuffle=True, stop="cycle_forever")
    with pytest.raises(TypeError, match="endless"):
        len(endless)
    it = iter(endless)
    assert sum(len(next(it).keys) for _ in range(20)) == 80
    with pytest.raises(loader_ml.ConfigError, match="stop"):
        loader_ml.DataLoader(urls, stop="sometimes")
    with pytest.raises(loader_ml.ConfigError, match="2 weights for 1"):
        loader_ml.DataLoader(urls[0], weights=[1, 2])


def test_per_stream_batches_come_from_one_source(data_root: Path, second: Path) -> None:
    loader = loader_ml.DataLoader([str(data_root / "images"), str(second)], batch_size=4,
                                  shuffle=True, batching="per_stream")
    for batch in loader:
        assert len(set(batch.sources)) == 1, batch.sources


def test_another_mixture_needs_a_new_segment_and_continues_each_source(
        data_root: Path, second: Path) -> None:
    urls = [str(data_root / "images"), str(second)]
    before = loader_ml.DataLoader(urls, batch_size=4, shuffle=True, seed=5, stop="all_exhausted")
    it = iter(before)
    first = []
    for _ in range(3):
        batch = next(it)
        first += list(zip(batch.sources, batch.keys))
    state = before.state_dict()
    changed = loader_ml.DataLoader(urls, weights=[1, 3], batch_size=4, shuffle=True, seed=5,
                                   stop="all_exhausted")
    with pytest.raises(loader_ml.ConfigError, match=r"weights \(1:1\).*new_segment"):
        changed.load_state_dict(state)
    resumed = loader_ml.DataLoader(urls, weights=[1, 3], batch_size=4, shuffle=True, seed=5,
                                   stop="all_exhausted", new_segment=True)
    resumed.load_state_dict(state)
    # Epochs of the new mixture are of its own length.
    fresh = loader_ml.DataLoader(urls, weights=[1, 3], batch_size=4, stop="all_exhausted")
    assert len(resumed) == len(fresh) != len(before)
    rest = reads(resumed)
    # Each source goes on where it stood: nothing of a permutation read twice.
    for source, size in ((0, 24), (1, 12)):
        keys = [k for s, k in first + rest if s == source][:size]
        assert len(keys) == len(set(keys)), (source, keys)
    segment = resumed.state_dict()["order"]["mixture"]["segment"]
    assert segment["number"] == 1


def test_padding_only_when_a_last_global_batch_is_shorter_than_the_ranks(
        data_root: Path) -> None:
    url = str(data_root / "images")
    # Global batches of 5 x 2 over 24 samples: the last holds 4, so rank 4 repeats one.
    ranks = [loader_ml.DataLoader(url, batch_size=2, shuffle=True, rank=r, world_size=5)
             for r in range(5)]
    batches = [list(r) for r in ranks]
    assert len({len(b) for b in batches}) == 1, "every rank takes as many steps"
    assert [b[-1].padding for b in batches] == [0, 0, 0, 0, 1]
    real = [k for b in batches for batch in b for k in batch.keys[:len(batch.keys) - batch.padding]]
    assert len(real) == SAMPLES and len(set(real)) == SAMPLES


def test_torchrun_three_ranks_then_two_resume_from_a_torch_saved_checkpoint(
        s3, second: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.pt"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        import torch
        import torch.distributed as dist
        import loader_ml
        phase, batch_size = sys.argv[1], int(sys.argv[2])
        dist.init_process_group("gloo")
        # One source over S3, one on local disk: a mixture of stores.
        images = loader_ml.Dataset("s3://images", storage_options={s3.options!r})
        loader = loader_ml.DataLoader([images, loader_ml.Dataset({str(second)!r})],
                                      weights=[2, 1], batch_size=batch_size, shuffle=True,
                                      seed=7, stop="all_exhausted")
        if phase == "resume":
            loader.load_state_dict(torch.load({str(checkpoint)!r})["loader"])
        seen = []
        for step, batch in enumerate(loader):
            real = len(batch.keys) - batch.padding
            seen += [[s, k] for s, k in zip(batch.sources[:real], batch.keys[:real])]
            if phase == "first" and step == 2:
                break
    """) + gather_and_save(checkpoint, tmp_path))
    torchrun(script, 3, "first", "2")
    torchrun(script, 2, "resume", "3")
    got = [tuple(r) for r in phases(tmp_path)]
    whole = loader_ml.DataLoader(
        [loader_ml.Dataset("s3://images", storage_options=s3.options), str(second)],
        weights=[2, 1], batch_size=5, shuffle=True, seed=7, stop="all_exhausted")
    expected = reads(whole)
    assert len(got) == len(expected) == 36
    assert Counter(got) == Counter(expected), "not the epoch, exactly once"
