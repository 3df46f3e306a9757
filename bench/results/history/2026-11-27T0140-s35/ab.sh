#!/bin/bash
# A/B of the Spark one-row write (bench.write_cpu, Python bookie): base worktree against main, alternating.
cd /work/main
for i in 1 2; do
  for side in base main; do
    T=/work/main; [ $side = base ] && T=/work/wt/base
    (cd $T && PYTHONPATH=$T timeout 900 /work/main/.venv/bin/python -m bench.write_cpu --no-make --size ${SIZE:-1024} \
       --bookie-kind ${KIND:-python} --rounds 2 --rows-per-entry 1 --threads --json /tmp/s35/ab-$side-$i-${SIZE:-1024}-${KIND:-python}.json \
       > /tmp/s35/ab-$side-$i-${SIZE:-1024}-${KIND:-python}.log 2>&1)
    echo "$side $i: $(grep 'Spark write  ' /tmp/s35/ab-$side-$i-${SIZE:-1024}-${KIND:-python}.log | tr -s ' ' | cut -c1-80 | tr '\n' ';')"
    echo "   workers: $(grep "Spark write:   Spark's Python workers  " /tmp/s35/ab-$side-$i-${SIZE:-1024}-${KIND:-python}.log | tr -s ' ' | cut -c1-90 | tr '\n' ';')"
  done
done
