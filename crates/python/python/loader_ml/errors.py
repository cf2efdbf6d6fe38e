"""The exceptions loader_ml raises.

Every one is a :class:`LoaderError` and carries ``key`` (the object, or the sample's name
within its shard), ``backend`` (the store, e.g. ``s3://bucket/train``; never a credential)
and ``cause`` (what went wrong underneath). Each also derives from the built-in exception
the same failure raises elsewhere in Python, so ``except FileNotFoundError`` or
``except ValueError`` catch them too.
"""

from __future__ import annotations

__all__ = [
    "LoaderError",
    "NotFoundError",
    "PermissionDeniedError",
    "TransientError",
    "DecodeError",
    "ConfigError",
]


class LoaderError(Exception):
    """Base of loader_ml's exceptions."""

    key: str | None
    backend: str | None
    cause: str | None

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        backend: str | None = None,
        cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.backend = backend
        self.cause = cause


class NotFoundError(LoaderError, FileNotFoundError):
    """The object (or bucket, or prefix) does not exist."""


class PermissionDeniedError(LoaderError, PermissionError):
    """The credentials are missing, wrong, or not allowed to read the object."""


class TransientError(LoaderError, ConnectionError):
    """A failure that outlasted the retries: connection errors, 5xx, throttling, timeouts."""


class DecodeError(LoaderError, ValueError):
    """The bytes are not a readable image or sample, or a Python transform raised (its
    exception is this one's ``__cause__``)."""


class ConfigError(LoaderError, ValueError):
    """The settings, or the dataset's description, do not make sense."""
