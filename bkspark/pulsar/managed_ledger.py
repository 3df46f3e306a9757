"""A topic's managed-ledger znode (``/managed-ledgers/<tenant>/<namespace>/persistent/<encoded topic>``), parsed.

The znode holds a ``ManagedLedgerInfo`` (Pulsar's ``MLDataFormats.proto``): the topic's ledgers in order, with
entries, size and close time for each closed one; the last one listed is the ledger the broker writes (no
``entries`` yet).  When the broker's ``managedLedgerInfoCompressionType`` is set (and the info is above
``managedLedgerInfoCompressionThresholdInBytes``), the znode is instead::

    [0x4778][int32 size][ManagedLedgerInfoMetadata][ManagedLedgerInfo compressed as its metadata says]

which is read as Pulsar's ``MetaStoreImpl.parseManagedLedgerInfo`` reads it, falling back to the plain form when
the compressed one does not parse.  Pure functions over bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from bkspark.pulsar.compression import decompress
from bkspark.pulsar.errors import PulsarEntryError, PulsarMetadataError
from bkspark.pulsar.proto.MLDataFormats_pb2 import ManagedLedgerInfo, ManagedLedgerInfoMetadata

__all__ = [
    "MAGIC_MANAGED_INFO_METADATA", "TopicLedger", "parse_managed_ledger_info", "parse_metadata_proto", "topic_ledgers",
]

#: Pulsar's ``MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA``: a compressed info follows.
MAGIC_MANAGED_INFO_METADATA = 0x4778

_HEADER = struct.Struct(">Hi")
M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class TopicLedger:
    """One ledger of a topic, as the managed-ledger info lists it."""

    ledger_id: int
    #: Entries of a closed ledger; None for the ledger the broker still writes (the last one).
    entries: int | None
    size: int | None
    #: Milliseconds since the epoch when the ledger was closed (None while open).
    timestamp_ms: int | None
    #: ``offloadContext.complete``: its entries are in tiered storage (the bookies may no longer have them).
    offloaded: bool
    #: ``offloadContext.bookkeeperDeleted``: the bookies' copy is deleted.
    bookkeeper_deleted: bool


def parse_managed_ledger_info(data: bytes, *, path: str = "") -> ManagedLedgerInfo:
    """The ``ManagedLedgerInfo`` of a znode's bytes, plain or compressed; :class:`PulsarMetadataError` otherwise."""
    if len(data) >= _HEADER.size and _HEADER.unpack_from(data)[0] == MAGIC_MANAGED_INFO_METADATA:
        try:
            return _parse_compressed(data)
        except (DecodeError, PulsarEntryError, PulsarMetadataError, struct.error):
            pass  # Pulsar falls back to the plain form too
    return parse_metadata_proto(ManagedLedgerInfo, data, "managed-ledger info", path=path)


def parse_metadata_proto(cls: type[M], data: bytes, what: str, *, path: str = "") -> M:
    """A protobuf message Pulsar keeps as metadata (a znode, a schema entry), with every required field;
    :class:`PulsarMetadataError` naming ``what`` and ``path`` otherwise."""
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise PulsarMetadataError(f"{what} does not parse", path=path, error=str(exc)) from None
    if not message.IsInitialized():
        raise PulsarMetadataError(f"{what} lacks required fields", path=path)
    return message


def _parse_compressed(data: bytes) -> ManagedLedgerInfo:
    _, size = _HEADER.unpack_from(data)
    start = _HEADER.size
    if size < 0 or start + size > len(data):
        raise PulsarMetadataError("compressed managed-ledger info's header runs past the znode")
    header = ManagedLedgerInfoMetadata()
    header.ParseFromString(data[start : start + size])
    if not header.IsInitialized():
        raise PulsarMetadataError("ManagedLedgerInfoMetadata lacks required fields")
    raw = decompress(header.compressionType, memoryview(data)[start + size :], header.uncompressedSize)
    info = ManagedLedgerInfo()
    info.ParseFromString(bytes(raw))
    if not info.IsInitialized():
        raise PulsarMetadataError("compressed managed-ledger info lacks required fields")
    return info


def topic_ledgers(info: ManagedLedgerInfo) -> list[TopicLedger]:
    """The info's ledgers in the order the topic wrote them."""
    out = []
    for ledger in info.ledgerInfo:
        offload = ledger.offloadContext if ledger.HasField("offloadContext") else None
        out.append(
            TopicLedger(
                ledger_id=ledger.ledgerId,
                entries=ledger.entries if ledger.HasField("entries") else None,
                size=ledger.size if ledger.HasField("size") else None,
                timestamp_ms=ledger.timestamp if ledger.HasField("timestamp") and ledger.timestamp > 0 else None,
                offloaded=bool(offload is not None and offload.complete),
                bookkeeper_deleted=bool(offload is not None and offload.bookkeeperDeleted),
            )
        )
    return out
