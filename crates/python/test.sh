#!/usr/bin/env bash
# The Python package's tests: install it from this checkout into a virtualenv with the pinned
# test requirements (torch from the package index is the CUDA build: 5.5 GB and 258 s
# the first time here; it runs on CPU), then pytest. The virtualenv is kept, keyed by the pins,
# under LOADER_CACHE (default ~/.cache/loader).
#
# The tests start `loader serve s3` and run examples/dump_batches.rs from the debug build in
# cargo's target directory (as `cargo metadata` reports it, so CARGO_TARGET_DIR is honoured;
# or LOADER_BIN_DIR), building them if `cargo test` has not.
set -euo pipefail
cd "$(dirname "$0")/../.."

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
# The README's install command (maturin, from the package index, builds the release wheel).
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./crates/python
exec "$venv/bin/python" -m pytest crates/python/tests -q "$@"
