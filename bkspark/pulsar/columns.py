"""Pulsar messages as Arrow columns, named as StreamNative's Pulsar connector for Spark names them.

``value``, ``__key``, ``__topic``, ``__messageId``, ``__publishTime``, ``__eventTime`` and ``__messageProperties``
are that connector's columns (so a query moved from it keeps working); bkspark adds what it has for free:
``__producerName``, ``__sequenceId``, ``__ledgerId``, ``__entryId``, ``__batchIndex``, ``__partition`` and
``__encrypted`` (docs/pulsar.md, "Columns").  ``__messageId`` is Pulsar's ``MessageId.toByteArray()``: a
serialized ``MessageIdData``, which ``MessageId.fromByteArray`` (or the Python client's ``MessageId.deserialize``)
turns back into an id.  Columns are gathered per message into lists, or per batch entry straight into Arrow arrays
when the compiled split of bkspark/pulsar/_batch.c takes the batch (docs/pulsar.md, "Speed"), and built once per
Arrow batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from bkspark.protocol.speedups import load_compiled
from bkspark.protocol.values import encode_varint
from bkspark.pulsar.entry import (
    PulsarEntry, PulsarMessage, batch_payload, message_key, message_properties, single_value,
)
from bkspark.pulsar.proto.PulsarApi_pb2 import MessageIdData

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from bkspark.pulsar.schemas import ValueDecoder

__all__ = [
    "PULSAR_SCHEMA_DDL", "PULSAR_COLUMNS", "message_id_bytes", "entry_message_id", "batch_message_ids", "MessageColumns", "arrow_schema",
    "spark_schema",
]

#: The compiled batch split, or None (not built, or ``BKSPARK_NO_EXTENSIONS``): then every batch takes the
#: pure-Python reference of :func:`bkspark.pulsar.entry.entry_messages`.
_batch = load_compiled("bkspark.pulsar._batch")

#: Column names and Spark types, in order.
PULSAR_COLUMNS = (
    ("value", "BINARY"),
    ("__key", "BINARY"),
    ("__topic", "STRING"),
    ("__messageId", "BINARY"),
    ("__publishTime", "TIMESTAMP"),
    ("__eventTime", "TIMESTAMP"),
    ("__messageProperties", "MAP<STRING, STRING>"),
    ("__producerName", "STRING"),
    ("__sequenceId", "BIGINT"),
    ("__ledgerId", "BIGINT"),
    ("__entryId", "BIGINT"),
    ("__batchIndex", "INT"),
    ("__partition", "INT"),
    ("__encrypted", "BOOLEAN"),
)
PULSAR_SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in PULSAR_COLUMNS)


def message_id_bytes(
    ledger_id: int, entry_id: int, partition: int, batch_index: int = -1, batch_size: int = 0,
    first_chunk: tuple[int, int] | None = None,
) -> bytes:
    """Pulsar's ``MessageId.toByteArray()`` of a message: its ledger and entry, the partition when the topic is
    partitioned, the batch index and size inside a batch, the first chunk's id for a chunked message."""
    data = MessageIdData(ledgerId=ledger_id, entryId=entry_id)
    if partition >= 0:
        data.partition = partition
    if batch_index >= 0:
        data.batch_index = batch_index
        data.batch_size = batch_size
    if first_chunk is not None:
        data.first_chunk_message_id.ledgerId = first_chunk[0]
        data.first_chunk_message_id.entryId = first_chunk[1]
        if partition >= 0:
            data.first_chunk_message_id.partition = partition
    return data.SerializeToString()


@lru_cache(maxsize=256)
def _ledger_field(ledger_id: int) -> bytes:
    return b"\x08" + encode_varint(ledger_id)  # field 1 ledgerId, a varint


@lru_cache(maxsize=256)
def _partition_field(partition: int) -> bytes:
    return b"\x18" + encode_varint(partition) if partition >= 0 else b""  # field 3 partition


def entry_message_id(ledger_id: int, entry_id: int, partition: int) -> bytes:
    """:func:`message_id_bytes` of a message outside a batch (``ledger_id``, ``entry_id``, ``partition``), at a byte
    concatenation instead of a protobuf message: the fields in field-number order, as protobuf serializes them."""
    return _ledger_field(ledger_id) + b"\x10" + encode_varint(entry_id) + _partition_field(partition)


