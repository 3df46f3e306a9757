"""A/B of the benchmark Java bookie's RocksDB settings (session 29): the test harness's small ones (4 MiB block
cache, 4 KiB blocks, 4 MB write buffers and SST files, 64 MiB entry logs) against Apache BookKeeper's defaults.

    python bench/results/history/2026-11-26T0734-s29/java_bookie_conf_ab.py {harness|defaults} ARGS...

ARGS go to bench.kafka_compare (e.g. --no-make --sizes 1024 --bookie-kinds java --json PATH).
"""
import sys

import bench.common as common

#: Apache BookKeeper 4.17's own values of what tests/harness/java_bookkeeper.py's bookie_conf shrinks for tests
#: (KeyValueStorageRocksDB: block cache maxDirectMemory / ledger dirs / 10, 64 MB write buffer and SST files,
#: 64 KiB blocks; ServerConfiguration: 1 GiB entry logs).
BOOKKEEPER_DEFAULTS = {
    "dbStorage_rocksDB_blockCacheSize": 512 * 1024 * 1024 // 10,
    "dbStorage_rocksDB_writeBufferSizeMB": 64,
    "dbStorage_rocksDB_sstSizeInMB": 64,
    "dbStorage_rocksDB_blockSize": 64 * 1024,
    "logSizeLimit": 1024 * 1024 * 1024,
}

which = sys.argv[1]
if which == "defaults":
    common.JAVA_BOOKIE_CONF.update(BOOKKEEPER_DEFAULTS)
elif which != "harness":
    raise SystemExit("first argument: harness or defaults")
print(f"java bookie conf ({which}): {common.JAVA_BOOKIE_CONF}", flush=True)
from bench.kafka_compare import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
