#!/usr/bin/env bash
# The elastic-resume measurements (docs/benchmarks.md, "Mixtures and elastic resume"), one run:
#  1. GETs per image per rank with 8 (and 3) ranks reading WebDataset shards in shard-local order,
#     this checkout's global order (lanes) against the per-rank order of the build before it
#     (git revision $BEFORE, built into a worktree of its own), same shards, same server;
#  2. img/s of a 3-source mixture against the same data as one dataset, one process each,
#     the two alternating, same server.
#
#   benches/scripts/elastic.sh   (env: BEFORE=0a6322f, IMAGES=4000, WORLDS="8 3", LOADER_CACHE)
set -euo pipefail
cd "$(dirname "$0")/../.."

before=${BEFORE:-0a6322f}
images=${IMAGES:-4000}
cache=${LOADER_CACHE:-$HOME/.cache/loader}
work=$cache/elastic-bench
source benches/scripts/common.sh
builds "$before" "$work"

data=$work/data
if [ ! -f "$data/.complete" ]; then
  rm -rf "$data"
  "$new" gen "$data/shards" --images "$images" --classes 10 --shards 16
  "$new" gen "$data/all" --images 2100 --classes 10 --data-seed 1
  # The same 2100 images as three datasets: every third file of each class folder.
  for part in 0 1 2; do
    for class in "$data"/all/class_*; do
      mkdir -p "$data/part$part/$(basename "$class")"
      ls "$class" | awk -v p=$part 'NR % 3 == p' | while read -r f; do
        ln "$class/$f" "$data/part$part/$(basename "$class")/$f"
      done
    done
  done
  touch "$data/.complete"
fi

trap 'kill ${server:-} 2>/dev/null || true; rm -f "${log:-}"' EXIT
serve_s3 "$data"
shards="s3://shards/shard-{000000..000015}.tar"

for world in ${WORLDS:-8 3}; do
  echo "== GETs per image in the epoch, $world ranks, shard-local order, batch 64"
  # before: the per-rank order of $BEFORE; new: the global order, its lanes chosen for this
  # world size (a run started on it); new-16: lanes 16, as a run started on 1-16 ranks keeps
  # when it resumes on this world size.
  for build in before new new-16; do
    bin=$old; extra=()
    [ $build != before ] && bin=$new
    [ $build = new-16 ] && extra=(--set lanes=16)
    total_requests=0; total_images=0; per_rank=""
    for rank in $(seq 0 $((world - 1))); do
      out=$("$bin" run "$shards" "${opts[@]}" --shuffle --batch-size 64 --decode-threads 1 \
        --set rank=$rank --set world_size=$world "${extra[@]}" --json 2>/dev/null)
      # The epoch's own requests: opening the dataset (sidecar indexes, heads) is left out.
      r=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["epochs"][0]["requests"])')
      i=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["images"])')
      total_requests=$((total_requests + r)); total_images=$((total_images + i))
      per_rank="$per_rank $(python3 -c "print(f'{$r/$i:.3f}')")"
    done
    python3 -c "print(f'$build: {$total_requests} GETs for {$total_images} images, {$total_requests/$total_images:.4f} per image; per rank:$per_rank')"
  done
done

echo "== img/s: 3 sources mixed against one dataset of the same 2100 images (local disk)"
for round in 1 2 3; do
  for layout in mixture one; do
    if [ $layout = mixture ]; then
      urls=("$data/part0" "$data/part1" "$data/part2" --stop all_exhausted_without_replacement)
    else
      urls=("$data/all")
    fi
    out=$("$new" run "${urls[@]}" --shuffle --batch-size 64 --json 2>/dev/null)
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f'round $round, $layout: {d[\"images\"]} images, {d[\"images_per_sec\"]:.0f} img/s')" "$out"
  done
done
