"""``spark.read`` of Pulsar topics straight from the bookies, checked message for message against Pulsar's own
Reader through a real Apache Pulsar 4.0.7 broker (tests/harness/pulsar.py, one per module): batching on and off,
every codec, keys and properties, a topic over several ledgers, a partitioned topic, ``topics`` and
``topicsPattern``, a topic still being produced to, retention deleting ledgers (``failOnDataLoss`` both ways), and
the whole ZooKeeper tree unchanged by a scan (docs/pulsar.md)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.pulsar import (
    PulsarStandalone,
    closed_ledger_entries,
    reader_messages as _reader_messages,
    wait_until_readable_from_bookies,
)

pytestmark = [pytest.mark.integration]

CODECS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")


def reader_messages(service_url: str, topic: str, metadata_service_uri: str | None = None) -> list[dict[str, Any]]:
    """Pulsar's Reader's messages (the oracle), returned once the bookies' LAC covers them (the event a scan of the
    open ledger needs: docs/pulsar.md)."""
    messages = _reader_messages(service_url, topic)
    wait_until_readable_from_bookies(metadata_service_uri or _URI[service_url], messages)
    return messages


#: The bookies' URI of each broker of this module, by its service URL (set by the ``pulsar`` fixture).
_URI: dict[str, str] = {}
NS = "persistent://public/default"


@pytest.fixture(scope="module")
def pulsar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarStandalone]:
    broker = PulsarStandalone(tmp_path_factory.mktemp("pulsar"), max_entries_per_ledger=20,
                              conf={"maxMessageSize": 65536})
    broker.start()
    _URI[broker.service_url] = broker.metadata_service_uri
    try:
        yield broker
    finally:
        _drop_cached_client(broker)
        broker.stop()


def _drop_cached_client(broker: PulsarStandalone) -> None:
    """Close this process's cached client of the module's reads while its ZooKeeper still runs."""
    from bkspark.datasource.clients import evict_client
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.datasource.pulsar_reader import client_settings

    options = parse_pulsar_read_options({"metadataServiceUri": broker.metadata_service_uri, "topic": "t"})
    evict_client(options.metadata_service_uri, client_settings(options))


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local[2,2] SparkSession (UTC) whose Python workers run this venv's interpreter."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,2]").appName("bkspark-pulsar-tests")
        .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g").config("spark.python.worker.reuse", "true").getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def produce(pulsar: PulsarStandalone, topic: str, count: int, *, batching: bool = False, codec: str = "NONE",
            start: int = 0) -> None:
    """``count`` messages with keys, properties and event times on most of them."""
    import pulsar as pulsar_client

    client = pulsar_client.Client(pulsar.service_url)
    try:
        producer = client.create_producer(
            topic, batching_enabled=batching, batching_max_publish_delay_ms=20,
            compression_type=pulsar_client.CompressionType(CODECS.index(codec)),
        )
        for i in range(start, start + count):
            kwargs: dict[str, Any] = {}
            if i % 3:
                kwargs["properties"] = {"i": str(i), "parity": "odd" if i % 2 else "even"}
            if i % 2 == 0:
                kwargs["partition_key"] = f"key-{i % 7}"
            if i % 4 == 1:
                kwargs["event_timestamp"] = 1_700_000_000_000 + i
            producer.send_async(f"value {i} ".encode() * (1 + i % 5), lambda result, msg_id: None, **kwargs)
        producer.flush()
        producer.close()
    finally:
        client.close()


def send_chunked(pulsar: PulsarStandalone, topic: str, messages: list[tuple[bytes, dict[str, Any]]]) -> None:
    """``(value, send kwargs)`` sent one after the other by an unbatched LZ4 producer with chunking on: a value
    above the broker's maxMessageSize is written as chunks, one entry each."""
    import pulsar as pulsar_client

    client = pulsar_client.Client(pulsar.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True,
                                          compression_type=pulsar_client.CompressionType.LZ4)
        for value, kwargs in messages:
            producer.send(value, **kwargs)
        producer.close()
    finally:
        client.close()


