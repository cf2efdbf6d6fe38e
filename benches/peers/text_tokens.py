"""Text to packed rows of 2,048 tokens, per CPU-second (the tokenizer spreads a batch over
the cores in both, so wall time per process would not say per core): `loader tokenize` then `loader run
--block-size 2048`, against Hugging Face `datasets` (`map` of the same tokenizer, batched,
then run_clm.py's `group_texts` packing), on one JSON-lines corpus.

    python benches/peers/text_tokens.py make DIR [--mb 50]     # corpus.jsonl, tokenizer.json
    python benches/peers/text_tokens.py datasets DIR           # one JSON line
    python benches/peers/text_tokens.py tokenizer DIR          # the tokenizer alone

The loader's side is run by benches/peers/tokenize.sh (it times the commands).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import time


def make(out: str, mb: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randrange(2, 10)))
             for _ in range(20_000)]
    path = os.path.join(out, "corpus.jsonl")
    size = 0
    with open(path, "w") as f:
        i = 0
        while size < mb << 20:
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(50, 2000)))
            line = json.dumps({"id": i, "text": text}) + "\n"
            f.write(line)
            size += len(line)
            i += 1
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(path) as f:
        sample = [json.loads(next(f))["text"] for _ in range(2000)]
    tokenizer.train_from_iterator(sample, trainer)
    tokenizer.save(os.path.join(out, "tokenizer.json"))


def run_datasets(out: str, block: int) -> None:
    import datasets
    from tokenizers import Tokenizer

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    datasets.disable_caching()
    tokenizer = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    eos = tokenizer.token_to_id("<|endoftext|>")
    started, cpu_started = time.perf_counter(), cpu()
    ds = datasets.load_dataset("json", data_files=os.path.join(out, "corpus.jsonl"),
                               split="train")

    def tokenize(batch):
        return {"input_ids": [e.ids + [eos] for e in tokenizer.encode_batch(batch["text"])]}

    def group_texts(batch):
        # run_clm.py's packing: concatenate, cut into blocks, labels a copy of the inputs.
        flat = [t for ids in batch["input_ids"] for t in ids]
        n = len(flat) // (block + 1) * (block + 1)
        rows = [flat[i:i + block + 1] for i in range(0, n, block + 1)]
        return {"input_ids": [r[:-1] for r in rows], "labels": [r[1:] for r in rows]}

    tokens = ds.map(tokenize, batched=True, remove_columns=ds.column_names)
    packed = tokens.map(group_texts, batched=True, batch_size=1000)
    rows = len(packed)
    seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
    print(json.dumps({"which": "datasets", "tokens": rows * block, "seconds": seconds,
                      "cpu_seconds": cpu_seconds,
                      "tokens_per_cpu_second": rows * block / cpu_seconds}))


def run_tokenizer(out: str) -> None:
    """The tokenizer alone, `encode_batch` over 1,024 documents at a time: what neither
    side can go below, since both run it."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "corpus.jsonl")) as f:
        texts = [json.loads(line)["text"] for line in f]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_started = usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    tokens = 0
    for i in range(0, len(texts), 1024):
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(texts[i:i + 1024]))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_seconds = usage.ru_utime + usage.ru_stime - cpu_started
    print(json.dumps({"which": "tokenizer", "tokens": tokens,
                      "seconds": time.perf_counter() - started, "cpu_seconds": cpu_seconds,
                      "tokens_per_cpu_second": tokens / cpu_seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["make", "datasets", "tokenizer"])
    parser.add_argument("dir")
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--block-size", type=int, default=2048)
    args = parser.parse_args()
    if args.command == "make":
        make(args.dir, args.mb)
    elif args.command == "tokenizer":
        run_tokenizer(args.dir)
    else:
        run_datasets(args.dir, args.block_size)


if __name__ == "__main__":
    main()
