"""The read path (docs/protocol.md §4 items 8, 9; BP-62), run on the client's event loop.

* Single reads go to the write set of the entry in the placement policy's
  order; an error or a digest mismatch moves on to the next replica, and after
  ``speculativeReadTimeout`` without an answer the next replica is asked too.
  Every entry's digest, ledger id and entry id are verified.
* Ranges are read pipelined, ``readPipelineDepth`` entries in flight.
* Batched reads: one request per batch to one bookie; the request is clamped
  to the LAC, the segment and the frame size; fewer entries than asked is a
  valid answer.  A digest mismatch inside a batch keeps the verified prefix
  and asks the next replica for the rest (BookKeeper #4789); striped ledgers,
  bookies that hung up on opcode 7 (pre-4.17) and ``batchReadEnabled=false``
  fall back to pipelined single reads, which terminate for ``max_count <= 0``
  too (BookKeeper #4641).
* Streaming (``stream_payloads``, under ``read_batches``): chunks of a range read concurrently, bounded by
  bytes, each preferring a different bookie, yielded in order.
* LAC: READ_LAC to every bookie of the last segment until the coverage rule
  holds (explicit LAC blob and last entry both count).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from functools import partial
from typing import Any, AsyncIterator, Callable, NamedTuple, Sequence

from bkspark.client.connection import V2
from bkspark.client.payloads import PackedPayloads, payload_bytes
from bkspark.client.services import ClientServices
from bkspark.protocol.ledger_name import LedgerRef
from bkspark.client.quorum import (
    Covered,
    QuorumRead,
    next_speculation,
    note_read_failure,
    pick_error,
    read_order,
    rotate_to,
    speculative_timeout,
)
from bkspark.client.schedule import is_striped
from bkspark.errors import (
    BKError,
    DigestMismatchError,
    InvalidOptionError,
)
from bkspark.protocol.digest import Digester, VerifiedEntry
from bkspark.protocol.ledger_metadata import LedgerMetadata
from bkspark.protocol.correlation import read_body
from bkspark.protocol.v2 import BATCH_RESPONSE_OVERHEAD, BatchItems

__all__ = ["DEFAULT_BYTES_IN_FLIGHT", "LedgerEntry", "LedgerReader", "pick_error"]

#: Payload bytes one streaming reader keeps requested at once (several batch requests, spread over bookies).
DEFAULT_BYTES_IN_FLIGHT = 8 * 1024 * 1024

#: Chunks (each one batch request, or one run of pipelined single reads) one streaming reader keeps in flight
#: at most, however small the entries: enough to keep every bookie of an ensemble busy.
MAX_CHUNKS_IN_FLIGHT = 12
#: Bytes a batch response adds to each entry's payload (length, header, digest), rounded up, for sizing chunks.
ENTRY_OVERHEAD_ESTIMATE = 64
#: Entries of a chunk sent before any entry size is known (one round trip of small entries, a few MiB of large).
UNKNOWN_SIZE_CHUNK_ENTRIES = 100

log = logging.getLogger(__name__)


class LedgerEntry(NamedTuple):
    """One entry read back: ids and the payload the writer appended."""

    ledger_id: int
    entry_id: int
    payload: bytes
    scope_id: int = 0


class _EntryRead:
    """One entry read in flight: its replicas in order, the answers so far, the speculative timer.

    A small object with bound methods rather than nested closures: closures that
    refer to each other form reference cycles, and thousands of reads in flight
    then leave the cyclic garbage collector a lot to chase (measured: 4x slower
    range reads).  This object is freed by reference counting alone.
    """

    __slots__ = (
        "reader", "entry_id", "bookies", "callback", "flags", "master_key",
        "next_i", "outstanding", "finished", "timer", "errors",
    )

    def __init__(
        self,
        reader: "LedgerReader",
        entry_id: int,
        bookies: list[str],
        callback: Callable[[VerifiedEntry | None, BaseException | None], None],
        flags: int,
        master_key: bytes | None,
    ) -> None:
        self.reader = reader
        self.entry_id = entry_id
        self.bookies = bookies
        self.callback = callback
        self.flags = flags
        self.master_key = master_key
        self.next_i = 0
        self.outstanding = 0
        self.finished = False
        self.timer: asyncio.TimerHandle | None = None
        self.errors: list[BaseException] = []

    def start(self, timer: bool = True) -> None:
        """Send to the first replica; with ``timer``, arm this read's own speculative timer (a range read arms
        one for the reads it sends together instead: :func:`_speculate_group`)."""
        self.send_next()
        if not timer:
            return
        spec = speculative_timeout(self.reader.ctx.conf)
        if spec > 0 and len(self.bookies) > 1 and not self.finished:
            self.timer = self.reader.ctx.loop.call_later(spec, self.speculate, spec)

    def claim_next(self) -> str | None:
        """The next replica to ask, counted as asked (None: every replica was)."""
        if self.next_i >= len(self.bookies):
            return None
        bookie = self.bookies[self.next_i]
        self.next_i += 1
        self.outstanding += 1
        return bookie

    def send_next(self) -> bool:
        bookie = self.claim_next()
        if bookie is None:
            return False
        r = self.reader
        # One shared bound method and the bookie id as context: no closure per request.
        r.ctx.ops.read(
            bookie, r.ref.ledger_id, self.entry_id, r.ref.scope_id, self.on_response, bookie,
            flags=self.flags, master_key=self.master_key,
        )
        return True

    def on_response(self, resp: Any, exc: BaseException | None, bookie: str) -> None:
        """A READENTRY answer (or failure) from ``bookie``."""
        self.answer(bookie, None if exc is not None else read_body(resp), exc)

    def speculate(self, delay: float) -> None:
        self.timer = None
        if not self.finished and self.send_next():
            nxt = next_speculation(self.reader.ctx.conf, delay)
            self.timer = self.reader.ctx.loop.call_later(nxt, self.speculate, nxt)

    def answer(self, bookie: str, data: Any, exc: BaseException | None) -> None:
        self.outstanding -= 1
        if self.finished:
            return
        r = self.reader
        if exc is None:
            try:
                entry = r._verify(data, self.entry_id)
            except DigestMismatchError as err:
                log.warning("bookie %s returned a bad copy of %s/%s: %s", bookie, r.ref.ledger_id, self.entry_id, err)
                exc = err
            else:
                self.finish(entry, None)
                return
        self.errors.append(exc)
        note_read_failure(r.ctx.ops.pool, bookie, exc)
        if not self.send_next() and self.outstanding == 0:
            self.finish(None, pick_error(self.errors, ledger_id=r.ref.ledger_id, entry_id=self.entry_id))

    def finish(self, entry: VerifiedEntry | None, exc: BaseException | None) -> None:
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        callback, self.callback = self.callback, None  # type: ignore[assignment]
        callback(entry, exc)


def _first_answer(resp: Any, exc: BaseException | None, read: _EntryRead) -> None:
    """The answer of a read sent with others to its first replica (:meth:`LedgerReader._send_together`)."""
    read.on_response(resp, exc, read.bookies[0])


def _speculate_group(reads: list[_EntryRead], delay: float) -> None:
    """The speculative timer of reads sent together: each one still unanswered speculates as its own timer would
    have (they were sent in the same loop iteration), and arms its own timer for the next, backed-off step."""
    for read in reads:
        if not read.finished:
            read.speculate(delay)


class _RangeRead:
    """Plain v2 single reads of ``first..last`` (one segment), all sent at once, with no object per entry.

    What :meth:`LedgerReader.read_range` makes of up to ``readPipelineDepth`` entries, and the fast path of a
    striped ledger's scan (:meth:`LedgerReader._fallback`; docs/client.md, "Read path"). Each entry's first replica
    is asked in one run of requests per bookie; answers are kept as they came, by index (successful ones handed
    over a chunk at a time: :meth:`on_answers`), and the digests of all of them are checked by one
    :meth:`Digester.verify_payloads` call at the end. An entry whose first answer is an error, or still missing
    after ``speculativeReadTimeout``, becomes an :class:`_EntryRead` that asks its other replicas by the rules of
    a single read (its first replica counted as asked); so does an entry whose copy fails the digest check.
    """

    __slots__ = ("reader", "first", "count", "bodies", "remaining", "done", "escalated", "verified", "replicas")

    def __init__(self, reader: "LedgerReader", first: int, last: int) -> None:
        self.reader = reader
        self.first = first
        self.count = last - first + 1
        #: Each entry's stored bytes as its first replica sent them (None until then).
        self.bodies: list[Any] = [None] * self.count
        self.remaining = self.count
        self.done: asyncio.Future[None] = reader.ctx.loop.create_future()
        #: Entries handed to an :class:`_EntryRead` (an error, a timeout), by index.
        self.escalated: dict[int, _EntryRead] = {}
        #: Payloads an :class:`_EntryRead` verified, by index.
        self.verified: dict[int, bytes] = {}
        # The write set's order repeats every E entries within a segment.
        ensemble_size = reader.metadata.ensemble_size
        cache: dict[tuple[int, int], list[str]] = {}
        self.replicas = [reader._replicas(first + k, cache) for k in range(min(ensemble_size, self.count))]

    async def run(self) -> list[bytes]:
        """The verified payloads of the range, in order."""
        reader = self.reader
        period = len(self.replicas)
        per_bookie: dict[str, list[int]] = {}
        for k, bookies in enumerate(self.replicas):
            per_bookie.setdefault(bookies[0], []).extend(range(k, self.count, period))
        ledger_id, first = reader.ref.ledger_id, self.first
        for bookie, indexes in per_bookie.items():
            indexes.sort()
            reader.ctx.ops.read_v2_many(
                bookie, ledger_id, [first + i for i in indexes], indexes, self.on_first, self.on_answers
            )
        spec = speculative_timeout(reader.ctx.conf)
        timer = (
            reader.ctx.loop.call_later(spec, self.speculate, spec)
            if spec > 0 and len(self.replicas[0]) > 1 and not self.done.done() else None
        )
        try:
            await self.done
        finally:
            if timer is not None:
                timer.cancel()
            for read in self.escalated.values():
                if read.timer is not None and not read.finished:
                    read.timer.cancel()  # the range failed or was cancelled: no more speculative asks
                    read.timer = None
        return await self.verify()

    def on_first(self, resp: Any, exc: BaseException | None, index: int) -> None:
        """The answer of an entry's first replica that came alone: a success as :meth:`on_answers` takes it; an
        error makes the entry ask its next replica."""
        if exc is None:
            self.on_answers([(index, read_body(resp))])
        elif not self.done.done():
            read = self.escalated.get(index) or self.escalate(index)
            read.answer(read.bookies[0], None, exc)

    def on_answers(self, pairs: list[tuple[int, Any]]) -> None:
        """Successful answers of first replicas that came together: ``(index, stored entry)`` each."""
        if self.done.done():
            return
        bodies, escalated = self.bodies, self.escalated
        if escalated:
            for index, entry in pairs:
                read = escalated.get(index)
                if read is None:
                    bodies[index] = entry
                    self.remaining -= 1
                else:
                    read.answer(read.bookies[0], entry, None)  # its own outcome counts (on_entry)
        else:
            for index, entry in pairs:
                bodies[index] = entry
            self.remaining -= len(pairs)
        if self.remaining == 0 and not self.done.done():
            self.done.set_result(None)

    def escalate(self, index: int) -> _EntryRead:
        """Entry ``index`` as an :class:`_EntryRead` whose first replica was asked, its answer still to count
        (:meth:`_EntryRead.answer` takes it, now or when it comes)."""
        read = _EntryRead(
            self.reader, self.first + index, self.replicas[index % len(self.replicas)],
            partial(self.on_entry, index), 0, None,
        )
        read.next_i = 1
        read.outstanding = 1
        self.escalated[index] = read
        return read

    def on_entry(self, index: int, entry: VerifiedEntry | None, exc: BaseException | None) -> None:
        """An escalated entry's outcome: its verified payload, or the range's error."""
        if self.done.done():
            return
        if exc is not None:
            self.done.set_exception(exc)
            return
        self.verified[index] = bytes(entry.payload)  # type: ignore[union-attr]
        self.remaining -= 1
        if self.remaining == 0:
            self.done.set_result(None)

    def speculate(self, delay: float) -> None:
        """``speculativeReadTimeout`` passed: each entry still unanswered asks its next replica too, and backs off on
        its own timer from then on (as :func:`_speculate_group`)."""
        if self.done.done():
            return
        bodies, escalated = self.bodies, self.escalated
        for index in range(self.count):
            if bodies[index] is None and index not in escalated:  # (a verified entry was escalated)
                self.escalate(index).speculate(delay)

    async def verify(self) -> list[bytes]:
        """Every payload, digests checked in runs of answers kept as they came; a copy that fails the check is read
        again from the entry's other replicas (its error kept, as :meth:`_EntryRead.answer` keeps it)."""
        reader = self.reader
        out: list[bytes] = []
        i = 0
        while i < self.count:
            if i in self.verified:
                out.append(self.verified[i])
                i += 1
                continue
            j = i + 1
            while j < self.count and j not in self.verified:
                j += 1
            payloads, bad = reader.digester.verify_payloads(
                self.bodies[i:j], reader.ref.ledger_id, self.first + i, reader.ref.scope_id
            )
            out.extend(payloads)
            i += len(payloads)
            if bad is not None:
                bookie = self.replicas[i % len(self.replicas)][0]
                log.warning("bookie %s returned a bad copy of %s/%s: %s", bookie, reader.ref.ledger_id, self.first + i, bad)
                self.done = reader.ctx.loop.create_future()
                self.remaining = 1
                self.escalate(i).answer(bookie, None, bad)
                await self.done
                out.append(self.verified[i])
                i += 1
        return out


