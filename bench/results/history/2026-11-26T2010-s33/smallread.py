"""Where a packed partition of one-entry ledgers spends its time: reader.read() of each planned partition in this
process (no Spark), timed, then one under cProfile."""
import cProfile, os, pstats, sys, time
from bench.common import Cluster
from bkspark.client import BookKeeper
from bkspark.datasource.options import parse_read_options
from bkspark.datasource.reader import BookKeeperReader
from tests.harness.ledgers import publish_dataset, write_small_ledgers

N = int(os.environ.get("N", "400"))
with Cluster(None, False, make_jars=False) as cluster:
    uri = cluster.new_root("smallread")
    cluster.python_bookies(uri, 2, "smallread")
    lids = write_small_ledgers(uri, N, quorum=(1, 1, 1))
    with BookKeeper(uri) as bk:
        publish_dataset(bk, "small", lids)
    reader = BookKeeperReader(parse_read_options({"metadataserviceuri": uri, "dataset": "small"}))
    parts = reader.partitions()
    for p in parts:  # warm-up: imports, the cached client
        sum(b.num_rows for b in reader.read(p))
    t0, c0 = time.perf_counter(), time.process_time()
    rows = sum(b.num_rows for p in parts for b in reader.read(p))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{len(parts)} partitions, {rows} rows: {wall:.2f} s wall, {cpu:.2f} s CPU, {wall / N * 1e3:.2f} ms per ledger")
    prof = cProfile.Profile()
    prof.enable()
    rows = sum(b.num_rows for p in parts for b in reader.read(p))
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(35)
