"""loader_ml: feed PyTorch training from S3, HTTP or local disk as fast as from a local drive.

Many requests in flight on an async runtime, decoding on native threads without the GIL,
bounded prefetch, exact order and resume. Batches arrive as torch tensors (numpy arrays
without torch) that share the loader's memory: no copy between the loader and the model.

>>> import loader_ml
>>> loader = loader_ml.DataLoader("s3://bucket/train", batch_size=64, shuffle=True,
...                               transform="imagenet_train")            # doctest: +SKIP
>>> for images, labels in loader:                                       # doctest: +SKIP
...     ...
"""

from __future__ import annotations

from . import errors
from ._native import Dataset, __version__
from .errors import (
    ConfigError,
    DecodeError,
    LoaderError,
    NotFoundError,
    PermissionDeniedError,
    TransientError,
)
from .loader import Batch, DataLoader, TokenBatch

__all__ = [
    "Batch",
    "ConfigError",
    "DataLoader",
    "Dataset",
    "DecodeError",
    "LoaderError",
    "NotFoundError",
    "PermissionDeniedError",
    "TokenBatch",
    "TransientError",
    "__version__",
    "errors",
]
