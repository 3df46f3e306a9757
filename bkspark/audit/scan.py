"""One orphan-audit pass: walk every ledger, judge it from its context, reconcile the ``orphans`` znodes.

The judgement (:func:`orphan_reasons`) is a pure function of one ledger's
metadata, the time and the grace period; the walk reads metadata with
pipelined ``getData`` calls (kazoo's async API), a window at a time, so a pass
over many ledgers is a few round trips per window, not one per ledger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from datetime import datetime, timedelta, timezone

from bkspark.audit.records import (
    AuditConfig,
    OrphanReason,
    OrphanRecord,
    decode_records,
    delete_znode,
    encode_records,
    orphans_path,
    put_znode,
)
from bkspark.context import LedgerLink, read_close_context, read_create_context
from bkspark.errors import BadMetadataError, InvalidOptionError
from bkspark.metadata.store import ZkMetadataStore
from bkspark.metadata.znodes import Znodes, zk_errors_as
from bkspark.protocol import zk_paths
from bkspark.protocol.ledger_metadata import LedgerMetadata

__all__ = ["AuditResult", "orphan_reasons", "iter_ledgers", "scan", "reconcile", "Progress"]

log = logging.getLogger(__name__)

#: ``progress(done, total)`` after each window of ledgers.
Progress = Callable[[int, int], None]

_WINDOW = 256
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class AuditResult:
    """What one pass found."""

    orphans: list[OrphanRecord] = field(default_factory=list)
    scanned: int = 0
    #: Ledgers whose metadata or context could not be read: (label, error), skipped by this pass.
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    started_ms: int = 0
    finished_ms: int = 0


def orphan_reasons(
    scope_id: int,
    ledger_id: int,
    metadata: LedgerMetadata,
    now_ms: int,
    grace_ms: int,
    parent_exists: Callable[[LedgerLink], bool],
    parent_grace_ms: int = 0,
) -> list[OrphanRecord]:
    """Why this ledger is an orphan (empty if it is not).

    A child younger than ``parent_grace_ms`` (by its ctime) is not judged for
    its parent yet.

    Raises :class:`~bkspark.errors.BadLedgerContextError` when its context is malformed.
    """
    out: list[OrphanRecord] = []
    close = read_close_context(metadata.custom_metadata)
    if close is not None and close.expect_delete_after is not None:
        delete_ms = (close.expect_delete_after - _EPOCH) // timedelta(milliseconds=1)
        if now_ms > delete_ms + grace_ms:
            out.append(OrphanRecord(ledger_id, scope_id, OrphanReason.DELETE_OVERDUE, delete_ms // 1000))
    create = read_create_context(metadata.custom_metadata)
    young = parent_grace_ms > 0 and metadata.ctime > 0 and now_ms - metadata.ctime < parent_grace_ms
    if create is not None and create.child_of_ledger is not None and not young:
        parent = create.child_of_ledger
        if not parent_exists(parent):
            out.append(
                OrphanRecord(
                    ledger_id, scope_id, OrphanReason.BROKEN_PARENT_REF, parent.ledger_id, detail_scope_id=parent.scope_id
                )
            )
    return out


def _walk_scopes(store: ZkMetadataStore, path: str) -> Iterator[tuple[int, int]]:
    children = store.retry(Znodes(store.zk).children, path)
    for child in sorted(children):
        full = f"{path}/{child}"
        if child.startswith(zk_paths.LEDGER_PREFIX):
            try:
                yield zk_paths.parse_ledger_path(store.root, full, store.scheme)
            except BadMetadataError:
                log.debug("skipping non-ledger znode %s", full)
        elif child.isdigit():
            yield from _walk_scopes(store, full)


def iter_ledgers(store: ZkMetadataStore) -> Iterator[tuple[int, int]]:
    """Every ``(scope_id, ledger_id)`` of the cluster: scope 0 as Java walks it, then ``<root>/scopes``."""
    for ledger_id in store.list_ledgers(0):
        yield 0, ledger_id
    if store.scheme != "flat":
        yield from _walk_scopes(store, zk_paths.scopes_root(store.root))


def _label(scope_id: int, ledger_id: int) -> str:
    return str(ledger_id) if scope_id == 0 else f"{scope_id}/{ledger_id}"


def _read_window(
    store: ZkMetadataStore, refs: list[tuple[int, int]]
) -> Iterator[tuple[int, int, LedgerMetadata | None, str | None]]:
    """``(scope, id, metadata or None, why it is unreadable or None)``, read by the store's multi reads
    (``ZkMetadataStore.read_many_ledger_metadata``); deleted ledgers are left out."""
    for scope_id, ledger_id, read in store.read_many_ledger_metadata(refs, bad_metadata_as_result=True):
        if read is None:
            continue
        if isinstance(read, BadMetadataError):
            yield scope_id, ledger_id, None, str(read)
            continue
        yield scope_id, ledger_id, read.metadata, None


def scan(
    store: ZkMetadataStore,
    config: AuditConfig,
    *,
    now_ms: int | None = None,
    progress: Progress | None = None,
    ledgers: Iterable[tuple[int, int]] | None = None,
) -> AuditResult:
    """Judge every ledger (or ``ledgers``) once; writes nothing."""
    result = AuditResult(started_ms=int(time.time() * 1000))
    now = result.started_ms if now_ms is None else now_ms
    grace_ms = int(config.grace_period * 1000)
    parent_grace_ms = int(config.parent_grace_period * 1000)
    refs = list(iter_ledgers(store) if ledgers is None else ledgers)
    known = set(refs)
    exists_cache: dict[tuple[int, int], bool] = {}

    def parent_exists(link: LedgerLink) -> bool:
        key = (link.scope_id, link.ledger_id)
        if key in known:  # listed at the start of this pass; a later deletion is the next pass's finding
            return True
        if key not in exists_cache:  # maybe created after we listed: ask ZooKeeper once
            try:
                exists_cache[key] = store.ledger_exists(link.ledger_id, link.scope_id)
            except InvalidOptionError:  # no path of this layout can hold it, so it does not exist
                exists_cache[key] = False
        return exists_cache[key]

    if progress is not None:
        progress(0, len(refs))
    for start in range(0, len(refs), _WINDOW):
        window = refs[start : start + _WINDOW]
        for scope_id, ledger_id, md, error in _read_window(store, window):
            result.scanned += 1
            if md is None:
                result.unreadable.append((_label(scope_id, ledger_id), error or "unreadable"))
                continue
            try:
                result.orphans.extend(
                    orphan_reasons(scope_id, ledger_id, md, now, grace_ms, parent_exists, parent_grace_ms)
                )
            except BadMetadataError as exc:  # BadLedgerContextError: someone else's malformed context
                result.unreadable.append((_label(scope_id, ledger_id), str(exc)))
        if progress is not None:
            progress(min(start + _WINDOW, len(refs)), len(refs))
    result.orphans.extend(_dataset_leftovers(store, known, result.unreadable))
    result.finished_ms = int(time.time() * 1000)
    return result


def _dataset_leftovers(
    store: ZkMetadataStore, known: set[tuple[int, int]], unreadable: list[tuple[str, str]]
) -> list[OrphanRecord]:
    """Ledgers the Spark writer's unfinished clean-ups left (bkspark.datasource.datasets), among ``known``.

    A job record or manifest that cannot be parsed goes to ``unreadable`` like a ledger's: one bad znode must
    not stop the pass from recording everything else.
    """
    from bkspark.datasource.datasets import DatasetRegistry

    def skipped(label: str, exc: BadMetadataError) -> None:
        unreadable.append((label, str(exc)))

    leftovers = DatasetRegistry(store.zk, store.root).leftover_ledgers(on_unreadable=skipped)
    out = []
    for (scope_id, ledger_id), parent in sorted(leftovers.items()):
        if (scope_id, ledger_id) in known:
            p_scope, p_id = parent if parent is not None else (0, 0)
            out.append(OrphanRecord(ledger_id, scope_id, OrphanReason.DATASET_LEFTOVER, p_id, detail_scope_id=p_scope))
    return out


def reconcile(
    zk: Any, root: str, found: list[OrphanRecord], now_ms: int | None = None, *, fence: str | None = None
) -> tuple[int, int]:
    """Make ``<root>/bkspark/audit/orphans`` hold exactly ``found``; returns ``(written, removed)``.

    Records whose findings did not change are left alone (their first-seen time
    survives); a record we cannot parse is replaced.  With ``fence`` (the leader's
    election znode) every create, set and delete is refused once that znode is gone
    (:class:`bkspark.audit.records.LeadershipLostError`, raised at the first one).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    base = orphans_path(root)
    by_name: dict[str, list[OrphanRecord]] = {}
    for record in found:
        by_name.setdefault(record.name, []).append(record)
    znodes = Znodes(zk)
    with zk_errors_as("cannot record orphans", path=base):
        znodes.ensure_path(base)
        existing = set(znodes.children(base))
        # Pipelined reads of the records we may keep (one round trip, not one per orphan).
        kept = [name for name in by_name if name in existing]
        stored = dict(zip(kept, znodes.get_each([f"{base}/{name}" for name in kept], timeout=60)))
        written = removed = 0
        for name, records in sorted(by_name.items()):
            path = f"{base}/{name}"
            old: list[OrphanRecord] = []
            found = stored.get(name)
            if found is not None:
                try:
                    old = decode_records(name, found[0])
                except BadMetadataError:
                    old = []
            first_seen = {(r.reason, r.detail, r.detail_scope_id): r.first_seen_ms for r in old}
            merged = [
                OrphanRecord(
                    r.ledger_id, r.scope_id, r.reason, r.detail, r.detail_scope_id,
                    first_seen.get((r.reason, r.detail, r.detail_scope_id)) or now,
                )
                for r in records
            ]
            if len(old) == len(merged) and all(a.same_finding(b) for a, b in zip(old, merged)):
                continue
            put_znode(zk, path, encode_records(merged), exists=name in existing, fence=fence)
            written += 1
        for name in existing - set(by_name):
            if delete_znode(zk, f"{base}/{name}", fence=fence):
                removed += 1
        return written, removed
