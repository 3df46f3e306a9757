#!/bin/bash
# alternate three trees (d734e95, 88dfca9 int keys, c67b984 + run past last entry): bookie CPU per entry and GC
# Run from anywhere: H is this directory; gc_sitecustomize.py goes into a directory of its own as sitecustomize.py.
H=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d); mkdir -p $W/site $W/gclog; cp $H/gc_sitecustomize.py $W/site/sitecustomize.py
for round in 1 2 3 4 5; do
  for t in s32base s32keys s32new; do
    T=/work/wt/$t
    rm -f $W/gclog/*
    out=$(cd $T && BK_GCLOG=$W/gclog PYTHONPATH=$W/site:$T timeout 600 /work/main/.venv/bin/python $H/bookiecpu.py 2>&1 | tail -1 | cut -c1-120)
    gc=$(grep -h bookie_server $W/gclog/* | sed 's/.*gc_seconds/gc_seconds/')
    echo "$round $t $out | $gc"
  done
done
