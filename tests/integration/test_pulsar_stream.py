"""``spark.readStream`` of Pulsar topics straight from the bookies, checked message for message against Pulsar's
own Reader through a real Apache Pulsar 4.0.7 broker (tests/harness/pulsar.py, one per module): a topic the broker
keeps producing to and rolls (the producer never fails: nothing fenced), a partitioned topic under admission
control with Trigger.AvailableNow, a restart from the checkpoint into an idempotent sink (every message exactly
once), a broker restart in the middle of a stream, and the whole ZooKeeper tree unchanged (docs/pulsar.md,
"Streaming")."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from tests.harness.pulsar import PulsarStandalone, closed_ledger_entries
from tests.integration.test_connector_streaming import wait_until
from tests.integration.test_pulsar_read import (  # noqa: F401 - the module's broker and Spark fixtures
    NS,
    _tree,
    assert_rows_equal_reader,
    produce,
    pulsar,
    reader_messages,
    send_chunked,
    send_with_schema,
    spark,
)

pytestmark = [pytest.mark.integration]


class IdempotentSink:
    """A ``foreachBatch`` sink that keeps each batch's rows under its batch id (a replayed batch overwrites its
    earlier write, as an idempotent sink does); rows in the shape ``assert_rows_equal_reader`` takes."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, Any]]] = {}
        self.writes = 0
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [r.asDict() for r in df.selectExpr(
            "*", "unix_millis(__publishTime) AS pt", "unix_millis(__eventTime) AS et").collect()]
        with self.lock:
            self.batches[batch_id] = rows
            self.writes += 1

    def rows(self) -> list[dict[str, Any]]:
        with self.lock:
            return [row for batch in sorted(self.batches) for row in self.batches[batch]]

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(self.batches[b]) for b in sorted(self.batches) if self.batches[b]]


def stream(spark: Any, pulsar: PulsarStandalone, **options: str) -> Any:  # noqa: F811
    reader = spark.readStream.format("bookkeeper").option("metadataServiceUri", pulsar.metadata_service_uri)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class Producer:
    """Sends messages one at a time from a thread until stopped; every send's result is kept (a fenced ledger
    would fail a send or close the ledger early)."""

    def __init__(self, pulsar: PulsarStandalone, topic: str, prefix: str = "m") -> None:  # noqa: F811
        import pulsar as pulsar_client

        self.client = pulsar_client.Client(pulsar.service_url, operation_timeout_seconds=60)
        self.producer = self.client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        self.prefix = prefix
        self.sent: list[Any] = []
        self.errors: list[BaseException] = []
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.paused.is_set():
                time.sleep(0.02)
                continue
            try:
                self.sent.append(self.producer.send(f"{self.prefix} {len(self.sent)}".encode(),
                                                    properties={"i": str(len(self.sent))}))
            except BaseException as exc:  # noqa: BLE001 - the test asserts there are none
                self.errors.append(exc)
                time.sleep(0.2)
            time.sleep(0.01)

    def wait_for(self, count: int, timeout: float = 90) -> None:
        wait_until(lambda: len(self.sent) >= count or bool(self.errors), timeout, f"{count} sends")

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(60)
        self.producer.close()
        self.client.close()


def run_until(query: Any, enough: Any, what: str) -> None:
    """Wait until ``enough()`` or the query fails (then its error is the test's), and stop the query."""
    try:
        wait_until(lambda: enough() or query.exception() is not None, 180, what)
        assert query.exception() is None
    finally:
        query.stop()


