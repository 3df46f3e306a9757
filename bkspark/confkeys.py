"""The configuration keys bkspark knows, so that no setting is silently ignored (docs/security.md).

* a key bkspark reads: used;
* a key of Apache BookKeeper that has no meaning for bkspark (JVM, Netty or RocksDB tuning...): an
  INFO line saying it has no effect;
* a key nobody knows: a WARNING naming it and the closest known key -- except a key one edit (a letter
  added, dropped, changed, or two neighbours swapped) away from a security key (:data:`SECURITY_KEYS`: TLS,
  SASL and auth provider, ZooKeeper auth, the JAAS file), such as ``tlsProviderFactoryClas``: that is a
  :class:`~bkspark.errors.MisspelledSecurityKeyError` naming the key it probably meant, since ignoring it
  would run without the TLS or authentication asked for (:func:`refuse_misspelled_security_keys`);
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

from bkspark.config.typed import lookup
from bkspark.errors import InvalidOptionError, MisspelledSecurityKeyError
from bkspark.security.auth import AUTH_KEYS
from bkspark.security.tls import TLS_KEYS
from bkspark.security.zk import ZK_SECURITY_KEYS

__all__ = [
    "COMMON_KEYS",
    "CLIENT_KEYS",
    "BOOKIE_KEYS",
    "NO_EFFECT_KEYS",
    "SECURITY_KEYS",
    "check_keys",
    "refuse_misspelled_security_keys",
    "misspelled_security_key",
    "one_edit_apart",
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

#: The security keys: every key the TLS, SASL/auth and ZooKeeper-auth settings read (``tls*``, ``sasl*``,
#: ``*AuthProviderFactoryClass``, ``zkDigestAuthPath``, ``java.security.auth.login.config``...).
SECURITY_KEYS: frozenset[str] = frozenset((*TLS_KEYS, *AUTH_KEYS, *ZK_SECURITY_KEYS))

#: Keys read by both sides.
COMMON_KEYS: frozenset[str] = frozenset(
    (*TLS_KEYS, *AUTH_KEYS, *ZK_SECURITY_KEYS, "metadataServiceUri", "zkServers", "zkLedgersRootPath", "zkTimeout")
)
#: Keys the client reads besides :class:`~bkspark.client.conf.ClientConf`'s own fields.
CLIENT_KEYS: frozenset[str] = COMMON_KEYS | frozenset(_PLACEMENT_KEYS)
#: Keys the bookie reads besides :class:`~bkspark.config.bookie.BookieConfig`'s own fields.
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


_SECURITY_LOWER = frozenset(k.lower() for k in SECURITY_KEYS)
_NO_EFFECT_LOWER = frozenset(k.lower() for k in NO_EFFECT_KEYS)


def one_edit_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter added, dropped or changed, or two neighbours swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long_[i]:
        i += 1
    return short[i:] == long_[i + 1 :]


def misspelled_security_key(key: str, known: Iterable[str] = ()) -> str | None:
    """The security key ``key`` probably misspells (one edit apart, any case), or None.  A key that is itself a
    known key (of :data:`SECURITY_KEYS` or ``known``) or one of :data:`NO_EFFECT_KEYS` misspells nothing."""
    low = str(key).lower()
    if low in _SECURITY_LOWER or low in _NO_EFFECT_LOWER or low in {str(k).lower() for k in known}:
        return None
    return next((k for k in sorted(SECURITY_KEYS) if one_edit_apart(low, k.lower())), None)


def refuse_misspelled_security_keys(conf: Mapping[str, Any], role: str = "client", *, known: Iterable[str] = (), prefix: str = "") -> None:
    """Raise :class:`MisspelledSecurityKeyError` for the first key of ``conf`` that misspells a security key.

    ``known``: the other keys the reader knows (its own fields), which are never typos; ``prefix``: how the
    user wrote the keys (the connector's ``bookkeeper.``), for the message.  Called at client start (through
    :func:`check_keys`), at bookie start, and by the connector's ``load()``/``save()`` on its ``bookkeeper.*``
    options, before any job runs.
    """
    known = frozenset(str(k).lower() for k in known)
    for key in conf:
        meant = misspelled_security_key(str(key), known)
        if meant is not None:
            raise MisspelledSecurityKeyError(prefix + str(key), prefix + meant, role)


def check_keys(conf: Mapping[str, Any], known: Iterable[str], role: str) -> list[str]:
    """Log a line for each key of ``conf`` outside ``known``; return the unknown keys (for tests and tools).

    A key that misspells a security key is refused first (:func:`refuse_misspelled_security_keys`).
    """
    known = list(known)
    refuse_misspelled_security_keys(conf, role, known=known)
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
