"""Bookie configuration, read from a BookKeeper-style ``bk_server.conf``: by the bookie and by the shell.

Key names are Apache BookKeeper's own (``bookiePort``, ``journalDirectories``,
``metadataServiceUri`` ...) so an operator can reuse what they know; other keys
are kept in :attr:`BookieConfig.extra`, where the TLS, SASL and ZooKeeper security
settings are read, and any key nobody reads is warned about at start
(:mod:`bkspark.confkeys`).  The file format
is the Java ``PropertiesConfiguration`` subset bookie configs use: ``key=value``
(or ``key: value``) lines, ``#``/``!`` comments, comma-separated lists.  Keys and
values are read by the shared rules of :mod:`bkspark.config.typed` (any case, one boolean rule set).

It lives under ``bkspark`` (not ``bookie_server``) so that ``bkspark shell bookieformat`` reads a bookie's
directories without importing the server; the bookie imports it from here too.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bkspark.config.typed import KeyIndex, coerce
from bkspark.errors import InvalidOptionError
from bkspark.properties import parse_properties as parse_conf_text  # the one properties parser

__all__ = ["BookieConfig", "parse_conf_text", "load_conf"]


@dataclass
class BookieConfig:
    """Settings of one bookie (BookKeeper key names, Python attribute names)."""

    bookiePort: int = 3181
    bookieId: str | None = None
    advertisedAddress: str | None = None
    listeningInterface: str | None = None
    bindAddress: str = "0.0.0.0"
    useHostNameAsBookieID: bool = False
    useShortHostName: bool = False
    allowLoopback: bool = False
    metadataServiceUri: str | None = None
    zkTimeout: int = 10000
    journalDirectories: list[str] = field(default_factory=lambda: ["/tmp/bk-txn"])
    ledgerDirectories: list[str] = field(default_factory=lambda: ["/tmp/bk-data"])
    journalSyncData: bool = True
    journalMaxSizeMB: int = 2048
    logSizeLimit: int = 1024 * 1024 * 1024
    flushInterval: int = 60000
    dbStorage_writeCacheMaxSizeMb: int = 64
    dbStorage_readAheadCacheMaxSizeMb: int = 64
    #: The longest an add waits for room in a full write cache before it is refused (Java's key and default;
    #: docs/bookie.md, "Limits"; 0: it waits as long as the checkpoint takes).
    dbStorage_maxThrottleTimeMs: int = 10000
    #: Entries a cold single read brings into the read cache, the one asked for included (BookKeeper's key and
    #: default; docs/bookie.md, "Reads").  1 turns the read-ahead off.
    dbStorage_readAheadCacheBatchSize: int = 100
    nettyMaxFrameSizeBytes: int = 5 * 1024 * 1024
    maxBatchReadSize: int = 5 * 1024 * 1024
    #: Threads that read entries only the disk holds (BookKeeper's key; docs/bookie.md, "Reads").
    numReadWorkerThreads: int = 1
    readOnlyModeEnabled: bool = True
    forceReadOnlyBookie: bool = False
    diskUsageThreshold: float = 0.95
    diskUsageLwmThreshold: float = 0.90
    diskCheckInterval: int = 10000
    gcWaitTime: int = 900000
    verifyMetadataOnGc: bool = False
    # -- entry-log compaction in GC rounds (Apache BookKeeper's keys and defaults; docs/bookie.md, "Compaction") --
    #: A log whose live share of bytes is under this is compacted by a minor compaction (0: no minor compaction).
    minorCompactionThreshold: float = 0.2
    #: Seconds between minor compactions (0: none).
    minorCompactionInterval: int = 3600
    #: The same for major compactions.
    majorCompactionThreshold: float = 0.8
    majorCompactionInterval: int = 86400
    #: While the ledger disks are over ``diskUsageThreshold``, every GC round runs a major compaction.
    isForceGCAllowWhenNoSpace: bool = False
    httpServerEnabled: bool = False
    httpServerPort: int = 8000
    httpServerHost: str = "0.0.0.0"
    longPollMaxTimeoutMs: int = 60000
    # -- bounds on what clients can make the bookie hold (docs/bookie.md, "Limits") --
    maxAddsInProgressLimit: int = 10000
    maxAddsInProgressBytes: int = 64 * 1024 * 1024
    maxReadsInProgressLimit: int = 10000
    maxLongPollReadsInProgress: int = 1000
    serverWriteBufferLowWaterMark: int = 384 * 1024
    serverWriteBufferHighWaterMark: int = 512 * 1024
    #: How long a response may wait for a client that reads nothing (its connection's queued responses over the
    #: high water mark) before it is given up (Java's key and default: -1 = never; docs/bookie.md, "Limits").
    waitTimeoutOnResponseBackpressureMs: int = -1
    #: What giving up means (Java's key and default): true closes the connection, false drops the responses.
    closeChannelOnResponseTimeout: bool = False
    serverMaxConnections: int = 4096
    serverConnectionIdleTimeoutMs: int = 600000
    serverPartialFrameTimeoutMs: int = 30000
    #: Bytes of unfinished frames (received in part) all connections together may hold (ours; docs/bookie.md,
    #: "Limits"): the connection whose bytes take the total past it is closed.
    serverPartialFramesMaxBytes: int = 64 * 1024 * 1024
    skipReplayJournalInvalidRecord: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    # -- building -----------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> "BookieConfig":
        """Build from raw ``key -> value`` pairs (strings from a file, or typed values)."""
        conf = cls()
        conf.update(values)
        return conf

    def update(self, values: Mapping[str, object]) -> None:
        """Apply ``key -> value`` overrides; unknown keys land in :attr:`extra`."""
        for raw_key, value in values.items():
            if value is None:
                continue
            key = _INDEX.field_for(raw_key)
            if key is None:
                self.extra[raw_key] = str(value)
                continue
            setattr(self, key, coerce(key, _FIELD_TYPES[key], value))
        self.validate()

    def validate(self) -> None:
        """Reject settings a bookie cannot run with."""
        if not 0 <= self.bookiePort <= 65535:
            raise InvalidOptionError("bookiePort out of range", bookiePort=self.bookiePort)
        if not self.journalDirectories or not self.ledgerDirectories:
            raise InvalidOptionError("journalDirectories and ledgerDirectories must not be empty")
        if self.nettyMaxFrameSizeBytes < 1024:
            raise InvalidOptionError("nettyMaxFrameSizeBytes too small", value=self.nettyMaxFrameSizeBytes)
        for key in (
            "maxAddsInProgressLimit",
            "maxAddsInProgressBytes",
            "maxReadsInProgressLimit",
            "maxLongPollReadsInProgress",
            "serverMaxConnections",
            "serverConnectionIdleTimeoutMs",
            "serverPartialFrameTimeoutMs",
            "serverPartialFramesMaxBytes",
            "dbStorage_maxThrottleTimeMs",
        ):
            if getattr(self, key) < 0:
                raise InvalidOptionError(f"{key} must be >= 0 (0 = no limit)", value=getattr(self, key))
        if not 0 < self.serverWriteBufferLowWaterMark <= self.serverWriteBufferHighWaterMark:
            raise InvalidOptionError(
                "need 0 < serverWriteBufferLowWaterMark <= serverWriteBufferHighWaterMark",
                serverWriteBufferLowWaterMark=self.serverWriteBufferLowWaterMark,
                serverWriteBufferHighWaterMark=self.serverWriteBufferHighWaterMark,
            )
        for key in ("minorCompactionThreshold", "majorCompactionThreshold"):
            if not 0 <= getattr(self, key) <= 1:
                # Java's GarbageCollectorThread refuses a threshold over 1 ("Invalid ... compaction threshold").
                raise InvalidOptionError(f"{key} must be between 0 and 1", value=getattr(self, key))
        for key in ("minorCompactionInterval", "majorCompactionInterval"):
            if getattr(self, key) < 0:
                raise InvalidOptionError(f"{key} must be >= 0 seconds (0 = off)", value=getattr(self, key))
        if self.forceReadOnlyBookie and not self.readOnlyModeEnabled:
            # Java's bookie starts, turns read-only and shuts down at once (readOnlyModeEnabled=false): say so here.
            raise InvalidOptionError("forceReadOnlyBookie=true needs readOnlyModeEnabled=true")
        if not 0 < self.diskUsageLwmThreshold <= self.diskUsageThreshold <= 1:
            raise InvalidOptionError(
                "need 0 < diskUsageLwmThreshold <= diskUsageThreshold <= 1",
                diskUsageLwmThreshold=self.diskUsageLwmThreshold,
                diskUsageThreshold=self.diskUsageThreshold,
            )

    # -- derived values -----------------------------------------------------------------
    def advertised_host(self) -> str:
        """The host clients should dial: advertisedAddress, else this machine's address."""
        if self.advertisedAddress:
            return self.advertisedAddress
        if self.useHostNameAsBookieID:
            name = socket.getfqdn()
            return name.split(".", 1)[0] if self.useShortHostName else name
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"

    def bookie_id(self) -> str:
        """This bookie's BookieId: ``bookieId`` if set, else ``host:bookiePort`` (BookieImpl.getBookieId)."""
        if self.bookieId:
            return self.bookieId
        return f"{self.advertised_host()}:{self.bookiePort}"

    @property
    def journal_paths(self) -> list[Path]:
        """Journal directories as paths."""
        return [Path(d) for d in self.journalDirectories]

    @property
    def ledger_paths(self) -> list[Path]:
        """Ledger directories as paths."""
        return [Path(d) for d in self.ledgerDirectories]


#: Which field a key names (BookKeeper's singular spellings of the directory keys too), and each field's type.
_INDEX = KeyIndex.of_dataclass(
    BookieConfig, {"journalDirectory": "journalDirectories", "ledgerDirectory": "ledgerDirectories"}
)
_FIELD_TYPES: dict[str, object] = {f.name: f.type for f in dataclasses.fields(BookieConfig)}


def load_conf(path: str | Path | None, overrides: Mapping[str, object] | None = None) -> BookieConfig:
    """Read a conf file (if given) and apply overrides (command-line flags)."""
    values: dict[str, object] = {}
    if path is not None:
        try:
            values.update(parse_conf_text(Path(path).read_text(encoding="utf-8")))
        except OSError as exc:
            raise InvalidOptionError("cannot read the configuration file", path=str(path), error=str(exc)) from exc
    if overrides:
        values.update({k: v for k, v in overrides.items() if v is not None})
    return BookieConfig.from_mapping(values)
