"""The build backend a build from source runs (backend/loader_backend.py): a missing cmake or
nasm stops it at once with one line naming the install command; `LOADER_PURE_RUST=1` asks
maturin for the build without libjpeg-turbo, however the build arguments were given. (The
build itself is not run here: the pure-Rust one is timed in docs/benchmarks.md.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend"))
import loader_backend  # noqa: E402


@pytest.fixture()
def path_without_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LOADER_PURE_RUST", raising=False)
    monkeypatch.delenv("MATURIN_PEP517_ARGS", raising=False)


def test_a_missing_cmake_or_nasm_is_one_line_with_the_install_command(path_without_tools) -> None:
    # The first hook pip calls stops, before maturin fetches anything; so do the builds.
    for hook in (loader_backend.get_requires_for_build_wheel,
                 loader_backend.get_requires_for_build_editable,
                 lambda: loader_backend.build_wheel("unused")):
        with pytest.raises(SystemExit) as stopped:
            hook()
        message = str(stopped.value)
        assert "\n" not in message
        assert "cmake and nasm" in message and "sudo apt-get install cmake nasm" in message
        assert "LOADER_PURE_RUST=1" in message


def test_pure_rust_is_off_for_the_usual_words_for_off(path_without_tools, monkeypatch) -> None:
    for off in ("0", "false", "No", "off", ""):
        monkeypatch.setenv("LOADER_PURE_RUST", off)
        with pytest.raises(SystemExit):
            loader_backend.get_requires_for_build_wheel()


def test_pure_rust_asks_maturin_for_no_default_features(path_without_tools, monkeypatch) -> None:
    monkeypatch.setenv("LOADER_PURE_RUST", "1")
    monkeypatch.setenv("MATURIN_PEP517_ARGS", "--locked")
    assert loader_backend._prepared(None) is None
    assert os.environ["MATURIN_PEP517_ARGS"] == "--locked --no-default-features"
    # Build arguments given as config settings win over the variable: they get it too.
    given = {"maturin.build-args": ["--locked"], "other": "kept"}
    assert loader_backend._prepared(given) == {
        "maturin.build-args": ["--locked", "--no-default-features"], "other": "kept"}
    assert loader_backend._prepared({"build-args": "--locked"}) == {
        "build-args": "--locked --no-default-features"}


def test_with_cmake_and_nasm_the_settings_pass_through(tmp_path: Path, monkeypatch) -> None:
    for tool in ("cmake", "nasm"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LOADER_PURE_RUST", raising=False)
    settings = {"maturin.build-args": "--locked"}
    assert loader_backend._prepared(settings) is settings
