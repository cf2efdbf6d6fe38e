#!/usr/bin/env bash
# The node-cache measurement (docs/benchmarks.md, "One cache per node"), one run: 4 and 8 rank
# processes on this machine (one node) read a shuffled ImageFolder from `loader serve s3`
# for two epochs through a cache directory, started together as torchrun starts them
# (LOCAL_RANK/LOCAL_WORLD_SIZE set); the second epoch's GETs and each rank's img/s for
#  - shared: this checkout, one directory for the node;
#  - per-rank: this checkout, a directory for each rank;
#  - owner: the build before the node cache (git revision $BEFORE, built into a worktree of
#    its own), one directory, which its first process owns and the others only read.
#
#   benches/scripts/node_cache.sh   (env: BEFORE=dc97a2a, IMAGES=2000, WORLDS="4 8", RTT=0 (ms), LOADER_CACHE)
set -euo pipefail
cd "$(dirname "$0")/../.."

before=${BEFORE:-dc97a2a}
images=${IMAGES:-2000}
cache=${LOADER_CACHE:-$HOME/.cache/loader}
work=$cache/node-cache-bench
source benches/scripts/common.sh
builds "$before" "$work"

data=$work/data
if [ ! -f "$data/.complete" ]; then
  rm -rf "$data"
  "$new" gen "$data/images" --images "$images" --classes 10
  touch "$data/.complete"
fi

dirs=$(mktemp -d)
trap 'kill ${server:-} 2>/dev/null || true; rm -rf "${log:-}" "$dirs"' EXIT
serve_s3 "$data" --rtt "${RTT:-0}"

for world in ${WORLDS:-4 8}; do
  echo "== $world ranks, 2 epochs of $images images, batch 32, one decode thread each"
  for setup in shared per-rank owner; do
    bin=$new; [ $setup = owner ] && bin=$old
    rm -rf "$dirs"/*
    pids=()
    for rank in $(seq 0 $((world - 1))); do
      dir=$dirs/node; local_world=$world
      if [ $setup = per-rank ]; then dir=$dirs/rank$rank; local_world=1; fi
      LOCAL_WORLD_SIZE=$local_world LOCAL_RANK=$((rank % local_world)) \
        "$bin" run s3://images "${opts[@]}" --shuffle --epochs 2 --batch-size 32 \
        --decode-threads 1 --set rank=$rank --set world_size=$world \
        --cache-dir "$dir" --cache-memory 0 --json > "$dirs/out$rank.json" 2>/dev/null &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    python3 - "$dirs" "$world" "$setup" <<'PY'
import json, sys
dirs, world, setup = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = [json.load(open(f"{dirs}/out{r}.json")) for r in range(world)]
total = sum(e["requests"] for r in runs for e in r["epochs"])
images = sum(r["images"] for r in runs) // 2
# A rank runs ahead into the second epoch before the first ends, so the GETs are counted
# over both: the first epoch needs one per image, the rest are the second epoch's.
second = total - images
rates = [r["epochs"][1]["images_per_sec"] for r in runs]
# The median rank: a rank that ran far ahead reads much of its second epoch before the
# first ends, and its rate over what is left says little.
median = sorted(rates)[len(rates) // 2]
print(f"{setup:>8}: {total} GETs over both epochs of {images} images: second epoch "
      f"{second} ({second / images:.3f} per image); second epoch img/s of the median rank "
      f"{median:.0f} (slowest {min(rates):.0f})")
PY
  done
done
