#!/bin/bash
for round in 1 2; do
  for t in base new; do
    if [ $t = base ]; then T=/work/wt/s32base; else T=/work/main; fi
    echo "=== round $round tree $t $(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    (cd $T && PYTHONPATH=$T timeout 1200 /work/main/.venv/bin/python -m bench.write_cpu --no-make --bookie-kind python --rows-per-entry 1 --rounds 3 2>&1 | grep -v "^\s*$" | tail -25)
  done
done
