"""A loader's settings as a torch ``IterableDataset``: inside each worker of torch's
``DataLoader``, a loader of that worker's share."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch.utils.data

from .batch import Batch


def keep(batch: Batch) -> Batch:
    """A ``collate_fn`` for ``DataLoader(view, batch_size=None)`` that hands each batch on as
    it came, keys and all (a module-level function, so ``spawn`` workers can unpickle it)."""
    return batch


class LoaderIterable(torch.utils.data.IterableDataset):
    """What :meth:`DataLoader.as_iterable_dataset` returns. It holds settings only, so it
    forks and pickles (``spawn``) as torch's workers need; each worker makes its own
    loader on first use: share ``rank * num_workers + worker`` of ``world_size *
    num_workers``."""

    def __init__(self, settings: dict[str, Any], make: Callable[..., Any]) -> None:
        self._settings = settings
        # The loader class, handed in (by reference, so it pickles): no import back.
        self._make = make
        self._epoch: int | None = None
        self._loader: Any = None

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` in the next pass (of every worker)."""
        self._epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        if self._loader is None:
            info = torch.utils.data.get_worker_info()
            workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
            rank, world = self._settings["rank"], self._settings["world_size"]
            self._loader = self._make(**dict(self._settings, rank=rank * workers + worker,
                                             world_size=world * workers))
        if self._epoch is not None:
            self._loader.set_epoch(self._epoch)
        return iter(self._loader)

    def __getstate__(self) -> dict[str, Any]:
        # A worker gets the settings and the epoch, never a loader of this process.
        return {"_settings": self._settings, "_make": self._make, "_epoch": self._epoch,
                "_loader": None}