@lru_cache(maxsize=64)
def _batch_suffixes(batch_size: int) -> tuple[bytes, ...]:
    """The batch index and size fields of each message of a batch of ``batch_size`` (field 4 ``batch_index``, then
    field 6 ``batch_size``), the same for every entry of that size: producers send batches of a few sizes."""
    size_field = b"\x30" + encode_varint(batch_size)
    return tuple(b"\x20" + encode_varint(index) + size_field for index in range(batch_size))


def batch_message_ids(ledger_id: int, entry_id: int, partition: int, indexes: "list[int] | range",
                      batch_size: int) -> list[bytes]:
    """:func:`message_id_bytes` of the messages ``indexes`` of one batch entry, at a byte concatenation each:
    the fields are written in field-number order (protobuf's serialization order), so the ledger, entry and
    partition make a prefix every message of the entry shares."""
    prefix = entry_message_id(ledger_id, entry_id, partition)
    suffixes = _batch_suffixes(batch_size)
    if isinstance(indexes, range) and indexes == range(batch_size):
        return [prefix + suffix for suffix in suffixes]
    return [prefix + suffixes[index] for index in indexes]


def spark_schema(decoder: "ValueDecoder | None" = None) -> Any:
    """The Spark ``StructType`` of :data:`PULSAR_COLUMNS` (built without a session, unlike ``fromDDL``); with a
    schema's ``decoder``, its typed columns first in place of ``value`` (docs/pulsar.md, "Schemas")."""
    from pyspark.sql import types as t

    simple = {"BINARY": t.BinaryType, "STRING": t.StringType, "TIMESTAMP": t.TimestampType, "BIGINT": t.LongType,
              "INT": t.IntegerType, "BOOLEAN": t.BooleanType}
    meta = [
        t.StructField(name, t.MapType(t.StringType(), t.StringType()) if kind.startswith("MAP") else simple[kind]())
        for name, kind in PULSAR_COLUMNS
    ]
    if decoder is None:
        return t.StructType(meta)
    return t.StructType([t.StructField(name, kind) for name, kind in decoder.fields] + meta[1:])


@lru_cache(maxsize=1)
def arrow_schema() -> "pa.Schema":
    """The Arrow schema Spark checks the yielded batches against."""
    return _arrow_schema(None)


def _arrow_schema(decoder: "ValueDecoder | None") -> "pa.Schema":
    from bkspark.spark_arrow import arrow_schema_utc

    return arrow_schema_utc(spark_schema(decoder))


#: The largest time in ms whose µs fit the int64 of an Arrow timestamp, and the largest sequence id (a Java long):
#: a message past either is malformed (its fields are uint64 in Pulsar's protobuf).
MAX_TIME_MS = (2**63 - 1) // 1000
MAX_SEQUENCE_ID = 2**63 - 1


def _check_ranges(ledger_id: int, entry_id: int, times: "list[int]", sequence_id: int) -> None:
    """A :class:`PulsarEntryError` naming the entry when a time or sequence id cannot be a column value (rather
    than Arrow's untyped overflow when the batch is built)."""
    from bkspark.pulsar.errors import PulsarEntryError

    if max(times) > MAX_TIME_MS or sequence_id > MAX_SEQUENCE_ID:
        raise PulsarEntryError(
            f"a message of ledger {ledger_id} entry {entry_id} has a publish or event time past {MAX_TIME_MS} ms "
            f"({max(times)}) or a sequence id past 2^63 - 1 ({sequence_id})"
        )


def _empty_maps(count: int, map_type: "pa.DataType") -> "pa.Array":
    """``count`` empty maps, built from their offsets (all 0) instead of ``count`` Python lists."""
    import numpy as np
    import pyarrow as pa

    empty = pa.array([], pa.string())
    return pa.MapArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)), empty, empty).cast(map_type)


@dataclass
class _Split:
    """One batch entry as the compiled split gave it, with what its messages share (built into arrays later,
    together with the entries around it, by :class:`_SplitRun`)."""

    kept: int
    count: int
    data: bytes
    offsets: bytes
    validity: bytes | None
    keys: list[bytes | None] | None
    properties: list[list[tuple[str, str]]] | None
    event_times: list[int | None] | None
    sequence_ids: list[int | None] | None
    indexes: list[int] | None
    topic: str
    partition: int
    ledger_id: int
    entry_id: int
    publish_time: int
    producer: str
    event_time: int
    sequence_id: int


