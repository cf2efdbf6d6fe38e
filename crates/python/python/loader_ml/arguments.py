"""``DataLoader``'s arguments, checked and turned into what the native loader takes: the
datasets opened with their source settings, the fields planned, the ranks found, the
transform split into its native and Python parts. Every check of how the arguments go
together is here; the native side checks the options' own values."""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

from . import _native
from . import fields as sample_fields
from ._native import Dataset
from .errors import ConfigError
from .options import _OPTIONS, _option_text
from .transforms import _is_torchvision, _steps

#: The keywords that cut a token dataset into blocks, as it is opened.
TOKEN_KEYWORDS = ("block_size", "keep_tail", "vocab_size", "token_column")

#: The keywords that open a dataset given by its URL (``source.*`` options and the store's).
SOURCE_KEYWORDS = ("manifest", "storage_options", "labels", "classes", "image_column",
                   "label_column", "member_columns", *TOKEN_KEYWORDS, "format")


def plan_fields(fields: Any, decode: Any, transform: Any,
                member_columns: Any) -> list[sample_fields.Field] | None:
    """The fields of each sample as planned for shards (planned again once the datasets
    say whether they are sharded), or None for (image, label) batches."""
    if member_columns is not None:
        raise ConfigError("member_columns: the Python package does not hand a sample's "
                          "members to Python yet; read them from Rust "
                          "(SampleInfo::members)")
    if fields is None and decode is not None:
        raise ConfigError("decode= says how the members named by fields= are decoded: "
                          "give fields= too")
    if fields is None:
        return None
    return sample_fields.plan(fields, decode, sharded=True, transform=transform is not None)


def open_datasets(dataset: Any, weights: Sequence[float] | None,
                  planned: list[sample_fields.Field] | None, source: dict[str, Any],
                  options: dict[str, Any]) -> list[Dataset]:
    """The datasets read: those given, and those named by URL opened with ``source`` (the
    source keywords) and ``options`` (option keywords a dataset is opened with: the request
    bounds its listing and index reads honour)."""
    given = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
    if not given:
        raise ConfigError("give a dataset, or a list of datasets to mix")
    if weights is not None and len(weights) != len(given):
        raise ConfigError(f"{len(weights)} weights for {len(given)} datasets: "
                          "give one weight per dataset")
    names = None if planned is None else [f.name for f in planned]
    datasets = []
    for one in given:
        if isinstance(one, (str, os.PathLike)):
            classes, members = source["classes"], source["member_columns"]
            one = Dataset(os.fspath(one), **{
                **source, "fields": names,
                "classes": None if classes is None else list(classes),
                "member_columns": None if members is None else list(members),
                "options": {_OPTIONS[k]: _option_text(v) for k, v in options.items()
                            if v is not None}})
        elif any(source.get(k) is not None for k in TOKEN_KEYWORDS):
            raise ConfigError(", ".join(TOKEN_KEYWORDS) + " say how the Dataset given is "
                              "opened: open it with them (Dataset(url, block_size=...)), or "
                              "give the URL")
        elif any(v is not None for v in source.values()):
            raise ConfigError(", ".join(SOURCE_KEYWORDS[:-1]) + " and format belong to the "
                              "Dataset given: open it with them, or give the URL")
        elif one.num_shards and one.fields != names:
            raise ConfigError(
                f"fields={names!r}, but the Dataset given was opened with fields="
                f"{one.fields!r}: open it with the same fields, or give the URL")
        datasets.append(one)
    return datasets


