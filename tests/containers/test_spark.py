"""The connector against BookKeeper clusters in containers: a Spark write and read on Java bookies, and a bookie
killed under a Spark write (the write completes through an ensemble change and every row reads back once).

Spark runs here, on the host; the bookies and ZooKeeper run in containers on loopback ports of the host's
network, so the connector is configured with nothing but the cluster's ``metadata_service_uri``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.writer import TAG_PARTITION
from bkspark.errors import BKError
from bkspark.protocol.ledger_metadata import LedgerState

pytestmark = [pytest.mark.containers, pytest.mark.integration, pytest.mark.fault]


def write_dataset(df, uri: str, dataset: str) -> None:
    (df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
     .option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
     .mode("overwrite").save())


def read_dataset(spark, uri: str, dataset: str):
    return spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset).load()


def test_spark_writes_and_reads_a_dataset_on_java_bookies_in_containers(spark, bookkeeper_cluster) -> None:
    from pyspark.sql import functions as F

    uri = bookkeeper_cluster.metadata_service_uri
    rows = 6000
    df = spark.range(rows, numPartitions=3).select(F.concat(F.lit("row-"), F.col("id").cast("string")).alias("payload"))
    write_dataset(df, uri, "containers-rw")

    back = read_dataset(spark, uri, "containers-rw")
    got = Counter(bytes(r.payload).decode() for r in back.select("payload").collect())
    assert got == Counter(f"row-{i}" for i in range(rows))
    ledgers = sorted(r.ledger_id for r in back.select("ledger_id").distinct().collect())
    assert len(ledgers) == 3
    with BookKeeper(uri) as bk:
        for lid in ledgers:
            md = bk.get_ledger_metadata(lid)
            assert md.state == LedgerState.CLOSED
            assert set(md.ensembles[0]) <= set(bookkeeper_cluster.bookie_ids)


def test_a_bookie_killed_under_a_spark_write_ends_in_an_ensemble_change_and_every_row_reads_back(
    spark, bookkeeper_cluster_factory
) -> None:
    from pyspark.sql import functions as F

    cluster = bookkeeper_cluster_factory(4, bookie="python")
    uri = cluster.metadata_service_uri
    rows = 40000  # 20,000 entries a ledger: seconds of appends, so that the kill lands while they go on
    df = spark.range(rows, numPartitions=2).select(F.concat(F.lit("row-"), F.col("id").cast("string")).alias("payload"))

    seen: dict[str, object] = {}  # the ledger the killer saw open: its id, first ensembles and the bookie killed
    failure: list[BaseException] = []
    done = threading.Event()

    def kill_a_bookie_of_an_open_data_ledger() -> None:
        try:
            with BookKeeper(uri) as bk:
                while not done.is_set() and not seen:
                    for lid in bk.list_ledgers():
                        try:
                            md = bk.get_ledger_metadata(lid)
                        except BKError:  # deleted since it was listed
                            continue
                        if md.state == LedgerState.OPEN and TAG_PARTITION in md.custom_metadata and md.ensembles:
                            seen.update(ledger=lid, ensembles=dict(md.ensembles), victim=md.ensembles[0][0])
                            cluster.kill_bookie(cluster.bookie_index(md.ensembles[0][0]))
                            return
                    time.sleep(0.02)
        except BaseException as exc:  # reported by the test below
            failure.append(exc)

    killer = threading.Thread(target=kill_a_bookie_of_an_open_data_ledger, name="test-bookie-killer")
    killer.start()
    try:
        write_dataset(df, uri, "killed-under-write")
    finally:
        done.set()
        killer.join(120)
    assert not failure, failure
    assert seen, "the write finished before a data ledger was seen open"
    victim = seen["victim"]
    assert not cluster.is_running(cluster.bookie_index(victim))

    back = read_dataset(spark, uri, "killed-under-write")
    got = Counter(bytes(r.payload).decode() for r in back.select("payload").collect())
    assert got == Counter(f"row-{i}" for i in range(rows))  # every row once
    assert seen["ledger"] in {r.ledger_id for r in back.select("ledger_id").distinct().collect()}
    with BookKeeper(uri) as bk:
        final = bk.get_ledger_metadata(seen["ledger"]).ensembles
    # The ensemble change: the killed bookie is replaced in the ledger's last segment (the segment it was in is
    # replaced in place when no entry of it had been confirmed yet, as Java does; else a new segment starts).
    assert final != seen["ensembles"] and victim not in final[max(final)], (seen, final)
