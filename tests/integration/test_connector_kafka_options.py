"""What a user of Spark's Kafka connector expects, against real ZooKeeper, Python bookies and Spark (local[2,2]):
``key`` and ``headers`` kept by a write and read back, unknown columns refused at ``save()``, per-ledger
``startingOffsets``/``endingOffsets``, ``startingTimestamp``/``endingTimestamp`` and ``ledger_ctime`` pushdown,
a streaming-only option refused by a batch read, Kafka's ``-1``/``-2`` and the renamed "done" marker in a
stream, and ``passwordEnv`` read in a Spark session of its own (docs/connector.md, docs/streaming.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from tests.integration.test_connector_spark import entries_of, read_ledgers, spark, write_bkspark_ledger  # noqa: F401
from tests.integration.test_connector_streaming import bk, py_cluster  # noqa: F401 - a cluster root per module

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def _write(df: Any, uri: str, dataset: str, **options: str) -> None:
    writer = df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
    writer = writer.option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def _read(spark: Any, uri: str, **options: str) -> Any:  # noqa: F811
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", uri)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _frame(spark: Any, n: int) -> tuple[Any, list[tuple[bytes, bytes | None, list | None]]]:  # noqa: F811
    """A DataFrame of payload, key (string, some null) and Kafka-style headers (some null, a null value), and the
    rows it holds as (payload, key bytes, [(header key, value)] or None)."""
    rows = []
    for i in range(n):
        key = None if i % 4 == 0 else f"key-{i % 10}"
        headers = None if i % 9 == 5 else [("trace", b"t%d" % i), ("ключ", None if i % 2 else b"")][: i % 3]
        rows.append((b"payload-%d" % i, key, headers))
    df = spark.createDataFrame(
        [(p, k, None if h is None else [{"key": hk, "value": hv} for hk, hv in h]) for p, k, h in rows],
        "payload binary, key string, headers array<struct<key: string, value: binary>>",
    ).repartition(2)
    return df, [(p, None if k is None else k.encode(), h) for p, k, h in rows]


def _kept(df: Any) -> list[tuple[bytes, bytes | None, list | None]]:
    return sorted(
        (bytes(r.payload), None if r.key is None else bytes(r.key),
         None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers])
        for r in df.select("payload", "key", "headers").collect()
    )


def _job_records(bk: BookKeeper) -> list[str]:
    from bkspark.protocol import zk_paths

    path = zk_paths.write_jobs_path(bk.store.root)
    return sorted(bk.store.zk.get_children(path)) if bk.store.zk.exists(path) else []


@pytest.mark.parametrize("rows_per_entry", ["1", "40"])
def test_key_and_headers_round_trip_as_kafka_columns(spark, bk, py_cluster, rows_per_entry: str) -> None:  # noqa: F811
    """docs/connector.md, "Write" and "Rows per entry": a DataFrame's key and headers are kept per row (rows-v2
    entries) and read back as the key and headers columns, nulls as nulls, with one row per entry or many."""
    from bkspark.datasource.datasets import DatasetRegistry
    from bkspark.datasource.packing import ENTRY_FORMAT_KEY, ROWS_V2

    uri = py_cluster.metadata_service_uri
    dataset = f"keyed-{rows_per_entry}"
    df, rows = _frame(spark, 500)
    _write(df, uri, dataset, rowsPerEntry=rows_per_entry)
    back = _read(spark, uri, dataset=dataset, includeHeaders="true")
    assert back.columns == ["scope_id", "ledger_id", "entry_id", "payload", "ledger_ctime", "key", "headers"]
    assert _kept(back) == sorted(rows)  # payloads are unique: the sort never compares keys
    manifest = DatasetRegistry(bk.store.zk, bk.store.root).manifest(dataset)
    assert manifest is not None
    for scope, lid in manifest.ledgers:
        md = bk.get_ledger_metadata(lid, scope_id=scope)
        assert md.custom_metadata[ENTRY_FORMAT_KEY] == ROWS_V2
        if rows_per_entry == "1":
            assert md.last_entry_id + 1 == back.where(f"ledger_id = {lid}").count()
    # without includeHeaders: the same rows and keys, no headers column; a stream returns them too
    plain = _read(spark, uri, dataset=dataset)
    assert "headers" not in plain.columns
    assert sorted((bytes(r.payload), r.key and bytes(r.key)) for r in plain.collect()) == sorted(
        (p, k) for p, k, _ in rows)
    query = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
             .option("includeHeaders", "true").load()
             .writeStream.format("memory").queryName(f"keyed_stream_{rows_per_entry}").trigger(availableNow=True)
             .start())
    try:
        assert query.awaitTermination(120)
        assert _kept(spark.table(f"keyed_stream_{rows_per_entry}")) == _kept(back)
    finally:
        query.stop()


def test_entries_of_other_writers_have_null_keys_and_headers(spark, bk, py_cluster) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [b"x", b"y"])
    rows = read_ledgers(spark, uri, str(lid), includeHeaders="true").collect()
    assert [(bytes(r.payload), r.key, r.headers) for r in sorted(rows, key=lambda r: r.entry_id)] == [
        (b"x", None, None), (b"y", None, None)]


def test_columns_the_writer_would_drop_fail_save_before_any_ledger(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/connector.md, "Write": a column the writer does not keep fails save() naming it, before any ledger id
    is reserved or job record created; a key or headers column of another type too."""
    uri = py_cluster.metadata_service_uri
    ledgers_before, jobs_before = bk.list_ledgers(), _job_records(bk)
    kafka_shaped = spark.createDataFrame([(b"v", "k", "events", 3)], "payload binary, key string, topic string, partition int")
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_UNKNOWN_COLUMNS\] .*'topic', 'partition', which would be lost"):
        _write(kafka_shaped, uri, "never")
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_COLUMN_TYPE\] column 'key' must be binary or string"):
        _write(spark.createDataFrame([(b"v", 1)], "payload binary, key int"), uri, "never")
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_COLUMN_TYPE\] column 'headers' must be Kafka's"):
        _write(spark.createDataFrame([(b"v", {"a": b"b"})], "payload binary, headers map<string, binary>"), uri, "never")
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_UNKNOWN_COLUMNS\] .*'id'"):
        _write(spark.range(3).selectExpr("id", "cast(id as string) as payload"), uri, "never")
    assert bk.list_ledgers() == ledgers_before and _job_records(bk) == jobs_before
    # a map of properties becomes Kafka's headers with map_entries, as the message says
    from pyspark.sql import functions as F

    props = spark.createDataFrame([(b"v", {"a": b"b"})], "payload binary, properties map<string, binary>")
    _write(props.select("payload", F.map_entries("properties").alias("headers")), uri, "from-properties")
    got = _read(spark, uri, dataset="from-properties", includeHeaders="true").collect()
    assert [(h.key, bytes(h.value)) for h in got[0].headers] == [("a", b"b")]


