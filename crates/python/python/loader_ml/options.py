"""The loader's keywords in torch's terms, and the native options they set: the table the
keyword test checks against the native declarations."""

from __future__ import annotations

import numbers
import os
from typing import Any

from .errors import ConfigError


#: Each keyword of :class:`DataLoader` that is a loader option, and its key in the native
#: ``LoaderOptions``: the one place they meet. ``test_every_native_option_is_a_keyword``
#: fails when an option has no keyword here, in the signature or in the docstring.
_OPTIONS = {
    "batch_size": "batch_size",
    "shuffle": "shuffle",
    "seed": "seed",
    "drop_last": "drop_last",
    "epochs": "epochs",
    "shard_order": "shard_order",
    "shuffle_buffer": "shuffle_buffer",
    "lanes": "lanes",
    "rank": "rank",
    "world_size": "world_size",
    "subset": "subset",
    "stop": "mixture.stop",
    "batching": "mixture.batching",
    "new_segment": "mixture.new_segment",
    "weigh_by": "mixture.weigh_by",
    "max_in_flight": "engine.fetch",
    "num_workers": "engine.decode_threads",
    "prefetch_factor": "engine.prefetch",
    "skip_errors": "engine.skip_errors",
    "order": "engine.order",
    "max_buffered_bytes": "engine.max_buffered_bytes",
    "max_decoded_bytes": "engine.max_decoded_bytes",
    "coalesce_gap": "engine.coalesce_gap",
    "max_coalesced_bytes": "engine.max_coalesced_bytes",
    "hedge": "engine.hedge",
    "request_timeout": "storage.request_timeout",
    "max_retries": "storage.max_retries",
    "cache_dir": "cache.dir",
    "cache_memory": "cache.memory",
    "cache_size": "cache.size",
    "cache_policy": "cache.policy",
    "cache_block": "cache.block",
    "cache_node_ranks": "cache.node_ranks",
    "cache_local_rank": "cache.local_rank",
    "format": "source.format",
    "manifest": "source.manifest",
    "labels": "source.labels",
    "classes": "source.classes",
    "fields": "source.fields",
    "image_column": "source.image_column",
    "label_column": "source.label_column",
    "member_columns": "source.member_columns",
    "block_size": "source.block_size",
    "keep_tail": "source.keep_tail",
    "vocab_size": "source.vocab_size",
    "token_column": "source.token_column",
    "mask_boundaries": "packing.mask_boundaries",
    "end_of_document": "packing.end_of_document",
}


def _same(value: Any) -> Any:
    return value


def _subset(value: Any) -> str:
    if isinstance(value, range) and value.step == 1:
        return f"{value.start}..{value.stop}"
    if isinstance(value, tuple) and len(value) == 2:
        return f"{int(value[0])}..{int(value[1])}"
    raise ConfigError(f"subset {value!r}: give range(start, stop) or (start, stop)")


def _stop(value: Any) -> str:
    if isinstance(value, bool):
        raise ConfigError(f"stop={value!r}: a rule's name, or a number of samples per epoch")
    if isinstance(value, numbers.Integral):
        return f"samples_per_epoch:{int(value)}"
    return str(value)


#: Keywords in torch's terms, turned into the option's value.
_CONVERT: dict[str, Any] = {
    # A fixed number of requests in flight is the async strategy at that number.
    "max_in_flight": lambda n: f"async:{n}",
    # PyTorch's 0 means "in the main process": here, one decode thread.
    "num_workers": lambda n: max(1, n),
    "prefetch_factor": lambda n: max(1, n),
    "subset": _subset,
    "stop": _stop,
}


def _option_text(value: Any) -> str:
    """A value as ``LoaderOptions.set`` reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)
