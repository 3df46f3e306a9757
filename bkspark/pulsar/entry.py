"""One BookKeeper entry a Pulsar broker wrote, turned into the messages it holds (sans-IO).

The layout is Pulsar's (``Commands.serializeMetadataAndPayload`` and ``Commands.addBrokerEntryMetadata``)::

    [0x0e02][int32 size][BrokerEntryMetadata]            only with brokerEntryMetadataInterceptors
    [0x0e01][uint32 CRC32C][int32 size][MessageMetadata][payload]

All integers are big-endian.  The CRC32C covers everything after it (metadata size, metadata, payload); a producer
of protocol version < 6 wrote no magic and no checksum, which is read too.  The payload is compressed as
``MessageMetadata.compression`` says (:mod:`bkspark.pulsar.compression`), and when ``num_messages_in_batch`` is
present it is a batch: that many ``[int32 size][SingleMessageMetadata][payload_size bytes]`` records.

What a Pulsar consumer drops is dropped here too: marker entries (``marker_type``, the broker's own bookkeeping)
and ``compacted_out`` messages.  Encrypted payloads cannot be decompressed or split: the entry becomes one message
holding the payload as stored, flagged ``encrypted``.  Chunks of a large message are put back together by
:class:`ChunkAssembler` (docs/pulsar.md, "Chunked messages").
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Callable, Iterator

import crc32c as _crc32c
from google.protobuf.message import DecodeError

from bkspark.pulsar.compression import NONE, decompress
from bkspark.pulsar.errors import PulsarChecksumError, PulsarChunkError, PulsarEntryError
from bkspark.pulsar.proto.PulsarApi_pb2 import BrokerEntryMetadata, MessageMetadata, SingleMessageMetadata

__all__ = [
    "MAGIC_CRC32C",
    "MAGIC_BROKER_ENTRY_METADATA",
    "PulsarEntry",
    "PulsarMessage",
    "parse_entry",
    "entry_messages",
    "batch_payload",
    "single_value",
    "message_key",
    "message_properties",
    "ChunkAssembler",
]

#: Pulsar's ``Commands.magicCrc32c``: a CRC32C over the rest of the message follows.
MAGIC_CRC32C = 0x0E01
#: Pulsar's ``Commands.magicBrokerEntryMetadata``: broker entry metadata comes first.
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class PulsarEntry:
    """An entry's framing taken apart: its metadata, and its payload as stored (maybe compressed)."""

    metadata: MessageMetadata
    payload: memoryview
    broker_metadata: BrokerEntryMetadata | None = None

    @property
    def is_batch(self) -> bool:
        return self.metadata.HasField("num_messages_in_batch")

    @property
    def is_marker(self) -> bool:
        return self.metadata.HasField("marker_type")

    @property
    def is_encrypted(self) -> bool:
        return len(self.metadata.encryption_keys) > 0

    @property
    def is_chunk(self) -> bool:
        md = self.metadata
        return md.HasField("uuid") and md.HasField("num_chunks_from_msg") and md.num_chunks_from_msg > 1


@dataclass(frozen=True)
class PulsarMessage:
    """One message as a Pulsar consumer gets it; ``batch_index`` is -1 and ``batch_size`` 0 outside a batch."""

    value: bytes | memoryview | None
    key: bytes | None
    properties: tuple[tuple[str, str], ...]
    publish_time: int
    event_time: int
    producer_name: str
    sequence_id: int
    batch_index: int = -1
    batch_size: int = 0
    encrypted: bool = False
    schema_version: bytes | None = None


def _take(view: memoryview, offset: int, size: int, what: str) -> memoryview:
    if size < 0 or offset + size > len(view):
        raise PulsarEntryError(f"{what} of {size} bytes at offset {offset} runs past the entry's {len(view)} bytes")
    return view[offset : offset + size]


def _int32(view: memoryview, offset: int, what: str) -> int:
    return _I32.unpack_from(_take(view, offset, 4, what))[0]


