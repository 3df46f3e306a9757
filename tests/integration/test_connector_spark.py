"""The ``bookkeeper`` Spark data source against real servers, through PySpark 4.3 at ``local[2,2]``.

One Spark session for the module (``local[2,2]``: two cores, every task tried at most twice), three Python
bookies on a cluster root of their own for the reads and writes that do not need Java, and Java bookie
clusters (4.17.3, 4.16.6) for the compatibility reads. The session never calls ``spark.dataSource.register``:
every ``format("bookkeeper")`` here goes through PySpark's lookup of ``pyspark_*`` modules
(test_connector_autoregister.py proves that lookup on a real, non-editable install).
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterator

import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.datasets import DatasetRegistry
from bkspark.datasource.writer import JOB_PARENT_ROLE, TAG_ATTEMPT, TAG_DATASET, TAG_JOB, TAG_PARTITION, TAG_ROLE
from tests.harness.java_bookkeeper import JavaTools
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer, init_new_cluster

pytestmark = [pytest.mark.integration]

JAVA_CLIENT = "bkspark.tools.JavaClient"


def java_payload(i: int, size: int = -1) -> bytes:
    """JavaClient's entry i: "entry-i" repeated and cut to ``size`` bytes (-1: exactly "entry-i")."""
    unit = f"entry-{i}".encode()
    if size < 0:
        return unit
    return (unit * (size // len(unit) + 1))[:size]


def java_create_and_write(java_tools: JavaTools, version: str, uri: str, *, ensemble: int, write: int, ack: int,
                          entries: int, size: int = -1, digest: str = "CRC32C", password: str = "") -> int:
    """Write a ledger with Apache BookKeeper's own Java client (tools/java JavaClient); its ledger id."""
    import json

    proc = java_tools.run(
        version, JAVA_CLIENT, "create-and-write", "--zk", uri, "--ensemble", str(ensemble), "--write", str(write),
        "--ack", str(ack), "--digest", digest, "--password", password, "--entries", str(entries),
        "--size", str(size), metadata_service_uri=uri, timeout=240,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"event"')]
    closed = [e for e in events if e["event"] == "closed"]
    assert len(closed) == 1 and closed[0]["last_entry_id"] == entries - 1, events[-3:]
    return int(closed[0]["ledger_id"])


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator["object"]:
    """A local[2,2] SparkSession whose Python workers run this venv's interpreter."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("bkspark-connector-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    """Three Python bookies on a cluster root of their own, for the whole module."""
    zk = zookeeper.client()
    try:
        init_new_cluster(zk, "/bk-connector-spark")
    finally:
        zk.stop()
        zk.close()
    uri = f"zk+hierarchical://{zookeeper.connect_string}/bk-connector-spark"
    with PythonBookieCluster(uri, tmp_path_factory.mktemp("connector-bookies"), bookies=3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def bk(py_cluster: PythonBookieCluster) -> Iterator[BookKeeper]:
    """A bkspark client on the Python bookies (the test's own view of the cluster)."""
    with BookKeeper(py_cluster.metadata_service_uri) as client:
        yield client


def read_ledgers(spark, uri: str, ledgers: str, **options: str):
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", ledgers)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def read_dataset(spark, uri: str, dataset: str):
    return spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset).load()


def entries_of(df) -> dict[int, list[tuple[int, bytes]]]:
    """ledger id -> [(entry id, payload)] in entry order, from a DataFrame of this source."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for row in df.select("ledger_id", "entry_id", "payload").collect():
        out.setdefault(row.ledger_id, []).append((row.entry_id, bytes(row.payload)))
    for rows in out.values():
        rows.sort()
    return out


def write_bkspark_ledger(bk: BookKeeper, payloads: list[bytes], *, close: bool = True, **kwargs) -> int:
    lh = bk.create_ledger(**kwargs)
    for future in [lh.append_async(p) for p in payloads]:
        future.result()
    if close:
        lh.close()
    return lh.ledger_id


def marker_ledger(bk: BookKeeper) -> int:
    """Create and delete an empty ledger: its id brackets the ledgers other writers create around it."""
    lh = bk.create_ledger(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
    lh.close()
    bk.delete_ledger(lh.ledger_id)
    return lh.ledger_id


def ledgers_between(bk: BookKeeper, low: int, high: int) -> list[int]:
    return [lid for lid in bk.list_ledgers() if low < lid < high]


def parent_of(bk: BookKeeper, lid: int, scope_id: int = 0) -> tuple[int, int]:
    """(scope, id) of the job parent a connector ledger names in its create context (childOfLedger)."""
    from bkspark.context import read_create_context

    create = read_create_context(bk.get_ledger_metadata(lid, scope_id=scope_id).custom_metadata)
    assert create is not None and create.child_of_ledger is not None, f"ledger {lid} names no job parent"
    return create.child_of_ledger.scope_id, create.child_of_ledger.ledger_id


def assert_committed_job_parent(bk: BookKeeper, ledgers, dataset: str) -> tuple[int, int]:
    """Every ledger of one committed job names the same parent, which exists: closed, empty, tagged as its marker."""
    parents = {parent_of(bk, lid, scope) for scope, lid in ledgers}
    assert len(parents) == 1, parents
    (scope, parent), = parents
    md = bk.get_ledger_metadata(parent, scope_id=scope)
    assert md.custom_metadata[TAG_ROLE] == JOB_PARENT_ROLE and md.custom_metadata[TAG_DATASET] == dataset.encode()
    assert md.state.name == "CLOSED" and md.last_entry_id == -1
    jobs = {bk.get_ledger_metadata(lid, scope_id=s).custom_metadata[TAG_JOB] for s, lid in ledgers}
    assert jobs == {md.custom_metadata[TAG_JOB]}
    return scope, parent


# -- reads -----------------------------------------------------------------------------------------------------------


def test_reads_ledgers_the_bkspark_client_wrote(spark, bk, py_cluster) -> None:
    uri = py_cluster.metadata_service_uri
    first = [f"a-{i}".encode() * (i % 7) for i in range(250)]
    second = [os.urandom(64) for _ in range(40)]
    lid_a = write_bkspark_ledger(bk, first, custom_metadata={"owner": b"tests"})
    lid_b = write_bkspark_ledger(bk, second, digest_type="CRC32", password=b"pw")
    df = read_ledgers(spark, uri, f"{lid_a}", maxEntriesPerPartition="100", includeCustomMetadata="true")
    assert df.rdd.getNumPartitions() == 3  # 250 entries in slices of 100
    assert entries_of(df) == {lid_a: list(enumerate(first))}
    row = df.where("entry_id = 0").collect()[0]
    assert (row.scope_id, row.custom_metadata["owner"]) == (0, b"tests")
    assert row.ledger_ctime is not None
    df = read_ledgers(spark, uri, f"{lid_a},{lid_b}", password="pw", batchReadEnabled="false")
    # A ledger with another password fails its reads, with the client's own exception (docs/connector.md, "Read
    # options": "reach users as the client's exception"); read them separately, each with its own password.
    with pytest.raises(Exception, match=rf"UnauthorizedAccessError: wrong password for ledger \(ledger_id={lid_a}\)"):
        df.count()
    assert entries_of(read_ledgers(spark, uri, str(lid_b), password="pw", digestType="CRC32")) == {
        lid_b: list(enumerate(second))
    }


def test_custom_metadata_is_left_out_unless_asked_for_and_keeps_every_row(spark, bk, py_cluster) -> None:
    """Kafka's source has ``headers`` only with ``includeHeaders``; ours has ``custom_metadata`` only with
    ``includeCustomMetadata=true`` (docs/connector.md, "Schema"): without it the rows are the same, less that
    column, for plain and packed ledgers, and a user schema must match what the options give."""
    import numpy as np

    from bkspark.datasource.packing import ENTRY_FORMAT_KEY, ROWS_V1, pack_rows

    uri = py_cluster.metadata_service_uri
    plain = [os.urandom(i % 90) for i in range(300)]
    lid = write_bkspark_ledger(bk, plain, custom_metadata={"owner": b"tests"})
    packed_rows = [b"row-%d" % i for i in range(50)]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in packed_rows])])
    packed_entries, _cuts = pack_rows(offsets, b"".join(packed_rows), 20)
    packed = write_bkspark_ledger(bk, packed_entries, custom_metadata={ENTRY_FORMAT_KEY: ROWS_V1})
    full = read_ledgers(spark, uri, f"{lid},{packed}", maxEntriesPerPartition="64", includeCustomMetadata="true")
    lean = read_ledgers(spark, uri, f"{lid},{packed}", maxEntriesPerPartition="64")
    assert full.columns == ["scope_id", "ledger_id", "entry_id", "payload", "ledger_ctime", "key", "custom_metadata"]
    assert lean.columns == full.columns[:-1]
    assert sorted(lean.collect()) == sorted(tuple(r)[:-1] for r in full.collect())
    assert entries_of(lean)[lid] == list(enumerate(plain))
    assert sorted(p for _, p in entries_of(lean)[packed]) == sorted(packed_rows)
    assert read_ledgers(spark, uri, str(lid), includeCustomMetadata="false").columns == lean.columns
    stream = (
        spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", str(lid))
        .option("includeCustomMetadata", "false").load()
    )
    assert stream.columns == full.columns[:-1]
    query = stream.writeStream.format("memory").queryName("lean_stream").trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120)
        streamed = spark.table("lean_stream")
        assert streamed.columns == full.columns[:-1]
        assert sorted(streamed.collect()) == sorted(r for r in lean.collect() if r.ledger_id == lid)
    finally:
        query.stop()
    # A user schema is accepted only when it is the one the options give.
    lean_schema = full.schema.fields[:-1]
    from pyspark.sql.types import StructType

    def with_user_schema(**options: str):  # a DataFrameReader keeps its options: a new one each time
        reader = spark.read.format("bookkeeper").schema(StructType(lean_schema)).options(**options)
        return reader.option("metadataServiceUri", uri).option("ledgers", str(lid)).load()

    assert with_user_schema().count() == len(plain)
    with pytest.raises(Exception, match="BOOKKEEPER_FIXED_SCHEMA"):
        with_user_schema(includeCustomMetadata="true").count()
    with pytest.raises(Exception, match="includeCustomMetadata"):
        read_ledgers(spark, uri, str(lid), includeCustomMetadata="sometimes")


def test_open_ledgers_are_read_up_to_their_lac_without_fencing(spark, bk, py_cluster) -> None:
    uri = py_cluster.metadata_service_uri
    lh = bk.create_ledger()
    for i in range(30):
        lh.append(f"open-{i}".encode())
    assert entries_of(read_ledgers(spark, uri, str(lh.ledger_id))) == {}
    got = entries_of(read_ledgers(spark, uri, str(lh.ledger_id), includeOpenLedgers="true"))
    lac = lh.last_add_confirmed
    assert got[lh.ledger_id] == [(i, f"open-{i}".encode()) for i in range(len(got[lh.ledger_id]))]
    assert len(got[lh.ledger_id]) >= lac  # every entry up to the LAC the bookies knew at planning
    lh.append(b"still writable")  # not fenced by the read
    lh.close()


def test_entry_ranges_and_ledger_ranges(spark, bk, py_cluster) -> None:
    uri = py_cluster.metadata_service_uri
    payloads = [f"r-{i}".encode() for i in range(50)]
    ids = [write_bkspark_ledger(bk, payloads) for _ in range(3)]
    got = entries_of(read_ledgers(spark, uri, f"{ids[0]}-{ids[2]}", startEntry="10", endEntry="19"))
    assert set(got) >= set(ids)
    for lid in ids:
        assert got[lid] == [(i, payloads[i]) for i in range(10, 20)]


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_filter_pushdown_on_and_off_give_the_same_rows(spark, bk, py_cluster, pushdown: str) -> None:
    uri = py_cluster.metadata_service_uri
    payloads = [f"f-{i}".encode() for i in range(100)]
    lid_a = write_bkspark_ledger(bk, payloads)
    lid_b = write_bkspark_ledger(bk, payloads)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
    try:
        df = read_ledgers(spark, uri, f"{lid_a},{lid_b}", maxEntriesPerPartition="10")
        query = df.where(f"ledger_id = {lid_b} AND entry_id >= 20 AND entry_id < 35 AND payload IS NOT NULL")
        rows = sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in query.collect())
        assert rows == [(lid_b, i, payloads[i]) for i in range(20, 35)]
        in_list = sorted(r.entry_id for r in df.where(f"ledger_id = {lid_a} AND entry_id IN (3, 4, 97)").collect())
        assert in_list == [3, 4, 97]
        scanned = query.rdd.getNumPartitions()
        if pushdown == "true":
            # Only ledger b's entries 20..34 are planned: two slices (20-29, 30-34) instead of 20.
            assert scanned == 2
        else:
            assert scanned == 20
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_small_ledgers_are_packed_into_few_partitions_and_every_row_is_read(spark, py_cluster) -> None:
    """300 one-entry ledgers of a dataset plan 3 partitions of 100 (docs/connector.md, "Partitions"), not 300
    tasks; minPartitions and maxPartitions change the partition count and never the rows."""
    from tests.harness.ledgers import payload_of, publish_dataset, write_small_ledgers

    uri = py_cluster.metadata_service_uri
    lids = write_small_ledgers(uri, 300, quorum=(2, 2, 2))
    with BookKeeper(uri) as client:
        publish_dataset(client, "packed", lids)
    want = {lid: [(0, payload_of(i, 0))] for i, lid in enumerate(lids)}
    df = read_dataset(spark, uri, "packed")
    assert df.rdd.getNumPartitions() == 3
    assert entries_of(df) == want
    many = read_dataset_with(spark, uri, "packed", minPartitions="7")
    assert many.rdd.getNumPartitions() >= 7 and entries_of(many) == want
    few = read_dataset_with(spark, uri, "packed", maxEntriesPerPartition="1", maxPartitions="2")
    assert few.rdd.getNumPartitions() == 2 and entries_of(few) == want


@pytest.mark.fault  # slow: 10,000 ledgers written, then scanned
def test_a_dataset_of_10000_ledgers_is_scanned_to_the_last_row(spark, py_cluster) -> None:
    from tests.harness.ledgers import payload_of, publish_dataset, write_small_ledgers_in_two_processes

    uri = py_cluster.metadata_service_uri
    lids = write_small_ledgers_in_two_processes(uri, 10_000, entries=2, quorum=(1, 1, 1))
    with BookKeeper(uri) as client:
        publish_dataset(client, "ten-thousand", lids)
    df = read_dataset(spark, uri, "ten-thousand")
    assert df.rdd.getNumPartitions() == 100  # 10,000 ledgers of 2 entries, 100 to a partition
    rows = df.select("ledger_id", "entry_id", "payload").collect()
    assert len(rows) == 20_000
    index = {lid: i for i, lid in enumerate(lids)}
    assert sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in rows) == sorted(
        (lid, e, payload_of(index[lid], e)) for lid in lids for e in range(2)
    )


def read_dataset_with(spark, uri: str, dataset: str, **options: str):
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


# -- writes --------------------------------------------------------------------------------------------------------


def payload_frame(spark, rows: int, partitions: int, prefix: str):
    from pyspark.sql import functions as F

    return spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit(prefix), F.col("id").cast("string")).cast("binary").alias("payload")
    )


def write_dataset(df, uri: str, dataset: str, mode: str = "append", **options: str) -> None:
    writer = df.write.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", dataset)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode(mode).save()


def test_write_then_read_back_exactly(spark, bk, py_cluster) -> None:
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    df = payload_frame(spark, 3000, 3, "w-")
    write_dataset(df, uri, "exact", ensembleSize="3", writeQuorumSize="2", ackQuorumSize="2")
    manifest = DatasetRegistry(bk.store.zk, bk.store.root).manifest("exact")
    assert manifest is not None and len(manifest.ledgers) == 3
    got = entries_of(read_dataset(spark, uri, "exact"))
    assert sorted(got) == sorted(lid for _, lid in manifest.ledgers)
    assert_committed_job_parent(bk, manifest.ledgers, "exact")
    # Every task wrote its partition's rows in order: each ledger is one contiguous run of ids.
    all_payloads = []
    for lid, rows in got.items():
        assert [eid for eid, _ in rows] == list(range(len(rows)))
        ids = [int(p.decode()[2:]) for _, p in rows]
        assert ids == list(range(ids[0], ids[0] + len(ids)))
        all_payloads.extend(p for _, p in rows)
        md = bk.get_ledger_metadata(lid)
        assert md.custom_metadata[TAG_DATASET] == b"exact"
        assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (3, 2, 2)
    assert sorted(all_payloads) == sorted(f"w-{i}".encode() for i in range(3000))
    # The same through Spark: counts and a checksum of the payloads.
    back = read_dataset(spark, uri, "exact").agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("c"))
    row = back.collect()[0]
    assert row.n == 3000 and row.c == sum(zlib.crc32(f"w-{i}".encode()) for i in range(3000))
    # A dataset may also be named as the path of load() and save().
    assert spark.read.format("bookkeeper").option("metadataServiceUri", uri).load("exact").count() == 3000
    payload_frame(spark, 5, 1, "p-").write.format("bookkeeper").option("metadataServiceUri", uri).mode(
        "append").save("by-path")
    assert sorted(bytes(r.payload) for r in read_dataset(spark, uri, "by-path").collect()) == [
        f"p-{i}".encode() for i in range(5)
    ]
    # Strings are written as UTF-8; the BP-44 context records the dataset and the close reason.
    from bkspark.context import read_context

    app_id = spark.sparkContext.applicationId
    write_dataset(
        spark.createDataFrame([("héllo",), ("wörld",)], "payload string").coalesce(1), uri, "strings",
        applicationId=app_id,
    )
    got = entries_of(read_dataset(spark, uri, "strings"))
    (lid, rows), = got.items()
    assert [p for _, p in rows] == ["héllo".encode(), "wörld".encode()]
    context = read_context(bk.get_ledger_metadata(lid))
    assert context.create is not None and context.create.data_set == "strings"
    assert context.create.created_by is not None and context.create.created_by.service.startswith(f"{app_id}/job-")
    assert context.close is not None and context.close.reason is not None and context.close.reason.name == "NO_MORE_DATA"


def test_the_writers_adds_in_flight_follow_the_clients_bounds(spark, bk, py_cluster) -> None:
    """``bookkeeper.maxPendingAdds`` and ``bookkeeper.maxPendingAddBytes`` reach each task's client (a bad value
    fails the write by name); with 7 entries and 200 bytes in flight every run of 500 entries waits for room, and
    every row still lands, in order (docs/connector.md, "Write"; docs/client.md, "How many adds in flight")."""
    uri = py_cluster.metadata_service_uri
    df = payload_frame(spark, 2000, 2, "room-")
    with pytest.raises(Exception, match="maxPendingAddBytes"):
        write_dataset(df, uri, "room-bad", **{"bookkeeper.maxPendingAddBytes": "-1"})
    write_dataset(df, uri, "room", **{"bookkeeper.maxPendingAdds": "7", "bookkeeper.maxPendingAddBytes": "200"})
    got = entries_of(read_dataset(spark, uri, "room"))
    assert len(got) == 2
    payloads = []
    for rows in got.values():
        assert [eid for eid, _ in rows] == list(range(len(rows)))
        ids = [int(p.decode()[5:]) for _, p in rows]
        assert ids == list(range(ids[0], ids[0] + len(ids)))
        payloads.extend(p for _, p in rows)
    assert sorted(payloads) == sorted(f"room-{i}".encode() for i in range(2000))


def test_writes_and_reads_in_a_scope_other_than_zero(spark, bk, py_cluster) -> None:
    """A negative scope: scope ids are signed 64-bit, as in the client and the shell."""
    uri = py_cluster.metadata_service_uri
    write_dataset(payload_frame(spark, 200, 2, "s-"), uri, "scoped", scopeId="-7")
    manifest = DatasetRegistry(bk.store.zk, bk.store.root).manifest("scoped")
    assert manifest is not None and {scope for scope, _ in manifest.ledgers} == {-7}
    got = read_dataset(spark, uri, "scoped")
    assert {r.scope_id for r in got.select("scope_id").distinct().collect()} == {-7}
    assert sorted(bytes(r.payload) for r in got.collect()) == sorted(f"s-{i}".encode() for i in range(200))
    lid = manifest.ledgers[0][1]
    by_id = entries_of(read_ledgers(spark, uri, str(lid), scopeId="-7"))
    _, parent = assert_committed_job_parent(bk, manifest.ledgers, "scoped")
    assert len(by_id[lid]) == 100
    assert sorted(bk.list_ledgers(scope_id=-7)) == sorted([parent] + [l for _, l in manifest.ledgers])


def test_append_adds_and_overwrite_replaces_the_previous_ledgers(spark, bk, py_cluster) -> None:
    uri = py_cluster.metadata_service_uri
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    write_dataset(payload_frame(spark, 100, 2, "one-"), uri, "ow")
    write_dataset(payload_frame(spark, 100, 2, "two-"), uri, "ow")
    before = registry.manifest("ow")
    assert before is not None and len(before.ledgers) == 4
    old_parents = {parent_of(bk, lid) for _, lid in before.ledgers}
    assert len(old_parents) == 2 and all(bk.get_ledger_metadata(p).state.name == "CLOSED" for _, p in old_parents)
    assert read_dataset(spark, uri, "ow").count() == 200
    write_dataset(payload_frame(spark, 60, 3, "three-"), uri, "ow", mode="overwrite")
    after = registry.manifest("ow")
    assert after is not None and len(after.ledgers) == 3 and not set(after.ledgers) & set(before.ledgers)
    payloads = sorted(bytes(r.payload) for r in read_dataset(spark, uri, "ow").collect())
    assert payloads == sorted(f"three-{i}".encode() for i in range(60))
    listed = set(bk.list_ledgers())
    assert not {lid for _, lid in before.ledgers} & listed, "overwrite must delete the previous ledgers"
    assert not {p for _, p in old_parents} & listed, "overwrite must delete the previous jobs' parents"
    _, new_parent = assert_committed_job_parent(bk, after.ledgers, "ow")
    # Overwriting with no rows empties the dataset: empty partitions create no ledger.
    write_dataset(spark.createDataFrame([], "payload binary"), uri, "ow", mode="overwrite")
    emptied = registry.manifest("ow")
    assert emptied is not None and emptied.ledgers == ()
    assert read_dataset(spark, uri, "ow").count() == 0
    assert not ({lid for _, lid in after.ledgers} | {new_parent}) & set(bk.list_ledgers())


@pytest.mark.parametrize("mode", [None, "ignore"])
def test_modes_other_than_append_and_overwrite_fail_before_anything_is_written(spark, bk, py_cluster, mode) -> None:
    """docs/connector.md, "Write": Spark's Python sources accept only append and overwrite; Spark's default mode
    (no .mode(...)) fails, and no job begins: no record, no manifest."""
    writer = payload_frame(spark, 3, 1, "m-").write.format("bookkeeper").option(
        "metadataServiceUri", py_cluster.metadata_service_uri).option("dataset", f"mode-{mode}")
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        (writer if mode is None else writer.mode(mode)).save()
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    assert registry.root(f"mode-{mode}") is None
    assert all(registry.job(job).dataset != f"mode-{mode}" for job in registry.jobs())  # type: ignore[union-attr]


def failing_payload(cluster: PythonBookieCluster, fail_partition: int, fail_from_row: int, attempts: dict[int, int]):
    """A payload UDF that raises in ``fail_partition`` from row ``fail_from_row`` (of 5000) on the given attempts.

    ``attempts`` maps a failing attempt to the number of ledgers the job must have registered by then
    (``<root>/bkspark/jobs/<job>/...``): the UDF waits for them before raising, so the failure always hits a
    task whose ledger exists (Spark buffers about a thousand rows between the UDF and the writer).
    """
    from pyspark.sql import functions as F

    connect, jobs = cluster.connect_string, f"{cluster.root}/bkspark/jobs"

    @F.udf("binary")
    def payload(value):  # type: ignore[no-untyped-def] - with hints PySpark tries to infer an eval type, and warns
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber()
        if context.partitionId() == fail_partition and attempt in attempts and value % 5000 >= fail_from_row:
            import time

            from kazoo.client import KazooClient

            zk = KazooClient(hosts=connect)
            zk.start(timeout=30)
            try:
                for _ in range(600):
                    jobs_now = zk.get_children(jobs) if zk.exists(jobs) else []
                    if sum(len(zk.get_children(f"{jobs}/{job}")) for job in jobs_now) >= attempts[attempt]:
                        break
                    time.sleep(0.2)
            finally:
                zk.stop()
                zk.close()
            raise RuntimeError(f"injected failure in partition {fail_partition}, attempt {attempt}")
        return f"retry-{value}".encode()

    return payload


def test_a_retried_task_leaves_only_the_committed_ledgers(spark, bk, py_cluster) -> None:
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        low = marker_ledger(bk)
        # Two partitions of 5000 rows; partition 1 fails at its 4000th row on its first attempt only, once the
        # ledgers of partition 0 and of that attempt are registered.
        payload = failing_payload(py_cluster, 1, 4000, {0: 2})
        df = spark.range(0, 10000, 1, 2).select(payload(F.col("id")).alias("payload"))
        write_dataset(df, uri, "retried")
        high = marker_ledger(bk)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    manifest = DatasetRegistry(bk.store.zk, bk.store.root).manifest("retried")
    assert manifest is not None
    committed = sorted(lid for _, lid in manifest.ledgers)
    # Three ledgers were created (partition 0, partition 1's failed and retried attempts) plus the job's parent,
    # whose id was reserved first: the ids between the two markers say so, and only the two committed ones and
    # the parent are left.
    assert high - low - 1 == 4
    _, parent = assert_committed_job_parent(bk, manifest.ledgers, "retried")
    assert parent == low + 1
    assert ledgers_between(bk, low, high) == [parent] + committed and len(committed) == 2
    attempts = {bk.get_ledger_metadata(lid).custom_metadata[TAG_PARTITION]: bk.get_ledger_metadata(lid).custom_metadata[TAG_ATTEMPT]
                for lid in committed}
    assert attempts == {b"0": b"0", b"1": b"1"}
    payloads = sorted(bytes(r.payload) for r in read_dataset(spark, uri, "retried").collect())
    assert payloads == sorted(f"retry-{i}".encode() for i in range(10000))
    assert bk.store.zk.get_children(f"{bk.store.root}/bkspark/jobs") == []


def test_a_failed_job_leaves_no_ledger_and_keeps_the_dataset(spark, bk, py_cluster) -> None:
    from pyspark.sql import functions as F

    uri = py_cluster.metadata_service_uri
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    write_dataset(payload_frame(spark, 10, 1, "kept-"), uri, "failing")
    before = registry.manifest("failing")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        low = marker_ledger(bk)
        payload = failing_payload(py_cluster, 1, 4000, {0: 2, 1: 3})
        df = spark.range(0, 10000, 1, 2).select(payload(F.col("id")).alias("payload"))
        with pytest.raises(Exception, match="injected failure in partition 1"):
            write_dataset(df, uri, "failing", mode="overwrite")
        high = marker_ledger(bk)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # The job reserved its parent's id, and partition 0 and both attempts of partition 1 created a ledger; the
    # abort deleted them, and the parent was never created.
    assert high - low - 1 == 4
    assert ledgers_between(bk, low, high) == []
    assert registry.manifest("failing") == before
    assert sorted(bytes(r.payload) for r in read_dataset(spark, uri, "failing").collect()) == [
        f"kept-{i}".encode() for i in range(10)
    ]
    kept_parent = assert_committed_job_parent(bk, before.ledgers, "failing")
    for lid in bk.list_ledgers():
        tags = bk.get_ledger_metadata(lid).custom_metadata
        if tags.get(TAG_DATASET) == b"failing":
            assert (0, lid) in before.ledgers + (kept_parent,), (
                f"ledger {lid} of the failed job ({tags.get(TAG_JOB)!r}) survived"
            )


# -- errors ----------------------------------------------------------------------------------------------------------


def test_the_test_driver_jvm_runs_with_the_harness_quick_start_flags(spark) -> None:
    """tests/conftest.py's SPARK_SUBMIT_OPTS reaches the driver JVM (docs/contracts.md, "Test harness")."""
    from tests.conftest import SPARK_SUBMIT_OPTS

    jvm_args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    expected = os.environ["SPARK_SUBMIT_OPTS"].split()
    assert "-XX:TieredStopAtLevel=1" in SPARK_SUBMIT_OPTS.split()
    assert set(expected) <= set(jvm_args), jvm_args


def test_bad_options_give_one_clear_error_each(spark, bk, py_cluster) -> None:
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [b"x"])
    # A malformed option fails at load(), a missing ledger when the query is planned (before any task runs), each
    # wrapped in Spark's PYTHON_DATA_SOURCE_ERROR (docs/connector.md, "Read options").
    with pytest.raises(Exception, match=r"(?s)PYTHON_DATA_SOURCE_ERROR.*\[BOOKKEEPER_MISSING_OPTION\] option "
                                        r"'metadataServiceUri' is required"):
        spark.read.format("bookkeeper").option("ledgers", str(lid)).load()
    with pytest.raises(Exception, match=r"option 'digestType'='SHA1' is invalid: expected one of CRC32, CRC32C"):
        read_ledgers(spark, uri, str(lid), digestType="SHA1")
    missing = read_ledgers(spark, uri, "987654321")  # load() needs no cluster
    with pytest.raises(Exception, match=r"(?s)PYTHON_DATA_SOURCE_ERROR.*read partitions.*\[BOOKKEEPER_LEDGER_NOT_FOUND\] "
                                        r"ledger 987654321 \(scope 0\) does not exist"):
        missing.collect()
    # An unreachable ZooKeeper is tried again for the client's zkTimeout (10 s by default): a short one here, the
    # clear error is what is tested (the retry budget itself: tests/campaign/test_outages.py).
    unreachable = (r"\[BOOKKEEPER_ZOOKEEPER_UNREACHABLE\] cannot reach ZooKeeper at 127\.0\.0\.1:1 "
                   r".*tried for zkTimeout=1 s")
    with pytest.raises(Exception, match=unreachable):
        read_ledgers(spark, "zk+hierarchical://127.0.0.1:1/ledgers", str(lid),
                     **{"bookkeeper.zkTimeoutMs": "1000"}).collect()
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_DATASET_NOT_FOUND\] dataset 'never-written'"):
        read_dataset(spark, uri, "never-written").collect()
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_MISSING_PAYLOAD\]"):
        spark.range(3).write.format("bookkeeper").option("metadataServiceUri", uri).option(
            "dataset", "x").mode("append").save()
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_FIXED_SCHEMA\]"):
        spark.read.format("bookkeeper").schema("ledger_id bigint").option("metadataServiceUri", uri).option(
            "ledgers", str(lid)).load().collect()
    with pytest.raises(Exception, match=r"\[BOOKKEEPER_ZOOKEEPER_UNREACHABLE\]"):
        write_dataset(payload_frame(spark, 3, 1, "z"), "zk+hierarchical://127.0.0.1:1/ledgers", "unreachable",
                      **{"bookkeeper.zkTimeoutMs": "1000"})


