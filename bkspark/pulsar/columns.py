"""Pulsar messages as Arrow columns, named as StreamNative's Pulsar connector for Spark names them.

``value``, ``__key``, ``__topic``, ``__messageId``, ``__publishTime``, ``__eventTime`` and ``__messageProperties``
are that connector's columns (so a query moved from it keeps working); bkspark adds what it has for free:
``__producerName``, ``__sequenceId``, ``__ledgerId``, ``__entryId``, ``__batchIndex``, ``__partition`` and
``__encrypted`` (docs/pulsar.md, "Columns").  ``__messageId`` is Pulsar's ``MessageId.toByteArray()``: a
serialized ``MessageIdData``, which ``MessageId.fromByteArray`` (or the Python client's ``MessageId.deserialize``)
turns back into an id.  Columns are gathered per message into lists and built once per batch.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from bkspark.pulsar.entry import PulsarMessage
from bkspark.pulsar.proto.PulsarApi_pb2 import MessageIdData

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "PULSAR_SCHEMA_DDL", "PULSAR_COLUMNS", "message_id_bytes", "MessageColumns", "arrow_schema", "spark_schema",
]

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
    from bkspark.datasource.spark_features import arrow_schema_utc

    return arrow_schema_utc(spark_schema())


class MessageColumns:
    """Rows gathered column by column; :meth:`batch` turns them into one ``pyarrow.RecordBatch``."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
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
        self.value_bytes = 0

    def __len__(self) -> int:
        return len(self.value)

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

    def batch(self) -> "pa.RecordBatch":
        import pyarrow as pa

        schema = arrow_schema()
        types = [f.type for f in schema]
        arrays = [
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
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
