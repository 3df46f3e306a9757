"""Errors of the Pulsar reader: each says whose fault it is (bytes Pulsar did not write as expected, metadata
we cannot use, or an option) and keeps the flags of the bkspark error it extends (bkspark/errors.py)."""

from __future__ import annotations

from bkspark.errors import BadMetadataError, CorruptEntryError, InvalidOptionError, NoSuchLedgerMetadataError

__all__ = [
    "PulsarEntryError",
    "PulsarChecksumError",
    "PulsarChunkError",
    "PulsarMetadataError",
    "PulsarTopicNotFoundError",
    "PulsarDataLossError",
    "PulsarSchemaError",
]


class PulsarEntryError(CorruptEntryError):
    """An entry of a topic's ledger is not a Pulsar message as Pulsar writes it (magic, sizes, metadata,
    compression): reading it again gives the same bytes."""


class PulsarChecksumError(PulsarEntryError):
    """The CRC32C a Pulsar producer wrote over the message's metadata and payload does not match."""


class PulsarChunkError(PulsarEntryError):
    """A chunked message whose chunks are not all in the scan (docs/pulsar.md, "Chunked messages")."""


class PulsarMetadataError(BadMetadataError):
    """Pulsar metadata that cannot be used: a managed-ledger znode that does not parse, a partitioned-topic
    znode that is not Pulsar's JSON, or a metadata store other than ZooKeeper."""


class PulsarTopicNotFoundError(InvalidOptionError):
    """A topic named by the ``topic``/``topics`` options has no managed ledger (and is no partitioned topic)."""


class PulsarDataLossError(NoSuchLedgerMetadataError):
    """A ledger of a topic cannot be read from the bookies any more (deleted by retention, or offloaded to tiered
    storage): raised when ``failOnDataLoss`` is true (the default)."""


class PulsarSchemaError(PulsarMetadataError):
    """A topic's schema (Pulsar's schema registry) that cannot type its rows: a type bkspark does not decode, topics
    of one read with different schemas, a message of a version the registry does not have, or a value that does not
    decode (docs/pulsar.md, "Schemas"); ``.option('schema', 'raw')`` reads such topics as bytes."""
