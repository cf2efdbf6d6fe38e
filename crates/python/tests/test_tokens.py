"""Token datasets (issue 47): Megatron-LM indexed datasets in the layout its
``megatron.core.datasets.indexed_dataset`` documents (``MMIDIDX`` header, sequence lengths,
byte offsets, document index), written here with numpy (the Rust tests read files
megatron-core itself wrote), read over S3 as packed rows: every block once, each row the
stream's tokens, and a resumed run reading on where the saved one stopped."""

from __future__ import annotations

import json
import pickle
import struct
import textwrap
from collections import Counter
from pathlib import Path

import numpy
import pytest

import loader_ml
from conftest import WORKSPACE, Server, gather_and_save, phases, torchrun

BLOCK = 16
#: Where each document of the bucket ``tokens``'s files starts in its file, as written.
DOCUMENT_STARTS: list[numpy.ndarray] = []


def write_megatron(prefix: Path, documents: list[numpy.ndarray]) -> None:
    """``prefix.idx`` and ``prefix.bin``, one sequence per document, uint16 ids."""
    sizes = numpy.array([len(d) for d in documents], numpy.int32)
    pointers = numpy.zeros(len(documents), numpy.int64)
    pointers[1:] = numpy.cumsum(sizes[:-1].astype(numpy.int64)) * 2
    document_index = numpy.arange(len(documents) + 1, dtype=numpy.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<QBQQ", 1, 8, len(sizes), len(document_index)))
        f.write(sizes.tobytes() + pointers.tobytes() + document_index.tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        f.write(numpy.concatenate(documents).astype(numpy.uint16).tobytes())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    """Two files of documents of 1 to 60 tokens in a bucket ``tokens`` and one in a bucket
    ``more``, the streams of the first two, and the server (``corpus.more``: the third's)."""
    root = tmp_path_factory.mktemp("root")
    rng = numpy.random.default_rng(5)
    streams = []
    for name in ("tokens/part-0", "tokens/part-1", "more/part-0"):
        (root / name).parent.mkdir(exist_ok=True)
        documents = [rng.integers(0, 50_000, rng.integers(1, 61)) for _ in range(40)]
        write_megatron(root / name, documents)
        streams.append(numpy.concatenate(documents).astype(numpy.int64))
        if name.startswith("tokens/"):
            DOCUMENT_STARTS.append(numpy.cumsum([0] + [len(d) for d in documents[:-1]]))
    server = Server(root, rtt_ms=20)
    yield streams[:2], server, streams[2:]
    server.stop()


def block_tokens(streams: list[numpy.ndarray], index: int) -> numpy.ndarray:
    """Block ``index`` of the dataset: blocks are cut per file, ``BLOCK + 1`` tokens each."""
    for stream in streams:
        blocks = (len(stream) - 1) // BLOCK
        if index < blocks:
            return stream[index * BLOCK:index * BLOCK + BLOCK + 1]
        index -= blocks
    raise IndexError(index)


def block_positions(streams: list[numpy.ndarray], index: int) -> list[int]:
    """What ``position_ids`` block ``index`` must hold: each token's place in its document,
    counted from the row's start for a document that began in an earlier block."""
    for stream, starts in zip(streams, DOCUMENT_STARTS):
        blocks = (len(stream) - 1) // BLOCK
        if index < blocks:
            first = index * BLOCK
            tokens = numpy.arange(first, first + BLOCK)
            begins = starts[numpy.searchsorted(starts, tokens, side="right") - 1]
            return (tokens - numpy.maximum(begins, first)).tolist()
        index -= blocks
    raise IndexError(index)


def loader(server: Server, **kwargs) -> loader_ml.DataLoader:
    return loader_ml.DataLoader("s3://tokens", block_size=BLOCK, vocab_size=50_000,
                                storage_options=server.options, batch_size=4, shuffle=True,
                                seed=3, output="torch", **kwargs)


def test_packed_rows_hold_the_stream_every_block_once(corpus) -> None:
    import torch

    streams, server, _ = corpus
    run = loader(server)
    blocks = sum((len(s) - 1) // BLOCK for s in streams)
    assert run.dataset.block_size == BLOCK and len(run.dataset) == blocks
    seen = []
    for batch in run:
        assert isinstance(batch, loader_ml.TokenBatch)
        b = len(batch.indices)
        for name in ("input_ids", "labels", "position_ids", "document_ids"):
            assert batch[name].shape == (b, BLOCK) and batch[name].dtype == torch.int64
        assert batch["cu_seqlens"].dtype == torch.int32
        assert int(batch["cu_seqlens"][-1]) == b * BLOCK
        assert batch.max_seqlen <= BLOCK
        for row, index in enumerate(batch.indices):
            tokens = block_tokens(streams, index)
            assert batch["input_ids"][row].tolist() == tokens[:-1].tolist(), index
            assert batch["labels"][row].tolist() == tokens[1:].tolist(), index
            positions = batch["position_ids"][row]
            # Positions restart where a document does, and count up within one.
            starts = positions == 0
            assert positions.tolist() == block_positions(streams, index), index
            steps = positions[1:][~starts[1:]] - positions[:-1][~starts[1:]]
            assert bool((steps == 1).all()), index
            seen.append(index)
    assert sorted(seen) == list(range(blocks))
    moved = batch.to("cpu")
    assert isinstance(moved, loader_ml.TokenBatch) and moved.indices == batch.indices
    again = pickle.loads(pickle.dumps(batch))
    assert torch.equal(again["input_ids"], batch["input_ids"])
    assert again.max_seqlen == batch.max_seqlen


def test_a_saved_state_resumes_the_same_blocks(corpus) -> None:
    _, server, _ = corpus
    whole = [i for batch in loader(server) for i in batch.indices]
    first = loader(server)
    taken = []
    for batch in first:
        taken.extend(batch.indices)
        if len(taken) >= 12:
            break
    state = first.state_dict()
    resumed = loader(server)
    resumed.load_state_dict(state)
    rest = [i for batch in resumed for i in batch.indices]
    assert taken + rest == whole


def test_token_settings_that_cannot_hold_are_refused(corpus) -> None:
    _, server, _ = corpus
    with pytest.raises(loader_ml.ConfigError, match="block_size"):
        loader_ml.DataLoader("s3://tokens", storage_options=server.options)
    with pytest.raises(loader_ml.ConfigError, match="transform"):
        loader(server, transform="imagenet_eval")
    with pytest.raises(loader_ml.ConfigError, match="fields"):
        loader(server, fields="jpg")
    # A Dataset opened already: its blocks were cut then, not by the loader's keywords.
    opened = loader_ml.Dataset("s3://tokens", storage_options=server.options, block_size=BLOCK)
    with pytest.raises(loader_ml.ConfigError, match="Dataset\\(url, block_size"):
        loader_ml.DataLoader(opened, block_size=BLOCK)
    # Ids past a vocabulary smaller than the writer's: the first batch names the file.
    small = loader_ml.DataLoader("s3://tokens", block_size=BLOCK, vocab_size=10,
                                 storage_options=server.options, batch_size=4)
    with pytest.raises(loader_ml.DecodeError, match="outside the vocabulary of 10"):
        next(iter(small))


def test_torchrun_three_ranks_then_two_read_a_token_mixture_once(corpus, tmp_path: Path) -> None:
    """A mixture of two token datasets weighted 2:1, 3 ranks for 2 steps, then 2 ranks resuming
    from a ``torch.save``d state: every block of the epoch once, each the stream's tokens.
    Lanes and the shuffle window are given, so one process reads the same order (left to
    the loader, they are the first run's, kept in its state)."""
    streams, server, more = corpus
    checkpoint = tmp_path / "checkpoint.pt"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        import torch
        import torch.distributed as dist
        import loader_ml
        phase, batch_size = sys.argv[1], int(sys.argv[2])
        dist.init_process_group("gloo")
        datasets = [loader_ml.Dataset(url, storage_options={server.options!r},
                                      block_size={BLOCK})
                    for url in ("s3://tokens", "s3://more")]
        loader = loader_ml.DataLoader(datasets, weights=[2, 1], batch_size=batch_size,
                                      shuffle=True, seed=7, stop="all_exhausted", lanes=6,
                                      shuffle_buffer=64)
        if phase == "resume":
            loader.load_state_dict(torch.load({str(checkpoint)!r})["loader"])
        seen = []
        for step, batch in enumerate(loader):
            real = len(batch.indices) - batch.padding
            seen += [[s, i, batch["input_ids"][r].tolist()] for r, (s, i) in
                     enumerate(zip(batch.sources[:real], batch.indices[:real]))]
            if phase == "first" and step == 1:
                break
    """) + gather_and_save(checkpoint, tmp_path))
    torchrun(script, 3, "first", "2")
    torchrun(script, 2, "resume", "3")
    got = phases(tmp_path)
    whole = loader_ml.DataLoader(
        [loader_ml.Dataset(url, storage_options=server.options, block_size=BLOCK)
         for url in ("s3://tokens", "s3://more")],
        weights=[2, 1], batch_size=5, shuffle=True, seed=7, stop="all_exhausted", lanes=6,
        shuffle_buffer=64)
    expected = [(s, i) for batch in whole
                for s, i in list(zip(batch.sources, batch.indices))[:len(batch.indices)
                                                                     - batch.padding]]
    assert Counter((s, i) for s, i, _ in got) == Counter(expected), "not the epoch, once"
    offset = len(whole.datasets[0])
    for source, index, ids in got:
        tokens = (block_tokens(streams, index) if source == 0
                  else block_tokens(more, index - offset))
        assert ids == tokens[:-1].tolist(), (source, index)


def test_litdata_token_chunks_give_litdatas_blocks() -> None:
    """Chunks ``litdata.optimize`` wrote for ``TokensLoader`` (the Rust tests' fixture):
    every block the ids litdata's own StreamingDataset read with ``block_size=9``."""
    fixtures = WORKSPACE / "crates/core/tests/fixtures/litdata-tokens"
    want = json.loads((fixtures / "expected.json").read_text())["numpy-u16"]["blocks"]["8"]
    run = loader_ml.DataLoader(str(fixtures / "numpy-u16"), block_size=8, batch_size=7,
                               shuffle=True, seed=1, output="numpy")
    seen = {}
    for batch in run:
        for row, index in enumerate(batch.indices):
            seen[index] = batch["input_ids"][row].tolist() + [int(batch["labels"][row][-1])]
    assert seen == dict(enumerate(want))


def test_token_rows_through_torchs_dataloader_with_workers(corpus) -> None:
    """``as_iterable_dataset()`` under torch's DataLoader with 2 workers: each worker a
    disjoint share, every block once, batches still ``TokenBatch``es with ``keep``."""
    import torch

    from loader_ml.torch_view import keep

    streams, server, _ = corpus
    iterable = loader(server).as_iterable_dataset()
    seen = []
    for batch in torch.utils.data.DataLoader(iterable, batch_size=None, num_workers=2,
                                             collate_fn=keep):
        assert isinstance(batch, loader_ml.TokenBatch) and batch.max_seqlen is not None
        for row, index in enumerate(batch.indices):
            assert batch["input_ids"][row].tolist() == block_tokens(streams, index)[:-1].tolist()
        seen += batch.indices[:len(batch.indices) - batch.padding]
    assert sorted(seen) == list(range(sum((len(s) - 1) // BLOCK for s in streams)))


def test_parquet_input_ids_as_a_tokenized_dataset_is_written(tmp_path: Path) -> None:
    """A tokenized dataset as users write one with pyarrow (``input_ids`` lists beside the
    text, zstd, row groups of 25 rows), served over S3: every block once, shuffled, each
    the ids pyarrow reads back, documents run together within a row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = numpy.random.default_rng(9)
    documents = [rng.integers(0, 50_000, rng.integers(1, 61)).tolist() for _ in range(100)]
    (tmp_path / "corpus").mkdir()
    table = pa.table({"text": [f"document {i}" for i in range(100)],
                      "input_ids": pa.array(documents, pa.list_(pa.int32()))})
    pq.write_table(table, tmp_path / "corpus/train.parquet", row_group_size=25,
                   compression="zstd")
    file = pq.ParquetFile(tmp_path / "corpus/train.parquet")
    want = []
    for group in range(file.num_row_groups):
        rows = file.read_row_group(group, columns=["input_ids"]).column(0).to_pylist()
        stream = [t for row in rows for t in row]
        want += [stream[s:s + 9] for s in range(0, len(stream) - 8, 8)]
    server = Server(tmp_path, rtt_ms=20)
    try:
        run = loader_ml.DataLoader("s3://corpus", block_size=8, vocab_size=50_000,
                                   storage_options=server.options, batch_size=8,
                                   shuffle=True, seed=2, output="numpy")
        seen = {}
        for batch in run:
            for row, index in enumerate(batch.indices[:len(batch.indices) - batch.padding]):
                assert index not in seen
                seen[index] = batch["input_ids"][row].tolist() + [int(batch["labels"][row][-1])]
        assert seen == dict(enumerate(want))
    finally:
        server.stop()


def test_mds_token_shards_give_the_documents_mdswriter_wrote() -> None:
    """MDS shards MDSWriter wrote as llm-foundry does (the Rust tests' fixture,
    ``{'tokens': 'ndarray:int32'}``): every block, cut from the documents streaming's own
    StreamingDataset read back."""
    fixtures = WORKSPACE / "crates/core/tests/fixtures/mds-tokens"
    want = json.loads((fixtures / "expected.json").read_text())["i32"]["blocks"]["16"]
    run = loader_ml.DataLoader(str(fixtures / "i32"), block_size=16, batch_size=5,
                               shuffle=True, seed=4, output="numpy")
    seen = {}
    for batch in run:
        for row, index in enumerate(batch.indices[:len(batch.indices) - batch.padding]):
            seen[index] = batch["input_ids"][row].tolist() + [int(batch["labels"][row][-1])]
    assert seen == dict(enumerate(want))


def test_an_end_of_document_id_splits_rows_and_boundaries_can_be_masked(corpus) -> None:
    """``end_of_document=``: a document also starts after each such id (positions restart,
    ``cu_seqlens`` split, document ids numbered per row); ``mask_boundaries=True``: the last
    token of each document predicts nothing. Both are refused for an image dataset."""
    streams, server, _ = corpus
    end = int(streams[0][10])  # an id that occurs in the corpus
    run = loader(server, end_of_document=end, mask_boundaries=True)
    for batch in run:
        ids, labels = batch["input_ids"].tolist(), batch["labels"].tolist()
        positions = batch["position_ids"].tolist()
        documents = batch["document_ids"].tolist()
        for r, index in enumerate(batch.indices):
            stored = block_positions(streams, index)
            for j in range(1, BLOCK):
                opens = stored[j] == 0 or ids[r][j - 1] == end
                assert (positions[r][j] == 0) == opens, (index, j)
                assert documents[r][j] == documents[r][j - 1] + opens, (index, j)
                assert (labels[r][j - 1] == -100) == opens, (index, j)
            assert documents[r][0] == 0
    with pytest.raises(loader_ml.ConfigError, match="block_size"):
        loader_ml.DataLoader(str(WORKSPACE / "crates/core/tests/fixtures/mds/raw"),
                             end_of_document=0)
