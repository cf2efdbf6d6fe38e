"""The DataLoader: PyTorch's names, batches as tensors that share the loader's memory."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Literal, Sequence, Union

import numpy

from . import _native
from ._native import Dataset
from .errors import ConfigError

__all__ = ["Batch", "DataLoader"]

#: A transform: a built-in name, torchvision-named steps, or a callable on one image.
Transform = Union[
    None,
    Literal["imagenet_eval", "imagenet_train"],
    Sequence[Any],
    Callable[[numpy.ndarray], Any],
]


class Batch:
    """One batch. Unpacks as ``images, labels``; also has ``keys``, ``indices``, ``epoch``
    and ``skipped`` (the exceptions of samples skipped under ``skip_errors``).

    ``images`` is ``[N, C, H, W]`` float32 after a tensor transform, ``[N, H, W, C]`` uint8
    without one; ``labels`` is ``[N]`` int64. Both view the loader's memory: keep them as
    long as needed, the memory goes back to the loader when the last view is gone.
    """

    __slots__ = ("images", "labels", "keys", "indices", "epoch", "skipped")

    def __init__(self, images: Any, labels: Any, keys: list[str], indices: list[int],
                 epoch: int, skipped: list[Exception]) -> None:
        self.images = images
        self.labels = labels
        self.keys = keys
        self.indices = indices
        self.epoch = epoch
        self.skipped = skipped

    def __iter__(self) -> Iterator[Any]:
        return iter((self.images, self.labels))

    def __repr__(self) -> str:
        shape = tuple(getattr(self.images, "shape", ()))
        return f"Batch(images={shape}, epoch={self.epoch}, skipped={len(self.skipped)})"


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


_TORCHVISION_STEPS = {
    "Resize", "CenterCrop", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor",
    "Normalize",
}


def _size(value: Any) -> list[float]:
    if isinstance(value, int):
        return [float(value)]
    sizes = [float(v) for v in value]
    return sizes


def _torchvision_step(step: Any) -> tuple[str, list[float]]:
    """A torchvision transform object as a native step, refusing settings the native
    pipeline would not honour (it must not silently train on other pixels)."""
    name = type(step).__name__
    if name == "Resize":
        size = step.size
        if not isinstance(size, int) and len(size) != 1:
            raise ConfigError(f"Resize({size}): only Resize(int), the shorter side, is native")
        interpolation = str(getattr(step, "interpolation", "bilinear")).lower()
        if getattr(step, "max_size", None) is not None:
            raise ConfigError("Resize(max_size=...) has no native equivalent")
        if "bilinear" not in interpolation:
            raise ConfigError(f"Resize with {interpolation}: only bilinear is native")
        return "Resize", _size(size)
    if name == "CenterCrop":
        return "CenterCrop", _size(step.size)
    if name == "RandomResizedCrop":
        h, w = (_size(step.size) * 2)[:2]
        return "RandomResizedCrop", [h, w, *map(float, step.scale), *map(float, step.ratio)]
    if name == "RandomHorizontalFlip":
        return "RandomHorizontalFlip", [float(step.p)]
    if name == "ToTensor":
        return "ToTensor", []
    if name == "Normalize":
        return "Normalize", [*map(float, step.mean), *map(float, step.std)]
    raise ConfigError(f"{name} has no native equivalent; pass a callable instead")


def _steps(spec: Sequence[Any]) -> list[tuple[str, list[float]]]:
    """Steps given as ``("Resize", 256)``, ``"ToTensor"``, ``("Normalize", mean, std)`` or
    torchvision transform objects (a ``Compose`` too)."""
    if type(spec).__name__ == "Compose":
        spec = spec.transforms
    steps: list[tuple[str, list[float]]] = []
    for step in spec:
        if isinstance(step, str):
            steps.append((step, []))
        elif isinstance(step, (tuple, list)) and step and isinstance(step[0], str):
            args: list[float] = []
            for arg in step[1:]:
                args.extend(_size(arg) if not isinstance(arg, float) else [arg])
            steps.append((step[0], args))
        elif type(step).__name__ in _TORCHVISION_STEPS:
            steps.append(_torchvision_step(step))
        else:
            raise ConfigError(f"transform step {step!r}: give (name, *args) or a torchvision transform")
    return steps


class DataLoader:
    """Batches of a dataset at a URL, with PyTorch's names.

    Args:
        dataset: a URL (``s3://bucket/prefix``, ``http(s)://...``, ``file:///dir`` or a
            path: an ImageFolder, a prefix of WebDataset ``.tar`` shards, or shards as
            ``s3://bucket/train-{000000..000127}.tar``) or a :class:`Dataset`.
        batch_size: samples per batch.
        shuffle: a new order every epoch (for shards: shards shuffled, samples shuffled
            within a buffer, few large GETs; see ``shard_order``).
        seed: the seed of the orders and the random transforms; resumes are exact for it.
        drop_last: drop the last, short batch of an epoch.
        transform: ``"imagenet_eval"`` or ``"imagenet_train"`` (float32 ``[3, 224, 224]``),
            torchvision-named steps (``[("Resize", 256), ("CenterCrop", 224), "ToTensor",
            ("Normalize", mean, std)]``, or torchvision's own transform objects, or their
            ``Compose``), run natively; a callable taking a uint8 HWC numpy array and
            returning an array (HWC or CHW; uint8 stays, floats become float32), run on the
            decode threads under the GIL; or ``None`` for uint8 ``[H, W, C]`` images.
        num_workers: decode threads (default: one per core; 0 means one). Threads, not
            processes: nothing is pickled or copied between them.
        max_in_flight: storage requests in flight, fixed (default: set by the loader
            itself from the latency and rates it measures, up to 16,384).
        prefetch_factor: finished batches kept ready (default 2).
        storage_options: the store's settings, e.g. ``{"aws_endpoint": ...,
            "aws_region": ...}`` (otherwise the usual environment variables).
        manifest: a CSV (``key,label``) or JSON-lines key under the URL listing the samples,
            instead of listing the store.
        rank, world_size: this process's share of every epoch (default: from ``RANK`` and
            ``WORLD_SIZE`` as torchrun sets them, or SLURM's ``SLURM_PROCID`` and
            ``SLURM_NTASKS``); ranks read disjoint samples, as PyTorch's
            ``DistributedSampler``.
        skip_errors: skip up to this many failing samples per epoch (reported in
            ``batch.skipped``) instead of raising at the first.
        shard_order: ``"local"`` or ``"global"`` for shuffled shards.
        shuffle_buffer: samples shuffled together in ``"local"`` shard order.
        cache_dir: cache what is read in this directory, so later epochs and runs read
            local disk; ``cache_size`` its budget in bytes (default 16 GiB),
            ``cache_memory`` the memory tier's (default 256 MiB), ``cache_policy``
            ``"future"``, ``"lru"`` or ``"pin-once"``.
        epochs: epochs to read at most (the loader does not prefetch past the last).
        request_timeout: seconds one attempt of one request may take (default 30).
        max_retries: retries of a failed request (default 9, with backoff, within 2 min).
        output: ``"torch"``, ``"numpy"`` or ``"auto"`` (torch tensors when torch imports).

    Iterating reads one epoch; iterating again reads the next one (or, after a ``break``,
    the rest of the current one). ``state_dict()`` and ``load_state_dict()`` resume exactly.
    """

    def __init__(
        self,
        dataset: str | Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        seed: int = 0,
        drop_last: bool = False,
        transform: Transform = None,
        num_workers: int | None = None,
        max_in_flight: int | None = None,
        prefetch_factor: int | None = None,
        storage_options: dict[str, str] | None = None,
        manifest: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        skip_errors: int | None = None,
        shard_order: Literal["local", "global"] = "local",
        shuffle_buffer: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | None = None,
        cache_memory: int | None = None,
        cache_policy: Literal["future", "lru", "pin-once"] = "future",
        epochs: int | None = None,
        request_timeout: float | None = None,
        max_retries: int | None = None,
        output: Literal["auto", "torch", "numpy"] = "auto",
    ) -> None:
        if isinstance(dataset, (str, os.PathLike)):
            dataset = Dataset(os.fspath(dataset), manifest=manifest,
                              storage_options=storage_options)
        elif manifest is not None or storage_options is not None:
            raise ConfigError("manifest and storage_options belong to the Dataset given")
        self.dataset = dataset
        name = steps = function = None
        if isinstance(transform, str):
            name = transform
        elif callable(transform) and type(transform).__name__ != "Compose" \
                and type(transform).__name__ not in _TORCHVISION_STEPS:
            function = transform
        elif transform is not None:
            steps = _steps(transform)
        if output == "auto":
            self._torch = _torch_or_none()
        elif output == "torch":
            import torch

            self._torch = torch
        elif output == "numpy":
            self._torch = None
        else:
            raise ConfigError(f"output {output!r}: auto, torch or numpy")
        self._native = _native.Loader(
            dataset, batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
            transform=name, steps=steps, transform_fn=function, num_workers=num_workers,
            max_in_flight=max_in_flight, prefetch_factor=prefetch_factor, rank=rank,
            world_size=world_size, skip_errors=skip_errors, shard_order=shard_order,
            shuffle_buffer=shuffle_buffer,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache_size=cache_size, cache_memory=cache_memory, cache_policy=cache_policy,
            epochs=epochs, request_timeout=request_timeout, max_retries=max_retries,
        )
        self.batch_size = batch_size

    def _array(self, buffer: _native.HostBuffer) -> Any:
        array = numpy.asarray(buffer)  # a view: the buffer protocol, no copy
        return array if self._torch is None else self._torch.from_numpy(array)

    def __iter__(self) -> Iterator[Batch]:
        native = self._native
        while True:
            raw = native.next_batch()
            if raw is None:
                return
            images, labels, keys, indices, epoch, skipped = raw
            yield Batch(self._array(images), self._array(labels), keys, indices, epoch, skipped)

    def __len__(self) -> int:
        """Batches per epoch (of this rank)."""
        return len(self._native)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._native.epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next, as ``DistributedSampler.set_epoch``; setting the epoch the
        loader is in keeps its position (so a resumed run's ``set_epoch`` continues)."""
        self._native.set_epoch(epoch)

    def state_dict(self) -> dict[str, int]:
        """Where the loader stands (epoch, samples of it delivered): save it with the
        model's; ``load_state_dict`` resumes exactly after it."""
        return self._native.state_dict()

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Continue from a ``state_dict()``: the samples not delivered before it, then the
        same epochs as without the interruption."""
        self._native.load_state_dict(dict(state_dict))

    def summary(self) -> str | None:
        """The per-stage summary of the run so far: fetch and decode rates, waits, and
        which stage limits it."""
        return self._native.summary()

    def close(self) -> None:
        """Stop now: cancel in-flight requests and join the threads."""
        self._native.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
