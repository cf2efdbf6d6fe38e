"""A batch as the loader hands it: a tuple of its fields with the keys, indices and epoch
beside them, movable (``.to``), picklable and seen through by torch's pytree."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["Batch", "TokenBatch"]


class Batch(tuple):
    """One batch: the tuple ``(images, labels)``, so it unpacks (``images, labels =
    batch``), indexes (``batch[0]``) and has ``len(batch) == 2`` as torch's default collate
    of ``(image, label)`` samples does; with ``fields=``, the tuple of those fields in their
    order (``batch.field("json")`` finds one by name). It also has ``keys``, ``indices``,
    ``epoch``, ``skipped`` (the exceptions of samples skipped under ``skip_errors``),
    ``sources`` (each sample's dataset, by its place in a mixture's list; all 0 for one
    dataset) and ``padding``: how many samples at the end repeat other ranks' samples,
    which happens only in an epoch's last global batch when it holds fewer samples than
    there are ranks (so every rank still takes a step; mask them out of the loss to count
    each sample once).

    ``batch.to(device, non_blocking=True)`` moves its tensors and keeps the rest, which is
    how Lightning's ``move_data_to_device`` and Accelerate's ``send_to_device`` move it;
    ``torch.utils._pytree`` sees its values as children. A library that rebuilds it from
    its values alone (torch's default conversion) makes a ``Batch`` whose ``keys``,
    ``indices``, ``epoch`` and ``skipped`` are ``None``.

    ``images`` is ``[N, C, H, W]`` float32 after a tensor transform, ``[N, H, W, C]`` uint8
    without one; ``labels`` is ``[N]`` int64 class indices, or float32 for a manifest read
    with ``labels="multi"`` (multi-hot ``[N, classes]``) or ``labels="values"`` (``[N]`` or
    ``[N, K]``). Both view the loader's memory: keep them as
    long as needed, the memory goes back to the loader when the last view is gone.
    """

    keys: list[str] | None
    indices: list[int] | None
    epoch: int | None
    skipped: list[Exception] | None
    padding: int | None
    sources: list[int] | None

    def __new__(cls, *values: Any, keys: Sequence[str] | None = None,
                indices: Sequence[int] | None = None, epoch: int | None = None,
                skipped: Sequence[Exception] | None = None,
                fields: Sequence[str] | None = None, padding: int | None = None,
                sources: Sequence[int] | None = None) -> Batch:
        # Made from its values alone (by a library rebuilding it), what it was read as
        # is unknown: None, never an empty list that would claim no samples.
        self = super().__new__(cls, values)
        self.keys = None if keys is None else list(keys)
        self.indices = None if indices is None else list(indices)
        self.epoch = epoch
        self.skipped = None if skipped is None else list(skipped)
        self._names = None if fields is None else tuple(fields)
        self.padding = padding
        self.sources = None if sources is None else list(sources)
        return self

    @property
    def _fields(self) -> tuple[str, ...]:
        """Its values' names, as a NamedTuple's: torch's default conversion
        (``DataLoader(batch_size=None)``) and pin-memory thread rebuild a batch as
        ``Batch(*values)`` when this exists, instead of a list."""
        if self._names is not None:
            return self._names
        return ("images", "labels") if len(self) == 2 else tuple(
            f"field{i}" for i in range(len(self)))

    def field(self, name: str) -> Any:
        """The values of the field ``name`` (as given in ``fields=``, or one of its
        suffixes)."""
        for i, field in enumerate(self._fields):
            if name == field or name in field.split(";"):
                return self[i]
        raise KeyError(f"no field {name!r}; the fields are {', '.join(self._fields)}")

    @property
    def images(self) -> Any:
        """The batch's images: the first value (with ``fields=``, the first field's)."""
        return self[0]

    @property
    def labels(self) -> Any:
        """The batch's labels: the second value (with ``fields=``, the first field that is
        a label, ``.cls`` and the like; ``None`` when none is, or when a batch rebuilt from
        its values alone has other than two)."""
        if self._names is None:
            return self[1] if len(self) == 2 else None
        from .fields import INT_SUFFIXES

        for i, field in enumerate(self._names):
            if all(s.rsplit(".", 1)[-1] in INT_SUFFIXES for s in field.split(";")):
                return self[i]
        return None

    def _with(self, *values: Any) -> Batch:
        """Other values, the same samples."""
        return Batch(*values, keys=self.keys, indices=self.indices, epoch=self.epoch,
                     skipped=self.skipped, fields=self._names, padding=self.padding,
                     sources=self.sources)

    def to(self, *args: Any, **kwargs: Any) -> Batch:
        """The batch with each tensor's ``.to(*args, **kwargs)``, also those in its lists
        and dicts (a field of ragged arrays); numpy arrays, which have no ``to``, and other
        values stay as they are."""
        return self._with(*(_moved(x, args, kwargs) for x in self))

    def _context(self) -> tuple[Any, ...]:
        return (self.keys, self.indices, self.epoch, self.skipped, self._names, self.padding,
                self.sources)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_batch, (tuple(self), self._context()))

    def __repr__(self) -> str:
        skipped = None if self.skipped is None else len(self.skipped)
        shapes = ", ".join(f"{name}={_shape(value)}" for name, value in zip(self._fields, self))
        return f"Batch({shapes}, epoch={self.epoch}, skipped={skipped})"


class TokenBatch(dict):
    """One batch of packed token rows, a dict as Hugging Face models take it
    (``model(**{k: batch[k] for k in ("input_ids", "labels", "position_ids")})``):
    ``input_ids``, ``labels`` (the inputs shifted by one; -100 where nothing is trained),
    ``position_ids`` (restarting with each document) and ``document_ids`` (-1 for padding),
    each ``[B, block_size]`` int64; ``cu_seqlens``, int32 ``[S + 1]``, where each document
    segment starts in the batch flattened to ``B * block_size`` tokens (a document spanning
    two rows is two segments), and ``max_seqlen``, the longest: what flash-attention's
    varlen kernels take. Beside the values, as ``Batch`` has them: ``keys``, ``indices``
    (each row's block), ``epoch``, ``skipped``, ``padding`` and ``sources``.

    ``batch.to(device, non_blocking=True)`` moves its tensors and keeps the rest.
    """

    #: The tensors, in the order a batch holds them.
    TENSORS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")

    def __init__(self, values: dict[str, Any], *, max_seqlen: int | None = None,
                 keys: Sequence[str] | None = None, indices: Sequence[int] | None = None,
                 epoch: int | None = None, skipped: Sequence[Exception] | None = None,
                 padding: int | None = None, sources: Sequence[int] | None = None) -> None:
        super().__init__(values)
        self.max_seqlen = max_seqlen
        self.keys = None if keys is None else list(keys)
        self.indices = None if indices is None else list(indices)
        self.epoch = epoch
        self.skipped = None if skipped is None else list(skipped)
        self.padding = padding
        self.sources = None if sources is None else list(sources)

    def _context(self) -> dict[str, Any]:
        return {"max_seqlen": self.max_seqlen, "keys": self.keys, "indices": self.indices,
                "epoch": self.epoch, "skipped": self.skipped, "padding": self.padding,
                "sources": self.sources}

    def to(self, *args: Any, **kwargs: Any) -> TokenBatch:
        """The batch with each tensor's ``.to(*args, **kwargs)``."""
        return TokenBatch({k: _moved(v, args, kwargs) for k, v in self.items()},
                          **self._context())

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_tokens, (dict(self), self._context()))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}={_shape(value)}" for name, value in self.items())
        return f"TokenBatch({shapes}, max_seqlen={self.max_seqlen}, epoch={self.epoch})"


