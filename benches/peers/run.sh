#!/usr/bin/env bash
# Side by side with PyTorch: `loader bench`, the Python package (loader_ml) and PyTorch's
# DataLoader (vanilla and the paper's threaded variant) on the same objects from the same `loader serve s3` endpoint,
# at each round-trip time, then one table with the ratios.
#
#   benches/peers/run.sh [RTTS]      e.g. benches/peers/run.sh "0 10 50 100"
#
# Sets up a virtualenv with torch, torchvision and boto3 from PyPI on first use (the CUDA
# build, about 6 GB; it runs on CPU). Env: LOADER_CACHE (default ~/.cache/loader).
set -euo pipefail
cd "$(dirname "$0")/../.."

rtts=${1:-"0 10 50 100"}
cache=${LOADER_CACHE:-$HOME/.cache/loader}
venv=$cache/peers-venv
data=$cache/peers-data
seconds=${SECONDS_PER_CELL:-8}
max_images=${MAX_IMAGES:-3000}
out=${OUT:-bench-report/peers}
mkdir -p "$cache" "$out"

if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv (torch, torchvision, boto3; a few GB)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet torch torchvision boto3 pillow
fi
# The Python package as users install it: the release wheel of this checkout (.ci/wheel).
"$venv/bin/pip" install --quiet --force-reinstall --no-deps "$(.ci/wheel)"

cargo build --release -q -p loader-cli
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
loader=$target/release/loader
[ -f "$data/.complete" ] || { "$loader" gen "$data/bench" --images 2000 --classes 10 && touch "$data/.complete"; }

results=$out/results.jsonl
: > "$results"
for rtt in $rtts; do
  log=$(mktemp)
  "$loader" serve s3 "$data" --rtt "$rtt" > "$log" &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 100); do grep -q '^press Ctrl-C' "$log" && break; sleep 0.1; done
  endpoint=$(sed -n 's/^endpoint: //p' "$log")
  key=$(sed -n 's/^access key: //p' "$log")
  secret=$(sed -n 's/^secret key: //p' "$log")
  for variant in vanilla threaded; do
    echo "rtt $rtt ms: pytorch $variant" >&2
    "$venv/bin/python" benches/peers/pytorch_loader.py --endpoint "$endpoint" --access-key "$key" \
      --secret-key "$secret" --variant "$variant" --seconds "$seconds" --max-images "$max_images" \
      | sed "s/^{/{\"rtt_ms\": $rtt, /" >> "$results"
  done
  echo "rtt $rtt ms: loader-ml (python)" >&2
  "$venv/bin/python" benches/peers/loader_python.py --endpoint "$endpoint" --access-key "$key" \
    --secret-key "$secret" --seconds "$seconds" --max-images "$max_images" \
    | sed "s/^{/{\"rtt_ms\": $rtt, /" >> "$results"
  echo "rtt $rtt ms: loader" >&2
  "$loader" bench --endpoint "$endpoint" --bucket bench --option "aws_access_key_id=$key" \
    --option "aws_secret_access_key=$secret" --rtts "$rtt" --no-local --seconds "$seconds" \
    --max-images "$max_images" --out "$out/loader-rtt$rtt" --json \
    | "$venv/bin/python" -c '
import json, sys
report = json.load(sys.stdin)
for c in report["cells"]:
    print(json.dumps({"rtt_ms": c["rtt_ms"], "system": "loader " + c["strategy"], "images_per_sec": c["images_per_sec"],
                      "cpu_ms_per_image": c["cpu_ms_per_image"], "one_core": c["one_core_images_per_sec"],
                      "one_core_runs": report["one_core_pipeline_runs"],
                      "cores": report["cores"]}))' >> "$results"
  kill $server; wait $server 2>/dev/null || true
  trap - EXIT
done

"$venv/bin/python" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["rtt_ms"], r["system"]): r for r in rows}
cores = max((r.get("cores", 0) for r in rows), default=0)
# The one-core speed moves with the machine's load, so each row is set against the one
# measured beside it: a loader cell against the runs just before and after it, a PyTorch
# run against the median of its RTT's loader runs (taken a minute or so later).
runs = {}
for r in rows:
    runs.setdefault(r["rtt_ms"], set()).update(r.get("one_core_runs", []))
def one_core(r):
    if "one_core" in r:
        return r["one_core"]
    return statistics.median(runs[r["rtt_ms"]]) if runs.get(r["rtt_ms"]) else 0
every = [x for xs in runs.values() for x in xs]
if every:
    print(f"CPU ceiling: one-core pipeline {statistics.median(every):.0f} img/s (median of {len(every)} runs, "
          f"{min(every):.0f}-{max(every):.0f}) x {cores} cores\n")
print("| RTT ms | system | img/s | CPU ms/img | vs pytorch vanilla | vs pytorch threaded | 1-core img/s | efficiency |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for (rtt, system), r in sorted(by.items()):
    v, t = by.get((rtt, "pytorch vanilla")), by.get((rtt, "pytorch threaded"))
    ratio = lambda b: f"{r['images_per_sec'] / b['images_per_sec']:.1f}x" if b else "–"
    unit = one_core(r)
    eff = f"{100 * r['images_per_sec'] / (cores * unit):.0f}%" if unit and cores else "–"
    print(f"| {rtt} | {system} | {r['images_per_sec']:.0f} | {r['cpu_ms_per_image']:.2f} | {ratio(v)} | {ratio(t)} | {unit:.0f} | {eff} |")
PY
