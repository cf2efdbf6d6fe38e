#!/usr/bin/env bash
# Packed token rows side by side: loader_ml against LitData's StreamingDataset +
# TokensLoader (StreamingDataLoader, 2 workers) on the same chunks, written by
# litdata.optimize, from one `loader serve s3 --rtt` endpoint, at each round-trip time.
#
#   benches/peers/tokens.sh [RTTS]      e.g. benches/peers/tokens.sh "0 50"
#
# Needs the Python tests' virtualenv (crates/python/test.sh makes it: torch, the package);
# adds litdata 0.2.76 in a virtualenv of its own that sees the tests' packages. Env:
# LOADER_CACHE (default ~/.cache/loader), SECONDS_PER_CELL (10), TOKENS (200M: 400 MB of
# uint16 ids, so that an epoch outlasts the window; a second epoch would find LitData's
# chunks in its local cache).
set -euo pipefail
cd "$(dirname "$0")/../.."

rtts=${1:-"0 50"}
cache=${LOADER_CACHE:-$HOME/.cache/loader}
tests=$(ls -d "$cache"/py-* 2>/dev/null | head -1)
[ -n "$tests" ] || { echo "run crates/python/test.sh first (it makes $cache/py-*)" >&2; exit 1; }
venv=$cache/tokens-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$tests/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/tests.pth"
  "$venv/bin/pip" install --quiet litdata==0.2.76
  # litdata's obstore path builds its client without allow_http, so it cannot reach a
  # plain-http endpoint; without obstore it downloads through boto3 (its fallback).
  "$venv/bin/pip" uninstall --quiet -y obstore
fi
"$tests/bin/pip" install --quiet --force-reinstall --no-deps ./crates/python
tokens=${TOKENS:-200000000}
data=$cache/tokens-data-$tokens
[ -f "$data/.complete" ] || {
  "$venv/bin/python" benches/peers/tokens.py make "$data/corpus" --tokens "$tokens"
  touch "$data/.complete"
}
source benches/scripts/common.sh
cargo build --release -q -p loader-cli
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
new=$target/release/loader
for rtt in $rtts; do
  serve_s3 "$data" --rtt "$rtt"
  trap 'kill $server 2>/dev/null || true' EXIT
  for which in loader litdata; do
    "$venv/bin/python" benches/peers/tokens.py read --which "$which" "${opts[@]}" \
      --seconds "${SECONDS_PER_CELL:-10}" | sed "s/^{/{\"rtt_ms\": $rtt, /"
  done
  kill $server; wait $server 2>/dev/null || true
done
