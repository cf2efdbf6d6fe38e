"""Train a tiny GPT on packed token rows served over S3 with 50 ms of latency.

    pip install ./crates/python torch
    cargo build --release -p loader-cli
    python examples/python/train_gpt.py [--steps 60] [--rtt 50]

Writes a small token corpus in Megatron-LM's indexed layout (`.idx` + `.bin`, with numpy:
documents that count up by a step of their own, which a model learns), serves it with
`loader serve s3 --rtt 50`, and trains a two-layer causal transformer on it with
loader_ml's DataLoader: rows of `--block-size` tokens packed across documents, positions
restarting with each document, labels the inputs shifted by one. Prints the loss and the
share of each step spent waiting for data. Point it at your own Megatron dataset with
--url (a folder of `.idx`/`.bin` pairs) and --option KEY=VALUE.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy
import torch

import loader_ml
from train import arguments, dataset_url, train

VOCAB = 64


def write_megatron(prefix: Path, documents: list[numpy.ndarray]) -> None:
    """`prefix.idx` and `prefix.bin` in Megatron-LM's `MMIDIDX` layout, uint16 ids: a
    header, each sequence's length, its byte offset, and where each document starts."""
    sizes = numpy.array([len(d) for d in documents], numpy.int32)
    pointers = numpy.zeros(len(documents), numpy.int64)
    pointers[1:] = numpy.cumsum(sizes[:-1].astype(numpy.int64)) * 2
    starts = numpy.arange(len(documents) + 1, dtype=numpy.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(starts)))
        f.write(sizes.tobytes() + pointers.tobytes() + starts.tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        f.write(numpy.concatenate(documents).astype(numpy.uint16).tobytes())


def write_corpus(folder: Path, documents: int) -> None:
    """Documents of 8 to 80 tokens, each counting up from a random start by a step of its
    own (mod the vocabulary): after two tokens every next one is known."""
    rng = numpy.random.default_rng(0)
    docs = []
    for _ in range(documents):
        start, step, n = rng.integers(0, VOCAB), rng.integers(1, 8), rng.integers(8, 81)
        docs.append((start + step * numpy.arange(n)) % VOCAB)
    folder.mkdir(parents=True, exist_ok=True)
    write_megatron(folder / "counting", docs)


class TinyGPT(torch.nn.Module):
    """Token and position embeddings, two causal transformer layers, a linear head."""

    def __init__(self, vocab: int, block: int, width: int = 64) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Embedding(block, width)
        layer = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                                 dropout=0.0, batch_first=True)
        self.layers = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                document_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) + self.positions(position_ids)
        n = input_ids.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        # Attend within a document only: packed rows hold several.
        same = document_ids[:, :, None] == document_ids[:, None, :]
        allowed = causal[None] & same
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
        mask = mask.repeat_interleave(4, dim=0)  # one per head
        return self.head(self.layers(x, mask=mask))


def main() -> None:
    parser = arguments(__doc__, steps=60, batch_size=16)
    parser.add_argument("--block-size", type=int, default=32)
    args = parser.parse_args()

    def make(root: Path) -> str:
        write_corpus(root / "corpus", documents=2_000)
        return "s3://corpus"

    with dataset_url(args, make) as (url, options):
        torch.manual_seed(0)
        loader = loader_ml.DataLoader(url, block_size=args.block_size, vocab_size=VOCAB,
                                      batch_size=args.batch_size, shuffle=True, seed=0,
                                      storage_options=options)
        model = TinyGPT(VOCAB, args.block_size)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        print(f"{len(loader.dataset)} blocks of {args.block_size} tokens at "
              f"{loader.dataset.backend}")

        def loss_of(batch: loader_ml.TokenBatch) -> torch.Tensor:
            logits = model(batch["input_ids"], batch["position_ids"], batch["document_ids"])
            return torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)

        train(loader, loss_of, optimizer, args.steps)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    main()
