"""One cache directory per node under torchrun: 4 ranks read an epoch from the S3 server
through one directory, then a second epoch with new loaders makes no request, and each
rank's ``cache_stats()`` carries the node's totals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import loader_ml
from conftest import WORKSPACE


def test_torchrun_four_ranks_share_one_cache_directory(s3, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import json
        import torch.distributed as dist
        import loader_ml
        dist.init_process_group("gloo")

        def loader(epochs):
            return loader_ml.DataLoader(
                loader_ml.Dataset("s3://images", storage_options={s3.options!r}),
                batch_size=2, shuffle=True, seed=3, epochs=epochs,
                cache_dir={str(cache)!r}, cache_memory=0)

        first = loader(1)
        keys = [k for batch in first for k in batch.keys]
        first.close()
        # Every rank's entries are written before any rank reads the second epoch.
        dist.barrier()
        second = loader(2)
        second.set_epoch(1)
        keys2 = [k for batch in second for k in batch.keys]
        dist.barrier()
        stats = second.cache_stats()
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, [keys, keys2, stats])
        if dist.get_rank() == 0:
            json.dump(every, open({str(tmp_path / "ranks.json")!r}, "w"))
        dist.destroy_process_group()
    """))
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc_per_node=4", str(script)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=180, capture_output=True,
        text=True, cwd=WORKSPACE)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    whole = [k for batch in loader_ml.DataLoader(
        loader_ml.Dataset("s3://images", storage_options=s3.options), batch_size=8)
        for k in batch.keys]
    for epoch in (0, 1):
        read = [k for rank in ranks for k in rank[epoch]]
        assert sorted(read) == sorted(whole), f"epoch {epoch}: each sample once"
    for _, _, stats in ranks:
        # Read by other ranks in the first epoch: all from the node's directory.
        assert stats["requests"] == 0, stats
        assert stats["disk_hits"] == stats["hits"] > 0, stats
        assert stats["node"]["processes"] >= 1, stats
    # The node's totals, as the rank that looked last saw them: the second loaders' (the
    # first of them to open the directory found it unused and began the node's count).
    last = max(ranks, key=lambda r: r[2]["node"]["processes"])[2]["node"]
    assert last["processes"] == 4, last
    assert (last["hits"], last["misses"], last["requests"]) == (len(whole), 0, 0), last
