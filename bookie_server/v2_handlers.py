"""The bookie's v2 requests: grouped adds, runs of single reads, single and batch reads (a room of
:class:`~bookie_server.connection.Connection`).

v2 is the protocol of BookKeeper's own client in its default (``useV2WireProtocol``) mode and of bkspark's
client, so it carries most of a bookie's load: a v2 connection's received chunk is decoded in two passes
(``v2_bulk.decode_add_requests``, ``v2_bulk.decode_plain_reads``) into runs (:func:`runs`); a run of adds is stored
and journalled as one group and answered with one write once durable (docs/bookie.md, "Adds"); a run of single reads
is answered from memory at once, or handed to a read thread as one job (docs/bookie.md, "Runs of single reads").
The compiled loop of ``bookie_server/_speedups.c`` takes a group's adds when it is built, and
:func:`add_rows_reference` is its tested pure-Python reference.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import groupby

from bkspark.errors import BookieError, BookieIOError, MalformedFrameError, rc_for_error
from bkspark.protocol import v2, v2_bulk
from bkspark.protocol.digest import entry_header
from bkspark.protocol.speedups import load_compiled

from bookie_server.limits import InFlightGate
from bookie_server.metrics import now_ms as _now_ms

__all__ = ["COLD_RUN_READS", "V2Handlers", "add_rows", "add_rows_reference", "bad_version", "runs"]

log = logging.getLogger("bookie_server.server")

#: Reads of a run of single reads handed to a read thread as one job when memory lacks one (docs/bookie.md, "Runs
#: of single reads"); the job also stops at the write buffer's high water mark in bytes.
COLD_RUN_READS = 1024

#: The bookie's compiled loops (bookie_server/_speedups.c), or None: read at call time, so tests can turn them off.
_speedups = load_compiled("bookie_server._speedups")

#: An add's row for :meth:`Bookie.add_entries_cb`: (ledger id, entry id, lac, entry, master key, recovery, high priority).
AddRow = tuple[int, int, int, "bytes | memoryview", bytes, bool, bool]
#: What a group's refused add is answered with: (rc, ledger id, entry id, protocol version).
Refusal = tuple[int, int, int, int]


def bad_version(version: int) -> bool:
    """True for a v2 protocol version this bookie does not serve (answered EBADVERSION, as Java's bookie does)."""
    return version < v2.LOWEST_COMPAT_PROTOCOL_VERSION or version > v2.PROTOCOL_VERSION


def add_rows(group: list[v2.AddRequest]) -> tuple[list[AddRow], list[tuple[int, int, int]], list[Refusal]]:
    """For a group of v2 adds: the row of each add the bookie may take, its ``(ledger id, entry id, version)``
    in the same order, and the refusals of the rest (an entry header too short or of an unknown format, a bad
    version, a scope id: v2 has none).

    The compiled loop when it is built and no add of the group is refused (the usual group; docs/bookie.md,
    "Adds"), else :func:`add_rows_reference`.
    """
    if _speedups is not None:
        rows = _speedups.add_rows(
            group, v2.LOWEST_COMPAT_PROTOCOL_VERSION, v2.PROTOCOL_VERSION, v2.FLAG_RECOVERY_ADD, v2.FLAG_HIGH_PRIORITY
        )
        if rows is not None:
            return rows[0], rows[1], []
    return add_rows_reference(group)


def add_rows_reference(group: list[v2.AddRequest]) -> tuple[list[AddRow], list[tuple[int, int, int]], list[Refusal]]:
    """The pure-Python :func:`add_rows`: the tested reference of the compiled one."""
    rows: list[AddRow] = []
    ids: list[tuple[int, int, int]] = []
    refusals: list[Refusal] = []
    for request in group:
        flags, master_key, entry, version = request
        try:
            scope_id, ledger_id, entry_id, lac = entry_header(entry)
        except MalformedFrameError:
            # Java takes the ids from bytes 0-15 (the decoder guaranteed 16) and fails later.
            refusals.append((v2.EBADREQ, request.ledger_id, request.entry_id, version))
            continue
        if bad_version(version):
            refusals.append((v2.EBADVERSION, ledger_id, entry_id, version))
        elif scope_id != 0:
            refusals.append((v2.EBADREQ, ledger_id, entry_id, version))  # scope ids need v3 (BP-35 extension)
        else:
            rows.append((ledger_id, entry_id, lac, entry, master_key,
                         bool(flags & v2.FLAG_RECOVERY_ADD), bool(flags & v2.FLAG_HIGH_PRIORITY)))
            ids.append((ledger_id, entry_id, version))
    return rows, ids, refusals


def runs(requests: list[object]) -> list[object]:
    """``requests`` with each run of consecutive :class:`v2.AddRequest` objects as one list and each run of plain
    reads' ``(ledger id, entry id, version)`` (:func:`v2_bulk.decode_plain_reads`) as one tuple: what a v2
    connection's backlog holds (:meth:`Connection._drain_requests` admits and handles a run at once)."""
    kinds = list(map(type, requests))
    if kinds.count(v2.AddRequest) == len(kinds):
        return [requests]  # the usual chunk of a writer: adds only
    if kinds.count(tuple) == len(kinds):
        return [tuple(requests)]  # the usual chunk of a reader: single reads only
    out: list[object] = []
    for kind, run in groupby(requests, type):
        if kind is v2.AddRequest:
            out.append(list(run))
        elif kind is tuple:
            out.append(tuple(run))
        else:
            out.extend(run)
    return out


class V2Handlers:
    """Handlers of v2 requests (event-loop thread); each answers through the connection's ``send`` and gives its
    permit back (:class:`~bookie_server.admission.Admission`) when it answers."""

    def _handle_v2(self, request: object) -> None:
        if isinstance(request, v2.ReadRequest):
            self._v2_read(request.ledger_id, request.entry_id, request.version, request.flags, request.master_key,
                          self._take_permit())
        elif isinstance(request, v2.BatchReadRequest):
            self._v2_batch_read(request)
        else:
            self.send(v2.encode_auth_response(v2.AUTH_DISABLED_PLUGIN_NAME, b"", request.version))

    def _v2_add_group(self, group: list[v2.AddRequest]) -> None:
        """v2 adds received together, each holding a permit of the adds gate (:meth:`_admit_adds`): checked one
        by one, stored and journalled as one group, and answered with one response write once the group is
        durable (refusals are answered at once)."""
        start = _now_ms()
        metrics = self.metrics
        adds, accepted, refusals = add_rows(group)
        group_bytes = sum([len(request[2]) for request in group])  # what the group's permits hold
        #: The adds the bookie took, and their entries' bytes: answered together once durable.
        durable: list[tuple[int, int, int]] = []
        durable_bytes = [0]

        def reply(error: BaseException | None) -> None:
            rc = v2.EOK if error is None else v2.EIO
            self._release_adds(durable_bytes[0], len(durable))
            self.send(v2_bulk.encode_add_responses(rc, durable))
            self.flush()  # the group's answers leave now, not one loop iteration later: its adds wait for them
            metrics.observe_request("ADD_ENTRY", _now_ms() - start, rc == v2.EOK, len(durable))

        #: True once ``durable`` is complete.  The journal's completion comes in a later loop iteration, and the
        #: reply then runs at once; a completion during add_entries_cb (no journal) waits for the next iteration.
        filled = [False]

        def when_durable(error: BaseException | None) -> None:
            if filled[0]:
                reply(error)
            else:
                self._loop.call_soon(reply, error)

        if adds:
            try:
                refused = self.bookie.add_entries_cb(adds, when_durable)
            except BookieError as exc:
                refused = [exc] * len(adds)
            except Exception:  # noqa: BLE001 - our own bug: these adds fail, the bookie and connection go on
                log.exception("unexpected error adding entries for %s", self.peer)
                refused = [BookieIOError("unexpected error adding the entry")] * len(adds)
            if not any(refused):
                durable.extend(accepted)
                durable_bytes[0] = group_bytes if not refusals else sum([len(add[3]) for add in adds])
            else:
                for (ledger_id, entry_id, version), add, error in zip(accepted, adds, refused):
                    if error is None:
                        durable.append((ledger_id, entry_id, version))
                        durable_bytes[0] += len(add[3])
                    else:
                        refusals.append((rc_for_error(error), ledger_id, entry_id, version))
            metrics.add_bytes.inc(durable_bytes[0])
            filled[0] = True
        if refusals:
            # Every add is durable (its permit goes back with the answer) or refused (its permit goes back now).
            self._release_adds(group_bytes - durable_bytes[0], len(refusals))
            encode = v2.encode_add_response
            self.send(b"".join([encode(rc, ledger_id, entry_id, version)
                                 for rc, ledger_id, entry_id, version in refusals]))
            elapsed = _now_ms() - start
            for _refusal in refusals:
                metrics.observe_request("ADD_ENTRY", elapsed, False)

    def _fence_first(self, ledger_id: int, flags: int, master_key: bytes | None) -> asyncio.Future[None] | None:
        """Start fencing when the read asks for it (``FLAG_DO_FENCING``); raises EUA (no key / wrong key)."""
        return self._start_fence(0, ledger_id, master_key) if flags & v2.FLAG_DO_FENCING else None

    def _v2_read_run(self, reads: tuple[tuple[int, int, int], ...]) -> int:
        """A run of plain v2 reads, each holding a permit of the reads gate (:meth:`_admit_reads`): those memory
        holds are answered at once with one frame buffer, one metrics update and one gate release per stretch
        of them; the others (a miss, entry -1, an unknown ledger, a bad version) take :meth:`_v2_read`, in
        their turn, so the answers leave in the order one read at a time gives them (docs/bookie.md, "Runs of
        single reads").

        Stops, as the dispatch loop does, where the answers reach the write buffer's high water mark or
        another read the memory lacks would pass the connection's bound of reads held; returns how many reads
        it handled.  The permits of the others go back.
        """
        start = _now_ms()
        found = self.reads.memory_hits(0, reads)
        budget = self.conf.serverWriteBufferHighWaterMark - self._out_bytes
        hits: list[tuple[int, int, int]] = []
        entries: list[bytes] = []
        size = 0
        done = 0
        try:
            for read, data in zip(reads, found):
                if data is not None and not bad_version(read[2]):
                    hits.append(read)
                    entries.append(data)
                    size += len(data)
                    done += 1
                    if size + v2.RESPONSE_HEADER_SIZE * len(hits) >= budget:
                        break
                    continue
                if self._reads_held() or self._write_blocked or self.closed:
                    break
                if data is None and self._plain_miss(read):
                    if hits:
                        self._v2_read_hits(hits, entries, size, start)
                        hits, entries, size = [], [], 0
                    done += self._v2_read_cold_run(reads[done:], found[done:], budget)
                    break  # the run's rest waits until that stretch is answered
                if hits:
                    self._v2_read_hits(hits, entries, size, start)
                    hits, entries, size = [], [], 0
                self._v2_read(read[0], read[1], read[2], 0, None, (self.server.reads_gate, 0))
                done += 1  # after: a read that raised gives its permit back below, as the dispatch loop does
            if hits:
                self._v2_read_hits(hits, entries, size, start)
        finally:
            self._release_reads(len(reads) - done)
        return done

    def _plain_miss(self, read: tuple[int, int, int]) -> bool:
        """A read of a run that memory lacks and that the disk answers as a single read would: a known ledger,
        an entry id, a good version (the others take :meth:`_v2_read`)."""
        return read[1] >= 0 and not bad_version(read[2]) and self.bookie.storage.ledger(0, read[0]) is not None

    def _v2_read_cold_run(
        self, reads: tuple[tuple[int, int, int], ...], found: list[bytes | None], budget: int
    ) -> int:
        """From ``reads[0]``, a read memory lacks: the stretch of the run up to :data:`COLD_RUN_READS` reads
        and the first read the per-read path must answer goes to a read thread as one job (its misses only;
        ``BookieReads.read_run_soon``), and the connection dispatches nothing until it is answered, in order, hits
        and misses alike (docs/bookie.md, "Runs of single reads").  Returns the stretch's length; its permits
        go back with its answers."""
        misses: list[tuple[int, int]] = []
        length = held_bytes = 0
        for read, data in zip(reads, found):
            if length >= COLD_RUN_READS or bad_version(read[2]) or (data is None and not self._plain_miss(read)):
                break
            if data is None:
                misses.append((read[0], read[1]))
            else:
                held_bytes += len(data)
                if held_bytes >= budget and misses:
                    break  # what memory holds counts against the write buffer's mark too
            length += 1
        stretch, held = reads[:length], found[:length]
        self._cold_run = True
        start = _now_ms()
        job = self.reads.read_run_soon(0, misses, max(budget - held_bytes, 1))

        def answered(done: "asyncio.Future[list[bytes | BookieError]]") -> None:
            self._cold_run = False
            try:
                self._answer_cold_run(stretch, held, done, start)
            except Exception:
                # Our own bug must not leave the connection waiting for ever: drop it, as the dispatch loop does.
                log.exception("answering a run of reads for %s failed; closing the connection", self.peer)
                self.close()
            finally:
                self._release_reads(len(stretch))
            if self._backlog and not self.closed:
                self._drain()

        job.add_done_callback(answered)
        return length

    def _answer_cold_run(
        self,
        stretch: tuple[tuple[int, int, int], ...],
        held: list[bytes | None],
        job: "asyncio.Future[list[bytes | BookieError]]",
        start: float,
    ) -> None:
        """Loop thread: answer a stretch of :meth:`_v2_read_cold_run` in order, hits and the job's results alike;
        the reads past the job's budget go back to the head of the backlog as a run (the caller gives their permits
        back with the stretch's, and they are admitted again in their turn)."""
        error = job.exception()  # BookieReads._on_read_thread settles it with a BookieError, never cancels it
        results = iter(() if error is not None else job.result())
        frames: list[bytes] = []
        ids: list[tuple[int, int, int]] = []
        entries: list[bytes] = []
        answered = nbytes = failed = 0
        for read, data in zip(stretch, held):
            item: bytes | BaseException | None = data
            if item is None:
                item = error if error is not None else next(results, None)
                if item is None:
                    break  # past the job's budget
            if isinstance(item, bytes):
                ids.append(read)
                entries.append(item)
                nbytes += len(item)
            else:
                if ids:
                    frames.append(v2_bulk.encode_read_responses(ids, entries))
                    ids, entries = [], []
                rc = rc_for_error(item) if isinstance(item, BookieError) else v2.EIO
                frames.append(v2.encode_read_response(rc, read[0], read[1], b"", read[2]))
                failed += 1
            answered += 1
        if ids:
            frames.append(v2_bulk.encode_read_responses(ids, entries))
        rest = stretch[answered:]
        if rest and not self.closed:
            self._backlog.appendleft(rest)
        if frames:
            self.send(b"".join(frames))
        metrics = self.metrics
        metrics.read_bytes.inc(nbytes)
        elapsed = _now_ms() - start
        if answered - failed:
            metrics.observe_request("READ_ENTRY", elapsed, True, answered - failed)
        if failed:
            metrics.observe_request("READ_ENTRY", elapsed, False, failed)

    def _v2_read_hits(self, ids: list[tuple[int, int, int]], entries: list[bytes], size: int, start: float) -> None:
        """Answer reads whose ``entries`` (``size`` bytes) memory held, and give their permits back."""
        count = len(ids)
        self._release_reads(count)
        self.send(v2_bulk.encode_read_responses(ids, entries))
        metrics = self.metrics
        metrics.read_bytes.inc(size)
        metrics.observe_request("READ_ENTRY", _now_ms() - start, True, count)

    def _v2_read(
        self,
        ledger_id: int,
        entry_id: int,
        version: int,
        flags: int,
        master_key: bytes | None,
        permit: tuple[InFlightGate, int] | None,
    ) -> None:
        """One v2 read (a fencing one, or one of a run that memory does not answer at once)."""
        start = _now_ms()
        op = "READ_ENTRY_FENCE_REQUEST" if flags & v2.FLAG_DO_FENCING else "READ_ENTRY"

        def reply(rc: int, data: bytes = b"") -> None:
            self._release(permit)
            self.send(v2.encode_read_response(rc, ledger_id, entry_id, data, version))
            self.metrics.observe_request(op, _now_ms() - start, rc == v2.EOK)

        if bad_version(version):
            reply(v2.EBADVERSION)
            return
        try:
            fence = self._fence_first(ledger_id, flags, master_key)
            found = self.reads.read_entry_soon(0, ledger_id, entry_id)
        except BookieError as exc:
            reply(rc_for_error(exc))
            return

        def respond(data: bytes) -> None:
            self.metrics.read_bytes.inc(len(data))
            if fence is None:
                reply(v2.EOK, data)
            else:
                self._on_durable(fence, lambda: reply(v2.EOK, data), lambda e: reply(v2.EIO))

        self._when_read(found, respond, lambda exc: reply(rc_for_error(exc)))


    def _v2_batch_read(self, req: v2.BatchReadRequest) -> None:
        start = _now_ms()
        ledger_id, first, request_id, version = req.ledger_id, req.start_entry_id, req.request_id, req.version
        permit = self._take_permit()

        def reply(rc: int, entries: list[bytes] | None = None) -> None:
            self._release(permit)
            frame = v2.encode_batch_read_response(rc, ledger_id, first, request_id, entries or (), version)
            self.send(frame)
            self.metrics.observe_request("BATCH_READ_ENTRY", _now_ms() - start, rc == v2.EOK)
            if rc == v2.EOK:
                self.metrics.batch_read_response_size.observe(len(frame))

        if bad_version(version):
            reply(v2.EBADVERSION)
            return
        try:
            fence = self._fence_first(ledger_id, req.flags, req.master_key)
            found = self.reads.read_batch_soon(0, ledger_id, first, req.max_count, req.max_size)
        except BookieError as exc:
            reply(rc_for_error(exc))
            return

        def respond(entries: list[bytes]) -> None:
            if fence is None:
                reply(v2.EOK, entries)
            else:
                self._on_durable(fence, lambda: reply(v2.EOK, entries), lambda e: reply(v2.EIO))

        self._when_read(found, respond, lambda exc: reply(rc_for_error(exc)))

