"""Where the orphan audit keeps its state in ZooKeeper, and how each piece is encoded.

Everything lives under ``<root>/bkspark/audit``.  Java's ledger iteration only
descends into root children named by two or three digits
(docs/scoped-ledger-paths.md), so ``bkspark`` is never walked or counted by a
Java bookie, shell or Auditor, and ``bookkeeper shell metaformat`` removes it
with the rest of the cluster.

* ``orphans/<qualified name>``: one znode per orphaned ledger (the 32-hex BP-35
  name, so scopes never collide and names sort by scope then id); its value is
  an :class:`OrphanRecord` as JSON.  Listing is one ``getChildren`` plus
  pipelined reads.
* ``config``: :class:`AuditConfig` as JSON; every auditor watches it.
* ``election``: kazoo's ``Election`` recipe (one leader among all auditors).
* ``status``: :class:`AuditStatus` as JSON, rewritten by the leader after each pass.

The leader's writes (orphan records and status) are fenced by its own election znode: each is one ``multi``
with a ``check`` that the znode still exists (:func:`put_znode`, :func:`delete_znode`), so a leader that lost
its session or its znode in the middle of a pass writes nothing more (:class:`LeadershipLostError`).
"""

from __future__ import annotations

import enum
import functools
import json
from dataclasses import dataclass
from typing import Any, Literal

from bkspark.config.typed import is_finite_number
from bkspark.errors import BadMetadataError, InvalidOptionError, MetadataError, MetadataVersionError
from bkspark.metadata.retry import ZkRetry
from bkspark.metadata.znodes import Outcome, Znodes, zk_errors_as
from bkspark.protocol.ledger_name import parse_qualified_name, qualified_name
from bkspark.protocol import zk_paths
from bkspark.protocol.values import is_int64
from bkspark.retry import METADATA_CAS_RETRY

__all__ = [
    "OrphanReason",
    "OrphanRecord",
    "AuditConfig",
    "AuditStatus",
    "audit_root",
    "orphans_path",
    "config_path",
    "election_path",
    "status_path",
    "list_orphans",
    "read_config",
    "write_config",
    "update_config",
    "read_stored_config",
    "read_status",
    "write_status",
    "MAX_RECORD_BYTES",
    "encode_records",
    "decode_records",
    "LeadershipLostError",
    "put_znode",
    "delete_znode",
]

MAX_RECORD_BYTES = 4096
#: The keys of the config znode, each optional.
CONFIG_KEYS = ("auditPeriodSeconds", "gracePeriodSeconds", "parentGracePeriodSeconds")


# The audit's znodes; their home is bkspark/protocol/zk_paths.py, named here for the auditor and the shell.
audit_root = zk_paths.audit_path
orphans_path = functools.partial(zk_paths.audit_znode_path, znode=zk_paths.AUDIT_ORPHANS)
config_path = functools.partial(zk_paths.audit_znode_path, znode=zk_paths.AUDIT_CONFIG)
election_path = functools.partial(zk_paths.audit_znode_path, znode=zk_paths.AUDIT_ELECTION)
status_path = functools.partial(zk_paths.audit_znode_path, znode=zk_paths.AUDIT_STATUS)


class OrphanReason(str, enum.Enum):
    """The seed's two kinds of orphaned ledger."""

    #: Closed with ``expectDeleteAfter`` and still there after that instant plus the grace period.
    DELETE_OVERDUE = "DELETE_OVERDUE"
    #: Created with ``childOfLedger`` naming a ledger that does not exist.
    BROKEN_PARENT_REF = "BROKEN_PARENT_REF"
    #: Left by a Spark write job after its commit point and named by no dataset manifest (an attempt that did not
    #: commit, or a ledger an overwrite replaced) while the job's clean-up is unfinished (docs/connector.md).
    #: The detail is the job's parent ledger id when known, else 0.
    DATASET_LEFTOVER = "DATASET_LEFTOVER"


