"""Garbage collection of ledgers whose metadata is gone, and entry-log compaction.

A bookie only learns that a ledger was deleted by noticing that its metadata
znode disappeared.  Looking in the wrong place would delete live data, so the
collector is deliberately conservative:

* it reads ``<root>/LAYOUT`` first and takes the path scheme from it (the same
  ledger manager the Java clients use), and does nothing when LAYOUT is
  missing or unreadable, or when the root itself does not exist;
* it lists local ledgers *before* asking ZooKeeper, so a ledger created
  meanwhile (metadata is always created before the first add) is found;
* a ledger is deleted only when its znode is missing in two look-ups taken
  at least ``confirm_delay`` apart (the path is built by
  :func:`bkspark.protocol.zk_paths.ledger_path`, the single home of the scheme);
* any ZooKeeper error aborts the whole round.

After the deletions, a round may compact entry logs (:class:`CompactionSchedule`: Apache BookKeeper's minor and
major compactions, their thresholds and intervals), then removes the entry logs no index row points into.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from bkspark.errors import BKError
from bkspark.metadata.znodes import ZK_FAILURES, Znodes
from bkspark.protocol import zk_paths
from bkspark.protocol.layout import LedgerLayout

from bookie_server.bookie import Bookie
from bkspark.config.bookie import BookieConfig
from bookie_server.journal import CrashPoint, crash_point

__all__ = ["CompactionSchedule", "GarbageCollector", "find_orphans"]

log = logging.getLogger("bookie_server.gc")

LedgerKey = tuple[int, int]


def find_orphans(zk: Any, root: str, ledgers: list[LedgerKey]) -> list[LedgerKey] | None:
    """Local ledgers whose metadata znode does not exist (None: not safe to decide now); ``zk`` is the bookie's
    started kazoo client."""
    nodes = Znodes(zk)
    try:
        if nodes.stat(root) is None:
            log.warning("gc: ledgers root %s does not exist; skipping", root)
            return None
        layout = nodes.get(zk_paths.layout_path(root))
        if layout is None:
            log.warning("gc: no LAYOUT under %s; skipping", root)
            return None
        scheme = LedgerLayout.parse(layout[0]).scheme
    except (*ZK_FAILURES, BKError) as exc:
        log.warning("gc: cannot read the layout under %s (%s); skipping", root, exc)
        return None
    if scheme == "ms":
        log.warning("gc: unsupported ledger manager layout %r; skipping", scheme)
        return None
    orphans = []
    try:
        for scope_id, ledger_id in ledgers:
            try:
                path = zk_paths.ledger_path(root, ledger_id, scheme, scope_id)
            except BKError:
                continue  # an id this layout cannot name: never ours to judge
            if nodes.stat(path) is None:
                orphans.append((scope_id, ledger_id))
    except ZK_FAILURES as exc:
        log.warning("gc: ZooKeeper error while checking ledgers (%s); skipping", exc)
        return None
    return orphans


@dataclass
class CompactionSchedule:
    """When a GC round compacts, and with which threshold: Apache BookKeeper's ``GarbageCollectorThread`` rules
    (docs/bookie.md, "Compaction").  A major compaction is due ``majorCompactionInterval`` seconds after the last
    one and counts as a minor one too; else a minor one ``minorCompactionInterval`` seconds after the last of
    either.  A threshold or an interval of 0 turns that kind off; an admin's ``forceMajor``/``forceMinor``, or a
    full disk with ``isForceGCAllowWhenNoSpace``, runs one now whatever its interval."""

    minor_threshold: float
    minor_interval_s: float
    major_threshold: float
    major_interval_s: float
    force_when_no_space: bool = False
    #: Monotonic times of the last compactions: the bookie's start counts as one, as in Java.
    last_minor: float = field(default_factory=time.monotonic)
    last_major: float = field(default_factory=time.monotonic)

    @classmethod
    def from_conf(cls, conf: BookieConfig) -> "CompactionSchedule":
        return cls(
            conf.minorCompactionThreshold,
            conf.minorCompactionInterval,
            conf.majorCompactionThreshold,
            conf.majorCompactionInterval,
            conf.isForceGCAllowWhenNoSpace,
        )

    def due(
        self, now: float, *, force_major: bool = False, force_minor: bool = False, disk_full: bool = False
    ) -> tuple[str, float] | None:
        """``("major" | "minor", threshold)`` of the compaction this round runs, or None; marks it as run."""
        force_major = force_major or (disk_full and self.force_when_no_space)
        major_on = self.major_threshold > 0 and self.major_interval_s > 0
        minor_on = self.minor_threshold > 0 and self.minor_interval_s > 0
        if (force_major and self.major_threshold > 0) or (major_on and now - self.last_major > self.major_interval_s):
            self.last_major = self.last_minor = now
            return "major", self.major_threshold
        if (force_minor and self.minor_threshold > 0) or (minor_on and now - self.last_minor > self.minor_interval_s):
            self.last_minor = now
            return "minor", self.minor_threshold
        return None


class GarbageCollector:
    """Periodic scan-and-compare against ZooKeeper, then local deletion."""

    def __init__(
        self,
        bookie: Bookie,
        zk: Any,
        root: str,
        *,
        confirm_delay: float = 1.0,
        compaction: CompactionSchedule | None = None,
    ) -> None:
        self.bookie = bookie
        self.compaction = compaction or CompactionSchedule.from_conf(bookie.conf)
        #: Entry logs compacted since start (each then removed by the reclaim of its round).
        self.compacted_total = 0
        self.zk = zk
        self.root = root
        self.confirm_delay = confirm_delay
        self.deleted_total = 0
        self._lock = asyncio.Lock()
        #: True until a round has removed the entry logs that deletions emptied: at start too, since a crash between
        #: a round's checkpoint and its removal leaves such logs, and the ledgers they held are no longer found.
        self._reclaim_due = True

    async def run_once(self, *, force_major: bool = False, force_minor: bool = False) -> list[LedgerKey]:
        """One collection round (with a compaction when one is due or forced); returns the ledgers deleted."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            started = time.monotonic()
            confirmed = await self._confirmed_orphans(loop)
            for scope_id, ledger_id in confirmed:
                self.bookie.delete_ledger(scope_id, ledger_id)
                log.info("gc: deleted ledger %d (scope %d): its metadata is gone", ledger_id, scope_id)
            self.deleted_total += len(confirmed)
            if confirmed:
                await self.bookie.checkpoint_after_now()  # index rows and states of the deleted ledgers go
                crash_point(CrashPoint.GC_CHECKPOINTED)
                self._reclaim_due = True
            kind = self.compaction.due(
                time.monotonic(), force_major=force_major, force_minor=force_minor,
                disk_full=self.bookie.disk_full,
            )
            if kind is not None:
                compacted = await loop.run_in_executor(None, self.bookie.storage.compact_entry_logs, kind[1])
                log.info("gc: %s compaction (threshold %.2f) compacted %d entry log(s)", kind[0], kind[1], len(compacted))
                self.compacted_total += len(compacted)
                if compacted:
                    # The loop's reused index snapshot may still point into the compacted logs: dropped before
                    # they go.
                    self.bookie.storage.refresh_indexes()
                    self._reclaim_due = True
            if self._reclaim_due:
                removed = await loop.run_in_executor(None, self.bookie.storage.reclaim_entry_logs)
                self._reclaim_due = False
                if removed:
                    log.info("gc: removed %d entry log(s) holding only deleted ledgers", len(removed))
            log.debug("gc round took %.3fs", time.monotonic() - started)
            return confirmed

    async def _confirmed_orphans(self, loop: asyncio.AbstractEventLoop) -> list[LedgerKey]:
        """Local ledgers whose metadata is missing in two look-ups ``confirm_delay`` apart (see the module's rules)."""
        local = self.bookie.storage.ledgers()
        if not local:
            return []
        first = await loop.run_in_executor(None, find_orphans, self.zk, self.root, local)
        if not first:
            return []
        await asyncio.sleep(self.confirm_delay)
        second = await loop.run_in_executor(None, find_orphans, self.zk, self.root, first)
        if not second:
            return []
        candidates = set(first)
        return [k for k in second if k in candidates]

    async def run_forever(self, interval_s: float) -> None:
        """Collect every ``interval_s`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.run_once()
            except Exception:
                log.exception("gc round failed")
