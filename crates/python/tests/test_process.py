"""A good citizen of a Python process: threads, signals, ranks. Every wait has a limit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import loader_ml
from conftest import WORKSPACE, Server


def test_the_loader_closed_while_a_thread_waits_on_it(data_root: Path) -> None:
    """A thread blocked on the next batch gets an error, not a hang, when the loader is
    closed and dropped under it."""
    started = threading.Event()

    def slow(image):
        started.set()
        time.sleep(0.2)
        return image

    loader = loader_ml.DataLoader(str(data_root / "images"), batch_size=24, transform=slow,
                                  num_workers=1)
    outcome: list[object] = []

    def consume() -> None:
        try:
            outcome.append(next(iter(loader)))
        except Exception as e:  # the loader is closed
            outcome.append(e)

    waiter = threading.Thread(target=consume, daemon=True)
    waiter.start()
    assert started.wait(10)
    loader.close()
    del loader
    waiter.join(timeout=10)
    assert not waiter.is_alive(), "the waiting thread hangs"
    assert isinstance(outcome[0], RuntimeError) and "closed" in str(outcome[0])


def test_ctrl_c_interrupts_a_blocked_iteration(data_root: Path) -> None:
    server = Server(data_root, rtt_ms=3000)  # every request waits 3 s
    script = textwrap.dedent(f"""
        import signal, sys, loader_ml
        # Python leaves Ctrl-C ignored when it started so (a shell's background job, as CI
        # may run this suite): install what an interactive run has.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        loader = loader_ml.DataLoader("s3://images", batch_size=4,
                                      storage_options={server.options!r})
        print("iterating", flush=True)
        try:
            next(iter(loader))
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        print("got a batch", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "iterating"
        time.sleep(0.3)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        code = child.wait(timeout=10)
        waited = time.monotonic() - sent
        out = child.stdout.read()
    finally:
        child.kill()
        server.stop()
    assert (code, out.strip()) == (3, "interrupted"), f"after {waited:.1f} s"


def test_torchrun_ranks_read_disjoint_samples(s3, tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys
        import torch.distributed as dist
        import loader_ml
        dist.init_process_group("gloo")
        loader = loader_ml.DataLoader("s3://images", batch_size=4, shuffle=True, seed=9,
                                      storage_options={s3.options!r})
        keys = [k for batch in loader for k in batch.keys]
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, keys)
        if dist.get_rank() == 0:
            json.dump(every, open({str(tmp_path / "keys.json")!r}, "w"))
        dist.destroy_process_group()
    """))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script)],
        env=env, timeout=120, capture_output=True, text=True, cwd=WORKSPACE,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = json.loads((tmp_path / "keys.json").read_text())
    assert len(ranks) == 2 and all(len(r) == 12 for r in ranks)
    assert not set(ranks[0]) & set(ranks[1])
    assert len(set(ranks[0]) | set(ranks[1])) == 24


@pytest.mark.parametrize("example, args", [
    # A torchvision model on images.
    ("train.py", ("--steps", "20", "--batch-size", "16")),
    # A tiny GPT on packed token rows of a Megatron dataset.
    ("train_gpt.py", ("--steps", "60")),
])
def test_the_training_examples_learn(example: str, args: tuple[str, ...]) -> None:
    """examples/python/, shortened: a model trained on batches served by
    `loader serve s3 --rtt 50`, its loss falling."""
    run = subprocess.run(
        [sys.executable, str(WORKSPACE / "examples" / "python" / example), *args],
        env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=300, capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    losses = [float(line.split("loss")[1]) for line in run.stdout.splitlines() if "loss" in line]
    assert len(losses) >= 3 and losses[-1] < 0.5 * losses[0], run.stdout
    assert "waiting for data" in run.stdout
