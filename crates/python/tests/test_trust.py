"""Issue 25 (trust, round 3): each defect found by using the package as a PyTorch engineer
would, as a test that failed on the code before the fix. Every wait has a limit."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import warnings
from pathlib import Path

import numpy
import pytest
import torch
from PIL import Image

import loader_ml
from conftest import WORKSPACE, binary, jpeg

SAMPLES = 24


def keys(batches) -> list[str]:
    return [k for batch in batches for k in batch.keys]


# Defect 1 -------------------------------------------------------------------------------


def test_a_loop_of_len_batches_reads_every_epoch(data_root: Path) -> None:
    """Lightning stops after ``len(loader)`` batches without asking past the last: every
    epoch must still be whole (it got 16 / 0 / 16)."""
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=5, shuffle=True)
    n = len(loader)
    counts = [sum(1 for _ in itertools.islice(iter(loader), n)) for _ in range(3)]
    assert counts == [n, n, n]
    # And with the training loop's own set_epoch between epochs.
    for epoch in range(3, 6):
        loader.set_epoch(epoch)
        got = keys(itertools.islice(iter(loader), n))
        assert len(got) == SAMPLES and len(set(got)) == SAMPLES, epoch
    # A break starts a whole new epoch, as torch's DataLoader does.
    next(iter(loader))
    assert len(keys(loader)) == SAMPLES


def test_every_pass_is_a_whole_epoch_however_the_consumer_stops(data_root: Path) -> None:
    """The property test's consumers, through the binding: random batch sizes, drop_last
    and shuffle; each pass read to its end, stopped after exactly ``len()`` batches, or
    broken after one batch (then a fresh ``iter()``), in a random sequence. Every complete
    pass is one epoch, each sample once (all but the dropped tail); a broken one is a
    prefix of an epoch, and the pass after it is a whole new epoch."""
    import random

    url = str(data_root / "images")
    rng = random.Random(25)
    for case in range(12):
        batch_size, drop_last, shuffle = rng.randint(1, 10), rng.random() < 0.5, rng.random() < 0.5
        loader = loader_ml.DataLoader(url, batch_size=batch_size, drop_last=drop_last,
                                      shuffle=shuffle, seed=case, output="numpy")
        n = len(loader)
        whole = n * batch_size if drop_last else SAMPLES
        epochs = set()
        for _ in range(5):
            consumer = rng.choice(["end", "len", "break"])
            batches = iter(loader)
            if consumer == "end":
                read = list(batches)
            elif consumer == "len":
                read = list(itertools.islice(batches, n))
            else:
                read = list(itertools.islice(batches, 1))
            got = keys(read)
            assert len(got) == len(set(got)), (case, consumer)
            assert len(got) == (min(batch_size, whole) if consumer == "break" else whole), \
                (case, consumer, batch_size, drop_last)
            (epoch,) = {b.epoch for b in read}
            epochs.add(epoch)
        assert len(epochs) == 5, "each pass read a new epoch"


def test_a_lightning_shaped_loop(data_root: Path) -> None:
    """What Lightning's fit loop does with a train and a validation loader: a sanity check
    of two validation batches that breaks, then epochs that each take exactly ``len()``
    batches of both. Every epoch sees every sample once; shuffled epochs differ."""
    url = str(data_root / "images")
    train = loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=3)
    val = loader_ml.DataLoader(url, batch_size=5)
    sanity = iter(val)
    assert len(keys(itertools.islice(sanity, 2))) == 10
    epochs = []
    for _ in range(3):
        seen = keys(itertools.islice(iter(train), len(train)))
        assert sorted(seen) == sorted(set(seen)) and len(seen) == SAMPLES
        epochs.append(seen)
        checked = keys(itertools.islice(iter(val), len(val)))
        assert sorted(checked) == sorted(set(checked)) and len(checked) == SAMPLES
    assert epochs[0] != epochs[1] != epochs[2]
    # An iterator of an earlier pass, asked for more after a new pass started, says its
    # epoch was cut short instead of ending as if it were whole; the new pass is whole.
    old = iter(train)
    next(old)
    new = iter(train)
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)
    assert len(keys(new)) == SAMPLES


def test_lightning_itself_trains_three_epochs_of_len_batches(data_root: Path,
                                                            tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    url = str(data_root / "images")
    counts: dict[str, list[int]] = {"train": [], "val": []}

    class Model(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 3)
            self.n = {"train": 0, "val": 0}

        def training_step(self, batch, _):
            images, labels = batch
            self.n["train"] += 1
            return torch.nn.functional.cross_entropy(
                self.layer(images.float().mean((1, 2))), labels)

        def validation_step(self, batch, _):
            self.n["val"] += 1

        def on_train_epoch_end(self) -> None:
            counts["train"].append(self.n["train"])
            self.n["train"] = 0

        def on_validation_epoch_end(self) -> None:
            if not self.trainer.sanity_checking:
                counts["val"].append(self.n["val"])
            self.n["val"] = 0

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    train = loader_ml.DataLoader(url, batch_size=4, shuffle=True)
    val = loader_ml.DataLoader(url, batch_size=5)
    trainer = lightning.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False,
                                default_root_dir=tmp_path)
    trainer.fit(Model(), train, val)
    assert counts == {"train": [6, 6, 6], "val": [5, 5, 5]}


# Defects 2 and 12 ------------------------------------------------------------------------


class Wrapped(torch.utils.data.IterableDataset):
    """The loader under torch's DataLoader, as users wrap it."""

    def __init__(self, make) -> None:
        self.make = make
        self.loader = None

    def __iter__(self):
        if self.loader is None:
            self.loader = self.make()
        for batch in self.loader:
            yield from batch.keys


