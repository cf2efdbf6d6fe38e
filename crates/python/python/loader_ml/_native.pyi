"""Type stubs of loader_ml's extension module (the Python API is in ``loader_ml``)."""

from typing import Any, Literal

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
    @property
    def owner(self) -> Any:
        """The torch tensor whose memory this is under ``pin_memory``, else ``None``."""
    def __buffer__(self, flags: int, /) -> memoryview: ...

class Dataset:
    """A dataset at a URL: an ImageFolder, WebDataset shards, Parquet files, or a
    manifest's samples."""

    def __init__(
        self,
        url: str,
        *,
        manifest: str | None = None,
        storage_options: dict[str, str] | None = None,
        fields: list[str] | None = None,
        labels: str | None = None,
        classes: list[str] | None = None,
        image_column: str | None = None,
        label_column: str | None = None,
        member_columns: list[str] | None = None,
        format: str | None = None,
        block_size: int | None = None,
        keep_tail: bool | None = None,
        vocab_size: int | None = None,
        token_column: str | None = None,
        options: dict[str, str] | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def fields(self) -> list[str] | None: ...
    def extensions(self) -> dict[str, int]: ...
    @property
    def labelled(self) -> bool: ...
    @property
    def label_kind(self) -> Literal["class", "multi", "values"]:
        """``"class"``, ``"multi"`` or ``"values"``: what its labels are."""
    def __getitem__(self, index: int) -> tuple[str, int | float | list[float] | list[int]]:
        """``(key, label)`` of sample ``index``: a class (-1 for none), a number, a list
        of numbers, or a multi-label sample's class indices."""
    @property
    def classes(self) -> list[str]: ...
    @property
    def backend(self) -> str: ...
    @property
    def num_shards(self) -> int: ...
    @property
    def block_size(self) -> int | None:
        """The tokens a row trains on, for a dataset of token blocks."""

def transform_steps() -> list[tuple[str, list[str]]]:
    """Every step a transform spec may name, with its fields in positional order."""

def image_suffixes() -> list[str]:
    """The file extensions the native decoder reads, lowercase."""

def launch() -> tuple[int, int]:
    """This process's ``(rank, world_size)`` as its launcher (torchrun, SLURM, MPI) says."""
def option_keys() -> list[tuple[str, str, str]]:
    """Every loader option: ``(key, default, doc)``."""

class Loader:
    def __init__(
        self,
        datasets: list[Dataset],
        *,
        options: dict[str, str],
        weights: list[float] | None = None,
        transform: str | None = None,
        steps: str | None = None,
        transform_fn: Any = None,
        main_image: bool = True,
        decode_fields: Any = None,
        batch_memory: Any = None,
    ) -> None: ...
    def next_batch(
        self,
    ) -> tuple[HostBuffer | None, HostBuffer, list[str], list[int], int, list[Exception],
               list[tuple[Any, ...]], int | None, int, list[int],
               dict[str, Any] | None] | None: ...
    def rewind(self, epoch: int, position: int) -> None: ...
    def __len__(self) -> int: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def decode_threads(self) -> int: ...
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
    def cache_stats(self) -> dict[str, Any] | None: ...
    def close(self) -> None: ...

def _shutting_down() -> None: ...
