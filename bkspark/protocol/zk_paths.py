"""ZooKeeper paths of a BookKeeper cluster, formatted exactly as Java formats them.

Ledger metadata (scope 0, ``util/StringUtils``):

* ``hierarchical`` (``HierarchicalLedgerManager``, the default) is a hybrid: ids
  below ``Integer.MAX_VALUE`` (2147483647) use the short 2-4-4 split of
  ``%010d`` (``<root>/00/0000/L0005``), larger ids the long 3-4-4-4-4 split of
  ``%019d`` (``<root>/000/0000/0042/9496/L7301``);
* ``longhierarchical`` always uses the long split;
* ``legacyhierarchical`` always the short one (ids < 2^31 - 1 only);
* ``flat`` (deprecated) is ``<root>/L%010d``.

Java's ledger listing only descends into root children named ``\\d{2}``
(legacy), ``\\d{3}`` (long) or either (hybrid), and skips the "special" znodes
of :func:`is_special_znode` wherever it lists ledger nodes.

Scope != 0 (BP-35, our extension, docs/scoped-ledger-paths.md): the
"long-long hierarchical" tree ``<root>/scopes/SSSS/SSSS/SSSS/SSSS/SSSS/``
``LLL/LLLL/LLLL/LLLL/LLLLL`` -- the scope id as unsigned ``%020d`` split 4-4-4-4-4,
then the ledger id in Java's long form.  ``scopes`` matches none of Java's
ledger-parent regexes, so Java never walks into it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bkspark.protocol.values import INT64_MAX, INT64_MIN, is_int64
from bkspark.errors import BadMetadataError, InvalidOptionError

__all__ = [
    "AVAILABLE",
    "READONLY",
    "COOKIES",
    "LAYOUT",
    "INSTANCEID",
    "UNDER_REPLICATION",
    "IDGEN",
    "IDGEN_LONG",
    "ID_PREFIX",
    "HOB_PREFIX",
    "LEDGER_PREFIX",
    "DISABLE_HEALTH_CHECK",
    "SCOPES",
    "SCHEMES",
    "MAX_SHORT_LEDGER_ID",
    "is_special_znode",
    "is_ledger_id_generator_znode",
    "is_ledger_parent_node",
    "check_root",
    "ledger_path",
    "parse_ledger_path",
    "ledger_id_from_path",
    "scopes_root",
    "scope_path",
    "available_path",
    "readonly_path",
    "bookie_registration_path",
    "cookies_path",
    "cookie_path",
    "layout_path",
    "instance_id_path",
    "disable_health_check_path",
    "underreplication_path",
    "underreplicated_ledger_path",
    "underreplication_lock_path",
    "idgen_path",
    "idgen_prefix",
    "idgen_long_path",
    "hob_path",
    "hob_prefix",
    "parse_hob",
    "sequential_id",
    "compose_long_id",
    "is_short_id_overflow",
    "BKSPARK",
    "bkspark_path",
    "audit_path",
    "audit_znode_path",
    "AUDIT_ORPHANS",
    "AUDIT_CONFIG",
    "AUDIT_ELECTION",
    "AUDIT_STATUS",
    "datasets_path",
    "write_jobs_path",
    "dataset_path",
    "dataset_shards_path",
    "dataset_shard_path",
    "write_job_path",
    "job_ledger_path",
]

AVAILABLE = "available"
READONLY = "readonly"
COOKIES = "cookies"
LAYOUT = "LAYOUT"
INSTANCEID = "INSTANCEID"
UNDER_REPLICATION = "underreplication"
#: ``LegacyHierarchicalLedgerManager.IDGEN_ZNODE``: the 31-bit id generator.
IDGEN = "idgen"
#: ``LongHierarchicalLedgerManager.IDGEN_ZNODE``: the 63-bit id generator.
IDGEN_LONG = "idgen-long"
#: ``ZkLedgerIdGenerator.LEDGER_ID_GEN_PREFIX``.
ID_PREFIX = "ID-"
HOB_PREFIX = "HOB-"
LEDGER_PREFIX = "L"
DISABLE_HEALTH_CHECK = "disableHealthCheck"
#: Our BP-35 tree for scope != 0 ledgers (docs/scoped-ledger-paths.md).
SCOPES = "scopes"
#: Our own tree under the ledgers root: the orphan audit and the connector's datasets and write jobs
#: (not digits, so ledger listing never takes it for a ledger parent).
BKSPARK = "bkspark"

SCHEMES = ("hierarchical", "longhierarchical", "legacyhierarchical", "flat")
#: Ids below this use the short path in the hybrid scheme (``Integer.MAX_VALUE``).
MAX_SHORT_LEDGER_ID = 2**31 - 1

_UINT64 = 2**64
_PARENT_RE = {
    "legacyhierarchical": re.compile(r"[0-9]{2}"),
    "longhierarchical": re.compile(r"[0-9]{3}"),
    "hierarchical": re.compile(r"[0-9]{2,3}"),
    "flat": re.compile(r"L[0-9]+"),  # FlatLedgerManager: the ledger znodes themselves
}
_DIGITS = re.compile(r"[0-9]+")


def is_ledger_id_generator_znode(name: str) -> bool:
    """``AbstractZkLedgerManager.isLeadgerIdGeneratorZnode``."""
    return name in (IDGEN, IDGEN_LONG) or name.startswith(ID_PREFIX)


def is_special_znode(name: str) -> bool:
    """``AbstractZkLedgerManager.isSpecialZnode``: children that ledger listing skips."""
    return name in (AVAILABLE, COOKIES, LAYOUT, INSTANCEID, UNDER_REPLICATION) or is_ledger_id_generator_znode(name)


def is_ledger_parent_node(name: str, scheme: str = "hierarchical") -> bool:
    """Whether Java's listing for ``scheme`` descends into root child ``name`` (``isLedgerParentNode``)."""
    return _PARENT_RE[_check_scheme(scheme)].fullmatch(name) is not None