def test_under_torch_workers_samples_are_never_delivered_twice(data_root: Path) -> None:
    url = str(data_root / "images")
    # Made in the main process, used in forked workers: refused in each worker.
    made_here = Wrapped(lambda: None)
    made_here.loader = loader_ml.DataLoader(url, batch_size=4)
    outer = torch.utils.data.DataLoader(made_here, batch_size=None, num_workers=2, timeout=60,
                                        multiprocessing_context="fork")
    with pytest.raises(loader_ml.ConfigError, match=r"forked[^\n]*as_iterable_dataset"):
        list(outer)
    # Made in each of two workers: each would read everything; refused.
    in_workers = Wrapped(lambda: loader_ml.DataLoader(url, batch_size=4))
    outer = torch.utils.data.DataLoader(in_workers, batch_size=None, num_workers=2, timeout=60,
                                        multiprocessing_context="fork")
    with pytest.raises(loader_ml.ConfigError, match="once per worker"):
        list(outer)
    # Given a share that is this process's alone (rank 0 of 1): still once per worker.
    explicit = Wrapped(lambda: loader_ml.DataLoader(url, batch_size=4, rank=0, world_size=1))
    outer = torch.utils.data.DataLoader(explicit, batch_size=None, num_workers=2, timeout=60,
                                        multiprocessing_context="fork")
    with pytest.raises(loader_ml.ConfigError, match="once per worker"):
        list(outer)
    # Split by worker as well: every sample once, from two workers.
    by_worker = Wrapped(lambda: loader_ml.DataLoader(
        url, batch_size=4, rank=torch.utils.data.get_worker_info().id, world_size=2))
    outer = torch.utils.data.DataLoader(by_worker, batch_size=None, num_workers=2, timeout=60,
                                        multiprocessing_context="fork")
    got = list(outer)
    assert len(got) == SAMPLES == len(set(got))
    # With num_workers=0 it is the loader itself: every sample once.
    outer = torch.utils.data.DataLoader(Wrapped(lambda: loader_ml.DataLoader(url, batch_size=4)),
                                        batch_size=None, num_workers=0)
    got = list(outer)
    assert len(got) == SAMPLES == len(set(got))