def _sequence_ids(split: _Split, positions: Any) -> Any:
    """The entry's messages' sequence ids: each one's own where it has one (Pulsar's producers write one for every
    message), else the entry's plus the message's batch index (what Pulsar's consumer gives)."""
    import numpy as np

    if split.sequence_ids is None:
        return positions + split.sequence_id
    if None not in split.sequence_ids:
        return np.array(split.sequence_ids, np.int64)
    return np.array([split.sequence_id + i if q is None else q for i, q in zip(positions.tolist(), split.sequence_ids)],
                    np.int64)


class _SplitRun:
    """Consecutive batch entries of the compiled split, turned into one set of Arrow arrays with a few calls per
    column for the whole run (not per entry): values joined with their offsets, shared fields repeated by numpy,
    strings taken from the run's distinct ones."""

    def __init__(self) -> None:
        self.splits: list[_Split] = []
        self.rows = 0

    def arrays(self, types: list["pa.DataType"]) -> list["pa.Array"]:
        import numpy as np
        import pyarrow as pa

        splits, rows = self.splits, self.rows
        counts = np.fromiter((s.kept for s in splits), np.int64, len(splits))
        offsets = [np.frombuffer(s.offsets, np.int32)[1:] for s in splits]
        sizes = np.fromiter((len(s.data) for s in splits), np.int64, len(splits))
        bases = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int32)
        value_offsets = np.concatenate([np.zeros(1, np.int32), *(o + b for o, b in zip(offsets, bases))])
        mask = None
        if any(s.validity is not None for s in splits):
            valid = np.concatenate([np.frombuffer(s.validity, np.uint8) if s.validity is not None
                                    else np.ones(s.kept, np.uint8) for s in splits])
            mask = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        values = pa.Array.from_buffers(types[0], rows, [mask, pa.py_buffer(value_offsets.tobytes()),
                                                        pa.py_buffer(b"".join(s.data for s in splits))])
        if all(s.keys is None for s in splits):
            keys = pa.nulls(rows, types[1])
        else:
            key_list: list[bytes | None] = []
            for s in splits:
                key_list.extend(s.keys if s.keys is not None else [None] * s.kept)
            keys = pa.array(key_list, types[1])
        ids: list[bytes] = []
        for s in splits:
            ids.extend(batch_message_ids(s.ledger_id, s.entry_id, s.partition,
                                         range(s.count) if s.indexes is None else s.indexes, s.count))
        events: list[int | None] = []
        for s in splits:
            default = s.event_time * 1000 if s.event_time > 0 else None
            if s.event_times is None:
                events.extend([default] * s.kept)
            else:
                events.extend(default if e is None else (e * 1000 if e > 0 else None) for e in s.event_times)
        if all(s.properties is None for s in splits):
            properties = _empty_maps(rows, types[6])
        else:
            property_list: list[list[tuple[str, str]]] = []
            for s in splits:
                property_list.extend(s.properties if s.properties is not None else [[]] * s.kept)
            properties = pa.array(property_list, types[6])
        positions = [np.arange(s.count, dtype=np.int64) if s.indexes is None else np.asarray(s.indexes, np.int64)
                     for s in splits]
        sequences = np.concatenate([_sequence_ids(s, p) for s, p in zip(splits, positions)])

        def repeated(values: list[Any], kind: Any) -> Any:
            return np.repeat(np.asarray(values, kind), counts)

        def strings(values: list[str], arrow_type: "pa.DataType") -> "pa.Array":
            distinct = sorted(set(values))
            index = {v: i for i, v in enumerate(distinct)}
            return pa.array(distinct, arrow_type).take(pa.array(repeated([index[v] for v in values], np.int32)))

        return [
            values,
            keys,
            strings([s.topic for s in splits], types[2]),
            pa.array(ids, types[3]),
            pa.array(repeated([s.publish_time * 1000 for s in splits], np.int64)).cast(types[4]),
            pa.array(events, pa.int64()).cast(types[5]),
            properties,
            strings([s.producer for s in splits], types[7]),
            pa.array(sequences, types[8]),
            pa.array(repeated([s.ledger_id for s in splits], np.int64), types[9]),
            pa.array(repeated([s.entry_id for s in splits], np.int64), types[10]),
            pa.array(np.concatenate(positions).astype(np.int32), types[11]),
            pa.array(repeated([s.partition for s in splits], np.int32), types[12]),
            pa.array(np.zeros(rows, np.bool_), types[13]),
        ]