def _check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise InvalidOptionError(f"unknown ledger path scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    return scheme


def check_root(root: str) -> str:
    """Validate a ledgers root path: ``""`` (the ZooKeeper root) or ``/a/b`` without a trailing slash."""
    if not isinstance(root, str) or (root and (not root.startswith("/") or root.endswith("/") or "//" in root)):
        raise InvalidOptionError(f"bad ledgers root path {root!r}: expected '' or '/name[/name...]'")
    return root


def _check_ledger_id(ledger_id: int) -> int:
    if not is_int64(ledger_id) or ledger_id < 0:
        raise InvalidOptionError(f"ledger id {ledger_id!r} is not a non-negative int64")
    return ledger_id


def _check_scope_id(scope_id: int) -> int:
    if not is_int64(scope_id):
        raise InvalidOptionError(f"scope id {scope_id!r} is not an int64")
    return scope_id


def _split(digits: str, sizes: tuple[int, ...]) -> list[str]:
    parts, pos = [], 0
    for size in sizes:
        parts.append(digits[pos : pos + size])
        pos += size
    return parts


def _short_path(ledger_id: int) -> str:
    a, b, c = _split(f"{ledger_id:010d}", (2, 4, 4))
    return f"/{a}/{b}/{LEDGER_PREFIX}{c}"


def _long_path(ledger_id: int) -> str:
    a, b, c, d, e = _split(f"{ledger_id:019d}", (3, 4, 4, 4, 4))
    return f"/{a}/{b}/{c}/{d}/{LEDGER_PREFIX}{e}"


def _cluster_znode(*names: str, doc: str) -> Callable[[str], str]:
    """A path function ``root -> <root>/<names...>``, the root checked by :func:`check_root`: the one rule for the
    cluster-wide znodes Java keeps beside the ledgers (each named below, with what it holds)."""
    suffix = "".join(f"/{name}" for name in names)

    def path(root: str) -> str:
        return check_root(root) + suffix

    path.__doc__ = doc
    return path


scopes_root = _cluster_znode(SCOPES, doc="``<root>/scopes``: where every scope != 0 ledger lives.")


def scope_path(root: str, scope_id: int) -> str:
    """The znode under which all ledgers of one scope != 0 live (list it to list the scope)."""
    if _check_scope_id(scope_id) == 0:
        raise InvalidOptionError("scope 0 ledgers live in BookKeeper's own tree, not under scopes/")
    groups = _split(f"{scope_id % _UINT64:020d}", (4, 4, 4, 4, 4))
    return scopes_root(root) + "/" + "/".join(groups)


def ledger_path(root: str, ledger_id: int, scheme: str = "hierarchical", scope_id: int = 0) -> str:
    """The metadata znode of a ledger, as Java's ledger manager for ``scheme`` names it (scope 0).

    For ``scope_id != 0`` the path is in our ``<root>/scopes`` tree whatever
    the scheme (a flat layout cannot hold scoped ledgers).
    """
    check_root(root)
    _check_ledger_id(ledger_id)
    _check_scheme(scheme)
    if _check_scope_id(scope_id) != 0:
        if scheme == "flat":
            raise InvalidOptionError("scope != 0 ledgers need a hierarchical layout, not flat")
        return scope_path(root, scope_id) + _long_path(ledger_id)
    if scheme == "flat":
        return f"{root}/{LEDGER_PREFIX}{ledger_id:010d}"
    if scheme == "longhierarchical" or (scheme == "hierarchical" and ledger_id >= MAX_SHORT_LEDGER_ID):
        return root + _long_path(ledger_id)
    if ledger_id >= MAX_SHORT_LEDGER_ID:
        raise InvalidOptionError(f"ledger id {ledger_id} does not fit the legacy hierarchical layout")
    return root + _short_path(ledger_id)


def _parse_digits(parts: list[str], sizes: tuple[int, ...], path: str) -> int:
    last = parts[-1]
    if not last.startswith(LEDGER_PREFIX):
        raise BadMetadataError(f"ledger znode {path!r}: the last level must start with 'L'")
    parts = parts[:-1] + [last[len(LEDGER_PREFIX) :]]
    if len(parts) != len(sizes) or any(
        len(p) != size or not _DIGITS.fullmatch(p) for p, size in zip(parts, sizes)
    ):
        raise BadMetadataError(f"ledger znode {path!r} is not a canonical ledger path")
    return int("".join(parts))


def parse_ledger_path(root: str, path: str, scheme: str = "hierarchical") -> tuple[int, int]:
    """``(scope_id, ledger_id)`` of a ledger metadata znode (the inverse of :func:`ledger_path`).

    Only canonical paths are accepted -- those :func:`ledger_path` produces --
    so ids and paths map one to one; anything else raises
    :class:`BadMetadataError` (a lister skips such znodes, as Java does).
    """
    check_root(root)
    _check_scheme(scheme)
    prefix = root + "/"
    if not path.startswith(prefix):
        raise BadMetadataError(f"znode {path!r} is not under the ledgers root {root!r}")
    parts = path[len(prefix) :].split("/")
    if parts[0] == SCOPES and scheme != "flat":
        if len(parts) != 11:
            raise BadMetadataError(f"scoped ledger znode {path!r} does not have 10 levels under scopes/")
        scope_groups = parts[1:6]
        if any(len(g) != 4 or not _DIGITS.fullmatch(g) for g in scope_groups):
            raise BadMetadataError(f"scoped ledger znode {path!r} has a bad scope level")
        unsigned_scope = int("".join(scope_groups))
        if unsigned_scope == 0 or unsigned_scope >= _UINT64:
            raise BadMetadataError(f"scoped ledger znode {path!r} names scope 0 or one beyond 64 bits")
        ledger_id = _parse_digits(parts[6:], (3, 4, 4, 4, 4), path)
        if ledger_id > INT64_MAX:
            raise BadMetadataError(f"ledger znode {path!r} names an id beyond int64")
        scope_id = unsigned_scope - _UINT64 if unsigned_scope > INT64_MAX else unsigned_scope
        return scope_id, ledger_id
    if scheme == "flat":
        digits = parts[0][len(LEDGER_PREFIX) :] if len(parts) == 1 and parts[0].startswith(LEDGER_PREFIX) else ""
        if not _DIGITS.fullmatch(digits) or f"{int(digits):010d}" != digits or int(digits) > INT64_MAX:
            raise BadMetadataError(f"ledger znode {path!r} is not a flat ledger path")
        return 0, int(digits)
    if len(parts) == 3 and scheme != "longhierarchical":
        ledger_id = _parse_digits(parts, (2, 4, 4), path)
        if ledger_id >= MAX_SHORT_LEDGER_ID:
            raise BadMetadataError(f"ledger znode {path!r}: id {ledger_id} belongs in the long form")
        return 0, ledger_id
    if len(parts) == 5 and scheme != "legacyhierarchical":
        ledger_id = _parse_digits(parts, (3, 4, 4, 4, 4), path)
        if ledger_id > INT64_MAX:
            raise BadMetadataError(f"ledger znode {path!r} names an id beyond int64")
        if scheme == "hierarchical" and ledger_id < MAX_SHORT_LEDGER_ID:
            raise BadMetadataError(f"ledger znode {path!r}: id {ledger_id} belongs in the short form")
        return 0, ledger_id
    raise BadMetadataError(f"znode {path!r} is not a ledger path of the {scheme} layout")


def ledger_id_from_path(root: str, path: str, scheme: str = "hierarchical") -> int:
    """The ledger id of a scope 0 ledger znode (Java's ``getLedgerId``, canonical paths only)."""
    scope_id, ledger_id = parse_ledger_path(root, path, scheme)
    if scope_id != 0:
        raise BadMetadataError(f"znode {path!r} holds a scope {scope_id} ledger, not a scope 0 one")
    return ledger_id


# ---------------------------------------------------------------------------
# Bookies, cookies and cluster nodes


available_path = _cluster_znode(AVAILABLE, doc="``<root>/available``: writable bookies register here.")
readonly_path = _cluster_znode(
    AVAILABLE, READONLY, doc="``<root>/available/readonly``: read-only bookies register here."
)


def bookie_registration_path(root: str, bookie_id: str, readonly: bool = False) -> str:
    """The ephemeral registration znode of a bookie (writable or read-only)."""
    return f"{readonly_path(root) if readonly else available_path(root)}/{bookie_id}"


cookies_path = _cluster_znode(
    COOKIES, doc="``<root>/cookies``: its children are all bookies ever formatted (the Auditor's 'all bookies')."
)


def cookie_path(root: str, bookie_id: str) -> str:
    """``<root>/cookies/<bookieId>``."""
    return f"{cookies_path(root)}/{bookie_id}"


layout_path = _cluster_znode(LAYOUT, doc="``<root>/LAYOUT``.")
instance_id_path = _cluster_znode(INSTANCEID, doc="``<root>/INSTANCEID``.")
disable_health_check_path = _cluster_znode(DISABLE_HEALTH_CHECK, doc="``<root>/disableHealthCheck``.")
underreplication_path = _cluster_znode(UNDER_REPLICATION, doc="``<root>/underreplication``.")


def underreplicated_ledger_path(root: str, ledger_id: int) -> str:
    """``ZkLedgerUnderreplicationManager.getUrLedgerZnode``: four ``%04x`` levels, then ``urL%010d``."""
    _check_ledger_id(ledger_id)
    groups = "/".join(f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))
    return f"{underreplication_path(root)}/ledgers/{groups}/urL{ledger_id:010d}"