# -- several rows per entry (docs/connector.md, "Rows per entry") ----------------------------------------------------


def varied_frame(spark, rows: int, partitions: int):
    """Rows of 0 to about 300 bytes, some of them null (written as empty payloads), in ``partitions`` partitions."""
    from pyspark.sql import functions as F

    payload = F.when(F.col("id") % 97 == 5, F.lit(None).cast("binary")).otherwise(
        F.concat(F.lit("v-"), F.col("id").cast("string"), F.lit("-"), F.expr("repeat('x', cast(id % 300 as int))"))
        .cast("binary"))
    return spark.range(0, rows, 1, partitions).select(payload.alias("payload"))


def expected_payload(i: int) -> bytes:
    return b"" if i % 97 == 5 else f"v-{i}-".encode() + b"x" * (i % 300)


def test_rows_per_entry_packs_rows_and_the_reader_unpacks_them(spark, bk, py_cluster) -> None:
    from pyspark.sql import functions as F

    from bkspark.datasource.packing import ENTRY_FORMAT_KEY, ROWS_V1

    uri = py_cluster.metadata_service_uri
    rows = 3000
    write_dataset(varied_frame(spark, rows, 3), uri, "rows-per-entry", ensembleSize="3", writeQuorumSize="2",
                  ackQuorumSize="2", rowsPerEntry="40", entryMaxBytes="4096")
    manifest = DatasetRegistry(bk.store.zk, bk.store.root).manifest("rows-per-entry")
    assert manifest is not None and len(manifest.ledgers) == 3
    entries = 0
    for _scope, lid in manifest.ledgers:
        md = bk.get_ledger_metadata(lid)
        assert md.custom_metadata[ENTRY_FORMAT_KEY] == ROWS_V1
        entries += md.last_entry_id + 1
    assert rows / 40 <= entries < rows / 10  # at most 40 rows and 4096 bytes an entry
    got = read_dataset(spark, uri, "rows-per-entry").select("ledger_id", "entry_id", "payload").collect()
    assert len(got) == rows
    by_ledger: dict[int, list[tuple[int, bytes]]] = {}
    for r in got:
        by_ledger.setdefault(r.ledger_id, []).append((r.entry_id, bytes(r.payload)))
    payloads = []
    for lid, ledger_rows in by_ledger.items():
        entry_ids = [e for e, _ in ledger_rows]
        assert entry_ids == sorted(entry_ids) and entry_ids[0] == 0  # Spark's collect keeps a partition's order
        assert max(entry_ids.count(e) for e in set(entry_ids)) <= 40
        payloads.extend(p for _, p in ledger_rows)
    assert sorted(payloads) == sorted(expected_payload(i) for i in range(rows))
    # Each task's rows stay in order inside its ledger (the ids of non-null rows increase).
    for ledger_rows in by_ledger.values():
        ids = [int(p.split(b"-")[1]) for _, p in ledger_rows if p]
        assert ids == sorted(ids)
    # Partitions cut inside a ledger (3 entries each) and an entry filter give exactly those entries' rows.
    small = read_dataset_with(spark, uri, "rows-per-entry", maxEntriesPerPartition="3")
    assert small.rdd.getNumPartitions() > 3
    summary = small.agg(F.count("*").alias("n"), F.sum(F.crc32("payload")).alias("c")).collect()[0]
    assert summary.n == rows and summary.c == sum(zlib.crc32(expected_payload(i)) for i in range(rows))
    lid = manifest.ledgers[0][1]
    some = entries_of(read_ledgers(spark, uri, str(lid), startEntry="2", endEntry="3"))
    assert [e for e, _ in some[lid]] == [e for e, _ in by_ledger[lid] if 2 <= e <= 3]
    assert sorted(p for _, p in some[lid]) == sorted(p for e, p in by_ledger[lid] if 2 <= e <= 3)  # entries_of sorts
    filtered = read_dataset(spark, uri, "rows-per-entry").where(f"ledger_id = {lid} and entry_id = 5")
    assert sorted(bytes(r.payload) for r in filtered.collect()) == sorted(p for e, p in by_ledger[lid] if e == 5)