def parse_entry(data: bytes | bytearray | memoryview, *, verify_checksum: bool = True) -> PulsarEntry:
    """Take an entry's framing apart; :class:`PulsarChecksumError` when its CRC32C does not match,
    :class:`PulsarEntryError` when it is not framed as Pulsar frames messages."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    offset = 0
    broker: BrokerEntryMetadata | None = None
    if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        size = _int32(view, 2, "broker entry metadata size")
        broker = _parse(BrokerEntryMetadata, _take(view, 6, size, "broker entry metadata"), "BrokerEntryMetadata")
        offset = 6 + size
    if len(view) >= offset + 2 and _U16.unpack_from(view, offset)[0] == MAGIC_CRC32C:
        checksum = _U32.unpack_from(_take(view, offset + 2, 4, "checksum"))[0]
        offset += 6
        if verify_checksum:
            actual = _crc32c.crc32c(view[offset:])
            if actual != checksum:
                raise PulsarChecksumError(
                    f"CRC32C of the message is {actual:#010x}, the entry says {checksum:#010x}"
                )
    size = _int32(view, offset, "metadata size")
    metadata = _parse(MessageMetadata, _take(view, offset + 4, size, "message metadata"), "MessageMetadata")
    return PulsarEntry(metadata=metadata, payload=view[offset + 4 + size :], broker_metadata=broker)


def _parse(cls: type, data: memoryview, what: str):  # type: ignore[no-untyped-def]
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise PulsarEntryError(f"{what} does not parse: {exc}") from None
    if not message.IsInitialized():
        raise PulsarEntryError(f"{what} lacks required fields: {', '.join(message.FindInitializationErrors())}")
    return message


def message_key(holder: MessageMetadata | SingleMessageMetadata) -> bytes | None:
    """The message key as bytes (``getKeyBytes``): base64-decoded when the producer set a byte key."""
    if not holder.HasField("partition_key") or holder.null_partition_key:
        return None
    if holder.partition_key_b64_encoded:
        try:
            return base64.b64decode(holder.partition_key, validate=True)
        except ValueError:
            raise PulsarEntryError(f"partition key {holder.partition_key!r} is flagged base64 but is not") from None
    return holder.partition_key.encode("utf-8")


def message_properties(holder: MessageMetadata | SingleMessageMetadata) -> tuple[tuple[str, str], ...]:
    properties = holder.properties
    if not properties:  # most messages have none: no generator for them
        return ()
    return tuple((kv.key, kv.value) for kv in properties)


def _schema_version(md: MessageMetadata) -> bytes | None:
    return md.schema_version if md.HasField("schema_version") else None


def _single(entry: PulsarEntry, value: bytes | memoryview | None, encrypted: bool = False) -> PulsarMessage:
    md = entry.metadata
    return PulsarMessage(
        value=None if md.null_value else value,
        key=message_key(md),
        properties=message_properties(md),
        publish_time=md.publish_time,
        event_time=md.event_time,
        producer_name=md.producer_name,
        sequence_id=md.sequence_id,
        encrypted=encrypted,
        schema_version=_schema_version(md),
    )


def _uncompressed(entry: PulsarEntry, payload: bytes | memoryview | None = None) -> bytes | memoryview:
    md = entry.metadata
    data = entry.payload if payload is None else payload
    if md.compression == NONE:
        return data
    return decompress(md.compression, data, md.uncompressed_size)


def single_value(entry: PulsarEntry) -> bytes | memoryview | None:
    """The value of an entry that holds one plain message (not a batch, chunk, marker or encrypted entry): its
    payload decompressed, None for a null value; what :func:`entry_messages` gives as that message's value, taken
    without the message (``MessageColumns.add_single``, docs/pulsar.md, "Speed")."""
    payload = _uncompressed(entry)  # first, as entry_messages does: a payload that does not decompress is an error
    return None if entry.metadata.null_value else payload


def batch_payload(entry: PulsarEntry) -> bytes | memoryview:
    """A batch entry's records, decompressed: what :func:`entry_messages` splits, and what the compiled split
    (bkspark/pulsar/_batch.c, used by :class:`bkspark.pulsar.columns.MessageColumns`) takes."""
    return _uncompressed(entry)


def entry_messages(entry: PulsarEntry) -> list[PulsarMessage]:
    """The messages a consumer gets from an entry that is not a chunk: none for a marker, one for a plain or
    encrypted entry, the batch's messages less the ``compacted_out`` ones for a batch."""
    if entry.is_marker:
        return []
    if entry.is_chunk:
        raise PulsarChunkError("a chunk of a chunked message goes to a ChunkAssembler, not entry_messages")
    if entry.is_encrypted:
        return [_single(entry, bytes(entry.payload), encrypted=True)]
    payload = _uncompressed(entry)
    if not entry.is_batch:
        return [_single(entry, payload)]
    return list(_batch(entry, memoryview(payload)))


