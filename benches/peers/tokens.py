"""Packed token rows from LitData token chunks on one S3 endpoint: loader_ml against
LitData's own StreamingDataset + TokensLoader under its StreamingDataLoader.

    python benches/peers/tokens.py make DIR [--tokens N]      # the corpus, by litdata.optimize
    python benches/peers/tokens.py read --which loader|litdata --option KEY=VALUE ... \\
        [--bucket corpus] [--block-size 2048] [--seconds 10]

`read` prints one JSON line: tokens/s from the first batch to the end of the window or of
the epoch, the first batch's wait (imports and opening included), and the tokens read. Both read the same blocks: TokensLoader(block_size=L + 1) is loader_ml's
block_size=L (inputs and labels from L + 1 tokens), shuffled, batches of 8.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy


def document(i: int) -> numpy.ndarray:
    rng = numpy.random.default_rng(i)
    return rng.integers(0, 50_000, int(rng.integers(100, 4000))).astype(numpy.uint16)


def make(out: str, tokens: int, block: int) -> None:
    from litdata import TokensLoader, optimize

    documents = tokens // 2050
    shutil.rmtree(out, ignore_errors=True)
    # Chunks of 1,024 blocks (about 4 MiB of uint16 ids), as LitData's examples size them.
    optimize(fn=_yield, inputs=list(range(documents)), output_dir=out,
             chunk_size=(block + 1) * 1024, item_loader=TokensLoader(), num_workers=2)


def _yield(i: int):
    yield document(i)


def read_loader(args: argparse.Namespace, options: dict[str, str]):
    import loader_ml

    loader = loader_ml.DataLoader(f"s3://{args.bucket}", block_size=args.block_size,
                                  batch_size=args.batch_size, shuffle=True, seed=0,
                                  storage_options=options)
    for batch in loader:
        yield batch["input_ids"].numel()


def read_litdata(args: argparse.Namespace, options: dict[str, str]):
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    cache = tempfile.mkdtemp(prefix="litdata-cache-")
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = cache
    dataset = StreamingDataset(
        f"s3://{args.bucket}", item_loader=TokensLoader(block_size=args.block_size + 1),
        shuffle=True, seed=0, cache_dir=cache,
        storage_options={"endpoint_url": options["aws_endpoint"],
                         "aws_access_key_id": options["aws_access_key_id"],
                         "aws_secret_access_key": options["aws_secret_access_key"],
                         "region_name": options.get("aws_region", "us-east-1")})
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=2)
    for batch in loader:
        # Inputs are a block's first L tokens: count what a step trains on.
        yield batch[:, :-1].numel()


def read(args: argparse.Namespace) -> None:
    options = dict(o.split("=", 1) for o in args.option)
    batches = read_loader(args, options) if args.which == "loader" else read_litdata(args,
                                                                                  options)
    started = time.perf_counter()
    first = None
    tokens = 0
    for n in batches:
        now = time.perf_counter()
        if first is None:
            first, tokens = now, 0
            continue
        tokens += n
        if now - first >= args.seconds:
            break
    elapsed = time.perf_counter() - (first or started)
    print(json.dumps({"which": args.which, "tokens_per_sec": tokens / elapsed,
                      "first_batch_s": (first or started) - started, "tokens": tokens,
                      "seconds": elapsed}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--tokens", type=int, default=200_000_000)
    m.add_argument("--block-size", type=int, default=2048)
    r = sub.add_parser("read")
    r.add_argument("--which", choices=["loader", "litdata"], required=True)
    r.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="the store's settings, as `loader --option` takes them")
    r.add_argument("--bucket", default="corpus")
    r.add_argument("--block-size", type=int, default=2048)
    r.add_argument("--batch-size", type=int, default=8)
    r.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    if args.command == "make":
        make(args.out, args.tokens, args.block_size)
    else:
        read(args)


if __name__ == "__main__":
    main()
