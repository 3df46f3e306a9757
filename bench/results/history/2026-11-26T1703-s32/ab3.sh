#!/bin/bash
# alternate three trees (d734e95, 88dfca9 int keys, c67b984 + run past last entry): bookie CPU per entry and GC
for round in 1 2 3 4 5; do
  for t in s32base s32keys s32new; do
    T=/work/wt/$t
    rm -f /tmp/s32/gclog/*
    out=$(cd $T && BK_GCLOG=/tmp/s32/gclog PYTHONPATH=/tmp/s32/gcsite:$T timeout 600 /work/main/.venv/bin/python /tmp/s32/bookiecpu.py 2>&1 | tail -1 | cut -c1-120)
    gc=$(grep -h bookie_server /tmp/s32/gclog/* | sed 's/.*gc_seconds/gc_seconds/')
    echo "$round $t $out | $gc"
  done
done
