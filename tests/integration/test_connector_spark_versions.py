"""The connector on the PySpark release of the running venv, with what that release lacks degraded as documented.

docs/connector.md, "Spark versions": ``make spark-matrix`` runs the tests marked ``spark_matrix`` (these, and the
autoregistration of an installed wheel) in a venv per older release (Makefile ``SPARK_MATRIX``); ``make test``
runs them with the whole suite on the newest.  Each test asserts what its release offers, read from
:mod:`bkspark.datasource.spark_features`: pushed-down filters plan fewer partitions where ``pushFilters`` exists
and the rows are the same everywhere; per-trigger limits split an ``AvailableNow`` run into batches where Spark
has admission control and are refused by name where it has not; the stream writer commits exactly once on all.
"""

from __future__ import annotations

import uuid
import zlib
from typing import Any

import pytest

from bkspark.datasource.datasets import DatasetRegistry
from bkspark.datasource.spark_features import ADMISSION_CONTROL, FILTER_PUSHDOWN, PYSPARK_VERSION
from bkspark.errors import InvalidOptionError
from tests.integration.test_connector_spark import spark, write_bkspark_ledger  # noqa: F401 - the Spark fixture
from tests.integration.test_connector_streaming import (  # noqa: F401 - the module's own cluster
    Collector,
    assert_exactly_once_in_order,
    bk,
    py_cluster,
    stream,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark_matrix]


def test_the_release_under_test_is_the_one_this_venv_holds(spark) -> None:  # noqa: F811
    """The session the tests drive is the PySpark the feature checks looked at (a venv of `make spark-matrix` runs
    its own release, not the main venv's)."""
    assert spark.version == PYSPARK_VERSION


def test_a_batch_write_reads_back_and_filters_give_the_same_rows_pushed_down_or_not(spark, bk, py_cluster) -> None:  # noqa: F811
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    name = f"matrix-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 2000, numPartitions=2).select(F.concat(F.lit("m-"), F.col("id").cast("string")).alias("payload"))
    df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name).mode("append").save()
    manifest = DatasetRegistry(bk.zk, bk.ledgers_root).manifest(name)
    assert manifest is not None and len(manifest.ledgers) == 2
    read = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name)
    back = read.load().agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("c")).collect()[0]
    assert back.n == 2000 and back.c == sum(zlib.crc32(f"m-{i}".encode()) for i in range(2000))

    first = min(lid for _, lid in manifest.ledgers)
    for pushdown in ("false", "true"):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
        try:
            query = read.option("maxEntriesPerPartition", "500").load().where(
                f"ledger_id = {first} AND entry_id >= 10 AND entry_id < 20")
            rows = sorted((r.ledger_id, r.entry_id) for r in query.collect())
            assert rows == [(first, i) for i in range(10, 20)]
            scanned = query.rdd.getNumPartitions()
        finally:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")
        if pushdown == "true" and FILTER_PUSHDOWN:
            assert scanned == 1  # only ledger `first`'s entries 10..19 are planned
        else:  # Spark filters after a scan of both ledgers: 2 slices of 500 entries each
            assert scanned == 4


def test_available_now_reads_what_was_confirmed_at_the_start_in_batches_where_spark_admits_them(
    spark, bk, py_cluster, tmp_path  # noqa: F811
) -> None:
    """docs/streaming.md, Trigger.AvailableNow: what is confirmed when the query starts is read, exactly once and in
    order; with admission control (PySpark 4.2+) ``maxEntriesPerTrigger`` splits it into batches, before that Spark
    reads it in one batch."""
    uri = py_cluster.metadata_service_uri
    lh = bk.create_ledger()
    try:
        for i in range(30):
            lh.append(b"a%d" % i)  # entry 29 is not confirmed yet: the LAC is 28
        limits = {"maxEntriesPerTrigger": "10"} if ADMISSION_CONTROL else {}
        sink = Collector()
        query = stream(spark, uri, ledgers=str(lh.ledger_id), **limits).writeStream.foreachBatch(sink) \
            .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp")).start()
        assert query.awaitTermination(180), "AvailableNow did not stop"
        assert query.exception() is None
    finally:
        lh.close()
    assert sink.sizes() == ([10, 10, 9] if ADMISSION_CONTROL else [29])
    assert_exactly_once_in_order(sink.rows(), {lh.ledger_id: [b"a%d" % i for i in range(29)]})


def test_per_trigger_limits_are_refused_by_name_where_spark_has_no_admission_control() -> None:
    from bkspark.datasource.stream_reader import parse_stream_read_options

    for option in ("maxEntriesPerTrigger", "maxOffsetsPerTrigger", "maxBytesPerTrigger", "minEntriesPerTrigger"):
        options = {"metadataServiceUri": "zk://127.0.0.1:2181/ledgers", "ledgers": "7", option: "10"}
        if ADMISSION_CONTROL:
            parse_stream_read_options(options)
            continue
        with pytest.raises(InvalidOptionError) as refused:
            parse_stream_read_options(options)
        message = str(refused.value)
        assert "[BOOKKEEPER_SPARK_VERSION]" in message and "PySpark 4.2" in message and PYSPARK_VERSION in message


def test_a_bookkeeper_to_bookkeeper_stream_commits_each_row_once(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """The stream writer (an Arrow writer on every release, bkspark/datasource/spark_features.py) commits a
    micro-batch into a dataset exactly once."""
    uri = py_cluster.metadata_service_uri
    name = f"copy-{uuid.uuid4().hex[:8]}"
    payloads = [b"s-%d" % i for i in range(50)]
    lid = write_bkspark_ledger(bk, payloads)
    query = (
        stream(spark, uri, ledgers=str(lid)).select("payload").writeStream.format("bookkeeper")
        .option("metadataServiceUri", uri).option("dataset", name)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180), "AvailableNow did not stop"
    assert query.exception() is None
    rows: list[Any] = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", name) \
        .load().collect()
    assert sorted(bytes(r.payload) for r in rows) == sorted(payloads)
