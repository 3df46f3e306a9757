"""A/B of the benchmark Java bookie's read threads (session 30): the harness's 2 read worker threads against
0 (reads served on the Netty I/O threads, no hand-off), and BookKeeper's default of 8.

    python readthreads_ab.py {2|0|8} ARGS...   (ARGS go to bench.kafka_compare)
"""
import sys

import bench.common as common

n = int(sys.argv[1])
common.JAVA_BOOKIE_CONF["numReadWorkerThreads"] = n
print(f"java bookie conf: {common.JAVA_BOOKIE_CONF}", flush=True)
from bench.kafka_compare import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
