"""Client configuration, under BookKeeper's own key names where an equivalent exists.

``ClientConf.from_mapping`` accepts Java keys (``addEntryTimeoutSec``) in any
case (Spark lower-cases option keys), their snake_case spellings
(``add_entry_timeout_sec``) and a few Pythonic aliases (``batch_read_enabled``),
so a Spark option map and a BookKeeper ``client.conf`` both work.  Other keys are kept in ``extra`` and handed to
the placement policy and the security settings, which read their own (``minNumRacksPerWriteQuorum``,
``tlsTrustStore``...); a key none of them knows is warned about (:mod:`bkspark.confkeys`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping

from bkspark.config.typed import KeyIndex, coerce
from bkspark.confkeys import CLIENT_KEYS, check_keys, check_unsupported
from bkspark.errors import InvalidOptionError
from bkspark.protocol.framing import DEFAULT_MAX_FRAME_SIZE

__all__ = ["ClientConf"]


@dataclass
class ClientConf:
    """Every knob of the client, with BookKeeper's defaults unless noted."""

    #: v2 protocol for adds and reads (as Pulsar runs it); v3 for the rest. Java's default is False.
    useV2WireProtocol: bool = True
    addEntryTimeoutSec: float = 5.0
    #: Seconds an add may wait for its ack quorum, ensemble changes included, before the ledger's writes end with
    #: ``AddEntryQuorumTimeoutError``; 0 or less = no bound (Java's default, -1). docs/client.md.
    addEntryQuorumTimeoutSec: float = -1.0
    readEntryTimeoutSec: float = 5.0
    #: Milliseconds before a read is also sent to the next replica (0 disables).
    speculativeReadTimeout: int = 2000
    speculativeReadTimeoutBackoffMultiplier: float = 2.0
    batchReadEnabled: bool = True
    nettyMaxFrameSizeBytes: int = DEFAULT_MAX_FRAME_SIZE
    #: Adds in flight per ledger handle before ``append`` blocks. Why 5,000, and how Java's ``throttle`` (a rate of
    #: adds per second, which this key's alias is not) differs: docs/client.md, "How many adds in flight".
    maxPendingAdds: int = 5000
    #: Payload bytes in flight per ledger handle before ``append`` blocks; 0 = no byte bound (docs/client.md).
    maxPendingAddBytes: int = 32 * 1024 * 1024
    #: Single reads in flight per read call (pipelining window).
    readPipelineDepth: int = 256
    ensemblePlacementPolicy: str | None = None
    bookieAddressResolverEnabled: bool = True
    enableBookieAddressTracking: bool = True
    zkTimeout: float = 10.0
    connectTimeoutMillis: int = 10000
    ledgerMetadataVersion: int = 3
    storeSystemTimeAsLedgerCreationTime: bool = False
    enableDigestTypeAutodetection: bool = True
    #: Milliseconds between explicit LAC flushes (WRITE_LAC) of an idle writer; 0 = off (Java's default).
    explicitLacInterval: int = 0
    maxNumEnsembleChanges: int = 2**31 - 1
    bookieFailureHistoryExpirationMSec: int = 60000
    reorderReadSequenceEnabled: bool = True
    #: Write nothing to the metadata store, not even the LAYOUT a first client creates (reading another system's
    #: ledgers, e.g. Apache Pulsar's: docs/pulsar.md); a client so opened only reads.
    metadataReadOnly: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    #: Other spellings of some keys (Java's older names, snake_case forms), public for the connector's option map.
    ALIASES: ClassVar[dict[str, str]] = {
        "batch_read_enabled": "batchReadEnabled",
        "use_v2_wire_protocol": "useV2WireProtocol",
        "throttle": "maxPendingAdds",
        "max_pending_adds": "maxPendingAdds",
        "enableBookieAddressResolver": "bookieAddressResolverEnabled",
        "enable_bookie_address_resolver": "bookieAddressResolverEnabled",
        "zkTimeoutMs": "zkTimeout",
        "zk_timeout_ms": "zkTimeout",
    }

    @classmethod
    def from_mapping(cls, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> "ClientConf":
        """Build from a BookKeeper-style mapping plus keyword overrides; values may be strings.

        Keys and values follow :mod:`bkspark.config.typed` (any case, snake_case, the aliases above).
        """
        merged: dict[str, Any] = dict(conf or {})
        merged.update(kwargs)
        index = KeyIndex.of_dataclass(cls, cls.ALIASES)
        types = {f.name: f.type for f in fields(cls)}
        out = cls()
        for key, value in merged.items():
            name = index.field_for(key)
            if name is None:
                out.extra[key] = value
                continue
            setattr(out, name, coerce(name, types[name], value))
        if any(k.lower() in ("zktimeoutms", "zk_timeout_ms") for k in merged):
            out.zkTimeout = float(out.zkTimeout) / 1000.0
        out._validate()
        # Nothing silently ignored: unknown keys warned about (a misspelled security key refused), unsupported
        # values refused (docs/security.md).
        check_keys(out.extra, CLIENT_KEYS, "client")
        check_unsupported(out.extra)
        return out

    def _validate(self) -> None:
        if self.addEntryTimeoutSec <= 0 or self.readEntryTimeoutSec <= 0:
            raise InvalidOptionError("timeouts must be positive")
        if self.maxPendingAdds < 1 or self.readPipelineDepth < 1:
            raise InvalidOptionError("maxPendingAdds and readPipelineDepth must be >= 1")
        if self.maxPendingAddBytes < 0:
            raise InvalidOptionError("maxPendingAddBytes must be >= 0 (0: no byte bound)", value=self.maxPendingAddBytes)
        if self.nettyMaxFrameSizeBytes < 1024:
            raise InvalidOptionError("nettyMaxFrameSizeBytes too small", value=self.nettyMaxFrameSizeBytes)
        if self.ledgerMetadataVersion not in (-1, 2, 3):
            raise InvalidOptionError("ledgerMetadataVersion must be 2 or 3", value=self.ledgerMetadataVersion)
        if self.ledgerMetadataVersion == -1:
            self.ledgerMetadataVersion = 3

    def placement_conf(self) -> dict[str, Any]:
        """The mapping handed to ``policy_from_conf``: our keys plus every unknown one."""
        conf = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        conf.update(self.extra)
        return conf
