#!/usr/bin/env bash
# The Python package's tests, run on the wheel users install:
#   1. the release wheel (.ci/wheel: manylinux_2_28, abi3, libjpeg-turbo linked in);
#   2. its smoke test (smoke.py) in a fresh virtualenv holding the wheel and Pillow alone,
#      on a PATH with nothing but that virtualenv's bin (no cargo, cmake or nasm), binary
#      packages only: a batch over S3 with PIL's pixels;
#   3. pytest in a virtualenv with the pinned test requirements and the wheel (torch from the
#      package index is the CUDA build: 5.5 GB and 258 s the first time here; it runs on
#      CPU), kept, keyed by the pins, under LOADER_CACHE (default ~/.cache/loader).
#
# The tests start `loader serve s3` and run examples/dump_batches.rs from the debug build in
# cargo's target directory (as `cargo metadata` reports it, so CARGO_TARGET_DIR is honoured;
# or LOADER_BIN_DIR), building them if `cargo test` has not.
set -euo pipefail
cd "$(dirname "$0")/../.."

wheel=$(.ci/wheel)

echo "== the wheel's smoke test: a fresh virtualenv, no cargo, cmake or nasm on PATH" >&2
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin_dir=${LOADER_BIN_DIR:-$target_dir/debug}
# The server the smoke test reads from, as `cargo test` built it (else built here).
[ -x "$bin_dir/loader" ] || cargo build --quiet --locked -p loader-cli
repo=$PWD
smoke=$(mktemp -d)
trap 'rm -rf "$smoke"' EXIT
"${PYTHON:-python3}" -m venv "$smoke/venv"
(
    cd "$smoke"
    export PATH="$smoke/venv/bin"
    pip install --quiet --disable-pip-version-check --only-binary :all: "$wheel" "pillow>=10"
    python "$repo/crates/python/smoke.py" "$bin_dir/loader"
)

requirements=crates/python/requirements-test.txt
cache=${LOADER_CACHE:-$HOME/.cache/loader}
venv=$cache/py-$(sha256sum "$requirements" | cut -c1-12)
if [ ! -f "$venv/.complete" ]; then
    echo "creating $venv from $requirements (torch: a few GB)" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    touch "$venv/.complete"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$venv/bin/python" -m pytest crates/python/tests -q "$@"
