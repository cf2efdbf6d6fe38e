"""Transforms as the user gives them (torchvision's objects, ``Compose``, named steps,
callables) mapped onto the native pipeline's steps; what cannot run natively runs after it,
in Python (:class:`PythonTail`)."""

from __future__ import annotations

import numbers
from typing import Any

from . import _native
from .errors import ConfigError


#: The steps the native pipeline runs, each with its parameters in torchvision's
#: positional order: from the native module, where the spec is declared.
_STEP_FIELDS: dict[str, list[str]] = dict(_native.transform_steps())
_NATIVE_STEPS = tuple(name for name in _STEP_FIELDS if name != "ImageNetNormalize")


def _is_torchvision(step: Any) -> bool:
    return type(step).__module__.startswith("torchvision.transforms")


def _whole(value: Any) -> int:
    """A number of pixels: an int, or a float that is one (``256.0``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != int(value):
        raise ConfigError(f"size {value!r}: a whole number of pixels")
    return int(value)


def _size(value: Any) -> Any:
    """torchvision's size: one number, or ``[height, width]``."""
    if isinstance(value, numbers.Real):
        return _whole(value)
    sizes = [_whole(v) for v in value]
    return sizes[0] if len(sizes) == 1 else sizes


class NotNative(ConfigError):
    """A torchvision transform, or one of its settings, the native pipeline does not run:
    it and the steps after it run in Python (see :class:`PythonTail`)."""


def _interpolation(name: str, step: Any, allowed: tuple[str, ...]) -> str:
    mode = getattr(step, "interpolation", allowed[0])
    mode = str(getattr(mode, "value", mode)).lower()
    if mode not in allowed:
        raise NotNative(f"{name} with {mode} interpolation (native: {', '.join(allowed)})")
    return mode


def _resize_interpolation(name: str, step: Any) -> str:
    """The native resize is antialiased bilinear or bicubic, as torchvision's on PIL."""
    mode = _interpolation(name, step, ("bilinear", "bicubic"))
    if getattr(step, "antialias", True) is False:
        raise NotNative(f"{name}(antialias=False)")
    return mode


def _fill(name: str, step: Any) -> Any:
    fill = getattr(step, "fill", None)
    if fill is None or isinstance(fill, numbers.Real):
        return fill
    if isinstance(fill, dict):
        raise NotNative(f"{name}(fill=<per type>)")
    return [float(v) for v in fill]


def _pair(value: Any) -> Any:
    return None if value is None else [float(v) for v in value]


def _torchvision_step(step: Any) -> dict[str, Any]:
    """A torchvision transform object as a native step. Every parameter of the class is
    read: one the native pipeline would not honour raises :class:`NotNative`, so it runs in
    torchvision itself rather than as something else."""
    name = type(step).__name__
    if name == "Resize":
        size = step.size
        if not isinstance(size, int) and len(size) != 1:
            raise NotNative(f"Resize({size}) (native: Resize(int), the shorter side)")
        if getattr(step, "max_size", None) is not None:
            raise NotNative("Resize(max_size=...)")
        return {"step": "Resize", "size": _size(size),
                "interpolation": _resize_interpolation(name, step)}
    if name == "CenterCrop":
        return {"step": "CenterCrop", "size": _size(step.size)}
    if name == "RandomResizedCrop":
        return {"step": "RandomResizedCrop", "size": _size(step.size),
                "scale": [*map(float, step.scale)], "ratio": [*map(float, step.ratio)],
                "interpolation": _resize_interpolation(name, step)}
    if name == "RandomHorizontalFlip":
        return {"step": "RandomHorizontalFlip", "p": float(step.p)}
    if name == "ColorJitter":
        return {"step": name, **{f: _pair(getattr(step, f))
                                 for f in ("brightness", "contrast", "saturation", "hue")}}
    if name == "RandAugment":
        return {"step": name, "num_ops": int(step.num_ops), "magnitude": int(step.magnitude),
                "num_magnitude_bins": int(step.num_magnitude_bins),
                "interpolation": _interpolation(name, step, ("nearest", "bilinear")),
                "fill": _fill(name, step)}
    if name == "TrivialAugmentWide":
        return {"step": name, "num_magnitude_bins": int(step.num_magnitude_bins),
                "interpolation": _interpolation(name, step, ("nearest", "bilinear")),
                "fill": _fill(name, step)}
    if name == "GaussianBlur":
        return {"step": name, "kernel_size": [int(k) for k in step.kernel_size],
                "sigma": _pair(step.sigma)}
    if name == "RandomRotation":
        return {"step": name, "degrees": _pair(step.degrees),
                "interpolation": _interpolation(name, step, ("nearest", "bilinear")),
                "expand": bool(step.expand), "center": _pair(step.center),
                "fill": _fill(name, step)}
    if name == "RandomAffine":
        return {"step": name, "degrees": _pair(step.degrees), "translate": _pair(step.translate),
                "scale": _pair(step.scale), "shear": _pair(step.shear),
                "interpolation": _interpolation(name, step, ("nearest", "bilinear")),
                "fill": _fill(name, step), "center": _pair(step.center)}
    if name in ("ToTensor", "ToImage", "PILToTensor"):
        return {"step": name}
    if name == "ToDtype":
        import torch

        if step.dtype is not torch.float32 or not step.scale:
            raise NotNative(f"ToDtype({step.dtype}, scale={step.scale}) (native: "
                            "ToDtype(torch.float32, scale=True))")
        return {"step": name, "dtype": "float32", "scale": True}
    if name == "Normalize":
        if getattr(step, "inplace", False):
            pass  # in place or not, the values are the same
        return {"step": "Normalize", "mean": [*map(float, step.mean)],
                "std": [*map(float, step.std)]}
    if name == "RandomErasing":
        value = step.value
        value = "random" if value is None or isinstance(value, str) else (
            float(value) if isinstance(value, numbers.Real) else [float(v) for v in value])
        return {"step": name, "p": float(step.p), "scale": _pair(step.scale),
                "ratio": _pair(step.ratio), "value": value}
    raise NotNative(f"{name} (native: {', '.join(_NATIVE_STEPS)})")


