"""The build backend of loader-ml: maturin's, after a look at what a build from source needs.

pip installs the manylinux wheel where there is one; this runs only for a build from source
(the sdist, or a checkout). libjpeg-turbo, the default JPEG decoder, is compiled from its C
source and needs cmake, and nasm for its SIMD code. Without them the build would stop after
minutes with a page of CMake output, so it stops at once with one line that says what to
install, or to set ``LOADER_PURE_RUST=1`` for the pure-Rust decoder (zune-jpeg, within a
mean of 0.2 levels of libjpeg-turbo), which needs neither.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Mapping

import maturin

PURE_RUST = "LOADER_PURE_RUST"
_PURE_ARGS = "--no-default-features"


def _say(message: str) -> None:
    """A line the user sees while pip builds: pip keeps a backend's output to itself unless
    run with ``-v``, so a build of minutes would otherwise show a spinner alone. The line goes
    to the terminal as well when there is one."""
    print(message, file=sys.stderr)
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(message + "\n")
    except OSError:
        pass


def _pure_rust() -> bool:
    return os.environ.get(PURE_RUST, "").strip().lower() not in ("", "0", "false", "no", "off")


def _check_tools() -> None:
    """One line naming the install command when cmake or nasm is missing."""
    if _pure_rust():
        return
    missing = [tool for tool in ("cmake", "nasm") if shutil.which(tool) is None]
    if "cmake" in missing and os.environ.get("CMAKE") and shutil.which(os.environ["CMAKE"]):
        missing.remove("cmake")  # the cmake crate runs $CMAKE when it is set
    if missing:
        tools = " ".join(missing)
        raise SystemExit(
            f"loader-ml: building from source needs {' and '.join(missing)} for libjpeg-turbo: "
            f"install them (`sudo apt-get install {tools}`, `dnf install {tools}`, "
            f"`brew install {tools}`) or set {PURE_RUST}=1 for the pure-Rust JPEG decoder")


def _prepared(config_settings: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The settings for maturin: its build arguments with the pure-Rust build's when asked;
    or a one-line error when a tool the default build needs is missing."""
    if _pure_rust():
        _say(f"loader-ml: {PURE_RUST} is set: building the pure-Rust JPEG decoder "
             "(no cmake or nasm needed)")
        settings = dict(config_settings or {})
        for key in ("maturin.build-args", "build-args"):
            if key in settings:
                given = settings[key]
                settings[key] = (f"{given} {_PURE_ARGS}" if isinstance(given, str)
                                 else [*given, _PURE_ARGS])
                return settings
        os.environ["MATURIN_PEP517_ARGS"] = (
            os.environ.get("MATURIN_PEP517_ARGS", "") + " " + _PURE_ARGS).strip()
        return config_settings
    _check_tools()
    _say("loader-ml: building from source: a release build of the Rust workspace and "
         "libjpeg-turbo, about 6 minutes on two cores (`pip install -v` shows cargo's "
         "progress)")
    return config_settings


def build_wheel(wheel_directory: str, config_settings: Mapping[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """PEP 517: the wheel, built by maturin after the check."""
    return maturin.build_wheel(wheel_directory, _prepared(config_settings), metadata_directory)


def build_editable(wheel_directory: str, config_settings: Mapping[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    """PEP 660: the editable wheel, built by maturin after the check."""
    return maturin.build_editable(wheel_directory, _prepared(config_settings),
                                  metadata_directory)


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    """PEP 517: the first hook pip calls, so a missing tool stops the build before maturin
    fetches anything (without cargo it would download a Rust toolchain first)."""
    _check_tools()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None
                                    ) -> list[str]:
    """PEP 660: as for a wheel."""
    _check_tools()
    return maturin.get_requires_for_build_editable(config_settings)


build_sdist = maturin.build_sdist
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = maturin.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = maturin.prepare_metadata_for_build_editable
