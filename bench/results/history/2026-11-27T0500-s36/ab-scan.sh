#!/bin/bash
# A/B of the Spark one-row scan (bench.write_cpu writes then scans; Java or Python bookie): main (the list path)
# against the fused worktree (packed runs), alternating.  SIZE, KIND from the environment.
S=${SIZE:-100}; K=${KIND:-java}
for i in 1 2; do
  for side in main fused; do
    T=/work/main; [ $side = fused ] && T=/work/wt/fused
    L=/tmp/s36/ab-$side-$i-$S-$K
    (cd $T && PYTHONPATH=$T timeout 900 /work/main/.venv/bin/python -m bench.write_cpu --no-make --size $S \
       --bookie-kind $K --rounds 2 --rows-per-entry 1 --threads --json $L.json > $L.log 2>&1)
    echo "$side $i: $(grep 'Spark scan  ' $L.log | tr -s ' ' | cut -c1-70 | tr '\n' ';')"
    echo "   workers: $(grep "Spark scan:   Spark's Python workers  " $L.log | tr -s ' ' | cut -c1-90 | tr '\n' ';')"
    echo "   bookie:  $(grep -E "Spark scan:   (bookie JVM|Python bookie)  " $L.log | tr -s ' ' | cut -c1-90 | tr '\n' ';')"
  done
done
