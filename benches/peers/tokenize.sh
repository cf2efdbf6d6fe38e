#!/usr/bin/env bash
# Text to packed rows of 2,048 tokens, tokens per CPU-second: `loader tokenize` then
# `loader run --block-size 2048` against Hugging Face `datasets` (`map` of the same
# tokenizer, then run_clm.py's packing, one process) on one generated JSON-lines corpus and
# a byte-level BPE of 8,192 ids trained on it.
#
#   benches/peers/tokenize.sh            Env: LOADER_CACHE (~/.cache/loader), MB (50)
#
# Makes a virtualenv with datasets and tokenizers from PyPI on first use.
set -euo pipefail
cd "$(dirname "$0")/../.."

cache=${LOADER_CACHE:-$HOME/.cache/loader}
venv=$cache/tokenize-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "datasets==4.*" tokenizers==0.23.3
fi
data=$cache/tokenize-data-${MB:-50}
[ -f "$data/.complete" ] || {
  "$venv/bin/python" benches/peers/text_tokens.py make "$data" --mb "${MB:-50}"
  touch "$data/.complete"
}
cargo build --release -q -p loader-cli
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
loader=$target/release/loader
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Wall and CPU seconds (user + system) of each command, summed.
timed() { /usr/bin/time -f "%e %U %S" -a -o "$out/times" "$@"; }
timed "$loader" tokenize "$data/corpus.jsonl" --tokenizer "$data/tokenizer.json" \
  --out "$out/corpus" --append-eos "<|endoftext|>"
timed "$loader" run "$out" --block-size 2048 --batch-size 8 --json > "$out/run.json"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
tokens = json.load(open(f"{out}/run.json"))["tokens"]
wall = cpu = 0.0
for line in open(f"{out}/times"):
    e, u, s = map(float, line.split())
    wall, cpu = wall + e, cpu + u + s
print(json.dumps({"which": "loader", "tokens": tokens, "seconds": wall, "cpu_seconds": cpu,
                  "tokens_per_cpu_second": tokens / cpu}))
PY
"$venv/bin/python" benches/peers/text_tokens.py datasets "$data"