def replan_fields(planned: list[sample_fields.Field] | None, datasets: list[Dataset],
                  fields: Any, decode: Any, transform: Any) -> list[sample_fields.Field] | None:
    """The fields planned for what the datasets are, and every dataset checked to give
    what the batches hold (labels, the objects the first field names)."""
    if planned is not None and len({bool(d.num_shards) for d in datasets}) > 1:
        raise ConfigError("fields= names the members of WebDataset samples and the parts "
                          "of one-object samples differently: mix datasets of one kind")
    if planned is not None and not datasets[0].num_shards:
        planned = sample_fields.plan(fields or (), decode, sharded=False,
                                     transform=transform is not None)
        for one in datasets:
            _check_extensions(one, planned[0])
    if any(d.block_size is not None for d in datasets):
        if planned is not None:
            raise ConfigError("fields= names the parts of image samples; a token dataset's "
                              "blocks are packed into rows natively: leave it out")
        return None
    for one in datasets:
        if not one.labelled and (planned is None or any(f.label for f in planned)):
            raise ConfigError(
                f"{one.backend}: the dataset gives no labels (its manifest has no label "
                "column, or no label column was found among its Parquet columns or MDS "
                "or LitData leaves), so batches of (images, labels) or a label field "
                "would hold -1 for every sample; name the labels' column "
                "(label_column='class'; a LitData tuple's leaves are '0', '1', ...), "
                "or the object alone, e.g. fields='jpg' or fields='npy'")
    return planned


def _check_extensions(dataset: Dataset, field: sample_fields.Field) -> None:
    """Refuse a dataset of one object per sample whose objects are not what its first
    field names: a PNG read as ``npy`` would fail each sample, or pass as another format."""
    others = {ext: n for ext, n in dataset.extensions().items() if ext not in field.suffixes}
    if others:
        shown = ", ".join(f".{ext or '(none)'}: {n}" for ext, n in sorted(others.items()))
        raise ConfigError(
            f"fields={field.name!r}...: the dataset's objects should end in "
            f".{' or .'.join(field.suffixes)}, but {sum(others.values())} do not ({shown}); "
            "name their suffixes in the first field (alternatives split by ';')")


def transform_parts(transform: Any) -> tuple[str | None, Any, Any]:
    """``(name, steps, function)``: a built-in transform's name, the torchvision steps that
    run natively, and what runs in Python (a callable, or the steps after the native ones)."""
    if isinstance(transform, str):
        return transform, None, None
    if callable(transform) and not _is_torchvision(transform):
        return None, None, transform
    if transform is not None:
        steps, function = _steps(transform)
        return None, steps, function
    return None, None, None


def ranks(rank: int | None, world_size: int | None) -> tuple[int | None, int | None, str]:
    """``(rank, world_size, from)``: as given, else torch.distributed's process group,
    else (both None) the launcher's variables, which the native side reads. Refuses a loader
    made in a torch DataLoader worker whose share is not split by worker."""
    worker = _torch_worker()
    if worker is not None and worker.num_workers > 1:
        # Each worker reads its rank's share: unless the share is split by worker too
        # (a world of workers x ranks), every sample would come once per worker.
        group = process_group()
        world = group[1] if group is not None else _native.launch()[1]
        if world_size is None or world_size < worker.num_workers * world:
            raise ConfigError(
                f"made inside worker {worker.id} of {worker.num_workers} of a torch "
                "DataLoader: each worker would read the same share, delivering every "
                "sample once per worker. Iterate this loader directly (it fetches and "
                "decodes on threads of its own), use num_workers=0, or give rank= and "
                "world_size= that split by worker too (world_size = num_workers x "
                "ranks)")
    if rank is not None or world_size is not None:
        return rank, world_size, "given"
    group = process_group()
    if group is not None:
        return group[0], group[1], "process group"
    return None, None, "environment"


def output_module(output: str) -> Any:
    """The torch module batches are made with, or None for numpy arrays."""
    if output == "auto":
        from .batch import _torch_or_none

        return _torch_or_none()
    if output == "torch":
        import torch

        return torch
    if output == "numpy":
        return None
    raise ConfigError(f"output {output!r}: auto, torch or numpy")


def process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of torch.distributed's default process group when one is
    initialised (``mp.spawn`` + ``init_process_group`` sets no environment variables)."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def _torch_worker() -> Any:
    """torch's ``get_worker_info()`` when this runs in a torch DataLoader worker."""
    data = sys.modules.get("torch.utils.data")
    return data.get_worker_info() if data is not None else None