def test_a_corrupt_packed_entry_is_a_clear_error_and_entry_max_bytes_above_the_frame_limit_too(
    spark, bk, py_cluster
) -> None:
    from bkspark.datasource.packing import ENTRY_FORMAT_KEY, ROWS_V1

    uri = py_cluster.metadata_service_uri
    good = b"BKR\x01" + (1).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"ok"
    lid = write_bkspark_ledger(bk, [good, b"not packed at all"], custom_metadata={ENTRY_FORMAT_KEY: ROWS_V1})
    with pytest.raises(Exception, match=r"CorruptEntryError.*no rows-v1 header.*entry_id=1"):
        read_ledgers(spark, uri, str(lid)).collect()
    # docs/connector.md, "Rows per entry": an InvalidOptionError naming both options, and the job aborts
    with pytest.raises(Exception, match=r"(?s)InvalidOptionError.*entryMaxBytes \(1048576\) is more than one entry "
                                        r"can carry.*raise bookkeeper\.nettyMaxFrameSizeBytes"):
        write_dataset(payload_frame(spark, 2000, 1, "big-" + "y" * 100), uri, "too-big", rowsPerEntry="10000",
                      entryMaxBytes="1048576", **{"bookkeeper.nettyMaxFrameSizeBytes": "65536"})
    assert DatasetRegistry(bk.store.zk, bk.store.root).manifest("too-big") is None


