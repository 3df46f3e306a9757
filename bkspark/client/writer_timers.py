"""A ledger writer's timed work (loop thread): the overall deadline of an add (``addEntryQuorumTimeoutSec``), the
explicit LAC of an idle writer (``explicitLacInterval``, WRITE_LAC) and FORCE_LEDGER.

One part of :class:`bkspark.client.writer.LedgerWriter` (it inherits this class), kept in a room of its own
(docs/client.md).
"""

from __future__ import annotations

import asyncio
import logging

from bkspark.errors import AddEntryQuorumTimeoutError
from bkspark.protocol.ledger_metadata import write_set


__all__ = ["WriterTimers"]

log = logging.getLogger("bkspark.client.writer")


class WriterTimers:
    """Deadlines and periodic flushes of a :class:`~bkspark.client.writer.LedgerWriter`."""

    # -- addEntryQuorumTimeoutSec: an overall deadline for an add ----------------------------

    def _note_queued(self) -> None:
        """Remember that the adds up to ``last_add_pushed`` were queued now; arm the deadline of the oldest."""
        self._queued_at.append((self.last_add_pushed, self.ctx.loop.time()))
        if self._quorum_timer is None:
            self._arm_quorum_deadline()

    def _oldest_queued_at(self) -> float | None:
        """When the oldest pending add was queued (None when nothing is pending)."""
        queued = self._queued_at
        if not self.pending:
            queued.clear()
            return None
        head = self.pending[0].entry_id
        while queued and queued[0][0] < head:
            queued.popleft()
        return queued[0][1] if queued else None

    def _arm_quorum_deadline(self) -> None:
        since = self._oldest_queued_at()
        if since is not None:
            self._quorum_timer = self.ctx.loop.call_at(since + self._quorum_timeout, self._quorum_deadline)

    def _quorum_deadline(self) -> None:
        """The oldest pending add's deadline: fail the writer if it still lacks its quorum (Java's
        ``PendingAddOp.timeoutQuorumWait``), else wait for the next oldest one's."""
        self._quorum_timer = None
        if self.error is not None:
            return
        since = self._oldest_queued_at()
        if since is None:
            return
        if self.ctx.loop.time() < since + self._quorum_timeout:
            self._arm_quorum_deadline()
            return
        head = self.pending[0]
        log.warning(
            "ledger %s: entry %s has no ack quorum after addEntryQuorumTimeoutSec=%s (ensemble %s): writes end",
            self.ref.ledger_id, head.entry_id, self._quorum_timeout, self.ensemble,
        )
        self._fail_all(
            AddEntryQuorumTimeoutError(
                f"entry reached no ack quorum within addEntryQuorumTimeoutSec={self._quorum_timeout:g}",
                ledger_id=self.ref.ledger_id, entry_id=head.entry_id, ensemble=list(self.ensemble),
            )
        )

    # -- explicit LAC and force (v3 only) ----------------------------------------------------

    def _explicit_lac_tick(self, interval: float) -> None:
        """``ExplicitLacFlushPolicy``: WRITE_LAC when the LAC moved and no later add carried it."""
        if self.closed or self.closing or self.error is not None:
            self._lac_timer = None
            return
        if self.lac > max(self._lac_piggybacked, self._lac_explicit):
            asyncio.ensure_future(self._flush_lac())
        self._lac_timer = self.ctx.loop.call_later(interval, self._explicit_lac_tick, interval)

    async def _flush_lac(self) -> None:
        try:
            await self.write_lac()
        except Exception as exc:  # noqa: BLE001 - best effort, the next tick tries again
            log.debug("ledger %s: explicit LAC flush failed: %s", self.ref.ledger_id, exc)

    async def write_lac(self) -> int:
        """WRITE_LAC(LAC) to the write set of entry LAC, done on Qa answers (Java's ``PendingWriteLacOp``).

        Lets readers that use READ_LAC see the LAC without a later entry piggy-backing it.
        """
        lac = self.lac
        if lac < 0:
            return lac
        blob = self.digester.package_lac(self.ref.ledger_id, lac, self.ref.scope_id)
        ops = self.ctx.ops
        results = await asyncio.gather(
            *(
                ops.write_lac_async(self.ensemble[i], self.ref.ledger_id, lac, self.master_key, blob, self.ref.scope_id)
                for i in write_set(lac, self.E, self.W)
            ),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if len(results) - len(errors) < self.A:
            raise errors[0]
        self._lac_explicit = max(self._lac_explicit, lac)
        return lac

    async def force(self) -> int:
        """FORCE_LEDGER to every bookie of the current ensemble; returns the LAC it made durable."""
        lac = self.lac
        ops = self.ctx.ops
        results = await asyncio.gather(
            *(ops.force_ledger_async(b, self.ref.ledger_id, self.ref.scope_id) for b in dict.fromkeys(self.ensemble)),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return lac
