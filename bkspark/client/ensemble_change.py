"""A ledger writer's ensemble changes, and its answer to a bookie that refuses adds as too many (loop thread).

One part of :class:`bkspark.client.writer.LedgerWriter` (it inherits this class), kept in a room of its own:
which bookie replaces a failed one (placement, bookies that failed lately passed over, scope-id support), the
metadata update of the new segment (``LedgerMetadata.with_last_ensemble`` through ``update_metadata``), the
re-sends to the replaced indexes, and the back-off towards a busy bookie no other can replace
(docs/client.md, "Write path").
"""

from __future__ import annotations

import asyncio
import logging
from operator import attrgetter
from typing import TYPE_CHECKING

from bkspark.client.services import update_metadata
from bkspark.errors import (
    BKError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NotEnoughBookiesError,
    TooManyRequestsError,
)
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState, write_set
from bkspark.protocol.service_info import SCOPE_IDS_EXTENSION
from bkspark.retry import BUSY_BOOKIE_RETRY

if TYPE_CHECKING:
    from bkspark.client.writer import _PendingAdd

__all__ = ["EnsembleChanges"]

log = logging.getLogger("bkspark.client.writer")

_entry_id_of = attrgetter("entry_id")


class EnsembleChanges:
    """Replacing failed bookies of a :class:`~bkspark.client.writer.LedgerWriter`."""

    # -- a bookie that refuses adds as too many ----------------------------------------------

    def _send_again_later(self, op: _PendingAdd, idx: int, bookie: str) -> bool:
        """ETOOMANYREQUESTS from ``bookie``: if no other bookie can take its place, queue ``op`` to be sent to it
        again after a back-off and say True; False when one can (the ensemble change then replaces it, as Java's
        client does).

        A Java bookie refuses adds past its add queue (``maxPendingAddRequestsPerThread``) and the queue drains in
        milliseconds, where Java's client would fail the ledger for want of a replacement.  The back-off
        (:data:`bkspark.retry.BUSY_BOOKIE_RETRY`) starts at the first refusal since the LAC last moved; when its next
        wait would end past ``addEntryTimeoutSec``, every pending add fails with :class:`TooManyRequestsError`
        (docs/client.md, "Write path").
        """
        key = (idx, bookie)
        waiting = self._busy_resends.get(key)
        if waiting is None:
            try:
                self._choose_replacements(self.ensemble, {idx: bookie})
            except NotEnoughBookiesError:
                waiting = self._busy_resends[key] = []
            else:
                return False
        waiting.append(op)
        if self._busy_timer is not None:
            return True
        timeout = self.ctx.conf.addEntryTimeoutSec
        attempts = self._busy_attempts
        if attempts is None:
            attempts = self._busy_attempts = BUSY_BOOKIE_RETRY.with_(deadline=timeout).start()
        error = TooManyRequestsError(
            f"bookie {bookie} kept refusing adds as too many (ETOOMANYREQUESTS) and the ledger made no progress "
            f"within addEntryTimeoutSec={timeout}; no other bookie can take its place",
            ledger_id=self.ref.ledger_id,
            bookie_id=bookie,
        )
        try:
            delay = attempts.next_delay(error)
        except TooManyRequestsError:
            log.warning("ledger %s: %s", self.ref.ledger_id, error)
            self._fail_all(error)
            return True
        if attempts.tries == 1:
            log.info("ledger %s: bookie %s refuses adds as too many, no other can replace it: sending them again",
                     self.ref.ledger_id, bookie)
        self._busy_timer = self.ctx.loop.call_later(delay, self._resend_refused)
        return True

    def _resend_refused(self) -> None:
        """Send the adds :meth:`_send_again_later` queued to the bookies that refused them, lowest entry first
        (loop thread).

        Refusals come back in the order the bookie worked through its requests, and the back-off's first rounds
        fire while refusals of an earlier send are still arriving, so the queue interleaves rounds.  Sent in that
        order, the ledger's next entry can sit behind thousands of later ones each round and be refused again
        while they are taken: acknowledgements without progress until ``addEntryTimeoutSec`` ends the ledger.
        Sorted, the lowest waiting entry is the first the bookie sees, so each round moves the LAC.
        """
        self._busy_timer = None
        waiting, self._busy_resends = self._busy_resends, {}
        if self.error is not None:
            return
        for (idx, bookie), ops in waiting.items():
            if self.ensemble[idx] != bookie:
                continue  # replaced since: the ensemble change sent its pending entries to the new bookie
            bit = 1 << idx
            ops.sort(key=_entry_id_of)
            for op in ops:
                if op.callback is not None and not op.acked & bit:
                    self._send(op, [idx])

    # -- ensemble change -------------------------------------------------------------------

    def _bookie_failed(self, idx: int, bookie: str) -> None:
        if self.changing_ensemble:
            self._delayed_failures[idx] = bookie
            return
        self.changing_ensemble = True
        asyncio.ensure_future(self._ensemble_change({idx: bookie}))

    async def _ensemble_change(self, failed: dict[int, str]) -> None:
        replaced: set[int] = set()
        try:
            while failed:
                if self.ensemble_changes >= self.ctx.conf.maxNumEnsembleChanges:
                    raise NotEnoughBookiesError("too many ensemble changes", limit=self.ctx.conf.maxNumEnsembleChanges)
                before = list(self.ensemble)
                new_ensemble = await self._replace_bookies(failed)
                self.ensemble_changes += 1
                self.ensemble = new_ensemble
                replaced |= {i for i in range(self.E) if before[i] != new_ensemble[i]}
                delayed, self._delayed_failures = self._delayed_failures, {}
                failed = {i: b for i, b in delayed.items() if self.ensemble[i] == b}
        except BaseException as exc:  # noqa: BLE001 - any failure ends the writer
            self.changing_ensemble = False
            if isinstance(exc, asyncio.CancelledError):
                exc = LedgerClosedError("client closed during ensemble change")
            log.warning("ledger %s: ensemble change failed: %s", self.ref.ledger_id, exc)
            self._fail_all(exc)
            return
        self.changing_ensemble = False
        log.info("ledger %s: new ensemble %s from entry %s", self.ref.ledger_id, self.ensemble, self.lac + 1)
        for op in list(self.pending):
            if op.callback is None:
                continue
            if not op.sent:
                self._send(op, None)
                continue
            redo = [i for i in write_set(op.entry_id, self.E, self.W) if i in replaced]
            if redo:
                for i in redo:
                    op.acked &= ~(1 << i)
                op.completed = op.acked.bit_count() >= self.A
                self._send(op, redo)
        self._complete_in_order()

    def _choose_replacements(self, current: list[str], failed: dict[int, str]) -> list[str]:
        new = list(current)
        exclude = set(failed.values()) | self._scope_excluded()
        # Bookies that failed lately are passed over while others exist (Java's quarantine does the same):
        # otherwise an ensemble change can swap one unanswering bookie for another for ever.
        window = self.ctx.conf.bookieFailureHistoryExpirationMSec / 1000.0
        suspects = exclude | set(self.ctx.ops.pool.failures_since(window))
        replaced_any = False
        last_error: BKError | None = None
        for idx, bookie in failed.items():
            if new[idx] != bookie:
                continue
            policy, metadata = self.ctx.policy, self.metadata.custom_metadata
            try:
                try:
                    new[idx] = policy.replace_bookie(self.E, self.W, self.A, metadata, new, bookie, suspects)
                except NotEnoughBookiesError:
                    new[idx] = policy.replace_bookie(self.E, self.W, self.A, metadata, new, bookie, exclude)
                replaced_any = True
            except NotEnoughBookiesError as exc:
                last_error = exc
        if not replaced_any:
            raise last_error or NotEnoughBookiesError("no replacement bookie available", ledger_id=self.ref.ledger_id)
        return new

    def _scope_excluded(self) -> set[str]:
        if self.ref.scope_id == 0:
            return set()
        pool = self.ctx.ops.pool
        return {b for b in self.ctx.policy.writable if SCOPE_IDS_EXTENSION not in pool.extensions(b)}

    async def _replace_bookies(self, failed: dict[int, str]) -> list[str]:
        start = self.lac + 1
        if self.recovery:
            new = self._choose_replacements(self.ensemble, failed)
            self.recovery_segments[start] = tuple(new)
            return new
        chosen: list[str] | None = None

        def needs_update(md: LedgerMetadata) -> bool:
            if md.state == LedgerState.CLOSED:
                raise LedgerClosedError("ledger was closed during ensemble change", ledger_id=self.ref.ledger_id)
            if md.state == LedgerState.IN_RECOVERY:
                raise LedgerFencedError("ledger is being recovered", ledger_id=self.ref.ledger_id)
            last = md.last_ensemble
            return any(last[i] == b for i, b in failed.items())

        def transform(md: LedgerMetadata) -> LedgerMetadata:
            nonlocal chosen
            if md.last_segment_start > start:
                raise MetadataVersionError(
                    "metadata has a segment beyond our LAC", last_key=md.last_segment_start, lac=self.lac
                )
            chosen = self._choose_replacements(list(md.last_ensemble), failed)
            return md.with_last_ensemble(start, chosen)

        self.versioned = await update_metadata(self.ctx, self.ref, self.versioned, needs_update, transform)
        md = self.versioned.metadata
        return list(md.last_ensemble) if chosen is None else chosen
