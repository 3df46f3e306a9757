"""The configuration keys bkspark knows, so that no setting is silently ignored (docs/security.md).

* a key bkspark reads: used;
* a key of Apache BookKeeper that has no meaning for bkspark (JVM, Netty or RocksDB tuning...): an
  INFO line saying it has no effect;
* a key nobody knows (a typo such as ``tlsProvder``): a WARNING naming it and the closest known key;
* a key bkspark knows but cannot honour with the given value (``tlsKeyStoreType=JKS``, an auth
  provider class other than BookKeeper's SASL ones, ``httpServerTlsEnable=true``): an error at start,
  raised by the module that reads it (:mod:`bkspark.security.tls`, :mod:`bkspark.security.auth`) or by
  :func:`check_unsupported` -- never a silent fall back to plain text or no authentication.

Keys compare without regard to case: Spark lower-cases data source options.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from bkspark.errors import InvalidOptionError
from bkspark.security.auth import AUTH_KEYS
from bkspark.security.tls import TLS_KEYS, lookup
from bkspark.security.zk import ZK_SECURITY_KEYS

__all__ = [
    "COMMON_KEYS",
    "CLIENT_KEYS",
    "BOOKIE_KEYS",
    "NO_EFFECT_KEYS",
    "check_keys",
    "check_unsupported",
]

log = logging.getLogger("bkspark.conf")

#: Keys of the placement policies (bkspark/placement), read from the client's mapping.
_PLACEMENT_KEYS = (
    "ensemblePlacementPolicy",
    "minNumRacksPerWriteQuorum",
    "enforceMinNumRacksPerWriteQuorum",
    "ignoreLocalNodeInPlacementPolicy",
    "networkTopologyScriptFileName",
    "networkTopologyScriptNumberArgs",
    "networkTopologyScriptTimeoutSeconds",
    "networkTopologyStabilizePeriodSeconds",
    "networkTopologyStaticMapping",
    "networkTopologyResolveByBookieId",
    "reppDnsResolverClass",
    "reppLocalNetworkLocation",
    "reppLocalRegion",
    "reppMinimumRegionsForDurability",
    "reppRegionsToWrite",
    "reppEnableDurabilityEnforcementInReplace",
    "reppDisableDurabilityEnforcementFeature",
)

#: Keys read by both sides.
COMMON_KEYS: frozenset[str] = frozenset(
    (*TLS_KEYS, *AUTH_KEYS, *ZK_SECURITY_KEYS, "metadataServiceUri", "zkServers", "zkLedgersRootPath", "zkTimeout")
)
#: Keys the client reads besides :class:`~bkspark.client.conf.ClientConf`'s own fields.
CLIENT_KEYS: frozenset[str] = COMMON_KEYS | frozenset(_PLACEMENT_KEYS)
#: Keys the bookie reads besides :class:`~bookie_server.config.BookieConfig`'s own fields.
BOOKIE_KEYS: frozenset[str] = COMMON_KEYS | frozenset(("httpServerTlsEnable", "httpAdminWriteEnabled", "httpAdminTokenPath"))

#: Apache BookKeeper keys that tune what bkspark does not have (JVM threads, Netty, RocksDB, stats...).
NO_EFFECT_KEYS: frozenset[str] = frozenset(
    (
        "allowLoopback", "enableStatistics", "statsProviderClass", "ledgerStorageClass", "numAddWorkerThreads",
        "numReadWorkerThreads", "numJournalCallbackThreads", "numHighPriorityWorkerThreads", "serverNumIOThreads",
        "journalPreAllocSizeMB", "journalWriteBufferSizeKB", "journalMaxGroupWaitMSec", "journalAdaptiveGroupWrites",
        "dbStorage_rocksDB_blockCacheSize", "dbStorage_rocksDB_writeBufferSizeMB", "dbStorage_rocksDB_sstSizeInMB",
        "dbStorage_rocksDB_blockSize", "diskUsageWarnThreshold", "autoRecoveryDaemonEnabled", "extraServerComponents",
        "numWorkerThreads", "numIOThreads", "nettyMaxFrameSizeBytes", "enableParallelRecoveryRead",
        "zkRetryBackoffMaxRetries", "zkRetryBackoffStartMs", "zkRetryBackoffMaxMs", "journalFormatVersionToWrite",
        "fileInfoFormatVersionToWrite", "entryLogFilePreallocationEnabled", "lostBookieRecoveryDelay",
    )
)

#: Known keys that bkspark refuses with some values: key -> (refused when the value is this, the reason).
_UNSUPPORTED_VALUES: dict[str, tuple[str, str]] = {
    "httpServerTlsEnable": ("true", "the bookie's HTTP admin server speaks plain HTTP only in bkspark"),
}


def _canon(keys: Iterable[str]) -> dict[str, str]:
    return {k.lower(): k for k in keys}


def check_keys(conf: Mapping[str, Any], known: Iterable[str], role: str) -> list[str]:
    """Log a line for each key of ``conf`` outside ``known``; return the unknown keys (for tests and tools)."""
    known_map = _canon(known)
    no_effect = _canon(NO_EFFECT_KEYS)
    unknown: list[str] = []
    for key in conf:
        low = str(key).lower()
        if low in known_map:
            continue
        if low in no_effect:
            log.info("configuration key %r of Apache BookKeeper has no effect in the bkspark %s", key, role)
            continue
        unknown.append(str(key))
        close = difflib.get_close_matches(low, list(known_map) + list(no_effect), n=1, cutoff=0.75)
        hint = f" (did you mean {(known_map.get(close[0]) or no_effect[close[0]])!r}?)" if close else ""
        log.warning("unknown %s configuration key %r is ignored%s", role, key, hint)
    return unknown


def check_unsupported(conf: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidOptionError` for a known key set to a value bkspark cannot honour."""
    for key, (refused, reason) in _UNSUPPORTED_VALUES.items():
        value = lookup(conf, key)
        if value is not None and str(value).strip().lower() == refused:
            raise InvalidOptionError(f"unsupported setting: {reason}", key=key, value=str(value))