def underreplication_lock_path(root: str, ledger_id: int) -> str:
    """``getUrLedgerLockZnode``: ``<root>/underreplication/locks/urL%010d``."""
    _check_ledger_id(ledger_id)
    return f"{underreplication_path(root)}/locks/urL{ledger_id:010d}"


# ---------------------------------------------------------------------------
# Ledger id generation (ZkLedgerIdGenerator / LongZkLedgerIdGenerator)


idgen_path = _cluster_znode(IDGEN, doc="``<root>/idgen``: parent of the 31-bit generator's sequential nodes.")
idgen_prefix = _cluster_znode(
    IDGEN, ID_PREFIX, doc="``<root>/idgen/ID-``: create this EPHEMERAL_SEQUENTIAL, parse the id, delete it."
)
idgen_long_path = _cluster_znode(
    IDGEN_LONG, doc="``<root>/idgen-long``: present once the cluster switched to 63-bit ids."
)


def hob_path(root: str, high_bits: int) -> str:
    """``<root>/idgen-long/HOB-%010d``: the directory for one value of the high 32 bits."""
    if not 0 <= high_bits < 2**31:
        raise InvalidOptionError(f"high-order bits {high_bits!r} out of range")
    return f"{idgen_long_path(root)}/{HOB_PREFIX}{high_bits:010d}"