def timed_topic(pulsar: PulsarStandalone, topic: str) -> tuple[list[dict[str, Any]], list[int], int]:
    """50 messages, unbatched, each sent after the one before is stored (publish times in order), over 3 ledgers or
    more: the Reader's messages, their ledgers in order, and the publish time of the third ledger's first message."""
    import pulsar as pulsar_client

    client = pulsar_client.Client(pulsar.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(f"t{i}".encode())
        producer.close()
    finally:
        client.close()
    oracle = reader_messages(pulsar.service_url, topic)
    ledgers = sorted({m["ledger"] for m in oracle})
    assert len(ledgers) >= 3
    return oracle, ledgers, next(m["publish_time"] for m in oracle if m["ledger"] == ledgers[2])


def read(spark: Any, pulsar: PulsarStandalone, **options: str) -> list[dict[str, Any]]:
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", pulsar.metadata_service_uri)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load().selectExpr("*", "unix_millis(__publishTime) AS pt", "unix_millis(__eventTime) AS et")
    return [row.asDict() for row in df.collect()]


def assert_rows_equal_reader(rows: list[dict[str, Any]], oracle: list[dict[str, Any]]) -> None:
    """Same messages, each topic (partition) in the Reader's order: value, key, properties, times, message id."""
    def by_topic(items: list[dict[str, Any]], topic_key: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            out.setdefault(item[topic_key], []).append(item)
        return out

    got, want = by_topic(rows, "__topic"), by_topic(oracle, "topic")
    assert sorted(got) == sorted(want)
    for topic, messages in want.items():
        assert len(got[topic]) == len(messages), topic
        for row, message in zip(got[topic], messages):
            assert row["value"] == message["value"]
            assert row["__key"] == message["key"]
            assert dict(row["__messageProperties"] or {}) == message["properties"]
            assert row["pt"] == message["publish_time"]
            assert (row["et"] or 0) == message["event_time"]
            assert (row["__ledgerId"], row["__entryId"], row["__batchIndex"], row["__partition"]) == (
                message["ledger"], message["entry"], message["batch_index"], message["partition"])
            assert row["__messageId"] == message["message_id"]


def test_every_codec_batched_or_not_equals_the_reader(spark: Any, pulsar: PulsarStandalone) -> None:
    """Each codec, batching on and off, a topic each: one scan of the ten topics (``topics``) equals Pulsar's Reader
    on each of them (one Spark job for the ten keeps the module short)."""
    cases = {f"{NS}/codec-{codec.lower()}-{'b' if batching else 'u'}": (codec, batching)
             for codec in CODECS for batching in (True, False)}
    for topic, (codec, batching) in cases.items():
        produce(pulsar, topic, 45 if batching else 12, batching=batching, codec=codec)
    oracle = [message for topic in cases for message in reader_messages(pulsar.service_url, topic)]
    rows = read(spark, pulsar, topics=",".join(cases))
    assert_rows_equal_reader(rows, oracle)
    for topic, (codec, batching) in cases.items():
        mine = [r for r in rows if r["__topic"] == topic]
        assert any(r["__batchIndex"] > 0 for r in mine) == batching, (topic, codec)
        assert len({r["__producerName"] for r in mine}) == 1 and mine[0]["__producerName"]  # one producer, named


def test_topic_over_several_ledgers_split_and_packed(spark: Any, pulsar: PulsarStandalone) -> None:
    from bkspark.pulsar.topics import TopicResolver, parse_topic_name, pulsar_root_of

    topic = f"{NS}/many-ledgers"
    produce(pulsar, topic, 130)
    zk = pulsar.zookeeper.client()
    try:
        resolver = TopicResolver(zk, pulsar_root_of("/ledgers"))
        (part,) = resolver.partitions(parse_topic_name(topic))
        ledgers = resolver.ledgers(part)
    finally:
        zk.stop()
        zk.close()
    assert ledgers is not None and len(ledgers) >= 6  # 20 entries per ledger
    oracle = reader_messages(pulsar.service_url, topic)
    assert len({m["ledger"] for m in oracle}) >= 6
    for options in ({}, {"maxEntriesPerPartition": "7"}, {"minPartitions": "5"}, {"maxPartitions": "1"}):
        assert_rows_equal_reader(read(spark, pulsar, topic=topic, **options), oracle)


def test_partitioned_topic_topics_and_pattern(spark: Any, pulsar: PulsarStandalone) -> None:
    topic = f"{NS}/parted"
    pulsar.admin("PUT", "/admin/v2/persistent/public/default/parted/partitions", 3)
    produce(pulsar, topic, 60, batching=True, codec="LZ4")
    oracle = reader_messages(pulsar.service_url, topic)
    assert {m["partition"] for m in oracle} == {0, 1, 2}
    rows = read(spark, pulsar, topic=topic)
    assert_rows_equal_reader(rows, oracle)
    assert {r["__topic"] for r in rows} == {f"{topic}-partition-{i}" for i in range(3)}
    other = f"{NS}/parted-other"
    produce(pulsar, other, 5)
    both = oracle + reader_messages(pulsar.service_url, other)
    assert_rows_equal_reader(read(spark, pulsar, topics=f"{topic}, {other}"), both)
    assert_rows_equal_reader(read(spark, pulsar, topicsPattern=f"{NS}/parted.*"), both)
    assert_rows_equal_reader(read(spark, pulsar, topicsPattern=f"{NS}/parted"), oracle)


def test_missing_topic_and_bad_options_fail_clearly(spark: Any, pulsar: PulsarStandalone) -> None:
    with pytest.raises(Exception, match="BOOKKEEPER_PULSAR_TOPIC_NOT_FOUND"):
        read(spark, pulsar, topic=f"{NS}/never-written")
    with pytest.raises(Exception, match="only persistent topics"):
        read(spark, pulsar, topic="non-persistent://public/default/x")
    with pytest.raises(Exception, match="BOOKKEEPER_PULSAR_METADATA_STORE"):
        spark.read.format("bookkeeper").option("metadataServiceUri", "metadata-store:oxia:127.0.0.1:6648").option(
            "topic", f"{NS}/x").load()
    with pytest.raises(Exception, match="BOOKKEEPER_CONFLICTING_OPTIONS"):
        read(spark, pulsar, topic=f"{NS}/a", topicsPattern=f"{NS}/.*")


def _tree(zk: Any, path: str = "/") -> dict[str, bytes]:
    data, _ = zk.get(path)
    out = {path: data}
    for child in zk.get_children(path):
        out.update(_tree(zk, path.rstrip("/") + "/" + child))
    return out


def _settled_tree(zk: Any, timeout: float = 60.0) -> dict[str, bytes]:
    """The whole tree once two snapshots a second apart are equal (the broker has finished writing)."""
    deadline = time.monotonic() + timeout
    previous = _tree(zk)
    while True:
        time.sleep(1.0)
        current = _tree(zk)
        if current == previous or time.monotonic() > deadline:
            return current
        previous = current


def test_a_scan_writes_nothing_to_pulsars_zookeeper(spark: Any, pulsar: PulsarStandalone) -> None:
    """The whole tree (paths and data) is the same before and after a scan through fresh clients (Pulsar writes
    no /ledgers/LAYOUT; a BookKeeper client would create one); the idle broker writes nothing meanwhile."""
    topic = f"{NS}/untouched"
    produce(pulsar, topic, 30, batching=True, codec="ZSTD")
    _drop_cached_client(pulsar)  # this process's planner opens a new client during the scan
    zk = pulsar.zookeeper.client()
    try:
        before = _tree(zk)
        assert "/ledgers/LAYOUT" not in before and any(p.startswith("/managed-ledgers/") for p in before)
        rows = read(spark, pulsar, topic=topic)
        after = _tree(zk)
    finally:
        zk.stop()
        zk.close()
    assert len(rows) == 30
    assert sorted(after) == sorted(before)
    assert [p for p in before if before[p] != after[p]] == []


def test_a_topic_still_being_produced_to(spark: Any, pulsar: PulsarStandalone) -> None:
    """A scan of a topic the broker is writing returns a prefix of what the Reader gives, and the producer goes
    on (no ledger is fenced or recovered): its sends after the scan succeed in the same managed ledger."""
    import pulsar as pulsar_client

    topic = f"{NS}/live"
    client = pulsar_client.Client(pulsar.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    sent: list[Any] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_producing() -> None:
        i = 0
        while not stop.is_set():
            try:
                sent.append(producer.send(f"live {i}".encode(), properties={"i": str(i)}))
            except BaseException as exc:  # noqa: BLE001 - the assertion below reports it
                errors.append(exc)
                return
            i += 1
            time.sleep(0.005)

    thread = threading.Thread(target=keep_producing, name="test-producer", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(sent) < 100 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
        rows = read(spark, pulsar, topic=topic)
        at_scan_end = len(sent)
        deadline = time.monotonic() + 60
        while len(sent) < at_scan_end + 50 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
        producer.close()
        client.close()
    assert errors == []
    assert len(sent) >= at_scan_end + 50  # the producer kept going after the scan
    # and no ledger was fenced: a fenced ledger is closed early, and the broker rolls to a new one, so every closed
    # ledger holds exactly managedLedgerMaxEntriesPerLedger entries (the sends are one at a time)
    closed = closed_ledger_entries(pulsar, topic)
    assert len(closed) >= 5 and set(closed) == {pulsar.max_entries_per_ledger}
    assert 100 <= len(rows) <= at_scan_end
    oracle = reader_messages(pulsar.service_url, topic)
    assert len(oracle) == len(sent)
    assert_rows_equal_reader(rows, oracle[: len(rows)])


def _plan_then_read(pulsar: PulsarStandalone, topic: str, between: Any, **options: str) -> list[Any]:
    """What an executor reads of a plan made before ``between()`` ran (the reader's own planning and read code,
    without Spark between them)."""
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.datasource.pulsar_reader import PulsarReader

    reader = PulsarReader(parse_pulsar_read_options(
        {"metadataServiceUri": pulsar.metadata_service_uri, "topic": topic, **options}))
    plan = reader.partitions()
    between()
    return [batch for partition in plan for batch in reader.read(partition)]


def test_retention_deleting_the_oldest_ledgers(spark: Any, pulsar: PulsarStandalone) -> None:
    """Ledgers retention deletes after planning are data loss: a clear error naming topic and ledger by default,
    skipped with failOnDataLoss=false; a scan after the deletion reads what the Reader still gives."""
    from bkspark.pulsar.errors import PulsarDataLossError

    pulsar.admin("PUT", "/admin/v2/namespaces/public/short", {})
    topic = "persistent://public/short/trimmed"
    produce(pulsar, topic, 70)
    before = reader_messages(pulsar.service_url, topic)
    first_ledger = before[0]["ledger"]

    def trim() -> None:
        pulsar.admin("POST", "/admin/v2/namespaces/public/short/retention",
                     {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        deadline = time.monotonic() + 60
        while reader_messages(pulsar.service_url, topic)[0]["ledger"] == first_ledger:
            assert time.monotonic() < deadline, "retention did not delete the oldest ledger"
            pulsar.admin("POST", "/admin/v2/persistent/public/short/trimmed/trim")
            time.sleep(0.5)

    with pytest.raises(PulsarDataLossError, match=f"ledger {first_ledger} of topic {topic}"):
        _plan_then_read(pulsar, topic, trim)
    after = reader_messages(pulsar.service_url, topic)
    assert 0 < len(after) < len(before)
    kept = [b for batch in _plan_then_read(pulsar, topic, lambda: None, failOnDataLoss="false")
            for b in batch.to_pylist()]
    assert [r["value"] for r in kept] == [m["value"] for m in after]
    assert_rows_equal_reader(read(spark, pulsar, topic=topic), after)


def test_chunked_messages_are_put_back_together(spark: Any, pulsar: PulsarStandalone) -> None:
    """A message larger than the broker's maxMessageSize (64 KiB here) is written as chunks, one entry each; the
    scan returns it whole with the Reader's message id, also when the plan cuts between its chunks (the slice
    holding its last chunk reads back for the rest, the slice before leaves them)."""
    import random

    topic = f"{NS}/chunked"
    rng = random.Random(43)
    send_chunked(pulsar, topic, [(b"before", {})] + [
        (rng.randbytes(size), {"properties": {"size": str(size)}, "partition_key": f"big-{size}"})
        for size in (150_000, 70_000)] + [(b"after", {})])
    oracle = reader_messages(pulsar.service_url, topic)
    assert [len(m["value"]) for m in oracle] == [6, 150_000, 70_000, 5]
    for options in ({}, {"maxEntriesPerPartition": "2"}, {"maxEntriesPerPartition": "1"}):
        assert_rows_equal_reader(read(spark, pulsar, topic=topic, **options), oracle)


def test_publish_time_filters_prune_ledgers_closed_before_them(spark: Any, pulsar: PulsarStandalone) -> None:
    """``__publishTime >= X`` with Spark's pushdown on skips the ledgers closed more than publishTimeSkewMs before
    X; the rows are those the Reader gives with that publish time, pushdown on or off."""
    import datetime

    from pyspark.sql.datasource import GreaterThanOrEqual

    from bkspark.datasource.planning import partition_slices
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.datasource.pulsar_reader import PulsarPushdownReader

    topic = f"{NS}/by-time"
    oracle, ledgers, since = timed_topic(pulsar, topic)
    wanted = [m for m in oracle if m["publish_time"] >= since]
    reader = PulsarPushdownReader(parse_pulsar_read_options(
        {"metadataServiceUri": pulsar.metadata_service_uri, "topic": topic, "publishTimeSkewMs": "0"}))
    filters = [GreaterThanOrEqual(("__publishTime",), datetime.datetime.fromtimestamp(since / 1000, datetime.UTC))]
    assert list(reader.pushFilters(filters)) == filters  # Spark still filters the rows
    planned = {s.ledger_id for p in reader.partitions() for s in partition_slices(p)}
    assert ledgers[0] not in planned and ledgers[2] in planned
    when = datetime.datetime.fromtimestamp(since / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    for pushdown in ("true", "false"):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
        try:
            df = (spark.read.format("bookkeeper").option("metadataServiceUri", pulsar.metadata_service_uri)
                  .option("topic", topic).option("publishTimeSkewMs", "0").load()
                  .where(f"__publishTime >= timestamp'{when}'")
                  .selectExpr("*", "unix_millis(__publishTime) AS pt", "unix_millis(__eventTime) AS et"))
            assert_rows_equal_reader([r.asDict() for r in df.collect()], wanted)
        finally:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_starting_and_ending_offsets(spark: Any, pulsar: PulsarStandalone) -> None:
    """startingOffsets (inclusive) and endingOffsets (exclusive) as message ids in StreamNative's JSON (the bytes of
    MessageId.toByteArray()), inside batches and across ledgers; earliest/latest read everything."""
    import json

    topic = f"{NS}/offsets"
    produce(pulsar, topic, 30)
    produce(pulsar, topic, 60, batching=True, codec="ZSTD", start=30)
    oracle = reader_messages(pulsar.service_url, topic)
    assert len({m["ledger"] for m in oracle}) >= 2 and any(m["batch_index"] > 0 for m in oracle)
    batched = [i for i, m in enumerate(oracle) if m["batch_index"] > 0]
    first, last = 7, batched[len(batched) // 2]

    def ids(message: dict[str, Any]) -> str:
        return json.dumps({topic: list(message["message_id"])})

    assert_rows_equal_reader(
        read(spark, pulsar, topic=topic, startingOffsets=ids(oracle[first]), endingOffsets=ids(oracle[last])),
        oracle[first:last])
    signed = json.dumps({topic: [b - 256 if b > 127 else b for b in oracle[batched[0]]["message_id"]]})
    assert_rows_equal_reader(read(spark, pulsar, topic=topic, startingOffsets=signed), oracle[batched[0]:])
    assert_rows_equal_reader(
        read(spark, pulsar, topic=topic, startingOffsets="earliest", endingOffsets="latest"), oracle)
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, pulsar, topic=topic, startingOffsets="latest")


def test_the_readmes_pulsar_example_reads_a_topic(spark: Any, pulsar: PulsarStandalone) -> None:
    """README.md's Pulsar example, taken from the README, run against this broker (its URI and topic swapped in)."""
    from tests.integration.test_readme import README, pulsar_blocks

    (block,) = pulsar_blocks(README.read_text())
    topic = f"{NS}/readme-events"
    produce(pulsar, topic, 25, batching=True, codec="LZ4")
    code = block.replace('"zk:127.0.0.1:2181"', repr(pulsar.metadata_service_uri))
    code = code.replace('"persistent://public/default/events"', repr(topic))
    assert pulsar.metadata_service_uri in code and topic in code, "the README's URI or topic changed: update this test"
    oracle = reader_messages(pulsar.service_url, topic)  # first: it waits for the LAC the scan needs
    namespace: dict[str, Any] = {"spark": spark}
    exec(compile(code, "README.md Pulsar example", "exec"), namespace)  # noqa: S102 - the README's own example
    df = namespace["df"].selectExpr("*", "unix_millis(__publishTime) AS pt", "unix_millis(__eventTime) AS et")
    assert_rows_equal_reader([row.asDict() for row in df.collect()], oracle)


def _schema_reader_values(pulsar: PulsarStandalone, topic: str, schema: Any) -> list[tuple[Any, tuple[int, int, int]]]:
    """Pulsar's Reader with ``schema`` (the oracle of a schema'd topic): each message's decoded value and its
    (ledger, entry, batch index); the bookies' LAC waited for as in :func:`reader_messages`."""
    import pulsar as pulsar_client

    client = pulsar_client.Client(pulsar.service_url)
    out = []
    try:
        reader = client.create_reader(topic, pulsar_client.MessageId.earliest, schema=schema)
        while reader.has_message_available():
            msg = reader.read_next(10_000)
            mid = msg.message_id()
            out.append((msg.value(), (mid.ledger_id(), mid.entry_id(), mid.batch_index())))
        reader.close()
    finally:
        client.close()
    wait_until_readable_from_bookies(pulsar.metadata_service_uri,
                                     [{"ledger": where[0], "entry": where[1]} for _, where in out])
    return out


def send_with_schema(pulsar: PulsarStandalone, topic: str, schema: Any, values: list[Any], *,
                     batching: bool) -> None:
    """``values`` sent by a producer with ``schema`` (which registers its version), all stored when it returns."""
    import pulsar as pulsar_client

    client = pulsar_client.Client(pulsar.service_url)
    try:
        producer = client.create_producer(topic, schema=schema, batching_enabled=batching,
                                          batching_max_publish_delay_ms=20)
        for value in values:
            producer.send_async(value, lambda result, msg_id: None)
        producer.flush()
        producer.close()
    finally:
        client.close()


def _typed_rows(spark: Any, pulsar: PulsarStandalone, topic: str, **options: str) -> tuple[Any, list[dict[str, Any]]]:
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", pulsar.metadata_service_uri)
    for key, value in {"topic": topic, **options}.items():
        reader = reader.option(key, value)
    df = reader.load()
    return df.schema, [row.asDict(recursive=True) for row in df.collect()]


def test_avro_json_and_primitive_schemas_type_the_value(spark: Any, pulsar: PulsarStandalone) -> None:
    """A topic with a schema in Pulsar's registry reads as typed columns equal to the Reader's decoded values: AVRO
    over two versions (a message of the first read as the latest, Avro's resolution, as the Reader's default),
    JSON, STRING and INT64; ``schema=raw`` gives the bytes; the ZooKeeper tree is unchanged by the reads."""
    import struct
    import types

    import _pulsar
    import pulsar as pulsar_client
    from pulsar.schema import Array, AvroSchema, Boolean, Double, Integer, JsonSchema, Map, Record, Schema, String
    from pulsar.schema import StringSchema

    def reading(with_unit: bool) -> Any:
        """The record class ``Reading``; the second version adds ``unit`` with "default": null (FULL-compatible)."""
        fields = {"name": String(), "count": Integer(), "score": Double(), "ok": Boolean(), "tags": Array(String()),
                  "attrs": Map(String())}
        if with_unit:
            fields["unit"] = String(required_default=True)
        return types.new_class("Reading", (Record,), exec_body=lambda namespace: namespace.update(fields))

    class Int64Schema(Schema):  # Pulsar's INT64 schema: 8 bytes big-endian (the Python client has no class for it)
        def __init__(self) -> None:
            super().__init__(int, _pulsar.SchemaType.INT64, None, "INT64")

        def encode(self, obj: int) -> bytes:
            return struct.pack(">q", obj)

        def decode(self, data: bytes) -> int:
            return struct.unpack(">q", data)[0]

    v1, v2 = reading(False), reading(True)
    avro_topic, json_topic = f"{NS}/schema-avro", f"{NS}/schema-json"
    string_topic, long_topic = f"{NS}/schema-string", f"{NS}/schema-int64"
    # The Python client registers no INT64 schema itself: the broker's admin API does (a Java producer's
    # Schema.INT64 would), and the producer's messages then carry no version (read with the latest).
    pulsar.admin("POST", "/admin/v2/schemas/public/default/schema-int64/schema",
                 {"type": "INT64", "schema": "", "properties": {}})
    for schema, topic, values, batching in (
        (AvroSchema(v1), avro_topic,
         [v1(name=f"n{i}", count=i, score=i / 4, ok=i % 2 == 0, tags=[f"t{i}", "x"], attrs={"k": str(i)})
          for i in range(25)], True),
        (AvroSchema(v2), avro_topic,
         [v2(name=f"m{i}", count=-i, score=None, ok=None, tags=[], attrs={}, unit="C" if i % 2 else None)
          for i in range(15)], False),
        (JsonSchema(v1), json_topic,
         [v1(name=f"j{i}", count=i * 3, score=1.5 * i, ok=bool(i % 3), tags=["a"] * (i % 3),
             attrs={"i": str(i)}) for i in range(30)], True),
        (StringSchema(), string_topic, [f"héllo {i}" for i in range(20)], True),
        (Int64Schema(), long_topic, [i * (1 << 40) - 7 for i in range(20)], False),
    ):
        send_with_schema(pulsar, topic, schema, values, batching=batching)

    # the oracle first: a Reader through the broker loads the topic, and the broker then writes its own metadata
    oracles = {avro_topic: _schema_reader_values(pulsar, avro_topic, AvroSchema(v2)),
               json_topic: _schema_reader_values(pulsar, json_topic, JsonSchema(v1)),
               string_topic: _schema_reader_values(pulsar, string_topic, StringSchema()),
               long_topic: _schema_reader_values(pulsar, long_topic, Int64Schema())}
    zk = pulsar.zookeeper.client()
    try:
        before = _settled_tree(zk)  # the broker's own writes are over
        assert any(p.startswith("/schemas/public/default/schema-avro") for p in before)
        results = {topic: (oracle, _typed_rows(spark, pulsar, topic)) for topic, oracle in oracles.items()}
        raw_schema, raw_rows = _typed_rows(spark, pulsar, long_topic, schema="raw")
        after = _tree(zk)
    finally:
        zk.stop()
        zk.close()
    assert sorted(after) == sorted(before) and [p for p in before if before[p] != after[p]] == []

    fields = ["name", "count", "score", "ok", "tags", "attrs"]
    (avro_oracle, (avro_schema, avro_rows)) = results[avro_topic]
    assert avro_schema.fieldNames()[:8] == [*fields, "unit", "__key"]
    assert dict((f.name, f.dataType.simpleString()) for f in avro_schema.fields[:7]) == {
        "name": "string", "count": "int", "score": "double", "ok": "boolean", "tags": "array<string>",
        "attrs": "map<string,string>", "unit": "string"}
    assert len(avro_rows) == len(avro_oracle) == 40
    for row, (value, where) in zip(avro_rows, avro_oracle):
        assert (row["__ledgerId"], row["__entryId"], row["__batchIndex"]) == where
        assert {f: row[f] for f in [*fields, "unit"]} == {f: getattr(value, f) for f in [*fields, "unit"]}
    (json_oracle, (json_schema, json_rows)) = results[json_topic]
    assert json_schema.fieldNames()[:7] == [*fields, "__key"] and len(json_rows) == len(json_oracle) == 30
    for row, (value, where) in zip(json_rows, json_oracle):
        assert (row["__ledgerId"], row["__entryId"], row["__batchIndex"]) == where
        assert {f: row[f] for f in fields} == {f: getattr(value, f) for f in fields}
    for topic, kind in ((string_topic, "string"), (long_topic, "bigint")):
        oracle, (schema, rows) = results[topic]
        assert schema.fields[0].name == "value" and schema.fields[0].dataType.simpleString() == kind
        assert [(r["value"], (r["__ledgerId"], r["__entryId"], r["__batchIndex"])) for r in rows] == oracle
    assert raw_schema.fields[0].dataType.simpleString() == "binary"
    assert [struct.unpack(">q", r["value"])[0] for r in raw_rows] == [v for v, _ in results[long_topic][0]]


def test_starting_and_ending_time_and_publish_time_bounds(spark: Any, pulsar: PulsarStandalone) -> None:
    """``startingTime`` (inclusive) and ``endingTime`` (exclusive), publish times in ms, give the Reader's messages
    published in that range; ``startingTime`` prunes the ledgers closed more than publishTimeSkewMs before it, and
    entries outside the range (also those outside a pushed ``__publishTime <`` bound) are skipped undecoded."""
    import datetime

    from pyspark.sql.datasource import LessThan

    from bkspark.datasource.planning import partition_slices
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.datasource.pulsar_reader import PulsarPushdownReader, PulsarReader

    topic = f"{NS}/by-time-options"
    oracle, ledgers, since = timed_topic(pulsar, topic)
    until = oracle[-5]["publish_time"]
    wanted = [m for m in oracle if since <= m["publish_time"] < until]
    assert 0 < len(wanted) < len(oracle)
    base = {"metadataServiceUri": pulsar.metadata_service_uri, "topic": topic, "publishTimeSkewMs": "0"}
    reader = PulsarReader(parse_pulsar_read_options({**base, "startingTime": str(since), "endingTime": str(until)}))
    planned = {s.ledger_id for p in reader.partitions() for s in partition_slices(p)}
    assert ledgers[0] not in planned and ledgers[2] in planned
    assert_rows_equal_reader(read(spark, pulsar, topic=topic, startingTime=str(since), endingTime=str(until)), wanted)
    # a pushed upper bound: rows past it are never built (Spark would drop them; here the reader alone). The bound is
    # rounded up to the next whole ms (never dropping a row the filter keeps), so the message at `until` is built.
    pushed = PulsarPushdownReader(parse_pulsar_read_options(base))
    bound = datetime.datetime.fromtimestamp(until / 1000, datetime.UTC)
    assert list(pushed.pushFilters([LessThan(("__publishTime",), bound)])) == [LessThan(("__publishTime",), bound)]
    rows = [r for part in pushed.partitions() for batch in pushed.read(part) for r in batch.to_pylist()]
    assert [r["value"] for r in rows] == [m["value"] for m in oracle if m["publish_time"] <= until]


def test_a_compacted_topic_reads_its_whole_history_not_the_compacted_ledger(spark: Any, pulsar: PulsarStandalone) -> None:
    """Compaction (triggered by the broker's admin REST API) writes the latest message of each key into a ledger of
    its own, kept by the ``__compaction`` cursor and not listed in the managed ledger: a scan leaves it out and reads
    the topic's own ledgers, equal to Pulsar's Reader without ``readCompacted`` (docs/pulsar.md, "Compacted
    topics"); the compacted ledger exists and is not among the rows' ledgers."""
    topic = f"{NS}/compacted"
    produce(pulsar, topic, 60)
    produce(pulsar, topic, 30, start=60)  # the same keys again: older values are compacted away
    path = "/admin/v2/persistent/public/default/compacted"
    pulsar.admin("PUT", f"{path}/compaction")
    deadline = time.monotonic() + 120
    while (status := pulsar.admin("GET", f"{path}/compaction"))["status"] != "SUCCESS":
        assert status["status"] in ("RUNNING", "NOT_RUN") and time.monotonic() < deadline, status
        time.sleep(0.5)
    compacted = pulsar.admin("GET", f"{path}/internalStats")["compactedLedger"]["ledgerId"]
    assert compacted > 0
    oracle = reader_messages(pulsar.service_url, topic)
    assert len(oracle) == 90
    rows = read(spark, pulsar, topic=topic)
    assert_rows_equal_reader(rows, oracle)
    assert compacted not in {r["__ledgerId"] for r in rows}


@pytest.mark.spark_matrix
def test_a_scan_on_this_spark_release_and_the_stream_where_spark_has_admission_control(
    spark: Any, pulsar: PulsarStandalone, tmp_path: Path,
) -> None:
    """On each PySpark release of `make spark-matrix` (4.0 on; docs/pulsar.md, "Spark versions"): a scan of a
    partitioned topic of LZ4 batches equals Pulsar's Reader, and an AVRO topic reads as typed columns equal to the
    Reader's values; readStream on a topic runs where PySpark has admission control (4.2 on) and elsewhere fails
    as the query starts with [BOOKKEEPER_SPARK_VERSION] naming the release that has it."""
    from pulsar.schema import AvroSchema, Double, Integer, Record, String

    from bkspark.datasource.spark_features import ADMISSION_CONTROL, PYSPARK_VERSION

    assert spark.version == PYSPARK_VERSION
    topic = f"{NS}/matrix-parted"
    pulsar.admin("PUT", "/admin/v2/persistent/public/default/matrix-parted/partitions", 2)
    produce(pulsar, topic, 40, batching=True, codec="LZ4")
    oracle = reader_messages(pulsar.service_url, topic)  # first: it waits for the LAC the scan needs
    assert_rows_equal_reader(read(spark, pulsar, topic=topic), oracle)

    class Reading(Record):
        name = String()
        count = Integer()
        score = Double()

    avro_topic = f"{NS}/matrix-avro"
    send_with_schema(pulsar, avro_topic, AvroSchema(Reading),
                     [Reading(name=f"r{i}", count=i, score=i / 8) for i in range(12)], batching=True)
    want = [((v.name, v.count, v.score), where)
            for v, where in _schema_reader_values(pulsar, avro_topic, AvroSchema(Reading))]
    schema, rows = _typed_rows(spark, pulsar, avro_topic)
    assert schema.fieldNames()[:4] == ["name", "count", "score", "__key"]
    assert [((r["name"], r["count"], r["score"]), (r["__ledgerId"], r["__entryId"], r["__batchIndex"]))
            for r in rows] == want and len(want) == 12

    got: list[Any] = []
    query = (spark.readStream.format("bookkeeper").option("metadataServiceUri", pulsar.metadata_service_uri)
             .option("topic", avro_topic).load().writeStream
             .foreachBatch(lambda df, _batch: got.extend(df.select("name").collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        if ADMISSION_CONTROL:
            assert query.awaitTermination(300)
            assert query.exception() is None and sorted(r.name for r in got) == sorted(v[0][0] for v in want)
        else:
            with pytest.raises(Exception) as refused:
                query.awaitTermination(300)
            message = str(refused.value)
            assert "[BOOKKEEPER_SPARK_VERSION]" in message and "PySpark 4.2" in message
            assert f"this is PySpark {PYSPARK_VERSION}" in message and got == []
    finally:
        query.stop()