class MessageColumns:
    """Rows gathered column by column; :meth:`batch` turns them into one ``pyarrow.RecordBatch``.

    Messages added one at a time (:meth:`add`) go to Python lists; batch entries the compiled split takes
    (:meth:`add_batch`) are kept as it gave them and built into arrays a run of entries at a time.  Rows keep the
    order they were added in.  With a schema's ``decoder``, ``value`` is decoded into its typed columns
    (docs/pulsar.md, "Schemas"), message by message."""

    def __init__(self, decoder: "ValueDecoder | None" = None) -> None:
        self.decoder = decoder
        self.schema = arrow_schema() if decoder is None else _arrow_schema(decoder)
        self.clear()

    def clear(self) -> None:
        #: Arrays of the parts already closed, in order: runs of split entries and runs of single messages.
        self._done: list[list["pa.Array"]] = []
        self._done_rows = 0
        self._run: _SplitRun | None = None
        self._clear_lists()
        self.value_bytes = 0

    def _clear_lists(self) -> None:
        self.value: list[Any] = []
        self.typed: list[list[Any]] = [[] for _ in (self.decoder.fields if self.decoder else ())]
        self.key: list[bytes | None] = []
        self.topic: list[str] = []
        self.message_id: list[bytes] = []
        self.publish_time: list[int] = []
        self.event_time: list[int | None] = []
        self.properties: list[list[tuple[str, str]]] = []
        self.producer: list[str] = []
        self.sequence_id: list[int] = []
        self.ledger_id: list[int] = []
        self.entry_id: list[int] = []
        self.batch_index: list[int] = []
        self.partition: list[int] = []
        self.encrypted: list[bool] = []

    def __len__(self) -> int:
        return self._done_rows + (self._run.rows if self._run is not None else 0) + len(self.value)

    def add(
        self, message: PulsarMessage, topic: str, partition: int, ledger_id: int, entry_id: int,
        first_chunk: tuple[int, int] | None = None,
    ) -> None:
        self._close_run()
        _check_ranges(ledger_id, entry_id, [message.publish_time, message.event_time], message.sequence_id)
        value = message.value
        if self.decoder is not None:
            where = f"the message at ledger {ledger_id} entry {entry_id} batch index {message.batch_index} of {topic}"
            for column, item in zip(self.typed, self.decoder.decode(value, message.schema_version, where, topic)):
                column.append(item)
        self.value.append(None if value is None else bytes(value))
        self.value_bytes += 0 if value is None else len(value)
        self.key.append(message.key)
        self.topic.append(topic)
        self.message_id.append(
            message_id_bytes(ledger_id, entry_id, partition, message.batch_index, message.batch_size, first_chunk)
        )
        self.publish_time.append(message.publish_time * 1000)
        self.event_time.append(message.event_time * 1000 if message.event_time > 0 else None)
        self.properties.append(list(message.properties))
        self.producer.append(message.producer_name)
        self.sequence_id.append(message.sequence_id)
        self.ledger_id.append(ledger_id)
        self.entry_id.append(entry_id)
        self.batch_index.append(message.batch_index)
        self.partition.append(partition)
        self.encrypted.append(message.encrypted)

    def add_single(self, entry: PulsarEntry, topic: str, partition: int, ledger_id: int, entry_id: int) -> bool:
        """The one message of an entry that is not a batch, chunk, marker or encrypted entry (a producer's entry
        with batching off), added straight from the entry's metadata: the rows of :meth:`add` of
        :func:`~bkspark.pulsar.entry.entry_messages`, without a message object, a protobuf message id or a range
        check per message when every field is in range.  False, with nothing added, for any other entry or with a
        schema's decoder (the caller then adds the reference's messages)."""
        md = entry.metadata
        if (self.decoder is not None or md.HasField("num_messages_in_batch") or md.HasField("marker_type")
                or len(md.encryption_keys) > 0 or entry.is_chunk):
            return False
        value = single_value(entry)
        publish_time, event_time, sequence_id = md.publish_time, md.event_time, md.sequence_id
        if publish_time > MAX_TIME_MS or event_time > MAX_TIME_MS or sequence_id > MAX_SEQUENCE_ID:
            _check_ranges(ledger_id, entry_id, [publish_time, event_time], sequence_id)
        self._close_run()
        self.value.append(None if value is None else bytes(value))
        self.value_bytes += 0 if value is None else len(value)
        self.key.append(message_key(md))
        self.topic.append(topic)
        self.message_id.append(entry_message_id(ledger_id, entry_id, partition))
        self.publish_time.append(publish_time * 1000)
        self.event_time.append(event_time * 1000 if event_time > 0 else None)
        self.properties.append(list(message_properties(md)))
        self.producer.append(md.producer_name)
        self.sequence_id.append(sequence_id)
        self.ledger_id.append(ledger_id)
        self.entry_id.append(entry_id)
        self.batch_index.append(-1)
        self.partition.append(partition)
        self.encrypted.append(False)
        return True

    def add_batch(self, entry: PulsarEntry, topic: str, partition: int, ledger_id: int, entry_id: int) -> bool:
        """Every message of the batch entry ``entry`` (not a marker, chunk or encrypted entry), if the compiled
        split takes it; False, with nothing added, when it does not (the caller then adds the reference's
        :func:`~bkspark.pulsar.entry.entry_messages` one by one, which raises the precise error of a bad batch)."""
        if _batch is None or self.decoder is not None:
            return False
        md = entry.metadata
        count = md.num_messages_in_batch
        split = _batch.split_batch(batch_payload(entry), count)
        if split is None:
            return False
        indexes, data, offsets, validity, keys, props, event_times, sequence_ids = split
        kept = count if indexes is None else len(indexes)
        if kept == 0:
            return True
        times = [md.publish_time, md.event_time]
        if event_times is not None:
            times.append(max((e for e in event_times if e is not None), default=0))
        if sequence_ids is None:
            largest_sequence = md.sequence_id + count - 1
        elif None not in sequence_ids:
            largest_sequence = max(sequence_ids)
        else:  # the message's own, else the entry's plus its batch index: as _sequence_ids makes them
            positions = range(count) if indexes is None else indexes
            largest_sequence = max(md.sequence_id + i if q is None else q for i, q in zip(positions, sequence_ids))
        _check_ranges(ledger_id, entry_id, times, largest_sequence)
        self._close_lists()
        if self._run is None:
            self._run = _SplitRun()
        self._run.splits.append(_Split(
            kept, count, data, offsets, validity, keys, props, event_times, sequence_ids, indexes, topic, partition,
            ledger_id, entry_id, md.publish_time, md.producer_name, md.event_time, md.sequence_id,
        ))
        self._run.rows += kept
        self.value_bytes += len(data)
        return True

    def _list_arrays(self) -> list["pa.Array"]:
        import pyarrow as pa

        typed = len(self.typed)
        types = [f.type for f in self.schema][max(typed - 1, 0):]
        return [pa.array(values, type=f.type) for values, f in zip(self.typed, self.schema)] + (
            [] if typed else [pa.array(self.value, type=types[0])]) + [
            pa.array(self.key, type=types[1]),
            pa.array(self.topic, type=types[2]),
            pa.array(self.message_id, type=types[3]),
            pa.array(self.publish_time, type=pa.int64()).cast(types[4]),
            pa.array(self.event_time, type=pa.int64()).cast(types[5]),
            pa.array(self.properties, type=types[6]),
            pa.array(self.producer, type=types[7]),
            pa.array(self.sequence_id, type=types[8]),
            pa.array(self.ledger_id, type=types[9]),
            pa.array(self.entry_id, type=types[10]),
            pa.array(self.batch_index, type=types[11]),
            pa.array(self.partition, type=types[12]),
            pa.array(self.encrypted, type=types[13]),
        ]

    def _close_lists(self) -> None:
        if self.value:
            self._done.append(self._list_arrays())
            self._done_rows += len(self.value)
            self._clear_lists()

    def _close_run(self) -> None:
        if self._run is not None:
            self._done.append(self._run.arrays([f.type for f in arrow_schema()]))
            self._done_rows += self._run.rows
            self._run = None

    def batch(self) -> "pa.RecordBatch":
        import pyarrow as pa

        schema = self.schema
        self._close_run()
        if not self._done:
            return pa.RecordBatch.from_arrays(self._list_arrays(), schema=schema)
        self._close_lists()
        if len(self._done) == 1:
            arrays = self._done[0]
        else:
            arrays = [pa.concat_arrays([part[i] for part in self._done]) for i in range(len(schema))]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