def _int(obj: dict[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if not is_int64(value):
        raise ValueError(f"{key} must be an int64, got {value!r}")
    return value


@dataclass(frozen=True)
class OrphanRecord:
    """One orphaned ledger and why.

    ``detail`` is what the seed prints after the reason: the expected delete
    instant (seconds since the epoch) for DELETE_OVERDUE, the parent's ledger
    id for BROKEN_PARENT_REF (``detail_scope_id`` is the parent's scope).
    """

    ledger_id: int
    scope_id: int
    reason: OrphanReason
    detail: int
    detail_scope_id: int = 0
    first_seen_ms: int = 0

    @property
    def name(self) -> str:
        """The ledger's qualified name (BP-35), the record's znode name."""
        return qualified_name(self.scope_id, self.ledger_id)

    @property
    def ledger_label(self) -> str:
        """How the shell names the ledger: the plain id in scope 0, the qualified name elsewhere."""
        return str(self.ledger_id) if self.scope_id == 0 else self.name

    @property
    def detail_label(self) -> str:
        """The detail as the seed prints it (a parent in another scope by its qualified name)."""
        if self.reason in (OrphanReason.BROKEN_PARENT_REF, OrphanReason.DATASET_LEFTOVER) and self.detail_scope_id != 0:
            return qualified_name(self.detail_scope_id, self.detail)
        return str(self.detail)

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "scopeId": self.scope_id,
            "reason": self.reason.value,
            "detail": self.detail,
            "detailScopeId": self.detail_scope_id,
            "firstSeenMs": self.first_seen_ms,
        }

    def same_finding(self, other: "OrphanRecord") -> bool:
        """Whether two records say the same thing (ignoring when it was first seen)."""
        return (self.ledger_id, self.scope_id, self.reason, self.detail, self.detail_scope_id) == (
            other.ledger_id,
            other.scope_id,
            other.reason,
            other.detail,
            other.detail_scope_id,
        )


def encode_records(records: list[OrphanRecord]) -> bytes:
    """The value of one ledger's orphan znode (all its reasons)."""
    return json.dumps({"v": 1, "reasons": [r.to_json() for r in records]}, sort_keys=True, separators=(",", ":")).encode()


def decode_records(name: str, data: bytes) -> list[OrphanRecord]:
    """Parse one orphan znode; :class:`BadMetadataError` naming it when it is not ours."""
    try:
        scope_id, ledger_id = parse_qualified_name(name)
        if len(data) > MAX_RECORD_BYTES:
            raise ValueError(f"{len(data)} bytes is too large")
        obj = json.loads(data.decode("utf-8"))
        if not isinstance(obj, dict) or not isinstance(obj.get("reasons"), list) or not obj["reasons"]:
            raise ValueError("expected an object with a non-empty 'reasons' list")
        out = []
        for item in obj["reasons"]:
            if not isinstance(item, dict):
                raise ValueError("each reason must be an object")
            if _int(item, "ledgerId") != ledger_id or _int(item, "scopeId") != scope_id:
                raise ValueError("record names another ledger than its znode")
            out.append(
                OrphanRecord(
                    ledger_id=ledger_id,
                    scope_id=scope_id,
                    reason=OrphanReason(item.get("reason")),
                    detail=_int(item, "detail"),
                    detail_scope_id=_int(item, "detailScopeId", 0),
                    first_seen_ms=_int(item, "firstSeenMs", 0),
                )
            )
        return out
    except (ValueError, UnicodeDecodeError, RecursionError, InvalidOptionError) as exc:
        raise BadMetadataError(f"malformed orphan record {name!r}: {exc}") from None


def list_orphans(zk: Any, root: str, retry: ZkRetry | None = None) -> list[OrphanRecord]:
    """Every orphan the last audit recorded, sorted by (scope, ledger id, reason).

    One ``getChildren`` and multi reads of the records: cheap whatever the number of ledgers in the cluster.
    A lost connection is retried under ``retry`` (a default :class:`ZkRetry` when None), as the metadata
    store's reads are.  No audit yet means an empty list.
    """
    base = orphans_path(root)
    policy = retry or ZkRetry()
    znodes = Znodes(zk)
    with zk_errors_as("cannot list orphans", path=base):
        names = policy(znodes.children, base)
    out: list[OrphanRecord] = []
    with zk_errors_as("cannot read orphan records", path=base):
        paths = [f"{base}/{name}" for name in names]
        for (_, found), name in zip(znodes.read_many(paths, timeout=30, retry=policy), names):
            if found is not None:  # (None: cleared by the auditor since we listed)
                out.extend(decode_records(name, found[0]))
    out.sort(key=lambda r: (r.scope_id % 2**64, r.ledger_id, r.reason.value))
    return out


@dataclass(frozen=True)
class AuditConfig:
    """The orphan audit's tunables, read from the ``config`` znode while auditors run.

    ``audit_period`` seconds between the starts of two passes;
    ``grace_period`` seconds a ledger may outlive its ``expectDeleteAfter``;
    ``parent_grace_period`` seconds after its creation during which a child's
    missing parent is not reported (0, the seed's rule: report at once; a writer
    that creates the parent after its children sets it, see docs/context-and-audit.md).
    """

    audit_period: float = 300.0
    grace_period: float = 3600.0
    parent_grace_period: float = 0.0

    def __post_init__(self) -> None:
        for name, minimum in (("audit_period", 0.1), ("grace_period", 0.0), ("parent_grace_period", 0.0)):
            value = getattr(self, name)
            if not is_finite_number(value):
                raise InvalidOptionError(f"{name} must be a number of seconds, not {value!r}")
            if value < minimum or value > 10 * 365 * 86400:
                raise InvalidOptionError(f"{name} {value} out of range [{minimum}, 10 years]")
            object.__setattr__(self, name, float(value))

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "auditPeriodSeconds": self.audit_period,
                "gracePeriodSeconds": self.grace_period,
                "parentGracePeriodSeconds": self.parent_grace_period,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, defaults: "AuditConfig | None" = None) -> "AuditConfig":
        """Parse the config znode; keys it lacks come from ``defaults``. :class:`BadMetadataError` if malformed."""
        base = defaults or cls()
        try:
            if len(data) > MAX_RECORD_BYTES:
                raise ValueError("too large")
            obj = json.loads(data.decode("utf-8")) if data.strip() else {}
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            return cls(
                audit_period=obj.get("auditPeriodSeconds", base.audit_period),
                grace_period=obj.get("gracePeriodSeconds", base.grace_period),
                parent_grace_period=obj.get("parentGracePeriodSeconds", base.parent_grace_period),
            )
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise BadMetadataError(f"malformed audit config: {exc}") from None