def hob_prefix(root: str, high_bits: int) -> str:
    """``<root>/idgen-long/HOB-%010d/ID-``: the sequential prefix for the low 32 bits."""
    return f"{hob_path(root, high_bits)}/{ID_PREFIX}"


def parse_hob(name: str) -> int | None:
    """The high bits of an ``idgen-long`` child, or ``None`` (Java: ``Long.parseLong(t.replace("HOB-", ""))``)."""
    text = name.replace(HOB_PREFIX, "")
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


def sequential_id(created_path: str, prefix: str) -> int:
    """The id ZooKeeper put after ``prefix`` in a created sequential znode (``ZkLedgerIdGenerator``).

    Java splits the created path on the prefix and parses the last piece as a
    long; raises :class:`BadMetadataError` when that is not a number.
    """
    if not created_path.startswith(prefix):
        raise BadMetadataError(f"sequential znode {created_path!r} does not start with {prefix!r}")
    suffix = created_path[len(prefix) :]
    if not _DIGITS.fullmatch(suffix):
        raise BadMetadataError(f"sequential znode {created_path!r} has no numeric suffix")
    return int(suffix)


def is_short_id_overflow(value: int) -> bool:
    """Whether a 31-bit generator result is unusable (``< 0 or >= Integer.MAX_VALUE``)."""
    return value < 0 or value >= MAX_SHORT_LEDGER_ID


