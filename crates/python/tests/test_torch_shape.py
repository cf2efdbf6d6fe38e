"""Batches and loaders shaped as torch's: a batch is the tuple ``(images, labels)`` that
Lightning, Accelerate and ``torch.utils._pytree`` move and map; a loader has the attributes
libraries look up and pickles as its settings and position, so spawned processes rebuild it.
Every wait has a limit."""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

import loader_ml


def test_a_batch_unpacks_indexes_and_keeps_its_keys(data_root: Path) -> None:
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=4)
    batch = next(iter(loader))
    images, labels = batch
    assert isinstance(batch, tuple) and len(batch) == 2
    assert batch[0] is images is batch.images and batch[1] is labels is batch.labels
    assert images.shape[0] == labels.shape[0] == 4 == len(batch.keys) == len(batch.indices)
    assert batch.epoch == 0 and batch.skipped == []
    copy = pickle.loads(pickle.dumps(batch))
    assert copy.keys == batch.keys and torch.equal(copy.images, images)


def test_lightning_and_pytree_move_a_batch_and_keep_its_keys(data_root: Path) -> None:
    """``meta`` stands for a GPU: tensors move there on any machine. Before, Lightning
    returned the batch unmoved and pytree saw one leaf."""
    fabric = pytest.importorskip("lightning.fabric.utilities.apply_func")
    from torch.utils import _pytree

    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=4)
    batch = next(iter(loader))
    moved = fabric.move_data_to_device(batch, torch.device("meta"))
    assert isinstance(moved, loader_ml.Batch)
    assert moved.images.device.type == moved.labels.device.type == "meta"
    assert (moved.keys, moved.indices, moved.epoch) == (batch.keys, batch.indices, batch.epoch)
    assert len(_pytree.tree_leaves(batch)) == 2
    doubled = _pytree.tree_map(lambda t: t * 2, batch)
    assert isinstance(doubled, loader_ml.Batch) and doubled.keys == batch.keys
    assert torch.equal(doubled.labels, batch.labels * 2)


def test_a_loader_has_the_attributes_libraries_look_up(data_root: Path) -> None:
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=4, drop_last=True,
                                  num_workers=2)
    assert (loader.batch_size, loader.drop_last, loader.num_workers) == (4, True, 2)
    assert loader.prefetch_factor == 2 and loader.pin_memory is False
    assert loader.sampler is None and loader.collate_fn is None
    assert isinstance(loader.dataset, loader_ml.Dataset)


def test_a_pickled_loader_continues_where_it_stood(data_root: Path) -> None:
    url = str(data_root / "images")
    loader = loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=5)
    whole = [k for b in loader for k in b.keys]
    fresh = pickle.loads(pickle.dumps(loader_ml.DataLoader(url, batch_size=4, shuffle=True,
                                                           seed=5)))
    assert [k for b in fresh for k in b.keys] == whole
    started = loader_ml.DataLoader(url, batch_size=4, shuffle=True, seed=5)
    it = iter(started)
    first = next(it).keys + next(it).keys
    rebuilt = pickle.loads(pickle.dumps(started))
    rest = [k for b in rebuilt for k in b.keys]
    assert first + rest == whole, "exactly the batches not yet delivered"
    with pytest.raises(TypeError, match="from the URL"):
        pickle.dumps(loader_ml.DataLoader(loader_ml.Dataset(url), batch_size=4))


