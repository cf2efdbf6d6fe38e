#!/bin/bash
# Usage: cache_du_snapshots.sh PID DIR  (docs/benchmarks.md, "Cache: budgets, measured").
# Exact snapshots of a cache directory's file bytes: stop the process, wait until every
# thread is stopped, walk, continue.
pid=$1; dir=$2; peak=0; n=0
while kill -0 $pid 2>/dev/null; do
  kill -STOP $pid 2>/dev/null || break
  for i in $(seq 200); do
    running=$(cat /proc/$pid/task/*/stat 2>/dev/null | awk '{print $3}' | grep -vc '[Tt]')
    [ "$running" = "0" ] && break
  done
  d=$(find $dir -type f -printf '%s\n' 2>/dev/null | awk '{s+=$1} END {print s+0}')
  kill -CONT $pid
  n=$((n+1)); [ "$d" -gt "$peak" ] && peak=$d
  sleep 0.1
done
echo "peak $peak bytes over $n snapshots"
