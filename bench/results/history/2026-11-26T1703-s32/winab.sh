#!/bin/bash
# the Spark writer's window: s32new (runs of 500, 2,000 in flight) / s32w8k (runs of 2,000, 8,000 in flight, client maxPendingAdds 8,000)
for kind in python java; do
for round in 1 2; do
  for t in s32new s32w8k; do
    T=/work/wt/$t
    echo "=== $kind round $round tree $t $(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    (cd $T && PYTHONPATH=$T timeout 1200 /work/main/.venv/bin/python -m bench.write_cpu --no-make --bookie-kind $kind --rows-per-entry 1 --rounds 3 2>&1 | grep -E "Spark write" )
  done
done
done