# -- Java: Apache BookKeeper's client and bookies ---------------------------------------------------------------------


@pytest.mark.compat
def test_reads_java_written_ledgers_on_java_bookies_including_striped(spark, java_cluster_factory, java_tools) -> None:
    cluster = java_cluster_factory("4.17.3", bookies=5)
    uri = cluster.metadata_service_uri
    plain = java_create_and_write(java_tools, "4.17.3", uri, ensemble=3, write=2, ack=2, entries=300, size=100)
    striped = java_create_and_write(java_tools, "4.17.3", uri, ensemble=5, write=2, ack=2, entries=123, size=37,
                                    digest="MAC", password="secret")
    got = entries_of(read_ledgers(spark, uri, str(plain), maxEntriesPerPartition="128"))
    assert got == {plain: [(i, java_payload(i, 100)) for i in range(300)]}
    got = entries_of(read_ledgers(spark, uri, str(striped), password="secret"))
    assert got == {striped: [(i, java_payload(i, 37)) for i in range(123)]}
    # A ledger the bkspark client wrote on the same Java bookies, read in the same query as a Java one.
    with BookKeeper(uri) as client:
        ours = write_bkspark_ledger(client, [f"py-{i}".encode() for i in range(77)], ensemble_size=5,
                                    write_quorum_size=3, ack_quorum_size=2)
    got = entries_of(read_ledgers(spark, uri, f"{plain},{ours}", startEntry="70", endEntry="76"))
    assert got == {plain: [(i, java_payload(i, 100)) for i in range(70, 77)],
                   ours: [(i, f"py-{i}".encode()) for i in range(70, 77)]}