def test_a_loader_reaches_a_spawned_process(data_root: Path, tmp_path: Path) -> None:
    """The start method of Python 3.14 on Linux (forkserver) and of macOS (spawn) pickle
    the arguments of a process: the loader goes as its settings."""
    script = tmp_path / "spawned.py"
    script.write_text(textwrap.dedent(f"""
        import json, multiprocessing as mp
        import loader_ml

        def read(loader, out):
            json.dump([k for b in loader for k in b.keys], open(out, "w"))

        if __name__ == "__main__":
            loader = loader_ml.DataLoader({str(data_root / "images")!r}, batch_size=4,
                                          shuffle=True, seed=9)
            child = mp.get_context("spawn").Process(target=read,
                                                    args=(loader, {str(tmp_path / "c")!r}))
            child.start()
            child.join(120)
            assert child.exitcode == 0, child.exitcode
            read(loader, {str(tmp_path / "p")!r})
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    child = json.loads((tmp_path / "c").read_text())
    assert child == json.loads((tmp_path / "p").read_text()) and len(child) == 24


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_inside_torch_dataloader_workers_each_sample_comes_once(data_root: Path,
                                                                start: str) -> None:
    """For code that must stay inside ``torch.utils.data.DataLoader``: two workers read
    disjoint shares that cover the dataset, with fork and with spawn; ``set_epoch`` gives
    each epoch its own order. Without ``keep``, torch's conversion rebuilds the batch from
    its tensors and says its keys are unknown."""
    from loader_ml.torch_view import keep

    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=4, shuffle=True,
                                  seed=2, num_workers=1)
    whole = sorted(k for b in loader for k in b.keys)
    view = loader.as_iterable_dataset()
    torch_loader = torch.utils.data.DataLoader(view, batch_size=None, num_workers=2,
                                               collate_fn=keep,
                                               multiprocessing_context=start, timeout=120)
    epochs = []
    for epoch in range(2):
        view.set_epoch(epoch)
        got = []
        for batch in torch_loader:
            images, labels = batch
            assert images.shape[0] == labels.shape[0] == len(batch.keys) <= 4
            got.extend(batch.keys)
        assert sorted(got) == whole, "each sample once, all of them"
        epochs.append(got)
    assert epochs[0] != epochs[1]
    plain = torch.utils.data.DataLoader(view, batch_size=None, num_workers=2,
                                        multiprocessing_context=start, timeout=120)
    batches = list(plain)
    assert all(isinstance(b, loader_ml.Batch) and b.keys is None for b in batches)
    assert sum(len(b.labels) for b in batches) == len(whole)


def test_decode_threads_share_the_node_among_its_ranks(data_root: Path) -> None:
    """Under torchrun with 8 ranks on a node, each rank starting a thread per core would ask
    for 8 times the node's cores."""
    # Against the native count for one rank: available cores include cgroup quotas that
    # os.sched_getaffinity does not see.
    code = ("import loader_ml; "
            f"print(loader_ml.DataLoader({str(data_root / 'images')!r}).num_workers)")
    counts = {}
    for ranks in (1, 2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["LOCAL_WORLD_SIZE"] = str(ranks)
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        counts[ranks] = int(run.stdout)
    assert counts[2] == max(1, counts[1] // 2), counts


def test_pin_memory_without_cuda_warns_once_and_dlpack_shares_memory(data_root: Path) -> None:
    url = str(data_root / "images")
    if torch.cuda.is_available():
        pinned = next(iter(loader_ml.DataLoader(url, batch_size=4, pin_memory=True)))
        assert pinned.images.is_pinned() and pinned.labels.is_pinned()
    else:
        with pytest.warns(UserWarning, match="CUDA is not available") as caught:
            loader = loader_ml.DataLoader(url, batch_size=4, pin_memory=True)
        assert len(caught) == 1 and loader.pin_memory is True
        assert len([k for b in loader for k in b.keys]) == 24
    with pytest.raises(loader_ml.ConfigError, match="needs torch"):
        loader_ml.DataLoader(url, batch_size=4, pin_memory=True, output="numpy")
    # numpy batches go to torch (or any DLPack consumer) without a copy.
    batch = next(iter(loader_ml.DataLoader(url, batch_size=4, output="numpy")))
    images = torch.from_dlpack(batch.images)
    assert images.data_ptr() == batch.images.ctypes.data
    assert torch.equal(images, torch.from_numpy(batch.images))


def test_s3_credentials_come_from_a_profile_as_boto3_finds_them(s3, tmp_path: Path) -> None:
    """A profile in the shared files (``AWS_PROFILE``, or ``aws_profile`` in the options),
    as the AWS CLI and boto3 read it; with nothing to find, the error says where it looked
    (before, it spoke of 169.254.169.254)."""
    (tmp_path / "credentials").write_text(
        "[train]\n"
        f"aws_access_key_id = {s3.options['aws_access_key_id']}\n"
        f"aws_secret_access_key = {s3.options['aws_secret_access_key']}\n")
    (tmp_path / "config").write_text("[profile train]\nregion = us-east-1\n")
    code = textwrap.dedent("""
        import sys, loader_ml
        options = {"aws_endpoint": sys.argv[1]}
        if len(sys.argv) > 2:
            options["aws_profile"] = sys.argv[2]
        try:
            loader = loader_ml.DataLoader("s3://images", batch_size=8,
                                          storage_options=options, max_retries=0)
            print(sum(len(b.keys) for b in loader))
        except loader_ml.LoaderError as e:
            print(type(e).__name__, e, e.cause)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
               AWS_EC2_METADATA_DISABLED="true")

    def run(extra_env: dict[str, str], *args: str) -> str:
        done = subprocess.run([sys.executable, "-c", code, s3.endpoint, *args],
                              env=dict(env, **extra_env), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    assert run({"AWS_PROFILE": "train"}) == "24"
    assert run({}, "train") == "24"
    missing = run({})
    assert missing.startswith("PermissionDeniedError"), missing
    assert "no AWS credentials found" in missing and "~/.aws/credentials" in missing, missing
    assert "169.254" not in missing


def _within(seconds: float, call: Any) -> Any:
    """`call()` under a watchdog: the test fails after `seconds` rather than waiting."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # handed to the test
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"no answer within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.fixture
def lent_pinned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Any]]:
    """CUDA stood in for on a CPU-only torch: the pinned allocator is `torch.empty`
    (recorded: address and a weak reference to each block), a tensor counts as pinned when
    it is such a block or a view of one, and `pin_memory()` copies."""
    blocks: list[tuple[int, Any]] = []

    def pinned_block(torch_: Any) -> Any:
        def make(nbytes: int) -> Any:
            block = torch_.empty(nbytes, dtype=torch_.uint8)
            blocks.append((block.data_ptr(), weakref.ref(block)))
            return block
        return make

    lent = lambda t: t.untyped_storage().data_ptr() in {a for a, _ in blocks}  # noqa: E731
    copies: list[Any] = []  # kept alive, so no other tensor can take a copy's address

    def pin_copy(t: Any) -> Any:
        copy = t.clone()
        copies.append(copy)
        return copy

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(loader_ml.loader, "_pinned_block", pinned_block)
    monkeypatch.setattr(torch.Tensor, "is_pinned",
                        lambda t: lent(t) or t.untyped_storage().data_ptr()
                        in {c.untyped_storage().data_ptr() for c in copies})
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_copy)
    return blocks


def test_pin_memory_collates_images_straight_into_torchs_pinned_blocks(
        data_root: Path, lent_pinned: list[tuple[int, Any]]) -> None:
    """With CUDA, a batch's images are written once, into a block of torch's pinned
    allocator, and handed over as a view of that block (so torch tracks a non_blocking
    copy's event on it, and reuses the block only when it may); labels are copied there as
    torch's DataLoader copies them. Same values as without pinning; the loader keeps no
    block once the batch is gone."""
    from torchvision.transforms import v2

    url = str(data_root / "images")
    tensor = v2.Compose([v2.Resize(32), v2.CenterCrop(32), v2.ToImage(),
                         v2.ToDtype(torch.float32, scale=True)])
    for transform in (None, tensor, lambda image: image[:8, :8]):
        def batches(pin: bool) -> list[Any]:
            loader = loader_ml.DataLoader(url, batch_size=5, pin_memory=pin, transform=transform)
            return _within(60, lambda: list(loader))

        plain = batches(False)
        lent_pinned.clear()
        pinned = batches(True)
        assert len(lent_pinned) == len(plain) == 5, "one block per batch"
        for (address, _), batch, reference in zip(lent_pinned, pinned, plain):
            assert batch.images.data_ptr() == address, "collated into the block, not copied"
            assert batch.images.is_pinned() and batch.labels.is_pinned()
            assert batch.images.dtype == reference.images.dtype
            assert torch.equal(batch.images, reference.images)
            assert torch.equal(batch.labels, reference.labels)
            assert batch.keys == reference.keys
        del pinned, batch
        gc.collect()
        assert all(ref() is None for _, ref in lent_pinned), "a block outlived its batch"


def test_a_pinned_allocator_that_refuses_fails_its_batch_with_the_cause(
        data_root: Path, lent_pinned: list[tuple[int, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def refusing(torch_: Any) -> Any:
        def make(nbytes: int) -> Any:
            calls.append(nbytes)
            if len(calls) == 2:
                raise RuntimeError("CUDA error: out of memory (pinned)")
            return torch_.empty(nbytes, dtype=torch_.uint8)
        return make

    monkeypatch.setattr(loader_ml.loader, "_pinned_block", refusing)
    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=5, pin_memory=True)
    batches = iter(loader)
    first = _within(60, lambda: next(batches))
    with pytest.raises(loader_ml.LoaderError) as caught:
        _within(60, lambda: next(batches))
    message = str(caught.value)
    assert "torch's pinned allocator (pin_memory=True) could not lend" in message, message
    assert "out of memory (pinned)" in message, message
    # Not counted as delivered: a resume reads the refused batch again.
    assert loader.state_dict()["position"] == len(first.keys)
