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

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from bkspark.protocol.speedups import load_compiled
from bkspark.pulsar.entry import PulsarEntry, PulsarMessage, batch_payload
from bkspark.pulsar.proto.PulsarApi_pb2 import MessageIdData

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "PULSAR_SCHEMA_DDL", "PULSAR_COLUMNS", "message_id_bytes", "batch_message_ids", "MessageColumns", "arrow_schema",
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


def _varint(value: int) -> bytes:
    """Protobuf's varint of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@lru_cache(maxsize=64)
def _batch_suffixes(batch_size: int) -> tuple[bytes, ...]:
    """The batch index and size fields of each message of a batch of ``batch_size`` (field 4 ``batch_index``, then
    field 6 ``batch_size``), the same for every entry of that size: producers send batches of a few sizes."""
    size_field = b"\x30" + _varint(batch_size)
    return tuple(b"\x20" + _varint(index) + size_field for index in range(batch_size))


def batch_message_ids(ledger_id: int, entry_id: int, partition: int, indexes: "list[int] | range",
                      batch_size: int) -> list[bytes]:
    """:func:`message_id_bytes` of the messages ``indexes`` of one batch entry, at a byte concatenation each:
    the fields are written in field-number order (protobuf's serialization order), so the ledger, entry and
    partition make a prefix every message of the entry shares."""
    prefix = message_id_bytes(ledger_id, entry_id, partition)
    suffixes = _batch_suffixes(batch_size)
    if isinstance(indexes, range) and indexes == range(batch_size):
        return [prefix + suffix for suffix in suffixes]
    return [prefix + suffixes[index] for index in indexes]


def spark_schema() -> Any:
    """The Spark ``StructType`` of :data:`PULSAR_COLUMNS` (built without a session, unlike ``fromDDL``)."""
    from pyspark.sql import types as t

    simple = {"BINARY": t.BinaryType, "STRING": t.StringType, "TIMESTAMP": t.TimestampType, "BIGINT": t.LongType,
              "INT": t.IntegerType, "BOOLEAN": t.BooleanType}
    return t.StructType([
        t.StructField(name, t.MapType(t.StringType(), t.StringType()) if kind.startswith("MAP") else simple[kind]())
        for name, kind in PULSAR_COLUMNS
    ])


@lru_cache(maxsize=1)
def arrow_schema() -> "pa.Schema":
    """The Arrow schema Spark checks the yielded batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(), timezone="UTC")


def _empty_maps(count: int, map_type: "pa.DataType") -> "pa.Array":
    """``count`` empty maps, built from their offsets (all 0) instead of ``count`` Python lists."""
    import numpy as np
    import pyarrow as pa

    empty = pa.array([], pa.string())
    return pa.MapArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)), empty, empty).cast(map_type)


class MessageColumns:
    """Rows gathered column by column; :meth:`batch` turns them into one ``pyarrow.RecordBatch``.

    Messages added one at a time (:meth:`add`) go to Python lists; a batch entry the compiled split takes
    (:meth:`add_batch`) becomes Arrow arrays at once.  Both are kept in the order added."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._chunks: list[list["pa.Array"]] = []
        self._chunk_rows = 0
        self._clear_lists()
        self.value_bytes = 0

    def _clear_lists(self) -> None:
        self.value: list[Any] = []
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
        return self._chunk_rows + len(self.value)

    def add(
        self, message: PulsarMessage, topic: str, partition: int, ledger_id: int, entry_id: int,
        first_chunk: tuple[int, int] | None = None,
    ) -> None:
        value = message.value
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

    def add_batch(self, entry: PulsarEntry, topic: str, partition: int, ledger_id: int, entry_id: int) -> bool:
        """Every message of the batch entry ``entry`` (not a marker, chunk or encrypted entry), if the compiled
        split takes it; False, with nothing added, when it does not (the caller then adds the reference's
        :func:`~bkspark.pulsar.entry.entry_messages` one by one, which raises the precise error of a bad batch)."""
        import numpy as np
        import pyarrow as pa

        if _batch is None:
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
        self._flush_lists()
        types = [f.type for f in arrow_schema()]
        mask = None if validity is None else pa.py_buffer(np.packbits(np.frombuffer(validity, np.uint8),
                                                                      bitorder="little").tobytes())
        positions: "range | list[int]" = range(count) if indexes is None else indexes
        publish_time = md.publish_time * 1000
        event_default = md.event_time * 1000 if md.event_time > 0 else None
        if event_times is None:
            events = pa.repeat(pa.scalar(event_default, pa.int64()), kept)
        else:
            events = pa.array([event_default if e is None else (e * 1000 if e > 0 else None) for e in event_times],
                              pa.int64())
        if sequence_ids is None:
            sequences = pa.array(np.asarray(positions, np.int64) + md.sequence_id, pa.int64())
        elif None not in sequence_ids:  # what Pulsar's producers write: each message's own sequence id
            sequences = pa.array(sequence_ids, pa.int64())
        else:
            sequences = pa.array([md.sequence_id + i if s is None else s for i, s in zip(positions, sequence_ids)],
                                 pa.int64())
        self._chunks.append([
            pa.Array.from_buffers(types[0], kept, [mask, pa.py_buffer(offsets), pa.py_buffer(data)]),
            pa.nulls(kept, types[1]) if keys is None else pa.array(keys, types[1]),
            pa.repeat(pa.scalar(topic, types[2]), kept),
            pa.array(batch_message_ids(ledger_id, entry_id, partition, positions, count), types[3]),
            pa.repeat(pa.scalar(publish_time, pa.int64()), kept).cast(types[4]),
            events.cast(types[5]),
            _empty_maps(kept, types[6]) if props is None else pa.array(props, types[6]),
            pa.repeat(pa.scalar(md.producer_name, types[7]), kept),
            sequences,
            pa.repeat(pa.scalar(ledger_id, types[9]), kept),
            pa.repeat(pa.scalar(entry_id, types[10]), kept),
            pa.array(np.arange(count, dtype=np.int32) if indexes is None else np.asarray(indexes, np.int32),
                     types[11]),
            pa.repeat(pa.scalar(partition, types[12]), kept),
            pa.repeat(pa.scalar(False, types[13]), kept),
        ])
        self._chunk_rows += kept
        self.value_bytes += len(data)
        return True

    def _list_arrays(self) -> list["pa.Array"]:
        import pyarrow as pa

        types = [f.type for f in arrow_schema()]
        return [
            pa.array(self.value, type=types[0]),
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

    def _flush_lists(self) -> None:
        if self.value:
            rows = len(self.value)
            self._chunks.append(self._list_arrays())
            self._chunk_rows += rows
            self._clear_lists()

    def batch(self) -> "pa.RecordBatch":
        import pyarrow as pa

        schema = arrow_schema()
        if not self._chunks:
            return pa.RecordBatch.from_arrays(self._list_arrays(), schema=schema)
        self._flush_lists()
        if len(self._chunks) == 1:
            arrays = self._chunks[0]
        else:
            arrays = [pa.concat_arrays([chunk[i] for chunk in self._chunks]) for i in range(len(schema))]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