@pytest.mark.compat
def test_reads_from_4_16_bookies_without_batch_reads(spark, java_cluster_factory, java_tools) -> None:
    cluster = java_cluster_factory("4.16.6", bookies=3)
    uri = cluster.metadata_service_uri
    lid = java_create_and_write(java_tools, "4.16.6", uri, ensemble=3, write=3, ack=2, entries=250, size=20,
                                digest="CRC32")
    # batchReadEnabled is on by default: the client finds that 4.16 bookies lack BATCH_READ_ENTRY and reads singly.
    got = entries_of(read_ledgers(spark, uri, str(lid), batchMaxCount="64"))
    assert got == {lid: [(i, java_payload(i, 20)) for i in range(250)]}


@pytest.mark.compat
def test_packed_rows_on_java_bookies_are_read_by_the_java_client_in_the_documented_format(
    spark, java_cluster_factory, java_tools
) -> None:
    """A Spark write with rowsPerEntry onto Apache BookKeeper's bookies: its Java client reads the entries, and
    they parse as docs/connector.md says (the parser here is the unit tests' reference, not bkspark's)."""
    from tests.integration.test_client_interop import entries_of as java_entries, java
    from tests.unit.test_connector_packing import reference_unpack

    cluster = java_cluster_factory("4.17.3", bookies=3)
    uri = cluster.metadata_service_uri
    write_dataset(varied_frame(spark, 1000, 1), uri, "packed-java", ensembleSize="3", writeQuorumSize="3",
                  ackQuorumSize="2", rowsPerEntry="64")
    with BookKeeper(uri) as client:
        manifest = DatasetRegistry(client.store.zk, client.store.root).manifest("packed-java")
    assert manifest is not None
    (_scope, lid), = manifest.ledgers
    theirs = java_entries(java(java_tools, uri, "read", "--ledger", str(lid), "--digest", "CRC32C"))
    assert len(theirs) == 1000 // 64 + 1
    rows = [row for entry_id in sorted(theirs) for row in reference_unpack(theirs[entry_id])]
    assert rows == [expected_payload(i) for i in range(1000)]
    ours = read_dataset(spark, uri, "packed-java").select("entry_id", "payload").collect()
    assert [bytes(r.payload) for r in ours] == rows
    assert [r.entry_id for r in ours] == [i // 64 for i in range(1000)]


def test_a_misspelled_security_option_fails_load_and_save(spark, bk, py_cluster) -> None:
    """docs/security.md, "Nothing silently ignored": ``bookkeeper.tlsProviderFactoryClas`` (one letter short) fails at
    load() and at save(), naming the key it probably meant, before any task runs in plain text; nothing written."""
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [b"x"])
    typo = {"bookkeeper.tlsProviderFactoryClas": "org.apache.bookkeeper.tls.TLSContextFactory"}
    meant = r"(?s)PYTHON_DATA_SOURCE_ERROR.*'bookkeeper\.tlsproviderfactoryclas'.*'bookkeeper\.tlsProviderFactoryClass'"
    with pytest.raises(Exception, match=meant):
        read_ledgers(spark, uri, str(lid), **typo)
    before = marker_ledger(bk)
    df = spark.createDataFrame([(b"row",)], "payload binary")
    with pytest.raises(Exception, match=meant):
        write_dataset(df, uri, "misspelled-tls", **typo)
    assert DatasetRegistry(bk.store.zk, bk.store.root).root("misspelled-tls") is None
    assert ledgers_between(bk, before, marker_ledger(bk)) == []  # no ledger was created for the refused write
    # Another unknown key keeps today's warning and the read goes on.
    assert entries_of(read_ledgers(spark, uri, str(lid), **{"bookkeeper.someUnknownKey": "1"})) == {lid: [(0, b"x")]}