def test_a_dataset_column_routes_rows_to_several_datasets_in_one_spark_job(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/connector.md, "Routing rows by a dataset column": as Kafka's sink routes by ``topic``, each row goes to
    the dataset its ``dataset`` column names (one created on first use), with its key; one job record, committed
    in one multi; rows packed per dataset (``rowsPerEntry``); mode overwrite replaces only the datasets the rows
    name; the ``dataset`` option wins."""
    from bkspark.datasource.datasets import DatasetRegistry

    uri = py_cluster.metadata_service_uri
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    _write(spark.createDataFrame([(b"old",)], "payload binary"), uri, "routed-b")
    data = [(b"r-%d" % i, f"k{i}", ["routed-a", "routed-b", "routed-c"][i % 3]) for i in range(30)]
    df = spark.createDataFrame(data, "payload binary, key string, dataset string").repartition(3)
    jobs_before = _job_records(bk)
    (df.write.format("bookkeeper").option("metadataServiceUri", uri).option("ensembleSize", "3")
     .option("writeQuorumSize", "2").option("ackQuorumSize", "2").option("rowsPerEntry", "4").mode("append").save())
    assert _job_records(bk) == jobs_before

    def rows_of(name: str) -> list[tuple[bytes, bytes | None]]:
        got = _read(spark, uri, dataset=name).collect()
        return sorted((bytes(r.payload), None if r.key is None else bytes(r.key)) for r in got)

    want = {n: sorted((p, k.encode()) for p, k, d in data if d == n) for n in ("routed-a", "routed-b", "routed-c")}
    assert rows_of("routed-a") == want["routed-a"] and rows_of("routed-c") == want["routed-c"]
    assert rows_of("routed-b") == sorted(want["routed-b"] + [(b"old", None)])
    # overwrite: only the datasets the rows name
    over = spark.createDataFrame([(b"new-a", "routed-a")], "payload binary, dataset string")
    over.write.format("bookkeeper").option("metadataServiceUri", uri).mode("overwrite").save()
    assert rows_of("routed-a") == [(b"new-a", None)] and rows_of("routed-c") == want["routed-c"]
    # the dataset option wins over the column (Kafka's topic option over its topic column)
    _write(spark.createDataFrame([(b"opt", "routed-c")], "payload binary, dataset string"), uri, "routed-option")
    assert rows_of("routed-option") == [(b"opt", None)] and rows_of("routed-c") == want["routed-c"]


def test_a_streaming_query_routes_each_micro_batch_by_its_dataset_column(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """``writeStream`` without the ``dataset`` option: each row of each micro-batch goes to the dataset its
    ``dataset`` column names, once (docs/connector.md, "Routing rows by a dataset column")."""
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    payloads = [b"s-%d" % i for i in range(60)]
    lid = write_bkspark_ledger(bk, payloads)
    query = (
        spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", str(lid))
        .option("maxEntriesPerTrigger", "25").load()
        .select("payload", F.when(F.col("entry_id") % 2 == 0, "sroute-even").otherwise("sroute-odd").alias("dataset"))
        .writeStream.format("bookkeeper").option("metadataServiceUri", uri)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180)
    for name, parity in (("sroute-even", 0), ("sroute-odd", 1)):
        got = sorted(bytes(r.payload) for r in _read(spark, uri, dataset=name).collect())
        assert got == sorted(p for i, p in enumerate(payloads) if i % 2 == parity)


def test_a_null_dataset_in_a_row_fails_the_spark_job_and_publishes_nothing(spark, bk, py_cluster) -> None:  # noqa: F811
    """A row whose dataset is null fails its task naming the column; the job aborts: no dataset changed, no
    ledger or job record left.  Spark's Python sources take only append and overwrite, routed or not."""
    uri = py_cluster.metadata_service_uri
    _write(spark.createDataFrame([(b"kept",)], "payload binary"), uri, "routed-null-a")
    ledgers_before, jobs_before = bk.list_ledgers(), _job_records(bk)
    df = spark.createDataFrame([(b"x", "routed-null-a"), (b"y", None)], "payload binary, dataset string").coalesce(1)
    with pytest.raises(Exception, match=r"BOOKKEEPER_INVALID_DATASET\] column 'dataset' is null in row 1"):
        df.write.format("bookkeeper").option("metadataServiceUri", uri).mode("append").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("bookkeeper").option("metadataServiceUri", uri).mode("errorifexists").save()
    assert bk.list_ledgers() == ledgers_before and _job_records(bk) == jobs_before
    assert [bytes(r.payload) for r in _read(spark, uri, dataset="routed-null-a").collect()] == [b"kept"]


def test_per_ledger_starting_and_ending_offsets_in_a_batch_read(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/connector.md, "Read options": JSON startingOffsets (first entry, -2 earliest) and endingOffsets (the
    entry to stop before, -1 latest) per ledger; ledgers not named use startEntry/endEntry."""
    uri = py_cluster.metadata_service_uri
    a = write_bkspark_ledger(bk, [b"a%d" % i for i in range(20)])
    b = write_bkspark_ledger(bk, [b"b%d" % i for i in range(20)])
    c = write_bkspark_ledger(bk, [b"c%d" % i for i in range(20)])
    df = read_ledgers(spark, uri, f"{a},{b},{c}", startingOffsets=json.dumps({str(a): 5, str(b): -2}),
                      endingOffsets=json.dumps({str(a): 8, f"0:{c}": -1}), startEntry="15")
    got = {lid: [e for e, _ in rows] for lid, rows in entries_of(df).items()}
    assert got == {a: [5, 6, 7], b: list(range(20)), c: list(range(15, 20))}
    with pytest.raises(Exception, match=r"option 'startingOffsets'='latest' is invalid: a batch read takes 'earliest'"):
        read_ledgers(spark, uri, str(a), startingOffsets="latest").collect()


def test_timestamps_and_ledger_ctime_filters_choose_ledgers_by_creation_time(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/connector.md: startingTimestamp/endingTimestamp select ledgers by creation time before any is opened,
    and filters on ledger_ctime are pushed down exactly (the plan shrinks, the rows are those Spark would keep)."""
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    old = write_bkspark_ledger(bk, [b"old"])
    time.sleep(0.05)
    middle = write_bkspark_ledger(bk, [b"middle"])
    time.sleep(0.05)
    new = write_bkspark_ledger(bk, [b"new"])
    ctime = {lid: bk.get_ledger_metadata(lid).ctime for lid in (old, middle, new)}
    assert ctime[old] < ctime[middle] < ctime[new]
    ids = f"{old},{middle},{new}"
    df = read_ledgers(spark, uri, ids, startingTimestamp=str(ctime[middle]), endingTimestamp=str(ctime[new]))
    assert set(entries_of(df)) == {middle}
    assert set(entries_of(read_ledgers(spark, uri, ids, startingTimestamp=str(ctime[middle])))) == {middle, new}
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        since = F.lit(ctime[middle] / 1000).cast("timestamp")
        pushed = read_ledgers(spark, uri, ids).where(F.col("ledger_ctime") >= since)
        assert pushed.rdd.getNumPartitions() == 1 and set(entries_of(pushed)) == {middle, new}
        assert sorted(pushed.collect()) == sorted(r for r in read_ledgers(spark, uri, ids).collect()
                                                  if r.ledger_id in (middle, new))
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    assert set(entries_of(read_ledgers(spark, uri, ids).where(F.col("ledger_ctime") >= since))) == {middle, new}


def test_starting_timestamp_leaves_older_ledgers_out_of_a_stream(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/streaming.md: ``startingTimestamp`` leaves out of a stream the ledgers created before it."""
    uri = py_cluster.metadata_service_uri
    old = write_bkspark_ledger(bk, [b"old"])
    time.sleep(0.05)
    new = write_bkspark_ledger(bk, [b"new-%d" % i for i in range(3)])
    since = bk.get_ledger_metadata(new).ctime
    assert bk.get_ledger_metadata(old).ctime < since
    query = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
             .option("ledgers", f"{old}-{new}").option("startingTimestamp", str(since)).load()
             .writeStream.format("memory").queryName("since_stream").trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(300)
        got = sorted((r.ledger_id, bytes(r.payload)) for r in spark.table("since_stream").collect())
    finally:
        query.stop()
    assert got == [(new, b"new-%d" % i) for i in range(3)]


def test_a_streaming_only_option_on_a_batch_read_fails_before_any_task(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/connector.md, "Read options": values are checked at load(), the kind of query when it is planned."""
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [b"x"])
    with pytest.raises(Exception, match=r"option 'maxEntriesPerTrigger'='0' is invalid"):
        read_ledgers(spark, uri, str(lid), maxEntriesPerTrigger="0")  # load(): the value
    df = read_ledgers(spark, uri, str(lid), maxOffsetsPerTrigger="10")  # load() passes: it cannot tell the kind
    with pytest.raises(Exception, match=r"option 'maxEntriesPerTrigger'='10' is invalid: it is an option of "
                                        r"spark.readStream only, not of spark.read"):
        df.collect()


def test_ranges_read_the_ledgers_that_exist_and_a_missing_single_id_fails(spark, bk, py_cluster) -> None:  # noqa: F811
    """docs/connector.md, "Partitions": a range is planned from the ledgers listed under it (packed as a dataset's
    are); a single id must exist."""
    uri = py_cluster.metadata_service_uri
    lids = [write_bkspark_ledger(bk, [b"r%d" % i], ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
            for i in range(30)]
    bk.delete_ledger(lids[3])
    df = read_ledgers(spark, uri, f"{lids[0]}-{lids[-1]}")
    assert df.rdd.getNumPartitions() == 1  # 29 one-entry ledgers packed into one task
    assert set(entries_of(df)) == set(lids) - {lids[3]}
    assert bk.store.list_ledgers_between(lids[0], lids[-1]) == sorted(set(lids) - {lids[3]})
    with pytest.raises(Exception, match=rf"\[BOOKKEEPER_LEDGER_NOT_FOUND\] ledger {lids[3]} "):
        read_ledgers(spark, uri, f"{lids[0]}-{lids[2]},{lids[3]}").collect()


def test_kafka_markers_and_old_done_markers_in_a_stream(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md: in JSON startingOffsets, -1 is the ledger's latest (read from there on) and -2 its
    earliest; a checkpoint written with the old -1 "done" marker restarts where it stopped."""
    uri = py_cluster.metadata_service_uri
    growing = bk.create_ledger(3, 2, 2)
    for i in range(10):
        growing.append(b"g%d" % i)
    closed = write_bkspark_ledger(bk, [b"c%d" % i for i in range(5)])
    seen: list[tuple[int, int]] = []

    def sink(df: Any, _batch: int) -> None:
        seen.extend((r.ledger_id, r.entry_id) for r in df.select("ledger_id", "entry_id").collect())

    checkpoint = str(tmp_path / "cp")

    def start() -> Any:
        return (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
                .option("ledgers", f"{growing.ledger_id},{closed}")
                .option("startingOffsets", json.dumps({str(growing.ledger_id): -1, str(closed): -2}))
                .option("longPollTimeout", "500ms").load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start())

    def wait(query: Any, done: Any, what: str) -> None:
        deadline = time.monotonic() + 300
        while not done():
            if query.exception() is not None:
                raise AssertionError(f"the query failed while waiting for {what}: {query.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; seen {sorted(seen)}")
            time.sleep(0.1)

    query = start()
    try:
        wait(query, lambda: len(seen) >= 5, "the closed ledger, from its earliest entry")
        growing.append(b"g10")
        growing.append(b"g11")  # g10 is confirmed once g11 carries the LAC past it
        wait(query, lambda: (growing.ledger_id, 10) in seen, "the growing ledger's new entry")
    finally:
        query.stop()
    # latest was the growing ledger's confirmed end at the start (entry 9 was not confirmed yet: its LAC was 8)
    assert sorted(s for s in seen if s[0] == closed) == [(closed, e) for e in range(5)]
    assert {e for lid, e in seen if lid == growing.ledger_id} in ({10}, {9, 10})
    offsets = Path(checkpoint) / "offsets"
    last = max(int(f.name) for f in offsets.iterdir() if f.name.isdigit())
    lines = (offsets / str(last)).read_text().splitlines()
    body = json.loads(lines[-1])
    assert body["ledgers"][f"0:{closed}"] == "done"
    body["ledgers"][f"0:{closed}"] = -1  # what the source wrote before the marker was renamed
    (offsets / str(last)).write_text("\n".join(lines[:-1] + [json.dumps(body)]) + "\n")
    seen.clear()
    growing.append(b"g12")
    growing.close()
    query = start()
    try:
        wait(query, lambda: (growing.ledger_id, 12) in seen, "the entries after the restart")
    finally:
        query.stop()
    assert (growing.ledger_id, 12) in seen and not [s for s in seen if s[0] == closed]


def test_password_env_is_read_by_a_spark_session_started_with_the_variable(bk, py_cluster, tmp_path) -> None:
    """docs/connector.md, "Passwords from the environment": a fresh Spark session, in a process of its own started
    with the variable set, reads a ledger whose only password is that variable; the same program without the
    variable fails with the error naming it. (The test's own driver JVM keeps the environment it was started
    with, so the variable is given to a new process, as a user would.)"""
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [b"secret-row-%d" % i for i in range(5)], password=b"env-pw", digest_type="CRC32C")
    program = tmp_path / "read_with_env.py"
    program.write_text(textwrap.dedent(f"""
        import sys
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").appName("bkspark-password-env")
                 .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m").getOrCreate())
        try:
            df = (spark.read.format("bookkeeper").option("metadataServiceUri", {uri!r})
                  .option("ledgers", "{lid}").option("passwordEnv", "BKSPARK_TEST_PASSWORD").load())
            print("ROWS", sorted(bytes(r.payload).decode() for r in df.collect()))
        finally:
            spark.stop()
    """))
    env = {k: v for k, v in os.environ.items() if k != "BKSPARK_TEST_PASSWORD"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    ok = subprocess.run([sys.executable, str(program)], cwd=str(REPO), env={**env, "BKSPARK_TEST_PASSWORD": "env-pw"},
                        capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert f"ROWS {sorted('secret-row-%d' % i for i in range(5))}" in ok.stdout
    missing = subprocess.run([sys.executable, str(program)], cwd=str(REPO), env=env, capture_output=True, text=True,
                             timeout=600)
    assert missing.returncode != 0 and "BKSPARK_TEST_PASSWORD" in missing.stderr


def test_listing_a_range_walks_only_the_znodes_under_it_in_both_layouts(bk) -> None:
    """``ZkMetadataStore.list_ledgers_between`` gives exactly the ledgers of ``list_ledgers`` in the range, for ids
    of the legacy layout (2/4/4 digits) and of the long one (ids from 2^31 on, 3/4/4/4/4 digits), and reads no
    znode of a digit group outside the range."""
    from tests.harness.ledgers import create_metadata_only

    ids = [900_001, 900_002, 2**31 - 1, 2**31 + 5, 2**31 + 70_000, 10**12, 10**12 + 1]
    create_metadata_only(bk, ids)
    everything = list(bk.store.list_ledgers())
    for first, last in ((900_000, 900_001), (900_001, 2**31), (2**31, 2**31 + 10), (2**31 - 1, 10**12),
                        (10**12, 10**12 + 1), (10**12 + 2, 2**62)):
        assert bk.store.list_ledgers_between(first, last) == [lid for lid in everything if first <= lid <= last]
    listed: list[str] = []
    real = bk.store.zk.get_children

    def counting(path: str, *args: Any, **kwargs: Any) -> Any:
        listed.append(path)
        return real(path, *args, **kwargs)

    bk.store.zk.get_children = counting  # type: ignore[method-assign]
    try:
        assert bk.store.list_ledgers_between(900_000, 900_010) == [900_001, 900_002]
    finally:
        del bk.store.zk.get_children
    root = bk.store.root
    assert listed == [root, f"{root}/00", f"{root}/00/0090"], listed


def test_the_stream_reader_shares_the_limit_follows_kafka_markers_and_reads_old_checkpoints(bk, py_cluster) -> None:
    """The stream reader driven directly, as Spark's driver process and a task would (docs/streaming.md): the
    limit shared in proportion across ledgers, -1 (latest) in JSON startingOffsets reads nothing of that ledger
    in the first batch, an old checkpoint's -1 is "done", and the progress report has Kafka's lag figures."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from bkspark.datasource.stream_reader import BookKeeperStreamReader, parse_stream_read_options

    uri = py_cluster.metadata_service_uri
    a = write_bkspark_ledger(bk, [b"a%d" % i for i in range(50)])
    b = write_bkspark_ledger(bk, [b"b%d" % i for i in range(50)])
    growing = bk.create_ledger(3, 2, 2)
    for i in range(10):
        growing.append(b"g%d" % i)
    g = growing.ledger_id
    reader = BookKeeperStreamReader(*parse_stream_read_options({
        "metadataServiceUri": uri, "ledgers": f"{a},{b},{g}", "startingOffsets": json.dumps({str(g): -1}),
        "maxOffsetsPerTrigger": "30"}))

    def rows(start: dict, end: dict) -> list[tuple[int, int]]:
        return sorted((r["ledger_id"], r["entry_id"]) for p in reader.partitions(start, end)
                      for batch in reader.read(p) for r in batch.to_pylist())

    try:
        start = reader.initialOffset()
        assert start == {"ledgers": {f"0:{g}": "latest"}}
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert (end["ledgers"][f"0:{a}"], end["ledgers"][f"0:{b}"]) == (15, 15)  # 30 shared by what waits
        assert end["ledgers"][f"0:{g}"] >= 9  # where its latest was: nothing of it read
        assert rows(start, end) == [(a, i) for i in range(15)] + [(b, i) for i in range(15)]
        lag = reader.reportLatestOffset()["lag"]
        assert (lag["minOffsetsBehindLatest"], lag["maxOffsetsBehindLatest"]) == (0, 35)
        growing.append(b"g10")
        growing.append(b"g11")
        old = {"ledgers": {f"0:{a}": -1, f"0:{b}": 15, f"0:{g}": end["ledgers"][f"0:{g}"]}}  # a checkpoint of before
        # g10 is confirmed once a bookie that stores g11 (which carries LAC 10) answers the reader's LAC read;
        # the first read may reach one that does not have it yet: wait for the event, not for a time.
        deadline = time.monotonic() + 60
        end2 = reader.latestOffset(old, ReadMaxRows(1000))
        while not (isinstance(end2["ledgers"][f"0:{g}"], int) and end2["ledgers"][f"0:{g}"] >= 11) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
            end2 = reader.latestOffset(old, ReadMaxRows(1000))
        assert end2["ledgers"][f"0:{a}"] == "done" and end2["ledgers"][f"0:{b}"] == "done"
        got = rows(old, end2)
        assert [r for r in got if r[0] == b] == [(b, i) for i in range(15, 50)] and not [r for r in got if r[0] == a]
        assert (g, 10) in got
    finally:
        reader.stop()
        growing.close()
        _evict_cached_client(uri)


def test_the_stream_reader_leaves_ledgers_older_than_starting_timestamp_out(bk, py_cluster) -> None:
    """The same without Spark: ``startingTimestamp`` leaves the older ledger out of the offsets entirely."""
    from bkspark.datasource.stream_reader import BookKeeperStreamReader, parse_stream_read_options

    uri = py_cluster.metadata_service_uri
    old = write_bkspark_ledger(bk, [b"old"])
    time.sleep(0.05)
    new = write_bkspark_ledger(bk, [b"new"])
    since = bk.get_ledger_metadata(new).ctime
    reader = BookKeeperStreamReader(*parse_stream_read_options({
        "metadataServiceUri": uri, "ledgers": f"{old}-{new}", "startingTimestamp": str(since)}))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end == {"ledgers": {f"0:{new}": "done"}}
    finally:
        reader.stop()
        _evict_cached_client(uri)


def _evict_cached_client(uri: str) -> None:
    """The stream reader ran in this process: close the client it cached before the module's cluster stops."""
    from bkspark.datasource.clients import client_conf, evict_client

    evict_client(uri, client_conf((), batch_read_enabled=True))
