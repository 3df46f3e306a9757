#!/bin/bash
# s35's runs, in the order they ran (2026-11-27 UTC), from /work/main; H is this directory.
H=bench/results/history/2026-11-27T0140-s35
python -m bench.write_cpu --no-make --size 1024 --bookie-kind python --rounds 2 --rows-per-entry 1 --threads > $H/wcpu-1k-py.log  # 01:41, c847bd2
PERF=bookie ROUNDS=1 SIZES=1024 python $H/clientcpu.py      # 01:42: perf record of the bookie -> bperf-1024.txt (perf report --sort sym -g none)
python $H/slicecost.py                                        # before and after 5482424
SIZE=1024 $H/ab.sh > $H/ab-1024.out                           # 01:46, worktree of c847bd2 at /work/wt/base against 5482424's tree
python -m bench.kafka_compare --no-make --json $H/kafka_compare-1.json > $H/kafka_compare-1.log   # 01:54, 5482424
# exp-4000.log: the same write_cpu command (no --threads) with MAX_PENDING_ADDS = 4000 in bkspark/datasource/writer.py
# exp-nosync.log: the same with the bench harness's Python bookie started with journal_sync_data=False
python $H/syncbench2.py                                       # fdatasync of appended groups, four file layouts
ROUNDS=4 TREE=/work/wt/pp python $H/packedload.py             # b0ab17e's map against 5482424 (worktree), 100 B
SIZE=100 $H/ab.sh > $H/ab-100.out                             # 02:07, c847bd2 against b0ab17e
# 02:35: python -m bench.write_cpu --no-make --size 100 --bookie-kind java --rounds 1 --rows-per-entry 1, four times,
#   taking turns between b0ab17e (readahead-java-100-*.log) and a worktree of it whose bench/common.py gave the Java
#   bookies dbStorage_readAheadCacheBatchSize=1000 (readahead-java-1000-*.log); 6b9cb6e then made that the setting
python -m bench.kafka_compare --no-make --json $H/kafka_compare-2.json > $H/kafka_compare-2.log        # 02:37, 6b9cb6e
python -m bench.client_compare --no-make --entries 20000 --repeat 3 --json $H/client_compare.json      # 02:48
python -m bench.bookie_compare --no-make --entries 20000 --repeat 5 --json $H/bookie_compare.json      # 02:50
make demo > $H/make-demo-1.log; make demo > $H/make-demo-2.log                     # 03:18, 552f5c6
(cd /work/wt/base && PYTHONPATH=. python examples/demo.py) > $H/make-demo-c847bd2-1.log   # 03:20, c847bd2
make demo > $H/make-demo-3.log                                                      # 03:21
(cd /work/wt/base && PYTHONPATH=. python examples/demo.py) > $H/make-demo-c847bd2-2.log   # 03:22