def _rebuild_tokens(values: dict[str, Any], context: dict[str, Any]) -> TokenBatch:
    """A token batch from its values and what ``TokenBatch._context`` kept."""
    return TokenBatch(values, **context)


def _moved(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``value.to(...)`` for a tensor, recursively for lists, tuples and dicts of them."""
    if hasattr(value, "to") and not isinstance(value, (list, tuple, dict)):
        return value.to(*args, **kwargs)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_moved(v, args, kwargs) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, args, kwargs) for k, v in value.items()}
    return value


def _shape(value: Any) -> Any:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else f"[{len(value)} values]"


def _rebuild_batch(values: tuple[Any, ...], context: tuple[Any, ...]) -> Batch:
    """A batch from its values and what ``Batch._context`` kept (pickle, pytree)."""
    keys, indices, epoch, skipped, fields, padding, sources = context
    return Batch(*values, keys=keys, indices=indices, epoch=epoch, skipped=skipped,
                 fields=fields, padding=padding, sources=sources)


_PYTREE_REGISTERED = False


def _register_pytree(torch: Any) -> None:
    """Make ``torch.utils._pytree`` (``tree_map``, ``torch.compile``'s input handling) see
    a batch's values, not one opaque leaf, and rebuild it with its keys."""
    global _PYTREE_REGISTERED
    if _PYTREE_REGISTERED or torch is None:
        return
    _PYTREE_REGISTERED = True
    from torch.utils import _pytree

    _pytree.register_pytree_node(
        Batch,
        lambda b: (list(b), b._context()),
        lambda values, context: _rebuild_batch(tuple(values), context),
        serialized_type_name="loader_ml.Batch",
    )
    _pytree.register_pytree_node(
        TokenBatch,
        lambda b: (list(b.values()), (list(b.keys()), b._context())),
        lambda values, context: TokenBatch(dict(zip(context[0], values)), **context[1]),
        serialized_type_name="loader_ml.TokenBatch",
    )


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch
