"""Samples of any kind: fields chosen by member suffix (WebDataset's ``to_tuple``), each
decoded by its suffix (WebDataset's default handlers) or by a function of the caller's, and
batched as torch's default collate batches them."""

from __future__ import annotations

import io
import json
import numbers
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

import numpy

from . import _native
from .errors import ConfigError, DecodeError

#: A decoder: a built-in name (see :data:`DECODERS`) or a function of the member's bytes.
Decoder = Union[str, Callable[[bytes], Any]]

#: Suffixes of images, as the native decoder reads them: the first field's is decoded (and
#: transformed) natively.
IMAGE_SUFFIXES = frozenset(_native.image_suffixes())
#: Suffixes WebDataset decodes as integers (class labels, counts, ids).
INT_SUFFIXES = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
_TEXT_SUFFIXES = frozenset({"txt", "text", "transcript"})
_JSON_SUFFIXES = frozenset({"json", "jsn"})


def _int(data: bytes) -> int:
    return int(data.decode("utf-8").strip())


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _npy(data: bytes) -> numpy.ndarray:
    # No pickled objects: a shard is data, not code.
    return numpy.load(io.BytesIO(data), allow_pickle=False)


def _pil(data: bytes) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _rgb8(data: bytes) -> numpy.ndarray:
    return numpy.asarray(_pil(data).convert("RGB"))


def _l8(data: bytes) -> numpy.ndarray:
    return numpy.asarray(_pil(data).convert("L"))


#: The built-in decoders by name: ``int`` (a decimal integer, as ``.cls``), ``txt``
#: (UTF-8 text), ``json``, ``npy`` (``numpy.load``, no pickles), ``bytes`` (as stored),
#: ``rgb8`` / ``l8`` (PIL's ``convert("RGB")`` / ``("L")`` as uint8 arrays), ``pil`` (a
#: PIL image).
DECODERS: dict[str, Callable[[bytes], Any]] = {
    "int": _int, "txt": _text, "json": json.loads, "npy": _npy, "bytes": bytes,
    "rgb8": _rgb8, "l8": _l8, "pil": _pil,
}


def _last(suffix: str) -> str:
    """The suffix's last part, which WebDataset's handlers match (``seg.png`` -> ``png``)."""
    return suffix.rsplit(".", 1)[-1]


def default_decoder(suffix: str) -> str:
    """What a member with this suffix is decoded as when ``decode=`` does not say."""
    last = _last(suffix)
    if last in IMAGE_SUFFIXES:
        return "rgb8"
    if last in INT_SUFFIXES:
        return "int"
    if last in _TEXT_SUFFIXES:
        return "txt"
    if last in _JSON_SUFFIXES:
        return "json"
    if last == "npy":
        return "npy"
    return "bytes"


@dataclass(frozen=True)
class Field:
    """One field of a sample: its name as given, its suffixes, how it is decoded."""

    name: str
    suffixes: tuple[str, ...]
    decoder: Decoder
    #: Decoded by the native pipeline (the first field, an image, with the transform).
    native: bool = False
    #: The dataset's own label (a folder's class, a manifest's label column).
    label: bool = False

    def decode(self, data: bytes, key: str) -> Any:
        function = DECODERS[self.decoder] if isinstance(self.decoder, str) else self.decoder
        try:
            return function(data)
        except Exception as e:
            raise DecodeError(
                f"sample {key!r}: its .{self.name} member could not be decoded by "
                f"{_name(self.decoder)}: {e}", key=key, cause=str(e)) from e

    def collate(self, values: list[Any], keys: list[str], torch: Any) -> Any:
        """This field's values of one batch, collated (see :func:`collate`)."""
        try:
            return collate(values, torch)
        except Exception as e:
            raise DecodeError(
                f"the .{self.name} values of samples {keys[0]!r}..{keys[-1]!r} could not be "
                f"batched: {e}", key=keys[0], cause=str(e)) from e


def decode_sample(fields: tuple[Field, ...], parts: list[bytes],
                  key: str) -> tuple[tuple[Any, ...], int]:
    """One sample's raw fields decoded, each by its field's decoder, and the bytes the
    values hold (for the loader's ``max_decoded_bytes``): what the decode threads call."""
    values = tuple(field.decode(data, key) for field, data in zip(fields, parts))
    return values, sum(_nbytes(v) for v in values)


def _nbytes(value: Any) -> int:
    """About what a decoded value holds: an array's buffer, bytes or text, else its own
    size (a dict's contents are not walked: small metadata)."""
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return sys.getsizeof(value)


def _decoder_of(suffix: str, decode: Mapping[str, Decoder]) -> tuple[Decoder, bool]:
    """The decoder for a suffix and whether the caller chose it: ``decode`` by the whole
    suffix, then by its last part, else the default."""
    for name in (suffix, _last(suffix)):
        if name in decode:
            chosen = decode[name]
            if isinstance(chosen, str) and chosen not in DECODERS:
                raise ConfigError(
                    f"decode[{name!r}] = {chosen!r}: give a function of the bytes or one of "
                    f"{', '.join(DECODERS)}")
            if not isinstance(chosen, str) and not callable(chosen):
                raise ConfigError(f"decode[{name!r}] = {chosen!r}: not a function or a name")
            return chosen, True
    return default_decoder(suffix), False