def test_a_child_forked_after_the_first_batch_fails_at_once(data_root: Path) -> None:
    """It hung for ever once past what had been prefetched."""
    script = textwrap.dedent(f"""
        import os, sys, loader_ml
        loader = loader_ml.DataLoader({str(data_root / "images")!r}, batch_size=1,
                                      prefetch_factor=1)
        it = iter(loader)
        next(it)
        pid = os.fork()
        if pid == 0:
            try:
                for _ in it:
                    pass
            except loader_ml.ConfigError as e:
                print("refused:", e, flush=True)
                os._exit(3)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        rest = sum(1 for _ in it)
        print("parent read", rest, flush=True)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "forked" in run.stdout and f"parent read {SAMPLES - 1}" in run.stdout


# Defect 3 -------------------------------------------------------------------------------


def test_mp_spawn_ranks_come_from_the_process_group(data_root: Path, tmp_path: Path) -> None:
    """``mp.spawn`` + ``init_process_group(rank, world_size)`` sets no environment
    variables: every rank read the whole dataset."""
    script = tmp_path / "spawned.py"
    script.write_text(textwrap.dedent(f"""
        import json, os
        import torch.distributed as dist
        import torch.multiprocessing as mp
        import loader_ml

        def main(rank, world, out):
            dist.init_process_group("gloo", init_method="file://" + out + ".rendezvous",
                                    rank=rank, world_size=world)
            loader = loader_ml.DataLoader({str(data_root / "images")!r}, batch_size=4,
                                          shuffle=True)
            keys = [k for batch in loader for k in batch.keys]
            json.dump(keys, open(f"{{out}}.{{rank}}", "w"))
            dist.destroy_process_group()

        if __name__ == "__main__":
            for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
                assert name not in os.environ, name
            mp.spawn(main, args=(2, {str(tmp_path / "keys")!r}), nprocs=2)
    """))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS")}
    run = subprocess.run([sys.executable, str(script)], env=dict(env, OMP_NUM_THREADS="1"),
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"keys.{r}").read_text()) for r in range(2)]
    assert [len(r) for r in ranks] == [12, 12]
    assert not set(ranks[0]) & set(ranks[1])


# Defect 4 -------------------------------------------------------------------------------


def test_float_labels_in_a_manifest_are_refused_as_classes(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(jpeg(0, 0))
    (tmp_path / "b.jpg").write_bytes(jpeg(1, 0))
    (tmp_path / "m.csv").write_text("key,label\na.jpg,0.5\nb.jpg,1.0\n")
    with pytest.raises(loader_ml.ConfigError, match='not an integer.*labels="values"'):
        loader_ml.Dataset(str(tmp_path), manifest="m.csv")
    # Said to be values, they are read as numbers.
    dataset = loader_ml.Dataset(str(tmp_path), manifest="m.csv", labels="values")
    assert (dataset[0], dataset.label_kind) == (("a.jpg", 0.5), "values")


# Defect 5 -------------------------------------------------------------------------------


def test_skip_errors_never_yields_an_empty_batch(tmp_path: Path) -> None:
    folder = tmp_path / "ds" / "cat"
    folder.mkdir(parents=True)
    for i in range(6):
        good = i in (2, 3)  # batches of 2: [bad, bad], [good, good], [bad, bad]
        (folder / f"{i}.jpg").write_bytes(jpeg(0, i) if good else b"\xff\xd8\xff broken")
    loader = loader_ml.DataLoader(str(tmp_path / "ds"), batch_size=2, skip_errors=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(loader)
    assert [b.images.shape[0] for b in batches] == [2]
    # The first batch's failures ride with the next batch; the last one's are a warning.
    assert sorted(e.key for e in batches[0].skipped) == ["cat/0.jpg", "cat/1.jpg"]
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "cat/4.jpg" in messages[0] and "cat/5.jpg" in messages[0]


# Defect 6 -------------------------------------------------------------------------------


def test_transform_settings_are_honoured_or_refused(data_root: Path) -> None:
    T = pytest.importorskip("torchvision").transforms
    url = str(data_root / "images")
    refused = {
        "before ToTensor": T.Compose([T.Normalize([0.5] * 3, [0.2] * 3), T.ToTensor()]),
        "ToTensor twice": [T.ToTensor(), T.ToTensor()],
        "after ToTensor": [T.ToTensor(), T.Resize(32)],
        "Normalize twice": [T.ToTensor(), T.Normalize([0.5] * 3, [0.2] * 3),
                            T.Normalize([0.5] * 3, [0.2] * 3)],
    }
    for needle, spec in refused.items():
        with pytest.raises(loader_ml.ConfigError, match=needle):
            loader_ml.DataLoader(url, transform=spec)
    # A transform alone is a pipeline of one step.
    single = loader_ml.DataLoader(url, batch_size=2, transform=T.Resize(20))
    assert next(iter(single)).images.shape == (2, 20, 28, 3)
    # A setting the native steps do not run is run by torchvision itself, from that step
    # on (after the native head), never as something else.
    for spec, tail in [
        ([T.Resize(32, antialias=False), T.ToTensor()], ["Resize", "ToTensor"]),
        ([T.CenterCrop(30), T.RandomRotation(10, interpolation=T.InterpolationMode.BICUBIC),
          T.ToTensor()], ["RandomRotation", "ToTensor"]),
    ]:
        loader = loader_ml.DataLoader(url, batch_size=2, transform=spec)
        assert [type(t).__name__ for t in loader.python_tail.steps] == tail
        assert next(iter(loader)).images.dtype == torch.float32


# Defect 7 -------------------------------------------------------------------------------


def test_every_format_image_folder_lists_decodes_to_pils_pixels(tmp_path: Path) -> None:
    # Once listed and then failing (later refused); now each is decoded natively. Files
    # written by PIL, pixels compared with PIL's convert("RGB") (torchvision's loader).
    folder = tmp_path / "ds"
    rng = numpy.random.default_rng(7)
    photo = numpy.asarray(Image.fromarray(rng.integers(0, 255, (6, 8, 3), numpy.uint8))
                          .resize((40, 30), Image.BILINEAR))
    files = {"a/1.webp": {"lossless": True}, "a/2.webp": {"quality": 90},
             "a/3.bmp": {}, "b/4.tiff": {}, "b/5.tif": {"compression": "tiff_lzw"},
             "b/6.ppm": {}, "b/7.pgm": {}, "b/8.png": {}}
    for name, kwargs in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(photo)
        (image.convert("L") if name.endswith(".pgm") else image).save(path, **kwargs)
    loader = loader_ml.DataLoader(str(folder), batch_size=8, output="numpy")
    assert len(loader.dataset) == len(files)  # listed as torchvision lists them
    batch = next(iter(loader))
    for key, got in zip(batch.keys, batch.images):
        want = numpy.asarray(Image.open(folder / key).convert("RGB"))
        diff = numpy.abs(got.astype(int) - want.astype(int))
        # Lossy WebP too: image-webp upsamples chroma as libwebp (PIL's) does.
        assert diff.max() == 0, (key, diff.mean(), diff.max())


# Defect 9 -------------------------------------------------------------------------------


def test_messages_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(loader_ml.ConfigError, match="unknown"):
        loader_ml.Dataset("s3://bucket/x", storage_options={"aws_no_such_option": "1"})
    with pytest.raises(loader_ml.ConfigError):
        loader_ml.Dataset("s3:/x")
    with pytest.raises(loader_ml.LoaderError) as caught:
        loader_ml.Dataset(str(tmp_path / "nowhere"))
    assert "dataset's store" not in str(caught.value.backend)
    assert "nowhere" in caught.value.backend
    shards = tmp_path / "gz"
    shards.mkdir()
    for i in range(2):
        with tarfile.open(shards / f"s-{i}.tar.gz", "w:gz") as tar:
            payload = jpeg(0, i)
            info = tarfile.TarInfo(f"k{i}.jpg")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    for url in (str(shards), str(shards / "s-{0..1}.tar.gz")):
        with pytest.raises(loader_ml.LoaderError, match="compressed") as caught:
            loader_ml.Dataset(url)
        assert "ImageFolder" not in str(caught.value) and "\\x" not in str(caught.value)


# Defect 11 ------------------------------------------------------------------------------


def test_a_script_with_a_python_transform_exits_cleanly_without_close(tmp_path: Path) -> None:
    """It ended with SIGABRT (134) at interpreter exit, 10 runs in 10."""
    data = tmp_path / "data"
    subprocess.run([str(binary("loader")), "gen", str(data), "--images", "64", "--classes",
                    "4", "--tiny"], check=True, capture_output=True, timeout=120)
    script = textwrap.dedent(f"""
        import time, numpy, loader_ml
        l = loader_ml.DataLoader({str(data)!r}, batch_size=4, num_workers=2, output="numpy",
            transform=lambda im: (time.sleep(0.02), numpy.ascontiguousarray(im[::-1]))[1])
        for images, labels in l:
            pass
    """)
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, (run.returncode, run.stderr[-2000:])


# Defect 13 ------------------------------------------------------------------------------


def test_credentials_never_reach_an_error(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "1.jpg").write_bytes(jpeg(0, 1))
    (root / "m.csv").write_text("cat/1.jpg,0\ncat/missing.jpg,0\n")
    server = subprocess.Popen([str(binary("loader")), "serve", "http", str(root)],
                              stdout=subprocess.PIPE, text=True)
    try:
        endpoint = None
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("endpoint: "):
                endpoint = line.split(": ", 1)[1].strip()
                break
        assert endpoint, "the server did not start"
        secret = endpoint.replace("http://", "http://user:S3CRET@")
        dataset = loader_ml.Dataset(secret, manifest="m.csv")
        texts = []
        with pytest.raises(loader_ml.NotFoundError) as caught:
            list(loader_ml.DataLoader(dataset, batch_size=2, max_retries=0))
        texts += [str(caught.value), str(caught.value.cause), str(caught.value.backend)]
        skipping = loader_ml.DataLoader(dataset, batch_size=1, skip_errors=5, max_retries=0)
        with warnings.catch_warnings(record=True) as caught_warnings:
            warnings.simplefilter("always")
            for batch in skipping:
                texts += [str(e) + str(e.cause) for e in batch.skipped]
        texts += [str(w.message) for w in caught_warnings]
        for url in (secret + "/shard-{0..2}.tar?token=S3CRET2",
                    secret + "/x-{0..9999999}-{0..9999999}.tar",
                    secret + "/missing-{0..1}.tar"):
            with pytest.raises(loader_ml.LoaderError) as caught:
                loader_ml.Dataset(url)
            texts.append(str(caught.value) + str(caught.value.cause))
        assert any("missing.jpg" in t for t in texts)
        for text in texts:
            assert "S3CRET" not in text, text
    finally:
        server.terminate()
        server.wait(timeout=10)


# Defect 15 ------------------------------------------------------------------------------


def test_a_state_of_another_order_is_refused(data_root: Path, tmp_path: Path) -> None:
    url = str(data_root / "images")
    two = [loader_ml.DataLoader(url, batch_size=4, shuffle=True, rank=r, world_size=2)
           for r in range(2)]
    for loader in two:
        next(iter(loader))
    state = two[0].state_dict()
    # The same dict on every rank: any rank's state restores all, on any world size (the
    # global order does not depend on it; test_elastic.py proves exactly once).
    assert two[1].state_dict() == state
    loader_ml.DataLoader(url, batch_size=4, shuffle=True, rank=1, world_size=2) \
        .load_state_dict(state)
    loader_ml.DataLoader(url, batch_size=3, shuffle=True, rank=3, world_size=4) \
        .load_state_dict(state)
    single = loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=1)
    next(iter(single))
    state = single.state_dict()
    with pytest.raises(loader_ml.ConfigError, match="seed"):
        loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=2).load_state_dict(state)
    with pytest.raises(loader_ml.ConfigError, match="shuffle"):
        loader_ml.DataLoader(url, batch_size=4).load_state_dict(state)
    other = tmp_path / "other"
    for label in range(3):
        (other / f"k{label}").mkdir(parents=True)
        for i in range(8):
            (other / f"k{label}" / f"{i}.jpg").write_bytes(jpeg(label, i))
    with pytest.raises(loader_ml.ConfigError, match="dataset"):
        loader_ml.DataLoader(str(other), batch_size=4, shuffle=True, seed=1) \
            .load_state_dict(state)
    with pytest.raises(loader_ml.ConfigError, match="epoch"):
        loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=1) \
            .load_state_dict(dict(state, epoch=2**64 - 1))
    # The state a loader gives back resumes it.
    resumed = loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=1)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert len(keys(resumed)) == SAMPLES - 4


# Defect 20 ------------------------------------------------------------------------------


def test_keyboard_interrupt_in_a_transform_stops_the_loader(data_root: Path) -> None:
    def interrupted(image: numpy.ndarray) -> numpy.ndarray:
        raise KeyboardInterrupt

    for skip in (None, 100):
        loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=4,
                                      transform=interrupted, skip_errors=skip)
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))
        with pytest.raises(RuntimeError, match="closed"):
            next(iter(loader))

    def exiting(image: numpy.ndarray) -> numpy.ndarray:
        sys.exit(7)

    with pytest.raises(SystemExit):
        list(loader_ml.DataLoader(str(data_root / "images"), batch_size=4, transform=exiting,
                                  skip_errors=100))
