"""The write path of one ledger (docs/protocol.md §4 items 1-5), run on the client's event loop.

* ``entryId = ++lastAddPushed``; the entry carries the LAC at send time
  (piggyback) and the cumulative length; it goes to the write set
  ``(e + i) mod E`` of the current ensemble.
* An entry is acknowledged by Qa distinct bookies; acknowledgements are handed
  to the caller strictly in entry order, and each one advances the LAC.
* Any non-fatal bookie error (timeout, lost connection, EIO, read-only...)
  replaces that bookie: a new segment starting at LAC + 1 is CAS-written to
  the metadata (re-reading on conflict), completions are held while that runs,
  then every pending entry is re-sent to the replaced indexes.
* Errors flagged ``ends_writes`` (fenced, unauthorized, illegal op, client
  closed) fail every pending add and every later one: a fenced writer never
  acknowledges another entry.
* Recovery re-adds use the same machinery with RECOVERY_ADD | HIGH_PRIORITY,
  but keep replacement ensembles local until the recovered close writes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from itertools import accumulate, repeat
from operator import attrgetter
from typing import Any, Callable, Iterable, Sequence

from bkspark.client.services import ClientServices, update_metadata
from bkspark.protocol.ledger_name import LedgerRef
from bkspark.client.connection import V2, Callback, ManyCallback
from bkspark.client.ops import FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD
from bkspark.client.payloads import PackedPayloads
from bkspark.errors import (
    AddEntryQuorumTimeoutError,
    BKError,
    EntryTooLargeError,
    IllegalOpError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NotEnoughBookiesError,
    TooManyRequestsError,
    ends_writes,
)
from bkspark.metadata.store import Versioned
from bkspark.protocol import v2, v3
from bkspark.protocol.digest import Digester, master_key
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState, write_set
from bkspark.protocol.service_info import SCOPE_IDS_EXTENSION
from bkspark.retry import BUSY_BOOKIE_RETRY, Attempts

__all__ = ["LedgerWriter", "AddCallback", "BatchCallback"]

log = logging.getLogger(__name__)

#: ``callback(entry_id, error)`` on the loop thread: entry id on success, else the error.
AddCallback = Callable[[int | None, BaseException | None], None]
#: ``callback(first_entry_id, count, error)`` on the loop thread, once every entry of one
#: :meth:`LedgerWriter.append_many` is acknowledged (error None) or one failed (the first error;
#: ``first_entry_id`` None when nothing was queued).
BatchCallback = Callable[[int | None, int, BaseException | None], None]


class _BatchAdd:
    """The shared per-entry callback of one bulk append: counts completions, reports once (loop thread).

    Entries complete in entry order (acknowledgements are handed back in order and a failure fails every
    pending entry), so when the count reaches zero every entry of the batch has its outcome.
    """

    __slots__ = ("first", "count", "remaining", "error", "callback")

    def __init__(self, first: int, count: int, callback: BatchCallback) -> None:
        self.first = first
        self.count = count
        self.remaining = count
        self.error: BaseException | None = None
        self.callback: BatchCallback | None = callback

    def __call__(self, _entry_id: int | None, error: BaseException | None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.settled(1)

    def settled(self, count: int) -> None:
        """``count`` more of its entries have their outcome (what as many calls do, in one; an error is recorded
        before): the last one reports the batch."""
        self.remaining -= count
        if self.remaining == 0 and self.callback is not None:
            callback, self.callback = self.callback, None
            callback(self.first, self.count, self.error)


class _PendingAdd:
    __slots__ = ("entry_id", "payload", "length", "entry", "frame", "acked", "completed", "sent", "callback")

    def __init__(
        self, entry_id: int, payload: bytes, length: int, callback: AddCallback, frame: bytes | None = None
    ) -> None:
        self.entry_id = entry_id
        self.payload = payload
        self.length = length
        self.entry = b""
        #: The v2 frame, when the entry was packaged with others (:meth:`LedgerWriter._append_many_v2`): sent.
        self.frame = frame
        #: Ensemble indexes that acknowledged the entry, one bit each (an int: no set per entry).
        self.acked = 0
        self.completed = False
        self.sent = frame is not None
        self.callback = callback


_entry_id_of = attrgetter("entry_id")


class LedgerWriter:
    """Appends, ensemble changes and close for one ledger this client writes (or recovers)."""

    def __init__(
        self,
        ctx: ClientServices,
        ref: LedgerRef,
        versioned: Versioned,
        password: bytes,
        *,
        last_add_confirmed: int = -1,
        length: int = 0,
        recovery: bool = False,
    ) -> None:
        self.ctx = ctx
        self.ref = ref
        self.versioned = versioned
        md = versioned.metadata
        self.E, self.W, self.A = md.ensemble_size, md.write_quorum_size, md.ack_quorum_size
        self.digester = Digester(md.digest_type, password)
        self.master_key = master_key(password)
        self.ensemble: list[str] = list(md.last_ensemble)
        self.lac = last_add_confirmed
        self.last_add_pushed = last_add_confirmed
        self.length = length
        self.confirmed_length = length
        self.recovery = recovery
        self.flags = (FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY) if recovery else 0
        #: Replacement segments found during recovery, written by the recovered close.
        self.recovery_segments: dict[int, tuple[str, ...]] = {}
        self.pending: deque[_PendingAdd] = deque()
        self.changing_ensemble = False
        self._delayed_failures: dict[int, str] = {}
        self.error: BaseException | None = None
        self.closing = False
        self.closed = False
        self.ensemble_changes = 0
        self._drained: list[asyncio.Future[None]] = []
        #: Highest LAC written into an entry header (piggy-backed) and by WRITE_LAC.
        self._lac_piggybacked = last_add_confirmed
        self._lac_explicit = last_add_confirmed
        self._lac_timer: asyncio.TimerHandle | None = None
        #: The add-response callbacks of each (ensemble index, bookie) pair sent to (:meth:`_ack_callbacks_of`).
        self._ack_callbacks: dict[tuple[int, str], tuple[Callback, ManyCallback]] = {}
        #: Adds refused as too many by a bookie no other can replace, by (ensemble index, bookie), to be sent to it
        #: again when ``_busy_timer`` fires; ``_busy_attempts`` backs off from the first refusal since the LAC
        #: last moved (:meth:`_send_again_later`).
        self._busy_resends: dict[tuple[int, str], list[_PendingAdd]] = {}
        self._busy_timer: asyncio.TimerHandle | None = None
        self._busy_attempts: Attempts | None = None
        #: ``addEntryQuorumTimeoutSec`` (> 0: on): when each append call queued its adds, as (its last entry id,
        #: loop time), one pair per call, not per entry; ``_quorum_timer`` fires at the oldest pending add's deadline.
        self._quorum_timeout = ctx.conf.addEntryQuorumTimeoutSec
        self._queued_at: deque[tuple[int, float]] = deque()
        self._quorum_timer: asyncio.TimerHandle | None = None
        #: The largest payload one add frame can carry (any thread may read it: it never changes).
        self.max_payload = ctx.conf.nettyMaxFrameSizeBytes - self.digester.entry_overhead(ref.scope_id) - (
            v2.ADD_REQUEST_OVERHEAD if ctx.ops.data_version(ref.scope_id) == V2 else v3.add_request_overhead(ref.scope_id)
        )
        interval = ctx.conf.explicitLacInterval / 1000.0
        if interval > 0 and not recovery:
            self._lac_timer = ctx.loop.call_later(interval, self._explicit_lac_tick, interval)

    # -- appends ------------------------------------------------------------------------

    @property
    def metadata(self) -> LedgerMetadata:
        return self.versioned.metadata

    def check_payload_size(self, size: int) -> None:
        """Refuse a payload no add frame can carry (any thread): every bookie would hang up on it.

        Raised before an entry id is taken, so the ledger stays writable and no bookie is blamed.
        """
        if size > self.max_payload:
            raise EntryTooLargeError(
                f"an entry of {size} bytes cannot fit one frame: this ledger's adds carry at most "
                f"{self.max_payload} bytes of payload within nettyMaxFrameSizeBytes="
                f"{self.ctx.conf.nettyMaxFrameSizeBytes} (raise that client option, and the bookies' own, for larger entries)",
                ledger_id=self.ref.ledger_id,
                size=size,
                max_payload=self.max_payload,
            )

    def append(self, payload: bytes, callback: AddCallback, entry_id: int | None = None) -> None:
        """Queue one entry (loop thread).  ``entry_id`` is only for recovery re-adds."""
        if len(payload) > self.max_payload:
            try:
                self.check_payload_size(len(payload))
            except EntryTooLargeError as exc:
                callback(None, exc)
                return
        if self.error is not None:
            callback(None, self.error)
            return
        if self.closing or self.closed:
            callback(None, LedgerClosedError("ledger handle is closed", ledger_id=self.ref.ledger_id))
            return
        next_id = self.last_add_pushed + 1
        if entry_id is not None and entry_id != next_id:
            callback(None, IllegalOpError("recovery re-add out of order", expected=next_id, entry_id=entry_id))
            return
        self.last_add_pushed = next_id
        self.length += len(payload)
        op = _PendingAdd(next_id, payload, self.length, callback)
        self.pending.append(op)
        if self._quorum_timeout > 0:
            self._note_queued()
        if not self.changing_ensemble:
            self._send(op, None)

    def check_payload_sizes(self, payloads: "Sequence[bytes | bytearray | memoryview] | PackedPayloads") -> None:
        """:meth:`check_payload_size` for a whole bulk append (any thread): the first too-large entry, by index."""
        max_payload = self.max_payload
        if not payloads:
            return
        if (payloads.max_size if type(payloads) is PackedPayloads else max(map(len, payloads))) <= max_payload:
            return
        for index, payload in enumerate(payloads):
            if len(payload) > max_payload:
                try:
                    self.check_payload_size(len(payload))
                except EntryTooLargeError as exc:
                    raise EntryTooLargeError(
                        f"entry {index} of a bulk append: {exc}", index=index, **exc.context
                    ) from None

    def append_many(self, payloads: "Sequence[bytes | memoryview] | PackedPayloads", callback: BatchCallback) -> None:
        """Queue ``payloads`` as consecutive entries, sent at once, with one completion (loop thread).

        Each entry is an ordinary add (its own id, write set, Qa acknowledgements, ensemble change on a
        failure); only the bookkeeping of the caller's side is shared.  Nothing is queued if any entry
        is too large, the writer failed or is closing.
        """
        count = len(payloads)
        try:
            self.check_payload_sizes(payloads)
        except EntryTooLargeError as exc:
            callback(None, 0, exc)
            return
        if self.error is not None:
            callback(None, 0, self.error)
            return
        if self.closing or self.closed:
            callback(None, 0, LedgerClosedError("ledger handle is closed", ledger_id=self.ref.ledger_id))
            return
        if count == 0:
            callback(self.last_add_pushed + 1, 0, None)
            return
        first = self.last_add_pushed + 1
        batch = _BatchAdd(first, count, callback)
        if self._sends_v2_runs():
            self._append_many_v2(payloads, repeat(batch, count))
            return
        send = self._send
        entry_id = first
        for index, payload in enumerate(payloads):
            if self.error is not None:
                # A send above failed the writer for good (fenced, closed client): the rest fail with it.
                for _ in range(count - index):
                    batch(None, self.error)
                return
            # Kept current per entry: an ensemble change or failure started by a send below sees them.
            self.last_add_pushed = entry_id
            self.length += len(payload)
            op = _PendingAdd(entry_id, payload, self.length, batch)
            entry_id += 1
            self.pending.append(op)
            if self._quorum_timeout > 0:
                self._note_queued()
            if not self.changing_ensemble:
                send(op, None)

    def append_each(self, payloads: "Sequence[bytes]", callbacks: Sequence[AddCallback]) -> None:
        """Queue consecutive single appends, each with its own callback (loop thread): what :meth:`append` of
        each in turn does, sent as one run like a bulk append's (one encode, one send per bookie) when the
        ledger is written over v2 and nothing special is going on, else one :meth:`append` at a time."""
        if (
            not self._sends_v2_runs()
            or self.error is not None
            or self.closing
            or self.closed
            or max(map(len, payloads)) > self.max_payload
        ):
            for payload, callback in zip(payloads, callbacks):
                self.append(payload, callback)
            return
        self._append_many_v2(payloads, callbacks)

    def _sends_v2_runs(self) -> bool:
        """Whether entries queued now may go as one v2 run (:meth:`_append_many_v2`): the ledger is written over
        v2 and no ensemble change holds the sends back."""
        return not self.changing_ensemble and self.ctx.ops.data_version(self.ref.scope_id) == V2

    def _append_many_v2(
        self, payloads: "Sequence[bytes | memoryview] | PackedPayloads", callbacks: Iterable[AddCallback]
    ) -> None:
        """The v2 path of a bulk append and of a run of single appends: package every entry, then one run of
        sends per bookie (loop thread).  ``callbacks`` gives each entry's: the bulk append's shared one, repeated,
        or each single append's own.

        Every entry goes to its whole write set even if a send below fails synchronously and starts an
        ensemble change (as :meth:`_send` does for one entry): the change then re-sends to the
        replaced indexes, and an entry marked sent always reached every bookie it was meant for.
        """
        first = self.last_add_pushed + 1
        length = self.length
        try:
            frames = self.ctx.ops.encode_v2_adds(
                self.digester, self.master_key, self.flags, self.ref.ledger_id, first, self.lac, length, payloads
            )
        except Exception as exc:  # noqa: BLE001 - MemoryError in practice: fail these appends, queue nothing
            # Nothing changed yet, so the writer stays usable for later appends (they take these ids); raising
            # instead would reach the loop's handler and leave the callers' futures, and any append queued
            # behind them in the same hand-over, unfinished.
            log.warning("ledger %s: could not frame %d entries: %r", self.ref.ledger_id, len(payloads), exc)
            for callback in callbacks:
                callback(None, exc)
            return
        self._lac_piggybacked = self.lac
        # An op sent as a frame never needs its payload again (an ensemble change re-sends the frame): each
        # keeps its cumulative length only, and a packed run makes no bytes object per entry.
        if type(payloads) is PackedPayloads:
            ends = payloads.ends(length)
        else:
            ends = list(accumulate(map(len, payloads), initial=length))
            del ends[0]
        entry_id = first + len(ends)
        ops = list(map(_PendingAdd, range(first, entry_id), repeat(b""), ends, callbacks, frames))
        self.last_add_pushed = entry_id - 1
        self.length = ends[-1] if ends else length
        self.pending.extend(ops)
        if self._quorum_timeout > 0:
            self._note_queued()
        ensemble = list(self.ensemble)
        E, W = self.E, self.W
        add_many, ledger_id = self.ctx.ops.add_v2_many, self.ref.ledger_id
        # The arguments are the ops themselves and the key and frame lists are shared by the bookies: no tuple
        # per entry and bookie (fewer GC-tracked objects; BENCHMARKS.md, "Per-entry allocations of the client").
        if E == W:
            keys = self.ctx.ops.add_keys(ledger_id, range(first, entry_id)) if ops else []
            for idx in range(E):
                bookie = ensemble[idx]
                add_many(bookie, keys, frames, ops, *self._ack_callbacks_of(idx, bookie))
            return
        per_index: list[list[_PendingAdd]] = [[] for _ in range(E)]
        for op in ops:
            for idx in write_set(op.entry_id, E, W):
                per_index[idx].append(op)
        for idx, sent in enumerate(per_index):
            if sent:
                bookie = ensemble[idx]
                keys = self.ctx.ops.add_keys(ledger_id, [op.entry_id for op in sent])
                add_many(bookie, keys, [op.frame for op in sent], sent, *self._ack_callbacks_of(idx, bookie))

    def _ack_callbacks_of(self, idx: int, bookie: str) -> tuple[Callback, ManyCallback]:
        """The add-response callbacks of ensemble index ``idx`` while it points to ``bookie``, made once per pair:
        one answer (each request's argument is then its :class:`_PendingAdd` alone) and acknowledgements that came
        together (a bulk append's, in one chunk of the bookie's bytes: one call for all of them)."""
        known = self._ack_callbacks.get((idx, bookie))
        if known is not None:
            return known
        on_ack, on_acks = self._on_ack, self._on_acks

        def on_response(_response: Any, error: BaseException | None, op: _PendingAdd) -> None:
            on_ack(op, idx, bookie, error)

        def on_responses(ops: list[_PendingAdd]) -> None:
            on_acks(ops, idx, bookie)

        known = self._ack_callbacks[(idx, bookie)] = (on_response, on_responses)
        return known

    def _package(self, op: _PendingAdd) -> None:
        self._lac_piggybacked = self.lac
        op.entry = self.digester.package_entry(
            self.ref.ledger_id, op.entry_id, self.lac, op.length, op.payload, scope_id=self.ref.scope_id
        )
        if self.ctx.ops.data_version(self.ref.scope_id) == V2:
            op.frame = self.ctx.ops.encode_v2_add(self.master_key, op.entry, self.flags)

    def _send(self, op: _PendingAdd, indexes: list[int] | None) -> None:
        if not op.sent:
            self._package(op)
            op.sent = True
        entry_id = op.entry_id
        targets = write_set(entry_id, self.E, self.W) if indexes is None else indexes
        add = self.ctx.ops.add
        ensemble = self.ensemble
        ledger_id, scope_id, key, flags, entry, frame = (
            self.ref.ledger_id, self.ref.scope_id, self.master_key, self.flags, op.entry, op.frame
        )
        for idx in targets:
            bookie = ensemble[idx]
            add(bookie, ledger_id, entry_id, key, entry, flags, scope_id, self._ack_callbacks_of(idx, bookie)[0], op, frame)

    def _on_ack(self, op: _PendingAdd, idx: int, bookie: str, error: BaseException | None) -> None:
        if self.error is not None or self.ensemble[idx] != bookie:
            return  # failed writer, or an answer from a bookie this index no longer points to
        if error is None:
            if op.callback is None:
                return  # already acknowledged and handed back
            op.acked |= 1 << idx
            if not op.completed and op.acked.bit_count() >= self.A:
                op.completed = True
                self._complete_in_order()
            return
        if ends_writes(error):
            if op.callback is not None or self.pending:
                self._fail_all(error)
            else:
                self.error = error  # nothing pending: every later append fails with it
            return
        if self.closed:
            return  # a late failure of a closed ledger's bookie: nothing will be written there again
        if type(error) is TooManyRequestsError and self._send_again_later(op, idx, bookie):
            return
        # A failure after the entry was acknowledged still replaces the bookie (Java
        # remembers it and changes ensemble on the next add): later entries need it.
        log.info("ledger %s: bookie %s failed entry %s: %s", self.ref.ledger_id, bookie, op.entry_id, error)
        self.ctx.ops.pool.note_failure(bookie)
        self._bookie_failed(idx, bookie)

    def _on_acks(self, ops: list[_PendingAdd], idx: int, bookie: str) -> None:
        """:meth:`_on_ack` of several successful acknowledgements from ``bookie`` at once, in the order they came:
        the same outcome, with one hand-back of what they completed."""
        if self.error is not None or self.ensemble[idx] != bookie:
            return
        bit, quorum, completed = 1 << idx, self.A, False
        for op in ops:
            if op.callback is None:
                continue  # already acknowledged and handed back
            op.acked |= bit
            if not op.completed and op.acked.bit_count() >= quorum:
                op.completed = completed = True
        if completed:
            self._complete_in_order()

    def _complete_in_order(self) -> None:
        """Hand back, in entry order, every completed entry at the head of the pending queue.  The consecutive
        entries of one bulk append go back together (one :meth:`_BatchAdd.settled` for them all)."""
        pending, lac = self.pending, self.lac
        while pending and not self.changing_ensemble:
            head = pending[0]
            if not head.completed:
                break
            pending.popleft()
            callback, head.callback = head.callback, None  # type: ignore[assignment]
            head.payload = b""
            if type(callback) is _BatchAdd:
                count = 1
                while pending and pending[0].callback is callback and pending[0].completed:
                    head = pending.popleft()
                    head.callback, head.payload = None, b""  # type: ignore[assignment]
                    count += 1
                self.lac = head.entry_id
                self.confirmed_length = head.length
                callback.settled(count)
                continue
            self.lac = head.entry_id
            self.confirmed_length = head.length
            callback(head.entry_id, None)
        if self._busy_attempts is not None and self.lac != lac:
            self._busy_attempts = None  # progress: a later refusal starts a new back-off
        if not pending:
            self._notify_drained()

    def _fail_all(self, error: BaseException) -> None:
        """Fail every pending add and every later append with ``error`` (sticky)."""
        if self.error is None:
            self.error = error
        pending, self.pending = self.pending, deque()
        self._busy_resends.clear()
        if self._busy_timer is not None:
            self._busy_timer.cancel()
            self._busy_timer = None
        self._queued_at.clear()
        if self._quorum_timer is not None:
            self._quorum_timer.cancel()
            self._quorum_timer = None
        self.length = self.confirmed_length
        self.last_add_pushed = self.lac
        for op in pending:
            callback, op.callback = op.callback, None  # type: ignore[assignment]
            if callback is not None:
                callback(None, error)
        self._notify_drained()

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

    # -- drain and close ---------------------------------------------------------------------

    def _notify_drained(self) -> None:
        if not self.pending and not self.changing_ensemble:
            waiters, self._drained = self._drained, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def drain(self) -> None:
        """Wait until every add queued so far has been acknowledged or failed, and no ensemble change runs.

        So a close that follows never races an ensemble change started by a failure that came
        after the last acknowledgement: the closed metadata includes the replacement.
        """
        if not self.pending and not self.changing_ensemble:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drained.append(fut)
        await fut

    async def close(self) -> LedgerMetadata:
        """Wait for pending adds, then write CLOSED with the LAC and length (docs/protocol.md §4 item 5)."""
        if self.closed:
            return self.metadata
        self.closing = True
        if self._lac_timer is not None:
            self._lac_timer.cancel()
            self._lac_timer = None
        await self.drain()
        if isinstance(self.error, LedgerFencedError):
            # A recovery took the ledger over: it, not us, writes the final state.
            self.closed = True
            return self.metadata
        last, length = self.lac, self.confirmed_length

        def needs_update(md: LedgerMetadata) -> bool:
            if md.state == LedgerState.CLOSED:
                if md.last_entry_id == last and md.length == length:
                    return False
                raise MetadataVersionError(
                    "ledger was closed by someone else with a different end (it was recovered)",
                    ledger_id=self.ref.ledger_id,
                    their_last_entry_id=md.last_entry_id,
                    our_last_entry_id=last,
                )
            return True

        def transform(md: LedgerMetadata) -> LedgerMetadata:
            return md.close(last, length)

        self.versioned = await update_metadata(self.ctx, self.ref, self.versioned, needs_update, transform)
        self.closed = True
        return self.metadata

    async def close_recovered(self) -> LedgerMetadata:
        """The recovery's final write: IN_RECOVERY -> CLOSED at the recovered LAC (docs/protocol.md §4 item 7h)."""
        await self.drain()
        if self.error is not None:
            raise self.error
        last, length = self.lac, self.confirmed_length
        segments = dict(self.recovery_segments)

        def needs_update(md: LedgerMetadata) -> bool:
            return md.state == LedgerState.IN_RECOVERY

        def transform(md: LedgerMetadata) -> LedgerMetadata:
            for start, members in sorted(segments.items()):
                if start >= md.last_segment_start:
                    md = md.with_last_ensemble(start, members)
            return md.close(last, length)

        self.versioned = await update_metadata(self.ctx, self.ref, self.versioned, needs_update, transform)
        self.closed = True
        return self.metadata
