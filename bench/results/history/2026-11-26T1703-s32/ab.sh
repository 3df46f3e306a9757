#!/bin/bash
# alternate base/new trees: bookie CPU per entry and its GC under bkspark's bulk appends
for round in 1 2 3; do
  for t in base new; do
    if [ $t = base ]; then T=/work/wt/s32base; else T=/work/main; fi
    rm -f /tmp/s32/gclog/*
    out=$(cd $T && BK_GCLOG=/tmp/s32/gclog PYTHONPATH=/tmp/s32/gcsite:$T timeout 600 /work/main/.venv/bin/python /tmp/s32/bookiecpu.py 2>&1 | tail -1 | cut -c1-120)
    gc=$(grep -h bookie_server /tmp/s32/gclog/* | sed 's/.*gc_seconds/gc_seconds/')
    echo "$round $t $out | $gc"
  done
done