class LedgerReader:
    """Reads of one ledger; the metadata and LAC are updated by the handle that owns it."""

    def __init__(self, ctx: ClientServices, ref: LedgerRef, metadata: LedgerMetadata, digester: Digester) -> None:
        self.ctx = ctx
        self.ref = ref
        self.metadata = metadata
        self.digester = digester

    # -- helpers ----------------------------------------------------------------------------

    def _verify(self, data: Any, entry_id: int | None) -> VerifiedEntry:
        return self.digester.verify_entry(data, self.ref.ledger_id, entry_id, self.ref.scope_id)

    def _entry(self, v: VerifiedEntry) -> LedgerEntry:
        return LedgerEntry(self.ref.ledger_id, v.entry_id, bytes(v.payload), self.ref.scope_id)

    # -- single entry -------------------------------------------------------------------------

    def read_entry_cb(
        self,
        entry_id: int,
        callback: Callable[[VerifiedEntry | None, BaseException | None], None],
        *,
        flags: int = 0,
        master_key: bytes | None = None,
    ) -> None:
        """Read one verified entry from its replicas; ``callback(entry, error)`` exactly once.

        Replicas are asked one after the other, in the policy's order; an error
        or a bad copy moves on at once, silence for ``speculativeReadTimeout``
        asks the next one too (backing off).  See :class:`_EntryRead`.
        """
        _EntryRead(self, entry_id, self._replicas(entry_id), callback, flags, master_key).start()

    def _replicas(self, entry_id: int, cache: dict[tuple[int, int], list[str]] | None = None) -> list[str]:
        """The bookies holding ``entry_id``, in the order to ask them.

        ``cache`` (one read call's) reuses the order per (segment, write set): it only
        depends on those, the failure history and the cluster view, which one call
        may take as fixed.  Without it the order is computed afresh.
        """
        md = self.metadata
        if cache is not None:
            seg = md.segment(entry_id)[0]
            ck = (seg, entry_id % md.ensemble_size)
            bookies = cache.get(ck)
            if bookies is not None:
                return bookies
        seg, ensemble = md.segment(entry_id)
        order = read_order(self.ctx, ensemble, md.write_set(entry_id))
        bookies = [ensemble[i] for i in order]
        if cache is not None:
            cache[(seg, entry_id % md.ensemble_size)] = bookies
        return bookies

    async def read_entry(self, entry_id: int, *, flags: int = 0, master_key: bytes | None = None) -> VerifiedEntry:
        """One verified entry from its replicas (see :meth:`read_entry_cb`)."""
        fut: asyncio.Future[VerifiedEntry] = asyncio.get_running_loop().create_future()

        def done(entry: VerifiedEntry | None, exc: BaseException | None) -> None:
            if not fut.done():
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(entry)  # type: ignore[arg-type]

        self.read_entry_cb(entry_id, done, flags=flags, master_key=master_key)
        return await fut

    async def read_range(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), ``readPipelineDepth`` in flight; every one verified.  At most
        ``readPipelineDepth`` plain v2 reads within one segment are one :class:`_RangeRead`."""
        if last < first:
            return []
        if self._one_range_read(first, last):
            ledger_id, scope_id = self.ref.ledger_id, self.ref.scope_id
            payloads = await _RangeRead(self, first, last).run()
            return [LedgerEntry(ledger_id, first + i, payload, scope_id) for i, payload in enumerate(payloads)]
        return await self._read_range_pipelined(first, last)

    def _one_range_read(self, first: int, last: int) -> bool:
        """Whether ``first..last`` is read as one :class:`_RangeRead`: plain v2 reads (scope 0), no more than
        ``readPipelineDepth`` of them, within one segment."""
        if last - first + 1 > self.ctx.conf.readPipelineDepth or self.ctx.ops.data_version(self.ref.scope_id) != V2:
            return False
        next_segment = self.metadata.next_segment_start(first)
        return next_segment is None or next_segment > last

    async def _read_range_pipelined(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` with ``readPipelineDepth`` :class:`_EntryRead` objects in flight, one started
        as each one ends."""
        count = last - first + 1
        results: list[LedgerEntry | None] = [None] * count
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        next_i = 0
        remaining = count

        cache: dict[tuple[int, int], list[str]] = {}

        def new_read() -> _EntryRead:
            nonlocal next_i
            i = next_i
            next_i += 1
            return _EntryRead(self, first + i, self._replicas(first + i, cache), partial(finished, i), 0, None)

        def start_one() -> None:
            new_read().start()

        def finished(i: int, entry: VerifiedEntry | None, exc: BaseException | None) -> None:
            nonlocal remaining
            if done.done():
                return
            if exc is not None:
                done.set_exception(exc)
                return
            results[i] = self._entry(entry)  # type: ignore[arg-type]
            remaining -= 1
            if remaining == 0:
                done.set_result(None)
            elif next_i < count:
                start_one()

        # The first reads leave together: one run of requests per bookie and one speculative timer for all of
        # them, not one each (a timer per entry was a tenth of a striped scan's client CPU: BENCHMARKS.md).
        # Reads started later, one per answer, go one by one and arm their own.
        together = [new_read() for _ in range(min(self.ctx.conf.readPipelineDepth, count))]
        self._send_together(together)
        spec = speculative_timeout(self.ctx.conf)
        waiting = [read for read in together if not read.finished and len(read.bookies) > 1]
        group_timer = self.ctx.loop.call_later(spec, _speculate_group, waiting, spec) if spec > 0 and waiting else None
        try:
            await done
        finally:
            if group_timer is not None:
                group_timer.cancel()
        return results  # type: ignore[return-value]

    def _send_together(self, reads: list[_EntryRead]) -> None:
        """Send each plain read to its first replica, as ``start(timer=False)`` would: over v2, one run of requests
        per bookie (:meth:`BookieOps.read_v2_many`)."""
        ops = self.ctx.ops
        if ops.data_version(self.ref.scope_id) != V2:
            for read in reads:
                read.start(timer=False)
            return
        per_bookie: dict[str, list[_EntryRead]] = {}
        for read in reads:
            per_bookie.setdefault(read.claim_next(), []).append(read)  # type: ignore[arg-type]  # never None first
        ledger_id = self.ref.ledger_id
        for bookie, group in per_bookie.items():
            ops.read_v2_many(bookie, ledger_id, [read.entry_id for read in group], group, _first_answer)

    # -- batched reads ---------------------------------------------------------------------------

    async def batch_read(self, start: int, max_count: int, max_size: int, last_readable: int) -> list[LedgerEntry]:
        """BP-62 batch read of at most ``max_count`` entries / ``max_size`` bytes from ``start``
        (:meth:`batch_read_payloads`, as :class:`LedgerEntry` objects)."""
        payloads = await self.batch_read_payloads(start, max_count, max_size, last_readable)
        ledger_id, scope_id = self.ref.ledger_id, self.ref.scope_id
        return [LedgerEntry(ledger_id, start + i, payload, scope_id) for i, payload in enumerate(payloads)]

    async def batch_read_payloads(
        self,
        start: int,
        max_count: int,
        max_size: int,
        last_readable: int,
        prefer: int | None = None,
    ) -> "list[bytes] | PackedPayloads":
        """The verified payloads of a BP-62 batch read of at most ``max_count`` entries / ``max_size`` bytes
        from ``start`` (entry ids ``start, start + 1, ...``): a list of ``bytes``, or, when one answer held them
        all and the compiled check took them (scope 0, CRC32C), one :class:`PackedPayloads` gathered straight
        from the answer with no object per entry (docs/architecture.md, "Compiled fast path").

        ``last_readable`` is the LAC (or the last entry id the caller may read).
        Returns at least one entry when ``start <= last_readable``.  ``prefer`` (an ensemble index, modulo E)
        names the bookie to ask first when it holds the entries and can serve batches; the others follow in the
        read order.  Concurrent batches of one reader prefer different bookies, so for E = W, where every
        bookie holds every entry, all of them serve at once.
        """
        if start < 0:
            raise InvalidOptionError("start entry id must be >= 0", start=start)
        if start > last_readable:
            raise InvalidOptionError("start entry is beyond the last readable entry", start=start, lac=last_readable)
        frame_limit = self.ctx.conf.nettyMaxFrameSizeBytes
        max_size = frame_limit if max_size <= 0 else min(max_size, frame_limit)
        end = last_readable if max_count <= 0 else min(last_readable, start + max_count - 1)
        next_segment = self.metadata.next_segment_start(start)
        if next_segment is not None:
            end = min(end, next_segment - 1)
        md = self.metadata
        if not self.ctx.conf.batchReadEnabled or is_striped(md.ensemble_size, md.write_quorum_size):
            return await self._fallback(start, end, max_size)
        ensemble = md.ensemble_at(start)
        order = read_order(self.ctx, ensemble, md.write_set(start))
        ops = self.ctx.ops
        capable = rotate_to([i for i in order if ops.can_batch_read(ensemble[i], self.ref.scope_id)], prefer, len(ensemble))
        if not capable:
            return await self._fallback(start, end, max_size)
        want = end - start + 1
        verified: list[bytes] = []
        used = BATCH_RESPONSE_OVERHEAD
        errors: list[BaseException] = []
        for idx in capable:
            bookie = ensemble[idx]
            cur = start + len(verified)
            try:
                raw = await ops.batch_read_async(
                    bookie, self.ref.ledger_id, cur, want - len(verified), max(max_size - used + BATCH_RESPONSE_OVERHEAD, 1), self.ref.scope_id
                )
            except BKError as exc:
                errors.append(exc)
                note_read_failure(ops.pool, bookie, exc)
                if not ops.can_batch_read(bookie, self.ref.scope_id):
                    # The bookie hung up on opcode 7: it predates batch reads.
                    break
                continue
            clean = True
            limit = want - len(verified)
            ledger_id, scope_id = self.ref.ledger_id, self.ref.scope_id
            if not verified and type(raw) is BatchItems and raw.count:
                packed = self.digester.verify_payloads_packed(raw.body, raw.offset, limit, ledger_id, cur, scope_id)
                if packed is not None and packed[3] == min(limit, raw.count):
                    # Every entry asked for (or answered) checked out: the usual case.  Otherwise the list path
                    # below checks the answer again and names the entry that stopped it.
                    data, bounds, max_size = packed[:3]
                    return PackedPayloads._sharing(data, bounds, max_size)
            items = raw[:limit]
            payloads, bad = self.digester.verify_payloads(items, ledger_id, cur, scope_id)
            verified.extend(payloads)
            used += 4 * len(payloads) + sum(map(len, items[: len(payloads)]))
            if bad is not None:
                log.warning("bookie %s: bad copy of %s/%s in a batch: %s", bookie, ledger_id, cur + len(payloads), bad)
                errors.append(bad)
                clean = False
            if clean or len(verified) >= want:
                break
        if verified:
            return verified
        if any(not ops.can_batch_read(ensemble[i], self.ref.scope_id) for i in capable):
            return await self._fallback(start, end, max_size)
        raise pick_error(errors, ledger_id=self.ref.ledger_id, entry_id=start)

    async def read_range_batched(
        self, first: int, last: int, batch_size: int, max_size: int, last_readable: int, parallel: int = 4
    ) -> list[LedgerEntry]:
        """Entries ``first..last`` through batch reads, ``parallel`` batches in flight.

        The range is cut into chunks of ``batch_size``; each chunk is read with
        as many batch reads as it takes (a batch may return fewer entries), and
        chunks start on different bookies (the write set rotates with the entry
        id), so an E == W ensemble serves them side by side.
        """
        if last < first:
            return []
        step = max(1, batch_size)
        chunks = [(s, min(last, s + step - 1)) for s in range(first, last + 1, step)]
        results: list[list[LedgerEntry]] = [[] for _ in chunks]
        counter = itertools.count()

        async def worker() -> None:
            while True:
                i = next(counter)
                if i >= len(chunks):
                    return
                start, end = chunks[i]
                out = results[i]
                cur = start
                while cur <= end:
                    got = await self.batch_read(cur, end - cur + 1, max_size, min(end, last_readable))
                    out.extend(got)
                    cur = got[-1].entry_id + 1

        workers = [asyncio.ensure_future(worker()) for _ in range(min(max(1, parallel), len(chunks)))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for w in workers:
                w.cancel()
            raise
        return [e for chunk in results for e in chunk]

    async def stream_payloads(
        self,
        first: int,
        last: int,
        last_readable: int,
        *,
        batch_size: int = 100,
        max_size: int = 0,
        bytes_in_flight: int = DEFAULT_BYTES_IN_FLIGHT,
        batch: bool = True,
    ) -> AsyncIterator[tuple[int, Sequence[bytes]]]:
        """Verified payloads of ``first..min(last, last_readable)``, in order, as ``(first entry id, payloads)``: one
        item per answer a chunk took (a chunk read in several requests gives several).

        The payloads of an answer are one :class:`PackedPayloads` when the compiled check gathered them
        (:meth:`batch_read_payloads`), else a list of ``bytes`` copies, not views of the responses: a view
        is tracked by the garbage collector, and with many batches in flight the collector's walks over them cost
        more than the copy (BENCHMARKS.md, "Per-entry allocations of the client").

        The range is cut into chunks of ``batch_size`` entries; chunks are read concurrently, as many as fit in
        ``bytes_in_flight`` (estimated from the entry sizes seen so far; at least one), and each chunk starts
        on a different bookie (``prefer``), so an E = W ensemble serves every bookie at
        once.  With ``batch`` (and a bookie that can), a chunk is BP-62 batch reads; otherwise, and for
        striped ledgers or bookies without batch reads, pipelined single reads spread over the write sets.
        A chunk that fails raises here, in order, and the chunks still in flight are cancelled.
        """
        last = min(last, last_readable)
        if last < first:
            return
        step = max(1, batch_size)
        frame_limit = self.ctx.conf.nettyMaxFrameSizeBytes
        request_size = frame_limit if max_size <= 0 else min(max_size, frame_limit)
        loop = asyncio.get_running_loop()
        pending: collections.deque[tuple[asyncio.Task[list[Sequence[bytes]]], int, int]] = collections.deque()
        seen_bytes = 0
        seen_entries = 0
        next_start = first
        chunk_index = 0

        async def read_chunk(start: int, end: int, prefer: int) -> list[Sequence[bytes]]:
            pieces: list[Sequence[bytes]] = []
            cur = start
            while cur <= end:
                got: Sequence[bytes]
                if batch:
                    got = await self.batch_read_payloads(cur, end - cur + 1, request_size, end, prefer)
                else:
                    got = [entry.payload for entry in await self.read_range(cur, end)]
                pieces.append(got)
                cur += len(got)
            return pieces

        def chunk_entries(limit: int) -> int:
            """Entries of the next chunk: ``batch_size``, but no more than one request's bytes once entry sizes
            are known, so large entries still make several chunks in flight over several bookies (16 KiB entries
            in chunks of 1,000 were one 16 MiB chunk at a time, its requests one after the other)."""
            if seen_entries == 0:
                return min(limit, UNKNOWN_SIZE_CHUNK_ENTRIES)
            return max(1, min(limit, request_size // (seen_bytes // seen_entries + ENTRY_OVERHEAD_ESTIMATE)))

        def estimate(entries: int) -> int:
            if seen_entries == 0:  # nothing seen yet: assume each request fills its byte limit
                return min(request_size, entries * 1024 * 1024)
            return entries * max(1, seen_bytes // seen_entries)

        try:
            while pending or next_start <= last:
                in_flight = sum(estimate(e - s + 1) for _, s, e in pending)
                while next_start <= last and (
                    not pending or (in_flight < bytes_in_flight and len(pending) < MAX_CHUNKS_IN_FLIGHT)
                ):
                    end = min(last, next_start + chunk_entries(step) - 1)
                    task = loop.create_task(read_chunk(next_start, end, chunk_index))
                    pending.append((task, next_start, end))
                    in_flight += estimate(end - next_start + 1)
                    next_start = end + 1
                    chunk_index += 1
                task, start, end = pending.popleft()
                for payloads in await task:  # the chunk's answers as they came: no join here
                    seen_entries += len(payloads)
                    seen_bytes += payload_bytes(payloads)
                    yield start, payloads
                    start += len(payloads)
        finally:
            for task, _, _ in pending:
                task.cancel()
                task.add_done_callback(_retrieve)


    async def _fallback(self, start: int, end: int, max_size: int) -> list[bytes]:
        """The verified payloads of pipelined single reads of ``start..end`` within ``max_size`` bytes (at least
        one entry), ``readPipelineDepth`` at a time: as a :class:`_RangeRead` each where :meth:`read_range` would
        make one, else through :meth:`read_range`."""
        out: list[bytes] = []
        used = BATCH_RESPONSE_OVERHEAD
        per_entry = 4 + 32 + self.digester.size
        chunk = max(1, self.ctx.conf.readPipelineDepth)
        cur = start
        while cur <= end:
            last = min(end, cur + chunk - 1)
            if self._one_range_read(cur, last):
                part = await _RangeRead(self, cur, last).run()
            else:
                part = [entry.payload for entry in await self.read_range(cur, last)]
            part_size = per_entry * len(part) + sum(map(len, part))
            if used + part_size <= max_size:  # the usual case: the whole part fits
                out.extend(part)
                used += part_size
            else:
                for payload in part:
                    size = per_entry + len(payload)
                    if out and used + size > max_size:
                        return out
                    out.append(payload)
                    used += size
            cur += len(part)
        return out

    # -- LAC ------------------------------------------------------------------------------------------

    async def read_lac(self) -> int:
        """Java's ``readLastAddConfirmed`` over READ_LAC: the max LAC once every write quorum answered
        (a :class:`QuorumRead` over the last segment; the explicit LAC blob and the last entry both count)."""
        md = self.metadata
        ensemble = md.last_ensemble
        read = QuorumRead(len(ensemble), Covered(md, -1), ledger_id=self.ref.ledger_id)

        async def ask(idx: int) -> None:
            try:
                lac_blob, last_entry = await self.ctx.ops.read_lac_async(
                    ensemble[idx], self.ref.ledger_id, self.ref.scope_id
                )
                lac = -1
                if lac_blob:
                    lac = max(lac, self.digester.verify_lac(lac_blob, self.ref.ledger_id, self.ref.scope_id))
                if last_entry:
                    lac = max(lac, self._verify(last_entry, None).last_add_confirmed)
            except Exception as exc:  # noqa: BLE001 - any failure is this bookie's answer; the rule decides
                read.answer(idx, None, exc)
            else:
                read.answer(idx, lac, None)

        tasks = [asyncio.ensure_future(ask(i)) for i in range(len(ensemble))]
        try:
            return await read.done
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()


def _retrieve(task: "asyncio.Task[Any]") -> None:
    """Mark an abandoned chunk's error as seen (it was not the first failure; asyncio would log it)."""
    if not task.cancelled():
        task.exception()
