"""Type stubs of loader_ml's extension module (the Python API is in ``loader_ml``)."""

from typing import Any

__version__: str

class HostBuffer:
    """Memory owned by the loader, lent through the buffer protocol (``numpy.asarray``)."""

    @property
    def shape(self) -> list[int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def data_ptr(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class Dataset:
    """A dataset at a URL: an ImageFolder, WebDataset shards, or a manifest's samples."""

    def __init__(
        self,
        url: str,
        *,
        manifest: str | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> tuple[str, int]:
        """``(key, label)`` of sample ``index``."""
    @property
    def classes(self) -> list[str]: ...
    @property
    def backend(self) -> str: ...
    @property
    def num_shards(self) -> int: ...

class Loader:
    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        transform: str | None = None,
        steps: list[tuple[str, list[float]]] | None = None,
        transform_fn: Any = None,
        num_workers: int | None = None,
        max_in_flight: int | None = None,
        prefetch_factor: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        skip_errors: int | None = None,
        shard_order: str = "local",
        shuffle_buffer: int | None = None,
        cache_dir: str | None = None,
        cache_size: int | None = None,
        cache_memory: int | None = None,
        cache_policy: str = "future",
        epochs: int | None = None,
        request_timeout: float | None = None,
        max_retries: int | None = None,
    ) -> None: ...
    def next_batch(
        self,
    ) -> tuple[HostBuffer, HostBuffer, list[str], list[int], int, list[Exception]] | None: ...
    def __len__(self) -> int: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    def begin_pass(self) -> int: ...
    def take_unreported_skips(self) -> list[Exception]: ...
    def set_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def summary(self) -> str | None: ...
    def close(self) -> None: ...

def _shutting_down() -> None: ...