class LeadershipLostError(MetadataError):
    """The audit leader's election znode is gone (its session ended, or the znode was deleted): it leads no more,
    and the write of its pass was refused."""

    code, retriable, invalidates_client = -999, False, False


_Op = Literal["set", "create", "delete"]


def _write(znodes: Znodes, fence: str | None, op: _Op, path: str, data: bytes = b"") -> Outcome:
    """One ``set``, ``create`` or ``delete`` of ``path``: OK, NO_NODE (set, delete) or NODE_EXISTS (create); with
    ``fence``, in a ``multi`` that first checks the fence znode exists (any version), so that nothing is written
    once it is gone."""
    if fence is None:
        if op == "set":
            return Outcome.OK if znodes.set(path, data) is not None else Outcome.NO_NODE
        if op == "create":
            return znodes.create(path, data, makepath=True)
        return Outcome.OK if znodes.delete(path) else Outcome.NO_NODE
    tx = znodes.multi().check(fence, -1)
    if op == "set":
        tx.set(path, data)
    elif op == "create":
        tx.create(path, data)
    else:
        tx.delete(path)
    outcomes = tx.commit()
    if outcomes is None:
        raise MetadataError(f"audit {op} of {path}: the connection to ZooKeeper was lost", path=path)
    check, result = outcomes
    if check is Outcome.NO_NODE:
        raise LeadershipLostError(f"audit leader's election znode is gone: {op} refused", fence=fence, path=path)
    if result in (Outcome.NO_NODE, Outcome.NODE_EXISTS):
        return result
    tx.raise_failure()  # a failed multi rolls back the ops before the failing one
    return Outcome.OK


#: :func:`put_znode`'s tries in all, each a set or a create, while other writers keep creating and deleting the znode.
_PUT_TRIES = 6


def put_znode(zk: Any, path: str, data: bytes, *, exists: bool = True, fence: str | None = None) -> None:
    """Set ``path`` to ``data``, creating it when it is missing (``exists`` says which to try first); with ``fence``
    (the writing leader's election znode) only while that znode exists, else :class:`LeadershipLostError`.
    Other ZooKeeper errors are kazoo's, for the caller to name.

    Another writer may create or delete ``path`` between our two tries (a tool's pass beside the leader's, or the
    next leader's): each ``NoNode`` or ``NodeExists`` turns to the other op, up to :data:`_PUT_TRIES` tries in all,
    then :class:`MetadataError`."""
    znodes = Znodes(zk)
    ops: tuple[_Op, _Op] = ("set", "create") if exists else ("create", "set")
    for attempt in range(_PUT_TRIES):
        if _write(znodes, fence, ops[attempt % 2], path, data) is Outcome.OK:
            return
    raise MetadataError(f"cannot write {path}: other writers kept creating and deleting it", path=path)


def delete_znode(zk: Any, path: str, *, fence: str | None = None) -> bool:
    """Delete ``path``; False when it was already gone.  ``fence`` as for :func:`put_znode`."""
    return _write(Znodes(zk), fence, "delete", path) is Outcome.OK


def _read_znode(zk: Any, path: str, what: str) -> bytes | None:
    """A znode's data, None if it does not exist; any other ZooKeeper error is a MetadataError naming ``what``."""
    with zk_errors_as(f"cannot read {what}"):
        found = Znodes(zk).get(path)
    return None if found is None else found[0]


def read_config(zk: Any, root: str, defaults: AuditConfig | None = None) -> tuple[AuditConfig, bool]:
    """The stored config (``defaults`` if none is stored) and whether one was stored."""
    data = _read_znode(zk, config_path(root), "audit config")
    if data is None:
        return defaults or AuditConfig(), False
    return AuditConfig.from_bytes(data, defaults), True


