"""Fixtures: datasets written by PIL and Python's tarfile, and loader's S3 server
(`loader serve s3`, s3s over a real socket) in a child process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import numpy
import pytest
from PIL import Image

WORKSPACE = Path(__file__).resolve().parents[3]
CLASSES = 3
PER_CLASS = 8


def target_directory() -> Path:
    """Where cargo builds this workspace: `CARGO_TARGET_DIR`, a config's `build.target-dir`
    or `target/`, as `cargo metadata` reports it (never guessed)."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=WORKSPACE,
        check=True, capture_output=True, text=True,
    ).stdout
    return Path(json.loads(out)["target_directory"])


def binary(name: str, example: bool = False) -> Path:
    """A workspace binary (`LOADER_BIN_DIR`, default the debug build in cargo's target
    directory), built if missing."""
    base = Path(os.environ.get("LOADER_BIN_DIR") or target_directory() / "debug")
    path = base / "examples" / name if example else base / name
    if not path.exists():
        target = ["--example", name, "-p", "loader-examples"] if example else ["-p", "loader-cli"]
        subprocess.run(["cargo", "build", "--quiet", *target], cwd=WORKSPACE, check=True)
    return path


def image(label: int, index: int) -> Image.Image:
    """A learnable picture: the class sets the colour, the index a little noise."""
    rng = numpy.random.default_rng(label * 1000 + index)
    base = numpy.zeros((40, 56, 3), numpy.uint8)
    base[..., label % 3] = 200
    noisy = base + rng.integers(0, 40, base.shape, dtype=numpy.uint8)
    return Image.fromarray(noisy)


def jpeg(label: int, index: int) -> bytes:
    out = io.BytesIO()
    image(label, index).save(out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`root/images/class_k/*.jpg` (PIL) and `root/shards/shard-*.tar` (tarfile, in
    WebDataset's layout: `key.jpg` and `key.cls` members); over S3, `images` and `shards`
    are buckets."""
    root = tmp_path_factory.mktemp("buckets")
    for label in range(CLASSES):
        folder = root / "images" / f"class_{label}"
        folder.mkdir(parents=True)
        for i in range(PER_CLASS):
            (folder / f"img_{i:03}.jpg").write_bytes(jpeg(label, i))
    shards = root / "shards"
    shards.mkdir()
    n = 0
    for s in range(2):
        with tarfile.open(shards / f"shard-{s:06}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(CLASSES * PER_CLASS // 2):
                label, i = n % CLASSES, n // CLASSES
                for ext, payload in (("jpg", jpeg(label, i)), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"sample{n:05}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
                n += 1
    return root


class Server:
    """`loader serve s3 DIR` in a child process, until stopped."""

    def __init__(self, root: Path, rtt_ms: int = 0) -> None:
        self.process = subprocess.Popen(
            [str(binary("loader")), "serve", "s3", str(root), "--rtt", str(rtt_ms)],
            stdout=subprocess.PIPE, text=True,
        )
        lines = {}
        deadline = time.monotonic() + 60
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line or line.startswith("press Ctrl-C"):
                break
            if ": " in line:
                name, value = line.rstrip("\n").split(": ", 1)
                lines[name] = value
        assert "endpoint" in lines, f"the server did not start: {lines}"
        self.endpoint = lines["endpoint"]
        self.options = {
            "aws_endpoint": lines["endpoint"],
            "aws_access_key_id": lines["access key"],
            "aws_secret_access_key": lines["secret key"],
            "aws_region": "us-east-1",
        }

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="session")
def s3(data_root: Path):
    """The buckets `images` (an ImageFolder) and `shards` over S3."""
    server = Server(data_root)
    yield server
    server.stop()


@pytest.fixture()
def rust_batches(tmp_path: Path):
    """The Rust loader's batches for the same settings, from `examples/dump_batches.rs`."""

    def run(url: str, batch_size: int, seed: int, shuffle: bool, transform: str,
            options: dict[str, str] | None = None) -> list[tuple[dict, bytes]]:
        out = tmp_path / f"rust-{len(list(tmp_path.iterdir()))}"
        args = [str(binary("dump_batches", example=True)), url, str(out), str(batch_size),
                str(seed), "1" if shuffle else "0", transform]
        args += [f"{k}={v}" for k, v in (options or {}).items()]
        subprocess.run(args, check=True, timeout=120)
        batches = []
        for meta in sorted(out.glob("*.json")):
            batches.append((json.loads(meta.read_text()), meta.with_suffix(".bin").read_bytes()))
        return batches

    return run



def gather_and_save(checkpoint: Path, out: Path) -> str:
    """The end of a torchrun training script whose ranks put their reads in ``seen``: every
    rank's state and reads gathered and the states checked equal; rank 0 saves the state
    (phase ``first``) with ``torch.save`` to ``checkpoint`` and writes every rank's reads to
    ``out/PHASE.json``."""
    return textwrap.dedent(f"""
        states = [None] * dist.get_world_size()
        dist.all_gather_object(states, loader.state_dict())
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, seen)
        if dist.get_rank() == 0:
            assert all(s == states[0] for s in states), "ranks' states differ"
            if phase == "first":
                torch.save({{"loader": states[0]}}, {str(checkpoint)!r})
            json.dump(every, open({str(out)!r} + "/" + phase + ".json", "w"))
        dist.destroy_process_group()
    """)


def torchrun(script: Path, ranks: int, *args: str) -> None:
    """``script ARGS`` under ``torch.distributed.run`` with ``ranks`` processes on this
    machine; its stderr's end is the failure report."""
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc_per_node={ranks}", str(script), *args],
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=180, capture_output=True,
        text=True, cwd=WORKSPACE)
    assert run.returncode == 0, run.stderr[-3000:]


def phases(out: Path) -> list[list]:
    """Every rank's reads of the phases ``first`` and ``resume``, in that order."""
    return [r for phase in ("first", "resume")
            for rank in json.loads((out / f"{phase}.json").read_text()) for r in rank]