def compose_long_id(high_bits: int, low_bits: int) -> int:
    """``(high << 32) | low``: a 63-bit ledger id from ``LongZkLedgerIdGenerator``."""
    if not 0 <= low_bits < MAX_SHORT_LEDGER_ID or not 0 <= high_bits < 2**31:
        raise InvalidOptionError(f"bad long ledger id parts high={high_bits!r} low={low_bits!r}")
    return (high_bits << 32) | low_bits


def bkspark_path(root: str) -> str:
    """``<root>/bkspark``: everything bkspark keeps beside the ledgers (a trailing slash on root is ignored)."""
    return f"{root.rstrip('/')}/{BKSPARK}"


def audit_path(root: str) -> str:
    """``<root>/bkspark/audit``: the orphan audit's reports, config, election and status."""
    return f"{bkspark_path(root)}/audit"


#: The orphan audit's znodes under ``<root>/bkspark/audit``: one record per orphaned ledger (named by its qualified
#: name), the audit's tunables (watched by every auditor), the auditors' leader election (kazoo's ``Election``
#: recipe) and the leader's report of its last pass.
AUDIT_ORPHANS, AUDIT_CONFIG, AUDIT_ELECTION, AUDIT_STATUS = "orphans", "config", "election", "status"


def audit_znode_path(root: str, znode: str) -> str:
    """``<root>/bkspark/audit/<znode>``, ``znode`` one of :data:`AUDIT_ORPHANS`, :data:`AUDIT_CONFIG`,
    :data:`AUDIT_ELECTION`, :data:`AUDIT_STATUS`."""
    if znode not in (AUDIT_ORPHANS, AUDIT_CONFIG, AUDIT_ELECTION, AUDIT_STATUS):
        raise InvalidOptionError(f"{znode!r} is not one of the audit's znodes")
    return f"{audit_path(root)}/{znode}"


def datasets_path(root: str) -> str:
    """``<root>/bkspark/datasets``: one manifest per connector dataset (docs/connector.md)."""
    return f"{bkspark_path(root)}/datasets"


def write_jobs_path(root: str) -> str:
    """``<root>/bkspark/jobs``: one record per connector write job and its registered ledgers (docs/connector.md)."""
    return f"{bkspark_path(root)}/jobs"


def dataset_path(root: str, name: str) -> str:
    """``<root>/bkspark/datasets/<name>``: a dataset's manifest root."""
    return f"{datasets_path(root)}/{name}"


def dataset_shards_path(root: str, name: str) -> str:
    """``<root>/bkspark/datasets/<name>/shards``: the immutable shards its roots name."""
    return f"{dataset_path(root, name)}/shards"


def dataset_shard_path(root: str, name: str, shard_id: str) -> str:
    """``<root>/bkspark/datasets/<name>/shards/<shard>``: one shard (``<job>.<random>.<n>``)."""
    return f"{dataset_shards_path(root, name)}/{shard_id}"


def write_job_path(root: str, job_id: str) -> str:
    """``<root>/bkspark/jobs/<job>``: a write job's record."""
    return f"{write_jobs_path(root)}/{job_id}"


def job_ledger_path(root: str, job_id: str, scope_id: int, ledger_id: int) -> str:
    """``<root>/bkspark/jobs/<job>/<scope>-<ledger>``: a ledger a task of the job created (registered before any
    entry is written)."""
    return f"{write_job_path(root, job_id)}/{scope_id}-{ledger_id}"