def write_config(zk: Any, root: str, config: AuditConfig) -> None:
    """Store ``config`` (both values); every running auditor picks it up through its watch."""
    update_config(
        zk, root, audit_period=config.audit_period, grace_period=config.grace_period,
        parent_grace_period=config.parent_grace_period,
    )


def update_config(
    zk: Any,
    root: str,
    *,
    audit_period: float | None = None,
    grace_period: float | None = None,
    parent_grace_period: float | None = None,
) -> dict[str, float]:
    """Set only the given values in the config znode (compare-and-set); returns what is stored now.

    A value never stored stays each auditor's own (its command-line flag).
    A malformed stored config is replaced.
    """
    AuditConfig(  # validate before writing
        audit_period=1.0 if audit_period is None else audit_period,
        grace_period=0.0 if grace_period is None else grace_period,
        parent_grace_period=0.0 if parent_grace_period is None else parent_grace_period,
    )
    path = config_path(root)
    znodes = Znodes(zk)
    attempts = METADATA_CAS_RETRY.start()
    with zk_errors_as("cannot write audit config"):
        while True:
            found = znodes.get(path)
            data, version = (found[0], found[1].version) if found is not None else (b"", None)
            stored = _stored_values(data)
            if audit_period is not None:
                stored["auditPeriodSeconds"] = float(audit_period)
            if grace_period is not None:
                stored["gracePeriodSeconds"] = float(grace_period)
            if parent_grace_period is not None:
                stored["parentGracePeriodSeconds"] = float(parent_grace_period)
            encoded = json.dumps({"v": 1, **stored}, sort_keys=True, separators=(",", ":")).encode()
            if version is None:
                written = znodes.create(path, encoded, makepath=True) is Outcome.OK
            else:
                written = znodes.set(path, encoded, version=version) is not None
            if written:
                return stored
            # Someone else wrote meanwhile: re-read and merge with theirs, while the CAS policy allows.
            attempts.backoff(MetadataVersionError("cannot write audit config: it keeps changing", path=path))


def _stored_values(data: bytes) -> dict[str, float]:
    """The valid values in a config znode (nothing from a malformed one)."""
    try:
        obj = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    if not isinstance(obj, dict):
        return {}
    out: dict[str, float] = {}
    for key in CONFIG_KEYS:
        value = obj.get(key)
        if is_finite_number(value):
            out[key] = float(value)
    return out


def read_stored_config(zk: Any, root: str) -> dict[str, float] | None:
    """The values stored in the config znode (``None`` if there is no znode); malformed: BadMetadataError."""
    data = _read_znode(zk, config_path(root), "audit config")
    if data is None:
        return None
    AuditConfig.from_bytes(data)  # raises on a malformed znode
    return _stored_values(data)


@dataclass(frozen=True)
class AuditStatus:
    """What the leader reports after each pass (``status`` znode)."""

    auditor: str
    pass_started_ms: int
    pass_finished_ms: int
    ledgers_scanned: int
    orphans: int
    unreadable: int
    passes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "auditor": self.auditor,
            "passStartedMs": self.pass_started_ms,
            "passFinishedMs": self.pass_finished_ms,
            "ledgersScanned": self.ledgers_scanned,
            "orphans": self.orphans,
            "unreadable": self.unreadable,
            "passes": self.passes,
        }

    @classmethod
    def from_bytes(cls, data: bytes) -> "AuditStatus":
        try:
            obj = json.loads(data.decode("utf-8"))
            if not isinstance(obj, dict) or not isinstance(obj.get("auditor"), str):
                raise ValueError("expected an object naming the auditor")
            return cls(
                auditor=obj["auditor"],
                pass_started_ms=_int(obj, "passStartedMs"),
                pass_finished_ms=_int(obj, "passFinishedMs"),
                ledgers_scanned=_int(obj, "ledgersScanned"),
                orphans=_int(obj, "orphans"),
                unreadable=_int(obj, "unreadable"),
                passes=_int(obj, "passes"),
            )
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise BadMetadataError(f"malformed audit status: {exc}") from None


def read_status(zk: Any, root: str) -> AuditStatus | None:
    """The last pass's status, ``None`` before the first pass."""
    data = _read_znode(zk, status_path(root), "audit status")
    return None if data is None else AuditStatus.from_bytes(data)


def write_status(zk: Any, root: str, status: AuditStatus, *, fence: str | None = None) -> None:
    """Store the leader's report of its last pass (``fence``: see :func:`put_znode`)."""
    data = json.dumps(status.to_json(), sort_keys=True, separators=(",", ":")).encode()
    with zk_errors_as("cannot write audit status"):
        put_znode(zk, status_path(root), data, fence=fence)