# Steps on a tensor: a Python tail that starts after one of them would get a tensor, so
# the tail starts at the first of them instead, and gets the PIL image.
_TENSOR_STEPS = frozenset({"ToTensor", "ToImage", "PILToTensor", "ToDtype", "Normalize",
                           "ImageNetNormalize", "RandomErasing"})


class PythonTail:
    """The steps after the native ones, run in Python on the decode threads (under the
    GIL): the first gets the natively transformed image as a PIL image (what torchvision
    gives it in a ``Compose``). Their random draws are torch's own generator's, so unlike
    the native steps' they are not the same on every run."""

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps

    def __call__(self, array: Any) -> Any:
        from PIL import Image

        x = Image.fromarray(array)
        for step in self.steps:
            x = step(x)
        return x

    def __repr__(self) -> str:
        return f"PythonTail({', '.join(type(s).__name__ for s in self.steps)})"


def _steps(spec: Any) -> tuple[list[dict[str, Any]], PythonTail | None]:
    """Steps given as ``("Resize", 256)``, ``"ToTensor"``, ``("Normalize", mean, std)``,
    ``{"step": "Resize", "size": 256}`` or torchvision transform objects (a ``Compose`` too,
    or one transform alone), as the native spec's dicts; from the first torchvision
    transform (or callable) that is not native on, the rest as a :class:`PythonTail`."""
    if type(spec).__name__ == "Compose" and _is_torchvision(spec):
        spec = spec.transforms
    elif _is_torchvision(spec):
        spec = [spec]
    if isinstance(spec, (str, bytes)) or not isinstance(spec, (list, tuple)):
        raise ConfigError(
            f"transform {spec!r}: give a name (\"imagenet_eval\"), a list of steps, a "
            "torchvision transform or Compose, or a callable")
    steps: list[dict[str, Any]] = []
    for at, step in enumerate(spec):
        if isinstance(step, str):
            step = (step,)
        if isinstance(step, dict):
            steps.append(step)
        elif isinstance(step, (tuple, list)) and step and isinstance(step[0], str):
            name, args = step[0], step[1:]
            fields = _STEP_FIELDS.get(name)
            if fields is None:
                raise ConfigError(
                    f"unknown transform step {name!r}; known: {', '.join(_NATIVE_STEPS)}")
            if len(args) > len(fields):
                raise ConfigError(f"{name}{tuple(args)!r}: {name} takes {', '.join(fields)}")
            steps.append({"step": name, **{
                field: _size(arg) if field == "size" else _plain(arg)
                for field, arg in zip(fields, args)}})
        elif _is_torchvision(step) or callable(step):
            try:
                if not _is_torchvision(step):
                    raise NotNative(f"{step!r} is not a torchvision transform")
                steps.append(_torchvision_step(step))
            except NotNative:
                # The tail starts here, or at the first tensor step before it.
                head = next((i for i, s in enumerate(steps) if s["step"] in _TENSOR_STEPS),
                            len(steps))
                tail = [*spec[head:]]
                for s in tail:
                    if not (_is_torchvision(s) or callable(s)):
                        raise ConfigError(
                            f"transform step {s!r} comes after {type(step).__name__}, which "
                            "runs in Python: give the steps after it as torchvision "
                            "transforms or callables") from None
                return steps[:head], PythonTail(tail)
        else:
            raise ConfigError(
                f"transform step {step!r}: give (name, *args), a name, a dict, or a "
                "torchvision transform")
    return steps, None


def _plain(value: Any) -> Any:
    """A positional argument as JSON takes it: numbers stay ints or floats, sequences
    become lists."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return [_plain(v) for v in value]
