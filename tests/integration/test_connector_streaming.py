"""``spark.readStream.format("bookkeeper")`` against real ZooKeeper, Python bookies and Spark (local[2,2]).

Every check is over what a ``foreachBatch`` sink saw: exactly once, entry order per ledger, batch sizes under
admission control, what a restart from the checkpoint reads.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.datasets import CommitKey, DatasetRegistry, JobRecord, JobState
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import init_new_cluster
from tests.integration.test_connector_spark import spark, write_bkspark_ledger  # noqa: F401 - the Spark fixture

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def py_cluster(request: pytest.FixtureRequest, zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    """Three Python bookies on a cluster root named after the test module (each module that imports it has its own)."""
    root = "/bk-" + request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    zk = zookeeper.client()
    try:
        init_new_cluster(zk, root)
    finally:
        zk.stop()
        zk.close()
    with PythonBookieCluster(f"zk+hierarchical://{zookeeper.connect_string}{root}", tmp_path_factory.mktemp("bookies"), bookies=3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def bk(py_cluster: PythonBookieCluster) -> Iterator[BookKeeper]:
    with BookKeeper(py_cluster.metadata_service_uri) as client:
        yield client


class Collector:
    """A ``foreachBatch`` sink that keeps (batch id, [(ledger, entry, payload)]) per batch (driver side)."""

    def __init__(self, fail_batches: set[int] | None = None) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []
        self.arrival: dict[tuple[int, int], float] = {}
        self.fail_batches = fail_batches or set()
        #: The rows each failed batch (of ``fail_batches``) read before it failed.
        self.failed: dict[int, list[tuple[int, int, bytes]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r.ledger_id, r.entry_id, bytes(r.payload)) for r in df.select("ledger_id", "entry_id", "payload").collect()]
        now = time.monotonic()
        if batch_id in self.fail_batches:
            self.failed[batch_id] = rows
            raise RuntimeError(f"injected failure in batch {batch_id}")
        with self.lock:
            self.batches.append((batch_id, rows))
            for ledger, entry, _ in rows:
                self.arrival.setdefault((ledger, entry), now)

    def rows(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return [row for _, rows in self.batches for row in rows]

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(rows) for _, rows in self.batches if rows]


def stream(spark, uri: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def source_offsets(checkpoint: str) -> list[tuple[int, str]]:
    """(batch id, the source's end offset as JSON text) of every batch in a query's offset log, in batch order
    (a file of Spark's offset log: a version line, the batch's metadata, then one line per source)."""
    log = Path(checkpoint) / "offsets"
    batches = sorted(int(f.name) for f in log.iterdir() if f.name.isdigit())
    return [(n, (log / str(n)).read_text().splitlines()[-1]) for n in batches]


def wait_until(predicate, timeout: float, what: str, query=None) -> None:  # type: ignore[no-untyped-def]
    """Wait for ``predicate``; with ``query`` (a streaming query), a query that dies meanwhile ends the wait with
    its own error (not a timeout that hides why)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        failure = query.exception() if query is not None and not query.isActive else None
        if failure is not None:
            raise AssertionError(f"the query failed while waiting for {what}: {failure}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Publisher:
    """Publishes ledgers to a dataset as another writer would (one job per call, through the registry's API)."""

    def __init__(self, bk: BookKeeper) -> None:
        self.registry = DatasetRegistry(bk.zk, bk.ledgers_root)
        self.writer = f"test-{uuid.uuid4().hex[:8]}"
        self.token = 0

    def commit(self, name: str, ledgers: list[tuple[int, int]], replace: bool = False) -> None:
        self.token += 1
        job_id = f"{self.writer}-{self.token}"
        self.registry.begin_job(job_id, JobRecord(JobState.WRITING, name, created_ms=int(time.time() * 1000)))
        result = self.registry.publish(name, ledgers, replace_all=replace, job_id=job_id, key=CommitKey(self.writer, self.token))
        assert not result.already
        self.registry.forget_job(job_id)


def registry(bk: BookKeeper) -> Publisher:
    return Publisher(bk)


def assert_exactly_once_in_order(rows: list[tuple[int, int, bytes]], expected: dict[int, list[bytes]]) -> None:
    per_ledger: dict[int, list[tuple[int, bytes]]] = {}
    for ledger, entry, payload in rows:
        per_ledger.setdefault(ledger, []).append((entry, payload))
    assert set(per_ledger) == set(expected)
    for ledger, got in per_ledger.items():
        # Delivery order inside a ledger is entry order (batches follow one another; a batch's rows are sorted here
        # only within the batch, where Spark may interleave partitions of the same ledger).
        assert got == list(enumerate(expected[ledger])), f"ledger {ledger}: {got[:5]}..."


def test_stream_follows_a_dataset_while_a_writer_appends_and_commits(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"live-{uuid.uuid4().hex[:8]}"
    reg = registry(bk)
    with BookKeeper(uri, explicitLacInterval=100) as writer_bk:
        open_lh = writer_bk.create_ledger(3, 2, 2)
        reg.commit(name, [(0, open_lh.ledger_id)], replace=False)
        sink = Collector()
        query = (
            stream(spark, uri, dataset=name, longPollTimeoutMs="1000", maxEntriesPerPartition="50")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        try:
            expected: dict[int, list[bytes]] = {open_lh.ledger_id: [b"warm-up"]}
            open_lh.append(b"warm-up")  # the query's first batch starts Spark's workers: not part of the latency
            wait_until(lambda: len(sink.rows()) == 1, 180, "the first entry", query=query)
            acked: dict[tuple[int, int], float] = {}
            for i in range(60):
                payload = b"open-%d" % i
                entry = open_lh.append(payload)
                acked[(open_lh.ledger_id, entry)] = time.monotonic()
                expected[open_lh.ledger_id].append(payload)
                if i % 20 == 19:  # commit a new, closed ledger to the dataset now and then
                    extra = [b"closed-%d-%d" % (i, j) for j in range(15)]
                    lid = write_bkspark_ledger(writer_bk, extra)
                    expected[lid] = extra
                    reg.commit(name, [(0, lid)], replace=False)
                time.sleep(0.03)
            # The idle writer's last entry is visible through its explicit LAC, before any close.
            wait_until(lambda: len(sink.rows()) == sum(map(len, expected.values())), 90, "every entry", query=query)
            open_lh.close()
            time.sleep(1.5)  # the close itself adds no row
            assert_exactly_once_in_order(sink.rows(), expected)
            assert all(key in sink.arrival for key in acked)  # latency: bench/streaming_latency.py
        finally:
            query.stop()


def test_max_entries_per_trigger_and_available_now(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    first = write_bkspark_ledger(bk, [b"a%d" % i for i in range(50)])
    second = write_bkspark_ledger(bk, [b"b%d" % i for i in range(50)])
    sink = Collector()
    query = (
        stream(spark, uri, ledgers=f"{first}-{second}", maxEntriesPerTrigger="30")  # a range: listed
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    assert query.awaitTermination(120), "AvailableNow did not stop"
    assert sink.sizes() == [30, 30, 30, 10]
    assert_exactly_once_in_order(sink.rows(), {first: [b"a%d" % i for i in range(50)], second: [b"b%d" % i for i in range(50)]})
    # docs/streaming.md, "Offsets": {"ledgers": {"<scope>:<ledger>": nextEntryId}}, keys in (scope, ledger) order,
    # "done" for a ledger closed and read to its end; "Admission control": the limit shared in proportion to what
    # each ledger has waiting, as Kafka shares maxOffsetsPerTrigger across partitions.
    import json

    a, b = f"0:{first}", f"0:{second}"
    assert first < second and [(n, json.loads(text)) for n, text in source_offsets(str(tmp_path / "cp"))] == [
        (0, {"ledgers": {a: 15, b: 15}}), (1, {"ledgers": {a: 30, b: 30}}),
        (2, {"ledgers": {a: 45, b: 45}}), (3, {"ledgers": {a: "done", b: "done"}}),
    ]
    assert all(list(json.loads(text)["ledgers"]) == [a, b] for _, text in source_offsets(str(tmp_path / "cp")))


def test_a_ledger_range_is_listed_again_at_every_trigger(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md: ``ledgers`` ranges are listed again at every trigger, so a ledger created in the range
    after the query started is followed too."""
    uri = py_cluster.metadata_service_uri
    first = write_bkspark_ledger(bk, [b"r0-%d" % i for i in range(5)])
    sink = Collector()
    query = stream(spark, uri, ledgers=f"{first}-{first + 10_000}", longPollTimeoutMs="500") \
        .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        wait_until(lambda: len(sink.rows()) == 5, 120, "the ledger there at the start", query=query)
        later = write_bkspark_ledger(bk, [b"r1-%d" % i for i in range(5)])
        assert first < later <= first + 10_000
        wait_until(lambda: len(sink.rows()) == 10, 60, "the ledger created in the range later", query=query)
    finally:
        query.stop()
    assert_exactly_once_in_order(sink.rows(), {first: [b"r0-%d" % i for i in range(5)], later: [b"r1-%d" % i for i in range(5)]})


def test_available_now_reads_what_was_confirmed_when_the_query_started(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, Trigger.AvailableNow: the source freezes, when the query starts, what is confirmed in the
    ledgers it follows then, and reads up to that in batches: entries added and ledgers created while it runs wait
    for the next run."""
    uri = py_cluster.metadata_service_uri
    lh = bk.create_ledger()
    for i in range(30):
        lh.append(b"n%d" % i)  # entry 29 is not confirmed yet: the LAC is 28
    later: list[int] = []

    class GrowWhileRunning(Collector):
        def __call__(self, df: Any, batch_id: int) -> None:
            super().__call__(df, batch_id)
            if batch_id == 0:  # the run is under way: grow the ledger and add one in the range
                for i in range(30, 40):
                    lh.append(b"n%d" % i)
                later.append(write_bkspark_ledger(bk, [b"late"]))

    sink = GrowWhileRunning()
    query = stream(spark, uri, ledgers=f"{lh.ledger_id}-{lh.ledger_id + 10_000}", maxEntriesPerTrigger="10") \
        .writeStream.foreachBatch(sink).trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        assert query.awaitTermination(120), "AvailableNow did not stop"
    finally:
        lh.close()
    assert later and later[0] <= lh.ledger_id + 10_000
    assert sink.sizes() == [10, 10, 9]
    assert_exactly_once_in_order(sink.rows(), {lh.ledger_id: [b"n%d" % i for i in range(29)]})


def test_a_stream_of_a_ledger_with_packed_rows_delivers_each_row_once_in_order(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """Rows per entry (docs/connector.md): admission control counts entries, every row of an entry comes with it."""
    import numpy as np

    from bkspark.datasource.packing import ENTRY_FORMAT_KEY, ROWS_V1, pack_rows

    uri = py_cluster.metadata_service_uri
    rows = [b"p%d" % i for i in range(100)]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    entries, cuts = pack_rows(offsets, b"".join(rows), 8)
    lid = write_bkspark_ledger(bk, entries, custom_metadata={ENTRY_FORMAT_KEY: ROWS_V1})
    sink = Collector()
    writer = stream(spark, uri, ledgers=str(lid), maxEntriesPerTrigger="5").writeStream.foreachBatch(sink)
    query = writer.trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp")).start()
    assert query.awaitTermination(120), "AvailableNow did not stop"
    assert len(entries) == 13 and sink.sizes() == [40, 40, 20]  # 5, 5 and 3 entries of 8, 8 ... and 4 rows
    got = sorted(sink.rows(), key=lambda r: (r[1], int(r[2][1:])))
    assert [(ledger, payload) for ledger, _entry, payload in got] == [(lid, r) for r in rows]
    assert [entry for _ledger, entry, _payload in got] == [i // 8 for i in range(100)]


@pytest.mark.parametrize(
    "options, partitions", [({}, [2]), ({"minPartitions": "5"}, [5]), ({"maxBytesPerPartition": "40"}, [75])]
)
def test_a_micro_batch_of_many_small_ledgers_is_packed_into_few_tasks(
    spark, bk, py_cluster, tmp_path, options: dict, partitions: list  # noqa: F811
) -> None:
    """150 one-entry ledgers in one micro-batch: 2 partitions (100 + 50 packed slices), or minPartitions; with a
    byte bound of 40 (payloads of 16 to 18 bytes, their closed ledgers' mean entry size) two to a partition."""
    from tests.harness.ledgers import payload_of, write_small_ledgers

    uri = py_cluster.metadata_service_uri
    lids = write_small_ledgers(uri, 150, quorum=(2, 2, 2))
    seen: dict[int, int] = {}
    sink = Collector()

    def counting_sink(df: Any, batch_id: int) -> None:
        seen[batch_id] = df.rdd.getNumPartitions()
        sink(df, batch_id)

    query = (
        stream(spark, uri, ledgers=f"{min(lids)}-{max(lids)}", **options)
        .writeStream.foreachBatch(counting_sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    assert query.awaitTermination(120), "AvailableNow did not stop"
    assert sink.sizes() == [150]
    assert [seen[batch_id] for batch_id, rows in sink.batches if rows] == partitions
    expected = {lid: [payload_of(i, 0)] for i, lid in enumerate(lids)}
    others = {lid for lid, _, _ in sink.rows()} - set(lids)
    assert not others, f"ledgers outside the range were read: {sorted(others)[:5]}"
    assert_exactly_once_in_order(sink.rows(), expected)


def test_max_bytes_per_trigger_and_lag_in_progress(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [bytes([65 + i % 26]) * 100 for i in range(100)])
    sink = Collector()
    query = (
        stream(spark, uri, ledgers=str(lid), maxBytesPerTrigger="2500")
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    assert query.awaitTermination(120)
    assert sink.sizes() == [25, 25, 25, 25]
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    first_latest = progress[0]["sources"][0]["latestOffset"]
    import json

    report = json.loads(first_latest)
    assert report["ledgers"] == {f"0:{lid}": "done"}
    # docs/streaming.md, "Progress": the lag in all, and Kafka's three lag figures over the ledgers being read
    assert report["lag"] == {"entries": 75, "bytes": 7500, "minOffsetsBehindLatest": 75, "maxOffsetsBehindLatest": 75,
                             "avgOffsetsBehindLatest": 75.0}


def test_min_entries_per_trigger_waits_then_max_trigger_delay_lets_a_small_batch_through(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri, explicitLacInterval=100) as writer_bk:
        lh = writer_bk.create_ledger(3, 2, 2)
        sink = Collector()
        query = (
            stream(spark, uri, ledgers=str(lh.ledger_id), minEntriesPerTrigger="20", maxTriggerDelay="4s",
                   longPollTimeoutMs="500")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        try:
            for i in range(25):
                lh.append(b"m%d" % i)
            wait_until(lambda: sum(sink.sizes()) == 25, 60, "the first 25 entries", query=query)
            assert min(sink.sizes()) >= 20  # never a batch below the minimum while the delay has not passed
            started = time.monotonic()
            for i in range(25, 28):
                lh.append(b"m%d" % i)
            wait_until(lambda: sum(sink.sizes()) == 28, 60, "the 3 entries after maxTriggerDelay", query=query)
            assert time.monotonic() - started >= 2.0  # held back until the delay ran out
            assert sink.sizes()[-1] == 3
        finally:
            query.stop()
            lh.close()


def test_fail_on_data_loss_both_ways(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, `failOnDataLoss`: a ledger deleted before the stream read it to its end fails the query
    (`[BOOKKEEPER_DATA_LOSS]`, naming it) or, with `false`, is skipped while the others are read on; a ledger
    already read to its end ("done" in the offset) loses nothing when deleted, so neither run names it."""
    import re

    uri = py_cluster.metadata_service_uri
    kept = write_bkspark_ledger(bk, [b"k%d" % i for i in range(10)])
    lost = bk.create_ledger(3, 2, 2)
    growing = bk.create_ledger(3, 2, 2)
    for i in range(10):
        lost.append(b"l%d" % i)
    for i in range(5):
        growing.append(b"g%d" % i)
    ledgers = f"{kept},{lost.ledger_id},{growing.ledger_id}"

    def run(checkpoint: str, **options: str) -> tuple[Collector, Any]:
        sink = Collector()
        query = (
            stream(spark, uri, ledgers=ledgers, **options)
            .writeStream.foreachBatch(sink)
            .trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        return sink, query

    for checkpoint in (tmp_path / "strict", tmp_path / "lenient"):
        sink, query = run(str(checkpoint))
        assert query.awaitTermination(120)
        assert len(sink.rows()) == 10 + 9 + 4  # the open ledgers up to their LAC (entries 8 and 3)
    lost.close()
    bk.delete_ledger(lost.ledger_id)  # deleted before the stream read it to its end
    bk.delete_ledger(kept)  # read to its end: its deletion loses nothing
    for i in range(5, 10):
        growing.append(b"g%d" % i)
    growing.close()

    sink, query = run(str(tmp_path / "strict"))  # failOnDataLoss defaults to true
    with pytest.raises(Exception, match="BOOKKEEPER_DATA_LOSS") as failure:
        query.awaitTermination(120)
    named = re.search(r"ledger\(s\) ([0-9:, ]+) of the 'ledgers' option", str(failure.value))
    assert named is not None and named.group(1).split(", ") == [f"0:{lost.ledger_id}"]
    sink, query = run(str(tmp_path / "lenient"), failOnDataLoss="false")
    assert query.awaitTermination(120) and query.exception() is None
    assert sink.rows() == [(growing.ledger_id, i, b"g%d" % i) for i in range(4, 10)]  # it went on with the others


def test_latest_after_a_crash_in_batch_zero_neither_skips_nor_repeats(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    name = f"latest-{uuid.uuid4().hex[:8]}"
    reg = registry(bk)
    old = write_bkspark_ledger(bk, [b"old%d" % i for i in range(10)])
    reg.commit(name, [(0, old)], replace=False)
    checkpoint = str(tmp_path / "cp")

    crashing = Collector(fail_batches={0})
    query = stream(spark, uri, dataset=name, startingOffsets="latest").writeStream.foreachBatch(crashing) \
        .option("checkpointLocation", checkpoint).start()
    with pytest.raises(Exception, match="injected failure in batch 0"):
        query.awaitTermination(120)

    new = write_bkspark_ledger(bk, [b"new%d" % i for i in range(10)])
    reg.commit(name, [(0, new)], replace=False)  # after batch 0 fixed where "latest" was
    sink = Collector()
    query = stream(spark, uri, dataset=name, startingOffsets="latest").writeStream.foreachBatch(sink) \
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    assert_exactly_once_in_order(sink.rows(), {new: [b"new%d" % i for i in range(10)]})


def test_starting_offsets_json_and_schema(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """startingOffsets names one ledger; ``startEntry`` is where the others start (docs/streaming.md); the schema is
    the batch source's, without ``custom_metadata`` under includeCustomMetadata=false; and minEntriesPerTrigger
    never holds a Trigger.AvailableNow query back (here 1000 > the 13 entries there are)."""
    uri = py_cluster.metadata_service_uri
    lid = write_bkspark_ledger(bk, [b"j%d" % i for i in range(20)], custom_metadata={"k": b"v"})
    other = write_bkspark_ledger(bk, [b"s%d" % i for i in range(20)])
    df = stream(spark, uri, ledgers=f"{lid},{other}", startingOffsets='{"%d": 15}' % lid, startEntry="12",
                minEntriesPerTrigger="1000")
    batch_schema = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", str(lid)).load().schema
    assert df.isStreaming and df.schema == batch_schema
    lean = stream(spark, uri, ledgers=str(lid), includeCustomMetadata="false").schema
    assert lean.fieldNames() == [f for f in batch_schema.fieldNames() if f != "custom_metadata"]
    sink = Collector()
    query = df.writeStream.foreachBatch(sink).trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    assert query.awaitTermination(120)
    expected = [(lid, i, b"j%d" % i) for i in range(15, 20)] + [(other, i, b"s%d" % i) for i in range(12, 20)]
    assert sorted(sink.rows()) == sorted(expected)
    with pytest.raises(Exception, match="startingOffsets"):
        stream(spark, uri, ledgers=str(lid), startingOffsets="yesterday").writeStream.foreachBatch(sink) \
            .option("checkpointLocation", str(tmp_path / "cp2")).start().awaitTermination(60)


def test_a_restart_replays_the_unfinished_batch_with_the_same_rows_and_keeps_its_checkpoints_start(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, "Restarts" and `startingOffsets`: a restarted query replays the batch that did not finish
    with the same start and end offsets, so it reads the same rows although the ledger moved on in between (more
    entries, then closed); `startingOffsets` is only for a new query and the restart's limits only shape later
    batches."""
    uri = py_cluster.metadata_service_uri
    lh = bk.create_ledger(3, 2, 2)
    for i in range(40):
        lh.append(b"r%d" % i)  # entries 0..38 confirmed
    checkpoint = str(tmp_path / "cp")
    crashing = Collector(fail_batches={1})
    query = stream(spark, uri, ledgers=str(lh.ledger_id), maxEntriesPerTrigger="15").writeStream.foreachBatch(crashing) \
        .trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    with pytest.raises(Exception, match="injected failure in batch 1"):
        query.awaitTermination(120)
    assert crashing.sizes() == [15] and sorted(e for _, e, _ in crashing.failed[1]) == list(range(15, 30))
    for i in range(40, 60):
        lh.append(b"r%d" % i)
    lh.close()

    sink = Collector()
    query = stream(spark, uri, ledgers=str(lh.ledger_id), startingOffsets='{"%d": 50}' % lh.ledger_id,
                   maxEntriesPerTrigger="100").writeStream.foreachBatch(sink) \
        .trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    assert query.awaitTermination(120)
    assert [batch_id for batch_id, _ in sink.batches] == [1, 2]
    assert sorted(sink.batches[0][1]) == sorted(crashing.failed[1])  # the replay: the failed attempt's rows
    assert_exactly_once_in_order(crashing.rows() + sink.rows(), {lh.ledger_id: [b"r%d" % i for i in range(60)]})


def test_max_bytes_per_trigger_estimates_an_open_ledgers_entries_from_the_long_poll(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, `maxBytesPerTrigger`: an open ledger's entry size is estimated from the last entry a long
    poll carried or, as here where every entry was confirmed before the query saw the ledger, from its last confirmed
    entry (100 bytes: 25 entries per 2500 bytes), not from a fixed guess (1024 bytes: 2 entries a batch)."""
    uri = py_cluster.metadata_service_uri
    lh = bk.create_ledger(3, 2, 2)
    for i in range(80):
        lh.append(bytes([65 + i % 26]) * 100)  # entries 0..78 confirmed
    sink = Collector()
    query = stream(spark, uri, ledgers=str(lh.ledger_id), maxBytesPerTrigger="2500").writeStream.foreachBatch(sink) \
        .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        assert query.awaitTermination(120)
    finally:
        lh.close()
    assert sink.sizes() == [25, 25, 25, 4]


def test_a_new_entry_or_commit_wakes_a_waiting_query_long_before_the_long_poll_timeout(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, "Latency": when nothing new is available the source waits on long polls of every open
    ledger and on the manifest watch, so a newly confirmed entry, and a ledger newly committed to the dataset,
    reach a micro-batch long before `longPollTimeoutMs` (here 120 s) runs out; and "Limits": a dataset's offset
    names every ledger the query has seen."""
    import json

    uri = py_cluster.metadata_service_uri
    name = f"wake-{uuid.uuid4().hex[:8]}"
    reg = registry(bk)
    checkpoint = str(tmp_path / "cp")
    with BookKeeper(uri, explicitLacInterval=100) as writer_bk:
        open_lh = writer_bk.create_ledger(3, 2, 2)
        reg.commit(name, [(0, open_lh.ledger_id)], replace=False)
        sink = Collector()
        query = stream(spark, uri, dataset=name, longPollTimeoutMs="120000").writeStream.foreachBatch(sink) \
            .option("checkpointLocation", checkpoint).start()
        try:
            open_lh.append(b"warm-up")
            wait_until(lambda: len(sink.rows()) == 1, 180, "the first entry", query=query)
            time.sleep(4)  # the batch is over: the query waits in latestOffset
            open_lh.append(b"entry")  # confirmed by the writer's explicit LAC 100 ms later
            wait_until(lambda: len(sink.rows()) == 2, 45, "the new entry (the long poll should wake the query)",
                       query=query)
            time.sleep(4)
            closed = write_bkspark_ledger(writer_bk, [b"c0", b"c1"])
            reg.commit(name, [(0, closed)], replace=False)
            wait_until(lambda: len(sink.rows()) == 4, 45,
                       "the committed ledger (the manifest watch should wake the query)", query=query)
            seen = sink.rows()
            _, last = source_offsets(checkpoint)[-1]
        finally:
            stop_waking(query, lambda: open_lh.append(b"stop"))
        open_lh.close()
    assert_exactly_once_in_order(seen, {open_lh.ledger_id: [b"warm-up", b"entry"], closed: [b"c0", b"c1"]})
    assert set(json.loads(last)["ledgers"]) == {f"0:{open_lh.ledger_id}", f"0:{closed}"}


def stop_waking(query: Any, wake: Any) -> None:
    """Stop a query whose source may be waiting a long ``longPollTimeoutMs``: Spark cannot interrupt the Python
    source's call, so ``wake`` (an append to an open ledger) ends the wait until the stop is done."""
    stopper = threading.Thread(target=query.stop, daemon=True)
    stopper.start()
    stopper.join(2)
    while stopper.is_alive():
        wake()
        stopper.join(2)


def test_a_stream_follows_a_ledger_across_an_ensemble_change_that_replaced_every_bookie(spark, bk, py_cluster, tmp_path) -> None:  # noqa: F811
    """docs/streaming.md, "A ledger that changes under the query": executors open ledgers afresh for every
    micro-batch, with the current ensembles, and the driver's long polls follow an ensemble change, here one that
    replaced both bookies of an E=W=2 ledger. (Last in the module: it adds a fourth bookie; the two it stops are
    started again.)"""
    uri = py_cluster.metadata_service_uri
    py_cluster.add_bookie()
    stopped: list[int] = []
    with BookKeeper(uri, explicitLacInterval=100) as writer_bk:
        lh = writer_bk.create_ledger(2, 2, 2)
        sink = Collector()
        query = stream(spark, uri, ledgers=str(lh.ledger_id), longPollTimeoutMs="1000").writeStream.foreachBatch(sink) \
            .option("checkpointLocation", str(tmp_path / "cp")).start()
        try:
            for i in range(5):
                lh.append(b"e%d" % i)
            wait_until(lambda: len(sink.rows()) == 5, 180, "the first segment's entries", query=query)
            old = set(lh.metadata.last_ensemble)
            stopped.extend(i for i, bookie_id in enumerate(py_cluster.bookie_ids) if bookie_id in old)
            for i in stopped:
                py_cluster.stop(i)
            for i in range(5, 10):
                lh.append(b"e%d" % i)
            assert not old & set(lh.metadata.last_ensemble)
            wait_until(lambda: len(sink.rows()) == 10, 60, "the entries of the new ensemble", query=query)
            lh.close()
        finally:
            query.stop()
            for i in stopped:
                py_cluster.start(i)
    assert_exactly_once_in_order(sink.rows(), {lh.ledger_id: [b"e%d" % i for i in range(10)]})