def test_a_stream_follows_the_ledgers_the_broker_rolls_while_it_produces(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,  # noqa: F811
) -> None:
    """The producer sends while the stream reads; the topic rolls over many ledgers; every message reaches the
    sink once, in order, equal to the Reader's; every send succeeded and every closed ledger holds exactly
    managedLedgerMaxEntriesPerLedger entries (a fenced ledger would be closed early)."""
    topic = f"{NS}/stream-live"
    producer = Producer(pulsar, topic)
    sink = IdempotentSink()
    query = None
    try:
        producer.wait_for(10)
        query = (stream(spark, pulsar, topic=topic, longPollTimeoutMs="500").writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
        producer.wait_for(75)
        wait_until(lambda: len(sink.rows()) >= 40 or query.exception() is not None, 180,
                   "the stream to catch up with the producer")
        assert query.exception() is None
        producer.close()
        sent = len(producer.sent)
        wait_until(lambda: len(sink.rows()) >= sent or query.exception() is not None, 120, "the last messages")
        assert query.exception() is None
    finally:
        if query is not None:
            query.stop()
        producer.close()
    assert producer.errors == []
    closed = closed_ledger_entries(pulsar, topic)
    assert len(closed) >= 3 and set(closed) == {pulsar.max_entries_per_ledger}
    oracle = reader_messages(pulsar.service_url, topic)
    assert len(oracle) == len(producer.sent)
    assert_rows_equal_reader(sink.rows(), oracle)
    assert len(sink.sizes()) > 1  # it streamed: the rows came in several micro-batches


def drain(reader: Any, start: dict[str, Any]) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """What Trigger.AvailableNow gives, as Spark's driver and tasks call the stream reader (without Spark): the
    rows of each micro-batch, and the last end offset."""
    reader.prepareForTriggerAvailableNow()
    batches = []
    while True:
        end = json.loads(json.dumps(reader.latestOffset(start, reader.getDefaultReadLimit())))  # as Spark stores it
        if end == start:
            return batches, end
        rows = [r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
        batches.append([{**r, "pt": round(r["__publishTime"].timestamp() * 1000),
                         "et": round(r["__eventTime"].timestamp() * 1000) if r["__eventTime"] else None} for r in rows])
        start = end


def stream_reader(pulsar: PulsarStandalone, **options: str) -> Any:  # noqa: F811
    from bkspark.datasource.pulsar_stream import pulsar_stream_reader

    return pulsar_stream_reader({"metadataServiceUri": pulsar.metadata_service_uri, **options}, None)


def test_a_partitioned_topic_under_admission_control_with_available_now(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,  # noqa: F811
) -> None:
    """Trigger.AvailableNow reads what is readable when the query starts, in micro-batches no larger than each
    budget: maxMessagesPerTrigger (cutting inside batches; through Spark), maxEntriesPerTrigger (by its Kafka alias)
    and maxBytesPerTrigger (the reader's own driver and task code); the offsets name each partition's (ledgerId,
    entryId, batchIndex), and such a position inside a batch is a valid startingOffsets."""
    topic = f"{NS}/stream-parted"
    pulsar.admin("PUT", "/admin/v2/persistent/public/default/stream-parted/partitions", 3)
    produce(pulsar, topic, 90, batching=True, codec="LZ4")
    oracle = reader_messages(pulsar.service_url, topic)
    assert {m["partition"] for m in oracle} == {0, 1, 2} and any(m["batch_index"] > 2 for m in oracle)
    sink = IdempotentSink()
    checkpoint = tmp_path / "cp"
    query = (stream(spark, pulsar, topic=topic, maxMessagesPerTrigger="7").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    assert query.exception() is None
    assert_rows_equal_reader(sink.rows(), oracle)
    assert len(sink.sizes()) >= 90 // 7 and max(sink.sizes()) <= 7
    offsets = checkpoint / "offsets"
    last = json.loads((offsets / max((f.name for f in offsets.iterdir() if f.name.isdigit()), key=int))
                      .read_text().splitlines()[-1])
    assert sorted(last["topics"]) == [f"{topic}-partition-{i}" for i in range(3)]
    assert all(set(p) == {"ledgerId", "entryId", "batchIndex"} for p in last["topics"].values())
    entries = {(m["partition"], m["ledger"], m["entry"]) for m in oracle}
    for options in ({"maxOffsetsPerTrigger": "1"}, {"maxBytesPerTrigger": "1"}):
        reader = stream_reader(pulsar, topic=topic, **options)
        try:
            batches, _ = drain(reader, reader.initialOffset())
        finally:
            reader.stop()
        assert_rows_equal_reader([r for b in batches for r in b], oracle)
        assert len(batches) == len(entries), options  # one entry (a whole batch of messages) per micro-batch
    # a position inside a batch starts there (as an offset shows it, or as message id bytes)
    inside = next(m for m in oracle if m["batch_index"] == 2)
    part = f"{topic}-partition-{inside['partition']}"
    mine = [m for m in oracle if m["topic"] == part]
    for start in ({part: {"ledgerId": inside["ledger"], "entryId": inside["entry"], "batchIndex": 2}},
                  {part: list(inside["message_id"])}):
        reader = stream_reader(pulsar, topic=part, startingOffsets=json.dumps(start))
        try:
            batches, _ = drain(reader, reader.initialOffset())
        finally:
            reader.stop()
        assert_rows_equal_reader([r for b in batches for r in b], mine[mine.index(inside):])


def test_a_restart_from_the_checkpoint_gives_every_message_exactly_once(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,  # noqa: F811
) -> None:
    """A query stopped in the middle of a topic and started again from its checkpoint (the driver's state gone:
    a new reader) writes every message exactly once into the idempotent sink; a stream from startingOffsets=latest
    reads only what is sent after its first batch."""
    topic = f"{NS}/stream-restart"
    produce(pulsar, topic, 60, batching=True, codec="ZSTD")
    sink = IdempotentSink()
    checkpoint = str(tmp_path / "cp")

    def start_query(**options: str) -> Any:
        return (stream(spark, pulsar, topic=topic, maxMessagesPerTrigger="9", **options).writeStream
                .foreachBatch(sink).option("checkpointLocation", checkpoint)
                .trigger(processingTime="100 milliseconds").start())

    run_until(start_query(), lambda: len(sink.rows()) >= 20, "some batches before the stop")
    assert len(sink.rows()) < 60
    produce(pulsar, topic, 40, start=60)
    run_until(start_query(), lambda: len(sink.rows()) >= 100, "the restarted query to read everything")
    oracle = reader_messages(pulsar.service_url, topic)
    assert len(oracle) == 100
    assert_rows_equal_reader(sink.rows(), oracle)
    assert len(sink.batches) > 100 // 9  # at most 9 messages a batch
    # startingOffsets=latest: only what is sent after the query's first batch
    reader = stream_reader(pulsar, topic=topic, startingOffsets="latest")
    try:
        start = reader.initialOffset()
        first = json.loads(json.dumps(reader.latestOffset(start, reader.getDefaultReadLimit())))
        assert list(reader.partitions(start, first)) == []
        produce(pulsar, topic, 10, start=100)
        oracle = reader_messages(pulsar.service_url, topic)
        batches, _ = drain(reader, first)
    finally:
        reader.stop()
    assert_rows_equal_reader([r for b in batches for r in b], oracle[100:])


def test_a_stream_writes_nothing_to_pulsars_zookeeper(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,  # noqa: F811
) -> None:
    """The whole tree (paths and data) is the same before and after a stream that follows a topic (its tails, its
    watches, its metadata reads) on an idle broker."""
    from tests.integration.test_pulsar_read import _drop_cached_client

    topic = f"{NS}/stream-untouched"
    produce(pulsar, topic, 45, batching=True, codec="SNAPPY")
    oracle = reader_messages(pulsar.service_url, topic)
    _drop_cached_client(pulsar)  # the stream opens a new client
    zk = pulsar.zookeeper.client()
    try:
        before = _tree(zk)
        sink = IdempotentSink()
        query = (stream(spark, pulsar, topic=topic, maxEntriesPerTrigger="5").writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        after = _tree(zk)
    finally:
        zk.stop()
        zk.close()
    assert_rows_equal_reader(sink.rows(), oracle)
    assert "/ledgers/LAYOUT" not in after
    assert sorted(after) == sorted(before)
    assert [p for p in before if before[p] != after[p]] == []


def test_retention_deleting_a_ledger_the_stream_has_not_finished(pulsar: PulsarStandalone) -> None:  # noqa: F811
    """A ledger retention deletes before the stream read it to its end: the next trigger fails with an error naming
    the topic and the ledger (failOnDataLoss, the default), and a batch planned before the deletion fails reading
    it the same way; with failOnDataLoss=false the stream goes on at the next ledger and reads what the Reader
    still gives (the stream's own driver and executor code, without Spark between them)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from bkspark.datasource.pulsar_stream import pulsar_stream_reader
    from bkspark.pulsar.errors import PulsarDataLossError

    pulsar.admin("PUT", "/admin/v2/namespaces/public/short", {})
    topic = "persistent://public/short/stream-trimmed"
    produce(pulsar, topic, 70)
    before = reader_messages(pulsar.service_url, topic)
    first_ledger = before[0]["ledger"]
    options = {"metadataServiceUri": pulsar.metadata_service_uri, "topic": topic, "maxEntriesPerTrigger": "5"}
    strict, lenient = pulsar_stream_reader(options, None), pulsar_stream_reader({**options, "failOnDataLoss": "false"}, None)
    try:
        planned = []
        for reader in (strict, lenient):
            start = reader.initialOffset()
            end = reader.latestOffset(start, ReadMaxRows(5))
            assert end["topics"][topic] == {"ledgerId": first_ledger, "entryId": 5, "batchIndex": -1}
            planned.append((start, end, reader.partitions(start, end)))
        pulsar.admin("POST", "/admin/v2/namespaces/public/short/retention",
                     {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        wait_until(lambda: pulsar.admin("POST", "/admin/v2/persistent/public/short/stream-trimmed/trim") is None
                   and reader_messages(pulsar.service_url, topic)[0]["ledger"] != first_ledger, 60,
                   "retention to delete the oldest ledger")
        after = reader_messages(pulsar.service_url, topic)
        start, end, plan = planned[0]
        with pytest.raises(PulsarDataLossError, match=f"ledger {first_ledger} of topic {topic}"):
            [batch for partition in plan for batch in strict.read(partition)]
        with pytest.raises(PulsarDataLossError, match=f"ledger {first_ledger} of topic {topic}"):
            strict.latestOffset(end, ReadAllAvailable())
        start, end, _plan = planned[1]
        rows = []
        while True:
            following = lenient.latestOffset(end, ReadAllAvailable())
            if following == end:
                break
            rows += [r for p in lenient.partitions(end, following) for b in lenient.read(p) for r in b.to_pylist()]
            end = following
        assert [r["value"] for r in rows] == [m["value"] for m in after]
    finally:
        strict.stop()
        lenient.stop()


def test_a_broker_restart_in_the_middle_of_a_stream(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,  # noqa: F811
) -> None:
    """The broker (and its bookie) stops and starts again while a stream follows a topic: the broker recovers
    its ledger and rolls to a new one; the stream goes on, and the sink holds every message the Reader gives,
    once, in order."""
    topic = f"{NS}/stream-broker-restart"
    produce(pulsar, topic, 30)
    sink = IdempotentSink()
    query = (stream(spark, pulsar, topic=topic, longPollTimeoutMs="500").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    def restart_then_produce() -> bool:
        """Once the first messages are in: the broker stopped and started again, then more messages."""
        if len(sink.rows()) >= 30 and not restarted:
            assert pulsar.process is not None
            pulsar.process.terminate(timeout=60)
            pulsar.start()
            produce(pulsar, topic, 30, start=30)
            restarted.append(True)
        return len(sink.rows()) >= 60

    restarted: list[bool] = []
    run_until(query, restart_then_produce, "the stream to read the messages sent after the broker's restart")
    oracle = reader_messages(pulsar.service_url, topic)
    assert len(oracle) == 60
    assert_rows_equal_reader(sink.rows(), oracle)


def test_bad_stream_options_fail_clearly(spark: Any, pulsar: PulsarStandalone) -> None:  # noqa: F811
    """A mistake in a stream's options fails the query as it starts, naming the option (each option's checks:
    tests/unit/test_pulsar_stream_offsets.py)."""
    produce(pulsar, f"{NS}/bad-options", 1)  # load() finds the topic and its schema in Pulsar's metadata
    query = stream(spark, pulsar, topic=f"{NS}/bad-options", endingOffsets="latest").writeStream.format("noop").start()
    try:
        with pytest.raises(Exception, match="endingOffsets"):
            query.awaitTermination(300)
    finally:
        query.stop()


def drain_all(reader: Any, start: dict[str, Any]) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """What a query with a processing-time trigger reads from the offset ``start`` (after a restart, its
    checkpoint) up to what is readable now, as Spark's driver and tasks call the stream reader (without Spark): the
    rows of each micro-batch within the reader's budgets, and the last end offset."""
    batches = []
    while True:
        end = json.loads(json.dumps(reader.latestOffset(start, reader.getDefaultReadLimit())))
        if end == start:
            return batches, end
        batches.append([{**r, "pt": round(r["__publishTime"].timestamp() * 1000),
                         "et": round(r["__eventTime"].timestamp() * 1000) if r["__eventTime"] else None}
                        for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()])
        start = end


def flat(batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [row for batch in batches for row in batch]


def test_a_typed_stream_across_a_schema_version_and_a_restart(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,  # noqa: F811
) -> None:
    """readStream on an AVRO topic gives the typed columns, equal to Pulsar's Reader decoding with the same schema;
    a producer moving to a new version while the query runs: its messages are decoded into the columns the query
    started with (the new version looked up in the registry, Avro's resolution), nothing fails; the query
    restarted from its checkpoint has the new version's columns and gives the rest, every message once. A JSON
    topic the same way through the stream reader's own driver and task code, restarted from a mid offset."""
    import types

    from pulsar.schema import AvroSchema, Double, Integer, JsonSchema, Record, String

    def reading(with_unit: bool) -> Any:
        fields = {"name": String(), "count": Integer(), "score": Double()}
        if with_unit:
            fields["unit"] = String(required_default=True)
        return types.new_class("Reading", (Record,), exec_body=lambda namespace: namespace.update(fields))

    v1, v2 = reading(False), reading(True)

    def send(topic: str, schema: Any, values: list[Any], batching: bool) -> None:
        send_with_schema(pulsar, topic, schema, values, batching=batching)

    def oracle(topic: str, kind: Any, record: Any) -> list[tuple[dict[str, Any], tuple[int, int, int]]]:
        """The Reader's values decoded with ``kind(record)`` (each message's own version resolved into it)."""
        from tests.integration.test_pulsar_read import _schema_reader_values

        return [({f: getattr(value, f) for f in record._fields}, where)  # noqa: SLF001 - the record's fields
                for value, where in _schema_reader_values(pulsar, topic, kind(record))]

    def typed(rows: list[dict[str, Any]], names: list[str]) -> list[tuple[dict[str, Any], tuple[int, int, int]]]:
        return [({f: r[f] for f in names}, (r["__ledgerId"], r["__entryId"], r["__batchIndex"])) for r in rows]

    topic = f"{NS}/stream-avro"
    send(topic, AvroSchema(v1), [v1(name=f"a{i}", count=i, score=i / 2) for i in range(15)], batching=True)
    sink = IdempotentSink()
    checkpoint = str(tmp_path / "cp")

    def start_query() -> Any:
        return (stream(spark, pulsar, topic=topic, maxMessagesPerTrigger="10", longPollTimeoutMs="500")
                .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
                .trigger(processingTime="200 milliseconds").start())

    query = start_query()
    try:
        wait_until(lambda: len(sink.rows()) >= 15 or query.exception() is not None, 180, "the first version's rows")
        send(topic, AvroSchema(v2), [v2(name=f"b{i}", count=-i, score=None, unit=f"u{i}") for i in range(10)],
             batching=False)
        wait_until(lambda: len(sink.rows()) >= 25 or query.exception() is not None, 180, "the new version's rows")
        assert query.exception() is None
    finally:
        query.stop()
    first = sink.rows()
    assert "unit" not in first[0] and "value" not in first[0]
    assert typed(first, ["name", "count", "score"]) == oracle(topic, AvroSchema, v1)
    send(topic, AvroSchema(v2), [v2(name=f"c{i}", count=100 + i, score=1.5, unit=None) for i in range(5)],
         batching=True)
    run_until(start_query(), lambda: len(sink.rows()) >= 30, "the restarted query's rows")
    rows = sink.rows()  # a batch Spark had not committed at the stop is run again, with the new columns
    want = oracle(topic, AvroSchema, v2)
    assert typed(rows, ["name", "count", "score"]) == [({f: v[f] for f in ("name", "count", "score")}, where)
                                                       for v, where in want]
    assert all("unit" in row for row in rows[25:])
    assert typed(rows[25:], ["name", "count", "score", "unit"]) == want[25:]

    json_topic = f"{NS}/stream-json"
    send(json_topic, JsonSchema(v1), [v1(name=f"j{i}", count=i, score=i * 1.5) for i in range(20)], batching=True)
    oracle(json_topic, JsonSchema, v1)  # returns once the bookies' LAC covers the messages: a drain sees them all
    reader = stream_reader(pulsar, topic=json_topic, maxMessagesPerTrigger="7", longPollTimeoutMs="100")
    try:
        batches, end = drain_all(reader, reader.initialOffset())
        send(json_topic, JsonSchema(v2), [v2(name=f"k{i}", count=i, score=0.5, unit="x") for i in range(6)],
             batching=False)
        want = oracle(json_topic, JsonSchema, v1)
        more, _ = drain_all(reader, end)  # the same driver and decoder, a version it was not planned with
    finally:
        reader.stop()
    names = ["name", "count", "score"]
    assert typed(flat(batches + more), names) == want and len(want) == 26
    assert max(len(b) for b in batches + more) <= 7
    restarted = stream_reader(pulsar, topic=json_topic, maxMessagesPerTrigger="12", longPollTimeoutMs="100")
    try:
        mid = json.loads(json.dumps(restarted.latestOffset(restarted.initialOffset(),
                                                           restarted.getDefaultReadLimit())))
        rest, _ = drain_all(restarted, mid)
    finally:
        restarted.stop()
    assert typed(flat(rest), [*names, "unit"]) == oracle(json_topic, JsonSchema, v2)[12:]


def test_chunked_messages_in_a_stream_whole_once_across_ledgers_and_micro_batches(
    pulsar: PulsarStandalone,  # noqa: F811
) -> None:
    """Messages larger than maxMessageSize (64 KiB) sent as chunks, one of them begun in one ledger and ended in
    the next (the broker rolls every 20 entries): a stream cut into micro-batches of one entry
    (maxEntriesPerTrigger, so every chunk boundary is a micro-batch boundary) and of one message
    (maxMessagesPerTrigger) gives each message whole, once, equal to the Reader's, never a piece; and a query
    restarted from any of those offsets (inside a chunked message too) gives exactly the messages after it."""
    import random

    from bkspark.pulsar.proto.PulsarApi_pb2 import MessageIdData

    topic = f"{NS}/stream-chunked"
    rng = random.Random(2)
    # entries 0..18 of the first ledger, then chunks from entry 19 on: the first big message crosses the roll
    send_chunked(pulsar, topic, [(f"small {i}".encode(), {}) for i in range(19)] + [
        message for size in (150_000, 70_000, 200_000)
        for message in ((rng.randbytes(size), {"properties": {"size": str(size)}}), (b"between", {}))])
    oracle = reader_messages(pulsar.service_url, topic)
    assert [len(m["value"]) for m in oracle[19:]] == [150_000, 7, 70_000, 7, 200_000, 7]
    firsts = [MessageIdData.FromString(m["message_id"]) for m in oracle[19::2]]
    assert firsts[0].first_chunk_message_id.ledgerId != firsts[0].ledgerId  # begun in one ledger, ended in the next
    offsets = []
    for options in ({"maxEntriesPerTrigger": "1"}, {"maxMessagesPerTrigger": "1"}):
        reader = stream_reader(pulsar, topic=topic, longPollTimeoutMs="50", **options)
        try:
            batches, _ = drain(reader, reader.initialOffset())
            if not offsets:  # every offset Spark would checkpoint, for the restarts below
                start = reader.initialOffset()
                reader.prepareForTriggerAvailableNow()
                while (end := json.loads(json.dumps(reader.latestOffset(start, ReadMaxRows(1))))) != start:
                    offsets.append(end)
                    start = end
        finally:
            reader.stop()
        assert_rows_equal_reader([r for b in batches for r in b], oracle)
        assert max(len(b) for b in batches) == 1, options
        if "maxMessagesPerTrigger" in options:  # a chunked message counts once: one message a micro-batch
            assert [len(b) for b in batches] == [1] * len(oracle)
    assert len(offsets) > len(oracle)  # chunk entries hold no message: more micro-batches than messages
    for offset in offsets:
        reader = stream_reader(pulsar, topic=topic, longPollTimeoutMs="50")
        try:
            rest, _ = drain_all(reader, offset)
        finally:
            reader.stop()
        (position,) = offset["topics"].values()
        after = [m for m in oracle
                 if (m["ledger"], m["entry"]) >= (position["ledgerId"], position["entryId"])]
        assert_rows_equal_reader(flat(rest), after)


def test_a_partition_added_to_a_running_stream_is_read_from_its_earliest(
    pulsar: PulsarStandalone,  # noqa: F811
) -> None:
    """A partitioned topic grows from 2 to 3 partitions (the broker's admin API, as `pulsar-admin topics
    update-partitioned-topic` calls it) while a stream follows it: the next triggers find the new partition and
    read it from its first message; every message once, equal to the Reader's (the stream reader's own driver
    and task code, as Spark calls it)."""
    topic = f"{NS}/stream-grows"
    pulsar.admin("PUT", "/admin/v2/persistent/public/default/stream-grows/partitions", 2)
    produce(pulsar, topic, 20)
    reader_messages(pulsar.service_url, topic)  # returns once the bookies' LAC covers them
    reader = stream_reader(pulsar, topic=topic, longPollTimeoutMs="200")
    try:
        batches, end = drain_all(reader, reader.initialOffset())
        rows = flat(batches)
        assert sorted(end["topics"]) == [f"{topic}-partition-{i}" for i in range(2)]
        pulsar.admin("POST", "/admin/v2/persistent/public/default/stream-grows/partitions", 3)
        produce(pulsar, topic, 30, start=20)  # a new client: it sees three partitions
        oracle = reader_messages(pulsar.service_url, topic)
        assert {m["partition"] for m in oracle} == {0, 1, 2}
        deadline = time.monotonic() + 120
        while len(rows) < len(oracle) and time.monotonic() < deadline:
            more, end = drain_all(reader, end)
            rows += flat(more)
    finally:
        reader.stop()
    assert f"{topic}-partition-2" in end["topics"]
    assert_rows_equal_reader(rows, oracle)