def plan(fields: str | Sequence[str], decode: Mapping[str, Decoder] | None, *,
         sharded: bool, transform: bool) -> list[Field]:
    """The fields of a loader's samples, checked: each field's alternatives share one
    decoder; the first field is decoded natively when it is an image nobody chose another
    decoder for; a transform needs such a first field and no other image decoded unasked."""
    if isinstance(fields, str):
        # As webdataset's to_tuple("jpg cls"): one string of space-separated fields.
        fields = fields.split()
    decode = {str(k).lower().lstrip("."): v for k, v in (decode or {}).items()}
    planned = []
    for position, name in enumerate(fields):
        if not isinstance(name, str):
            raise ConfigError(f"field {name!r}: a member suffix such as 'jpg;png' or 'json'")
        suffixes = tuple(s.strip().lower().lstrip(".") for s in name.split(";") if s.strip())
        if not suffixes:
            raise ConfigError(f"field {name!r} names no suffix")
        if any(s.startswith("__") for s in suffixes):
            raise ConfigError(
                f"field {name!r}: a sample's key is not a member; every batch carries its "
                "samples' keys as batch.keys")
        if any(c.isspace() for s in suffixes for c in s):
            raise ConfigError(f"field {name!r}: a suffix holds a space")
        chosen = [_decoder_of(s, decode) for s in suffixes]
        decoders = {id(d) if callable(d) else d for d, _ in chosen}
        if len(decoders) > 1:
            raise ConfigError(
                f"field {name!r}: its alternatives decode differently "
                f"({', '.join(f'.{s}: {_name(d)}' for s, (d, _) in zip(suffixes, chosen))}); "
                "give them one decoder with decode=")
        decoder, asked = chosen[0]
        image = all(_last(s) in IMAGE_SUFFIXES for s in suffixes)
        native = position == 0 and image and not asked
        label = not sharded and position > 0 and all(_last(s) in INT_SUFFIXES for s in suffixes)
        if not sharded and position > 0 and not label:
            raise ConfigError(
                f"field {name!r}: a dataset of one object per sample (a folder or a "
                "manifest) has two fields, the object and its label, e.g. ('npy', 'cls'); "
                "other members exist in WebDataset shards")
        if transform and position > 0 and image and not asked:
            raise ConfigError(
                f"field {name!r} is an image, and transform= runs on the first field's "
                f"image only: say how to decode it, e.g. decode={{{suffixes[0]!r}: 'rgb8'}} "
                "(untransformed uint8 HWC), 'l8', 'bytes', or a function")
        planned.append(Field(_display(name), suffixes, decoder, native=native, label=label))
    if not planned:
        raise ConfigError("fields=(): name at least one member suffix")
    if transform and not planned[0].native:
        raise ConfigError(
            f"transform= runs on images, and the first field {planned[0].name!r} is not one "
            "decoded natively; drop transform= or make an image the first field")
    return planned


def _name(decoder: Decoder) -> str:
    """A decoder as an error shows it: its name, or its repr for objects without one."""
    if isinstance(decoder, str):
        return decoder
    return getattr(decoder, "__name__", None) or repr(decoder)


def _display(name: str) -> str:
    return ";".join(s.strip().lower().lstrip(".") for s in name.split(";") if s.strip())


def collate(values: list[Any], torch: Any) -> Any:
    """Values of one field as a batch, as torch's default collate makes them: Python
    integers as int64, floats as float64, bools as bool, numpy scalars and arrays of one
    shape and dtype stacked in their dtype (tensors too); anything else (text, dicts,
    ragged arrays, bytes) a list, whose arrays become tensors under torch output."""
    if not values:
        return values
    if all(type(v) is bool for v in values):
        return _tensor(numpy.asarray(values, numpy.bool_), torch)
    if all(isinstance(v, numbers.Integral) and not isinstance(v, (bool, numpy.generic))
           for v in values):
        return _tensor(numpy.asarray(values, numpy.int64), torch)
    if all(isinstance(v, numbers.Real) and not isinstance(v, (bool, numpy.generic))
           for v in values):
        return _tensor(numpy.asarray(values, numpy.float64), torch)
    if all(isinstance(v, (numpy.ndarray, numpy.generic)) for v in values):
        first = numpy.asarray(values[0])
        same = all(numpy.shape(v) == first.shape and v.dtype == first.dtype for v in values)
        if first.dtype.kind in "biufc":
            if same:
                return _tensor(numpy.stack(values), torch)
            return [_tensor(numpy.asarray(v), torch) for v in values]
        return list(values)
    if torch is not None and all(isinstance(v, torch.Tensor) for v in values):
        first = values[0]
        if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            return torch.stack(values)
    return list(values)


def _tensor(array: numpy.ndarray, torch: Any) -> Any:
    return array if torch is None else torch.from_numpy(array)