def _batch(entry: PulsarEntry, payload: memoryview) -> Iterator[PulsarMessage]:
    md = entry.metadata
    count = md.num_messages_in_batch
    schema_version = _schema_version(md)
    offset = 0
    for index in range(count):
        size = _int32(payload, offset, f"metadata size of batch message {index}")
        smm = _parse(SingleMessageMetadata, _take(payload, offset + 4, size, "single message metadata"),
                     "SingleMessageMetadata")
        offset += 4 + size
        value = _take(payload, offset, smm.payload_size, f"payload of batch message {index}")
        offset += smm.payload_size
        if smm.compacted_out:
            continue
        yield PulsarMessage(
            value=None if smm.null_value else value,
            key=message_key(smm),
            properties=message_properties(smm),
            publish_time=md.publish_time,
            event_time=smm.event_time if smm.HasField("event_time") else md.event_time,
            producer_name=md.producer_name,
            sequence_id=smm.sequence_id if smm.HasField("sequence_id") else md.sequence_id + index,
            batch_index=index,
            batch_size=count,
            schema_version=schema_version,
        )
    if offset != len(payload):
        raise PulsarEntryError(f"a batch of {count} messages holds {len(payload)} bytes, its records {offset}")


@dataclass
class _PendingChunks:
    #: Where chunk 0 is; None while the chunks before ``first_chunk_id`` are before the scan.
    first_position: tuple[int, int] | None
    parts: list[bytes]
    first_chunk_id: int = 0


#: How a scan fetches the chunks of a message that lie before it: ``(producer, uuid, count)`` -> (chunk 0's
#: position, the payloads of chunks ``0..count-1``), or None when they are not there.
EarlierChunks = Callable[[str, str, int], "tuple[tuple[int, int], list[bytes]] | None"]


class ChunkAssembler:
    """Puts the chunks of large messages back together, in the order they are read (Pulsar's consumer does the
    same with ``ChunkedMessageCtx``): chunks of several producers may interleave; each message is keyed by its
    producer and ``uuid``.

    A message belongs to the scan that holds its *last* chunk, where Pulsar's message id puts it (docs/pulsar.md,
    "Chunked messages"): its chunks before the scan's start are fetched through ``earlier`` (the caller reads back
    for them), and a message whose last chunk is past the scan's end is left to the scan that holds it
    (:attr:`pending` names those).  So a run of scans that cut a topic anywhere gives every message once."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], _PendingChunks] = {}

    def add(
        self, entry: PulsarEntry, position: tuple[int, int], *, earlier: EarlierChunks | None = None
    ) -> tuple[PulsarMessage, tuple[int, int]] | None:
        """Feed one chunk (at ``position`` = (ledger, entry)); the whole message and its first chunk's position
        when this was its last chunk, else None."""
        md = entry.metadata
        key = (md.producer_name, md.uuid)
        pending = self._pending.get(key)
        if md.chunk_id == 0:
            pending = self._pending[key] = _PendingChunks(position, [])
        elif pending is None:
            pending = self._pending[key] = _PendingChunks(None, [], md.chunk_id)
        elif pending.first_chunk_id + len(pending.parts) != md.chunk_id:
            self._pending.pop(key)
            raise PulsarChunkError(
                f"chunk {md.chunk_id} of {md.num_chunks_from_msg} of message uuid={md.uuid!r} at ledger "
                f"{position[0]} entry {position[1]} follows chunk {pending.first_chunk_id + len(pending.parts) - 1} "
                "(the chunks are out of order)"
            )
        pending.parts.append(bytes(entry.payload))
        if md.chunk_id + 1 < md.num_chunks_from_msg:
            return None
        del self._pending[key]
        first_position, parts = pending.first_position, pending.parts
        if first_position is None:
            found = None if earlier is None else earlier(md.producer_name, md.uuid, pending.first_chunk_id)
            if found is None:
                raise PulsarChunkError(
                    f"chunk {md.chunk_id} of {md.num_chunks_from_msg} of message uuid={md.uuid!r} at ledger "
                    f"{position[0]} entry {position[1]} without the chunks before it (deleted by retention, or "
                    "out of order)"
                )
            first_position, before = found
            parts = [*before, *parts]
        whole = _uncompressed(entry, b"".join(parts))
        return _single(entry, whole), first_position

    @property
    def pending(self) -> list[tuple[str, str, tuple[int, int] | None]]:
        """(producer, uuid, first chunk's position or None) of every message whose last chunk was not seen."""
        return [(producer, uuid, p.first_position) for (producer, uuid), p in self._pending.items()]
