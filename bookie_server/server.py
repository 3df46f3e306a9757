"""The bookie's network side: one asyncio event loop, v2 and v3 on one port.

Each connection gets a :class:`~bkspark.protocol.framing.FrameSplitter` and a
:class:`~bkspark.protocol.detect.ProtocolDetector`, so it is classified
exactly as the Java bookie classifies it (v3 until a frame fails to parse as
v3, then v2 for good).  Requests are handled as they arrive; those that wait
for the journal (adds, fences, explicit LACs) or for a LAC change (long
polls) answer when their future completes, so responses leave out of order,
as BookKeeper's own bookie sends them.

Bad input is contained to its connection: an oversized frame, an unknown v2
opcode or a v2 frame that cannot be decoded closes that connection (what
``BookieRequestHandler.exceptionCaught`` does); a v3 request for an unknown
operation gets EBADREQ with its header echoed.  Nothing a client sends can
stop the server.

Memory is bounded whatever a client does (docs/bookie.md, "Limits"): frames
are dispatched one at a time and dispatching stops -- and the connection is
no longer read -- while its queued responses are over
``serverWriteBufferHighWaterMark`` (until they drain under the low mark), while
the bookie's adds, reads or long polls in progress are at their limit, or
while the write cache is full during a checkpoint.  Connections over
``serverMaxConnections``, idle ones and ones stuck in a partial frame are closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from itertools import groupby
from typing import TypeVar

from bkspark.errors import (
    BookieError,
    BookieIOError,
    FrameTooLargeError,
    MalformedFrameError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ProtocolError,
    UnauthorizedAccessError,
    rc_for_error,
    status_for_error,
)
from bkspark.protocol import v2, v3
from bkspark.protocol.detect import ProtocolDetector
from bkspark.protocol.digest import entry_header, lac_header
from bkspark.protocol.framing import FrameSplitter
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.speedups import load_compiled

from bookie_server.bookie import Bookie, ReadAheadWait
from bookie_server.config import BookieConfig
from bookie_server.limits import InFlightGate, LimitLog
from bookie_server.metrics import BookieMetrics
from bookie_server.security import BookieSecurity, ConnectionSecurity

__all__ = ["BookieServer"]

T = TypeVar("T")

log = logging.getLogger("bookie_server.server")

#: Longest pause between two sweeps for idle connections and stalled partial frames.
_SWEEP_INTERVAL_S = 1.0


def _now_ms() -> float:
    return time.perf_counter() * 1000.0


_PB_REQUEST = pb.Request

#: Reads of one connection waiting for the read threads before it stops dispatching its requests: each may
#: bring up to ``maxBatchReadSize`` bytes, so this bounds what a connection's cold reads hold
#: (docs/bookie.md, "Reads"), as the write buffer's marks bound its answers.
COLD_READS_PER_CONNECTION = 4

#: Reads of one connection waiting for a read-ahead already on a read thread, per ``dbStorage_readAheadCacheBatchSize``
#: (a waiter holds no entry while it waits): as many as its own cold reads' read-aheads could answer
#: (docs/bookie.md, "Reads").
WAITING_READS_PER_CONNECTION = COLD_READS_PER_CONNECTION

#: Reads of a run of single reads handed to a read thread as one job when memory lacks one (docs/bookie.md, "Runs
#: of single reads"); the job also stops at the write buffer's high water mark in bytes.
COLD_RUN_READS = 1024

#: Configuration key of each gate, for the limit log.
_GATE_KEYS = {
    "adds": "maxAddsInProgressLimit",
    "reads": "maxReadsInProgressLimit",
    "long polls": "maxLongPollReadsInProgress",
}


def _set_no_delay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a client connection, as Java bookies do (``serverTcpNoDelay``, default true).

    asyncio does it only for sockets whose protocol number is TCP's, and the listening socket the bookie binds
    itself (protocol 0) passes 0 on to the connections it accepts.  With Nagle on, a small response written
    while an earlier one is unacknowledged waits for the client's delayed ACK (about 40 ms): a tailing reader's
    zero-timeout long poll right after a woken one was answered 40 ms late (docs/streaming.md, "Latency").
    """
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # the connection is already gone: nothing to tune
            pass


#: The bookie's compiled loops (bookie_server/_speedups.c), or None: read at call time, so tests can turn them off.
_speedups = load_compiled("bookie_server._speedups")

#: An add's row for :meth:`Bookie.add_entries_cb`: (ledger id, entry id, lac, entry, master key, recovery, high priority).
AddRow = tuple[int, int, int, "bytes | memoryview", bytes, bool, bool]
#: What a group's refused add is answered with: (rc, ledger id, entry id, protocol version).
Refusal = tuple[int, int, int, int]


def _bad_version(version: int) -> bool:
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
        if _bad_version(version):
            refusals.append((v2.EBADVERSION, ledger_id, entry_id, version))
        elif scope_id != 0:
            refusals.append((v2.EBADREQ, ledger_id, entry_id, version))  # scope ids need v3 (BP-35 extension)
        else:
            rows.append((ledger_id, entry_id, lac, entry, master_key,
                         bool(flags & v2.FLAG_RECOVERY_ADD), bool(flags & v2.FLAG_HIGH_PRIORITY)))
            ids.append((ledger_id, entry_id, version))
    return rows, ids, refusals


def _runs(requests: list[object]) -> list[object]:
    """``requests`` with each run of consecutive :class:`v2.AddRequest` objects as one list and each run of plain
    reads' ``(ledger id, entry id, version)`` (:func:`v2.decode_plain_reads`) as one tuple: what a v2 connection's
    backlog holds (:meth:`_Connection._drain_requests` admits and handles a run at once)."""
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


class BookieServer:
    """Accepts connections and serves them with one :class:`Bookie`."""

    def __init__(
        self, bookie: Bookie, conf: BookieConfig, metrics: BookieMetrics, security: BookieSecurity | None = None
    ) -> None:
        self.bookie = bookie
        self.conf = conf
        self.metrics = metrics
        #: TLS and SASL (docs/security.md); from the configuration when not given.
        self.security = security if security is not None else BookieSecurity.from_conf(conf.extra)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self.port = conf.bookiePort
        self.adds_gate = InFlightGate("adds", conf.maxAddsInProgressLimit, conf.maxAddsInProgressBytes)
        self.reads_gate = InFlightGate("reads", conf.maxReadsInProgressLimit)
        self.long_polls_gate = InFlightGate("long polls", conf.maxLongPollReadsInProgress)
        self.limit_log = LimitLog(on_hit=lambda limit: metrics.limit_hits.labels(limit=limit).inc())
        metrics.adds_in_progress.set_function(lambda: self.adds_gate.count)
        metrics.reads_in_progress.set_function(lambda: self.reads_gate.count + self.long_polls_gate.count)
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen on ``bindAddress:bookiePort`` (port 0 picks a free one), or on a bound ``sock``."""
        loop = asyncio.get_running_loop()
        if sock is not None:
            self._server = await loop.create_server(lambda: _Connection(self), sock=sock)
        else:
            self._server = await loop.create_server(
                lambda: _Connection(self), self.conf.bindAddress, self.conf.bookiePort, reuse_address=True, backlog=1024
            )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.conf.serverConnectionIdleTimeoutMs or self.conf.serverPartialFrameTimeoutMs:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="bookie-connection-sweeper")
        log.info("bookie listening", extra={"port": self.port})

    async def _sweep_forever(self) -> None:
        """Close connections idle for serverConnectionIdleTimeoutMs or stuck in a partial frame."""
        timeouts = [t for t in (self.conf.serverConnectionIdleTimeoutMs, self.conf.serverPartialFrameTimeoutMs) if t]
        interval = min(_SWEEP_INTERVAL_S, min(timeouts) / 4000.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self._connections):
                conn.check_timeouts(now)

    async def stop_accepting(self) -> None:
        """Stop taking new connections (existing ones keep being served)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def close_connections(self) -> None:
        """Close every client connection."""
        for conn in list(self._connections):
            conn.close()
        await asyncio.sleep(0)


class _Connection(asyncio.Protocol):
    """One client connection: frame splitting, v2/v3 detection, dispatch."""

    def __init__(self, server: BookieServer) -> None:
        self.server = server
        self.bookie = server.bookie
        self.conf = server.conf
        self.metrics = server.metrics
        self.splitter = FrameSplitter(server.conf.nettyMaxFrameSizeBytes)
        self.detector = ProtocolDetector()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._loop = asyncio.get_running_loop()
        # Requests received but not dispatched yet: frame bodies, or requests once parsed.
        self._backlog: deque[object] = deque()
        self._write_blocked = False  # queued responses over the high water mark
        self._parked = False  # waiting for a gate (adds/reads/long polls) or the write cache
        self._cold_reads = 0  # reads of this connection on the read threads (COLD_READS_PER_CONNECTION)
        self._waiting_reads = 0  # its reads waiting for a read-ahead (WAITING_READS_PER_CONNECTION)
        self._cold_run = False  # a stretch of a run of reads is on a read thread (_v2_read_cold_run)
        self._waiting_limit = WAITING_READS_PER_CONNECTION * max(1, server.conf.dbStorage_readAheadCacheBatchSize)
        self._reading_paused = False
        self._rejected = False
        # (gate, bytes) of the request being dispatched (None: it needs no permit).
        self._permit: tuple[InFlightGate, int] | None = None
        self._permit_taken = False
        self._permits_held = 0
        self.last_activity = time.monotonic()
        self.partial_since: float | None = None
        security = server.security
        #: TLS and SASL state (bookie_server/security.py); None when the bookie has neither.
        self.sec = ConnectionSecurity(security) if security.tls is not None or security.sasl is not None else None

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        limit = self.conf.serverMaxConnections
        if limit and len(self.server._connections) >= limit:
            # No free slot: closed at once (a client sees the connection drop, as when a
            # Java bookie closes a channel) and it never counts as a connection.
            self._rejected = self.closed = True
            self.server.limit_log.hit(
                "serverMaxConnections", "connection from %s closed: serverMaxConnections=%d reached", self.peer, limit
            )
            transport.close()
            return
        transport.set_write_buffer_limits(
            high=self.conf.serverWriteBufferHighWaterMark, low=self.conf.serverWriteBufferLowWaterMark
        )
        _set_no_delay(transport)
        self.server._connections.add(self)
        self.metrics.connections.inc()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._backlog.clear()
        if self._rejected:
            return
        self.server._connections.discard(self)
        self.metrics.connections.dec()
        for task in list(self._tasks):
            task.cancel()

    def pause_writing(self) -> None:
        # A client that does not read its responses stops being read from (Netty's water marks).
        self._write_blocked = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._drain()

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.sec is not None and self.sec.upgrading:
            self.sec.held_data.append(bytes(data))  # decrypted bytes that beat the end of start_tls
            return
        try:
            bodies = self.splitter.feed(data)
        except FrameTooLargeError as exc:
            self._protocol_error(exc)
            return
        if not self.splitter.buffered:
            self.partial_since = None
        elif bodies or self.partial_since is None:
            self.partial_since = self.last_activity  # a new frame started (earlier ones completed)
        if bodies:
            if self.sec is None and self.detector.version == "v2":
                # A v2 connection's adds and plain single reads are decoded in two passes over the chunk, and each
                # run of them waits as one list or tuple (admitted and handled as a run); the rest are parsed in
                # their turn.
                self._backlog.extend(_runs(v2.decode_plain_reads(v2.decode_add_requests(bodies))))
            else:
                self._backlog.extend(bodies)
            self._drain()

    # -- dispatch with bounds -----------------------------------------------------------
    def _drain(self) -> None:
        """Dispatch backlogged requests until one must wait; pause reading while any waits.

        Consecutive v2 adds are gathered (admitted through the adds gate, a run at a time:
        :meth:`_admit_adds`) and handled as one group (:meth:`_v2_add_group`) before the next request of
        another kind, or when dispatching stops: one journal submission and one response write for the group.
        """
        adds: list[v2.AddRequest] = []
        try:
            self._drain_requests(adds)
        finally:
            if adds:
                self._v2_add_group(adds)
        self._update_reading()

    def _drain_requests(self, adds: list[v2.AddRequest]) -> None:
        backlog = self._backlog
        sec = self.sec
        while backlog and not (self.closed or self._write_blocked or self._parked or self._reads_held()):
            if sec is not None and sec.upgrading:
                return  # the TLS upgrade resumes dispatching when it is done
            request = backlog[0]
            try:
                if type(request) is list:
                    # A run of v2 adds (_runs): as many as the gate admits join the group, in order.
                    admitted = self._admit_adds(request)
                    if admitted == len(request):
                        backlog.popleft()
                        adds.extend(request)
                    elif admitted:
                        backlog[0] = request[admitted:]
                        adds.extend(request[:admitted])
                    continue  # the rest of a run the gate cut parks the connection on the next turn
                if type(request) is tuple:
                    # A run of plain v2 reads (_runs): the gate admits a prefix, the adds before it go first.
                    admitted = self._admit_reads(request)
                    if not admitted:
                        continue  # parked
                    self._hand_over_adds(adds)
                    done = self._v2_read_run(request if admitted == len(request) else request[:admitted])
                    if done == len(request):
                        backlog.popleft()
                    else:
                        backlog[0] = request[done:]
                    continue
                if type(request) is memoryview or type(request) is bytes:
                    # A frame body as the splitter gave it (bytes when small: framing.SMALL_BODY).
                    # Parsed in arrival order, so v2/v3 detection sees frames as Java's does.
                    # MalformedFrameError / UnknownOpcodeError close the connection, as in Java.
                    v3_request = self.detector.parse(request)
                    request = v2.decode_request(request) if v3_request is None else v3_request
                if sec is not None and sec.intercepts(request):
                    backlog.popleft()  # START_TLS, or anything before authentication (no permit needed)
                    if sec.handle(self, request):
                        return
                    continue
                if type(request) is v2.AddRequest:
                    backlog[0] = [request]  # an add parsed in its turn is a run of one
                    continue
                if not self._admit(request):
                    backlog[0] = request  # parsed once: it waits as a request
                    break
                backlog.popleft()
                permit = self._permit
                self._hand_over_adds(adds)
                try:
                    if type(request) is _PB_REQUEST:
                        self._handle_v3(request)  # type: ignore[arg-type]
                    else:
                        self._handle_v2(request)
                except BaseException:
                    self._release(permit)  # the request dies with the connection: its permit must not leak
                    raise
                finally:
                    self._permit = None
                if permit is not None and not self._permit_taken:
                    self._release(permit)  # the handler answered without taking it (e.g. a bad version)
            except ProtocolError as exc:
                self._protocol_error(exc)
                return
            except Exception:
                # Our own bug must not take the server down: drop this connection only.
                log.exception("unexpected error serving %s; closing the connection", self.peer)
                self.close()
                return

    def _hand_over_adds(self, adds: list[v2.AddRequest]) -> None:
        """In arrival order: the adds gathered before the request about to be handled go first, as a group."""
        if adds:
            group = list(adds)
            adds.clear()
            self._v2_add_group(group)

    def _reads_held(self) -> bool:
        """True while the connection's reads waiting for the read threads, or for a read-ahead, are at their
        bound (docs/bookie.md, "Reads"): it dispatches no more until one is answered."""
        return (
            self._cold_run
            or self._cold_reads >= COLD_READS_PER_CONNECTION
            or self._waiting_reads >= self._waiting_limit
        )

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        pause = self._write_blocked or bool(self._backlog)
        if pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
            if self.partial_since is not None:
                self.partial_since = time.monotonic()  # our pause is not the client's delay

    def _admit(self, request: object) -> bool:
        """Take the permit the request needs (``self._permit``); park the connection if it must wait."""
        cls = type(request)
        server = self.server
        if cls is v2.ReadRequest or cls is v2.BatchReadRequest:
            gate, nbytes = server.reads_gate, 0
        elif cls is _PB_REQUEST:
            gate, nbytes = self._v3_gate(request)  # type: ignore[arg-type]
        else:
            gate = None
        if gate is None:
            return True
        if gate is server.adds_gate and self.bookie.write_cache_full:
            self._park(self.bookie.wait_write_cache, "dbStorage_writeCacheMaxSizeMb")
            return False
        if not gate.try_acquire(nbytes):
            self._park(gate.wait, _GATE_KEYS[gate.name])
            return False
        self._permits_held += 1
        self._permit = (gate, nbytes)
        self._permit_taken = False
        return True

    def _admit_adds(self, run: list[v2.AddRequest]) -> int:
        """How many adds at the head of ``run`` get a permit of the adds gate (each of its entry's bytes), as
        :meth:`_admit` one at a time would give them; the connection is parked when none does."""
        if self.bookie.write_cache_full:
            self._park(self.bookie.wait_write_cache, "dbStorage_writeCacheMaxSizeMb")
            return 0
        gate = self.server.adds_gate
        admitted = gate.try_acquire_many([len(add[2]) for add in run])
        if not admitted:
            self._park(gate.wait, _GATE_KEYS[gate.name])
            return 0
        self._permits_held += admitted
        return admitted

    def _admit_reads(self, run: tuple[tuple[int, int, int], ...]) -> int:
        """How many reads at the head of ``run`` get a permit of the reads gate, as :meth:`_admit` one at a time
        would give them; the connection is parked when none does."""
        gate = self.server.reads_gate
        admitted = gate.try_acquire_many((0,) * len(run))
        if not admitted:
            self._park(gate.wait, _GATE_KEYS[gate.name])
            return 0
        self._permits_held += admitted
        return admitted

    def _release_reads(self, count: int) -> None:
        """Give back ``count`` permits of :meth:`_admit_reads`."""
        if count:
            self._permits_held -= count
            self.server.reads_gate.release(0, count)

    def _release_adds(self, nbytes: int, count: int) -> None:
        """Give back ``count`` permits of :meth:`_admit_adds` holding ``nbytes`` together."""
        if count:
            self._permits_held -= count
            self.server.adds_gate.release(nbytes, count)

    def _v3_gate(self, request: pb.Request) -> tuple[InFlightGate | None, int]:
        op = request.header.operation
        if op == pb.ADD_ENTRY:
            return self.server.adds_gate, len(request.addRequest.body)
        if op == pb.READ_ENTRY:
            read = request.readRequest
            fencing = read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER
            long_poll = not fencing and read.HasField("previousLAC")
            return (self.server.long_polls_gate if long_poll else self.server.reads_gate), 0
        if op == pb.BATCH_READ_ENTRY:
            return self.server.reads_gate, 0
        # These wait for the journal as adds do, so they count among adds in progress (their
        # records sit in the journal's queue meanwhile).
        if op == pb.WRITE_LAC:
            return self.server.adds_gate, len(request.writeLacRequest.body)
        if op == pb.FORCE_LEDGER:
            return self.server.adds_gate, 0
        return None, 0

    def _park(self, register: Callable[[Callable[[], None]], None], limit: str) -> None:
        self._parked = True
        self.server.limit_log.hit(limit, "%s reached: stopped reading requests from %s until it frees", limit, self.peer)

        def wake() -> None:
            self._parked = False
            self._loop.call_soon(self._drain)

        register(wake)

    def _take_permit(self) -> tuple[InFlightGate, int] | None:
        """The permit of the request being dispatched; its handler passes it to :meth:`_release` once, on reply."""
        self._permit_taken = True
        return self._permit

    def _release(self, permit: tuple[InFlightGate, int] | None) -> None:
        if permit is not None:
            self._permits_held -= 1
            permit[0].release(permit[1])

    def check_timeouts(self, now: float) -> None:
        """Close the connection when idle too long or stuck in a partial frame (the sweeper's call)."""
        if self.closed:
            return
        partial_ms = self.conf.serverPartialFrameTimeoutMs
        if partial_ms and self.partial_since is not None and not self._reading_paused:
            if (now - self.partial_since) * 1000.0 > partial_ms:
                self.server.limit_log.hit(
                    "serverPartialFrameTimeoutMs",
                    "closing %s: a frame stayed incomplete for over serverPartialFrameTimeoutMs=%d",
                    self.peer,
                    partial_ms,
                )
                self.close()
                return
        idle_ms = self.conf.serverConnectionIdleTimeoutMs
        if idle_ms and not self._permits_held and not self._backlog and (now - self.last_activity) * 1000.0 > idle_ms:
            self.server.limit_log.hit(
                "serverConnectionIdleTimeoutMs",
                "closing %s: idle for over serverConnectionIdleTimeoutMs=%d",
                self.peer,
                idle_ms,
            )
            self.close()

    # -- helpers ------------------------------------------------------------------------
    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def _protocol_error(self, exc: BaseException) -> None:
        self._backlog.clear()
        self.metrics.protocol_errors.inc()
        log.warning("closing connection from %s: %s", self.peer, exc)
        self.close()

    def _send(self, data: bytes) -> None:
        # Responses produced in one loop iteration leave in one write (one syscall, not one each),
        # unless they pass the high water mark: then they go to the transport now, which calls
        # pause_writing if they cannot leave.
        if self.closed:
            return
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= self.conf.serverWriteBufferHighWaterMark:
            self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        self._out_bytes = 0
        if not self.closed and self.transport is not None and out:
            self.last_activity = time.monotonic()
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _send_v3(self, response: pb.Response) -> None:
        self._send(v3.encode_response(response))

    def _spawn(self, coro: object) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("request task failed for %s: %r", self.peer, task.exception())

    def _when_read(
        self, found: "T | asyncio.Future[T]", on_data: Callable[[T], None], on_error: Callable[[BookieError], None]
    ) -> None:
        """``on_data`` now for what memory held, or when the read threads bring it from disk
        (``Bookie.read_entry_soon``; docs/bookie.md, "Reads"); ``on_error`` with the disk's error.  While
        ``COLD_READS_PER_CONNECTION`` of its reads wait for the read threads, or its waiting reads for a
        read-ahead (:class:`ReadAheadWait`) are at their bound, the connection dispatches no more."""
        if not isinstance(found, asyncio.Future):
            on_data(found)
            return
        waiting = type(found) is ReadAheadWait
        if waiting:
            self._waiting_reads += 1
        else:
            self._cold_reads += 1

        def done(fut: "asyncio.Future[T]") -> None:
            if waiting:
                self._waiting_reads -= 1
            else:
                self._cold_reads -= 1
            if self._backlog and not self.closed:
                self._loop.call_soon(self._drain)
            # Bookie._on_read_thread settles it with the bytes or a BookieError, never by cancelling it
            error = fut.exception()
            if error is None:
                on_data(fut.result())
            else:
                on_error(error)  # type: ignore[arg-type]

        found.add_done_callback(done)

    async def _read_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bytes:
        """An entry for a coroutine: from memory now, or awaited from a read thread."""
        found = self.bookie.read_entry_soon(scope_id, ledger_id, entry_id)
        return (await found) if isinstance(found, asyncio.Future) else found

    def _on_durable(
        self, fut: asyncio.Future[None], on_ok: Callable[[], None], on_error: Callable[[BaseException], None]
    ) -> None:
        def done(f: asyncio.Future[None]) -> None:
            if f.cancelled():
                on_error(BookieIOError("cancelled"))
                return
            error = f.exception()
            if error is None:
                on_ok()
            else:
                on_error(error)

        fut.add_done_callback(done)

    # -- v2 -----------------------------------------------------------------------------
    def _handle_v2(self, request: object) -> None:
        if isinstance(request, v2.ReadRequest):
            self._v2_read(request.ledger_id, request.entry_id, request.version, request.flags, request.master_key,
                          self._take_permit())
        elif isinstance(request, v2.BatchReadRequest):
            self._v2_batch_read(request)
        else:
            self._send(v2.encode_auth_response(v2.AUTH_DISABLED_PLUGIN_NAME, b"", request.version))

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
            self._send(v2.encode_add_responses(rc, durable))
            self._flush()  # the group's answers leave now, not one loop iteration later: its adds wait for them
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
            self._send(b"".join([encode(rc, ledger_id, entry_id, version)
                                 for rc, ledger_id, entry_id, version in refusals]))
            elapsed = _now_ms() - start
            for _refusal in refusals:
                metrics.observe_request("ADD_ENTRY", elapsed, False)

    def _fence_first(self, ledger_id: int, flags: int, master_key: bytes | None) -> asyncio.Future[None] | None:
        """Start fencing for a fencing read; raises EUA (no key / wrong key)."""
        if not flags & v2.FLAG_DO_FENCING:
            return None
        if master_key is None:
            raise UnauthorizedAccessError("fencing read without a master key", ledger_id=ledger_id)
        return self.bookie.fence(0, ledger_id, master_key)

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
        found = self.bookie.memory_hits(0, reads)
        budget = self.conf.serverWriteBufferHighWaterMark - self._out_bytes
        hits: list[tuple[int, int, int]] = []
        entries: list[bytes] = []
        size = 0
        done = 0
        try:
            for read, data in zip(reads, found):
                if data is not None and not _bad_version(read[2]):
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
        return read[1] >= 0 and not _bad_version(read[2]) and self.bookie.storage.ledger(0, read[0]) is not None

    def _v2_read_cold_run(
        self, reads: tuple[tuple[int, int, int], ...], found: list[bytes | None], budget: int
    ) -> int:
        """From ``reads[0]``, a read memory lacks: the stretch of the run up to :data:`COLD_RUN_READS` reads
        and the first read the per-read path must answer goes to a read thread as one job (its misses only;
        ``Bookie.read_run_soon``), and the connection dispatches nothing until it is answered, in order, hits
        and misses alike (docs/bookie.md, "Runs of single reads").  Returns the stretch's length; its permits
        go back with its answers."""
        misses: list[tuple[int, int]] = []
        length = held_bytes = 0
        for read, data in zip(reads, found):
            if length >= COLD_RUN_READS or _bad_version(read[2]) or (data is None and not self._plain_miss(read)):
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
        job = self.bookie.read_run_soon(0, misses, max(budget - held_bytes, 1))

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
        error = job.exception()  # Bookie._on_read_thread settles it with a BookieError, never cancels it
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
                    frames.append(v2.encode_read_responses(ids, entries))
                    ids, entries = [], []
                rc = rc_for_error(item) if isinstance(item, BookieError) else v2.EIO
                frames.append(v2.encode_read_response(rc, read[0], read[1], b"", read[2]))
                failed += 1
            answered += 1
        if ids:
            frames.append(v2.encode_read_responses(ids, entries))
        rest = stretch[answered:]
        if rest and not self.closed:
            self._backlog.appendleft(rest)
        if frames:
            self._send(b"".join(frames))
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
        self._send(v2.encode_read_responses(ids, entries))
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
            self._send(v2.encode_read_response(rc, ledger_id, entry_id, data, version))
            self.metrics.observe_request(op, _now_ms() - start, rc == v2.EOK)

        if _bad_version(version):
            reply(v2.EBADVERSION)
            return
        try:
            fence = self._fence_first(ledger_id, flags, master_key)
            found = self.bookie.read_entry_soon(0, ledger_id, entry_id)
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

    def _read_batch(
        self, scope_id: int, ledger_id: int, start_entry: int, max_count: int, max_size: int
    ) -> "list[bytes] | asyncio.Future[list[bytes]]":
        """BatchedReadEntryProcessor.readData (4.17): first entry always, stop at gaps or limits.

        The response frame is counted from 36 bytes (prefix, request id, length field)
        plus ``4 + len`` per entry, against ``min(request maxSize, maxBatchReadSize)``.
        The entries now when memory holds them all, else a future the read threads complete.
        """
        if max_count <= 0:
            max_count = 0x7FFFFFFF
        limit = min(max_size, self.conf.maxBatchReadSize)
        if start_entry >= 0:
            return self.bookie.read_range_soon(
                scope_id, ledger_id, start_entry, max_count, limit - v2.BATCH_RESPONSE_OVERHEAD
            )
        # Start -1 reads "the last entry" first, as Java's readEntry(-1) does, then -1 + i.
        frame_size = v2.BATCH_RESPONSE_OVERHEAD
        entries: list[bytes] = []
        for i in range(max_count):
            try:
                data = self.bookie.read_entry(scope_id, ledger_id, start_entry + i)
            except BookieError:
                if not entries:
                    raise
                break
            frame_size += len(data) + 4
            if entries and frame_size > limit:
                break
            entries.append(data)
        return entries

    def _v2_batch_read(self, req: v2.BatchReadRequest) -> None:
        start = _now_ms()
        ledger_id, first, request_id, version = req.ledger_id, req.start_entry_id, req.request_id, req.version
        permit = self._take_permit()

        def reply(rc: int, entries: list[bytes] | None = None) -> None:
            self._release(permit)
            frame = v2.encode_batch_read_response(rc, ledger_id, first, request_id, entries or (), version)
            self._send(frame)
            self.metrics.observe_request("BATCH_READ_ENTRY", _now_ms() - start, rc == v2.EOK)
            if rc == v2.EOK:
                self.metrics.batch_read_response_size.observe(len(frame))

        if _bad_version(version):
            reply(v2.EBADVERSION)
            return
        try:
            fence = self._fence_first(ledger_id, req.flags, req.master_key)
            found = self._read_batch(0, ledger_id, first, req.max_count, req.max_size)
        except BookieError as exc:
            reply(rc_for_error(exc))
            return

        def respond(entries: list[bytes]) -> None:
            if fence is None:
                reply(v2.EOK, entries)
            else:
                self._on_durable(fence, lambda: reply(v2.EOK, entries), lambda e: reply(v2.EIO))

        self._when_read(found, respond, lambda exc: reply(rc_for_error(exc)))

    # -- v3 -----------------------------------------------------------------------------
    def _handle_v3(self, request: pb.Request) -> None:
        op = request.header.operation
        handler = self._V3_HANDLERS.get(op)
        sub = v3.sub_request(request) if handler is not None else None
        if handler is None or (sub is None and op not in (pb.START_TLS, pb.GET_BOOKIE_INFO)):
            self._send_v3(v3.error_response(request, pb.EBADREQ))
            return
        handler(self, request)

    def _v3_version_ok(self, request: pb.Request, build: Callable[[int], pb.Response]) -> bool:
        if request.header.version != pb.VERSION_THREE:
            self._send_v3(build(pb.EBADVERSION))
            return False
        return True

    def _v3_add(self, request: pb.Request) -> None:
        start = _now_ms()
        add = request.addRequest
        permit = self._take_permit()

        def reply(status: int) -> None:
            self._release(permit)
            self._send_v3(v3.add_response(request, status))
            self.metrics.observe_request("ADD_ENTRY", _now_ms() - start, status == pb.EOK)

        if not self._v3_version_ok(request, lambda s: v3.add_response(request, s)):
            self._release(permit)
            return
        try:
            scope_id, ledger_id, entry_id, lac = entry_header(add.body)
        except MalformedFrameError:
            reply(pb.EBADREQ)
            return
        if scope_id != v3.scope_id_of(add):
            reply(pb.EBADREQ)
            return
        try:
            self.bookie.add_entry_cb(
                scope_id,
                ledger_id,
                entry_id,
                lac,
                add.body,
                add.masterKey,
                lambda error: reply(pb.EOK if error is None else pb.EIO),
                recovery=add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD,
                high_priority=request.header.priority > 0,
                deferred_sync=bool(add.writeFlags & v3.WRITE_FLAG_DEFERRED_SYNC),
            )
        except BookieError as exc:
            reply(status_for_error(exc))
            return
        self.metrics.add_bytes.inc(len(add.body))

    def _v3_read(self, request: pb.Request) -> None:
        read = request.readRequest
        permit = self._take_permit()
        if not self._v3_version_ok(request, lambda s: v3.read_response(request, s)):
            self._release(permit)
            return
        fencing = read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER
        if not fencing and read.HasField("previousLAC"):
            # Released when the task ends, however it ends (even cancelled before its first step).
            self._spawn(self._v3_long_poll(request)).add_done_callback(lambda _task: self._release(permit))
            return
        start = _now_ms()
        scope_id, ledger_id, entry_id = v3.scope_id_of(read), read.ledgerId, read.entryId
        op = "READ_ENTRY_FENCE_REQUEST" if fencing else "READ_ENTRY"

        def reply(resp: pb.Response) -> None:
            self._release(permit)
            self._send_v3(resp)
            self.metrics.observe_request(op, _now_ms() - start, resp.status == pb.EOK)

        fence = None
        try:
            if fencing:
                if not read.HasField("masterKey"):
                    raise UnauthorizedAccessError("fencing read without a master key", ledger_id=ledger_id)
                fence = self.bookie.fence(scope_id, ledger_id, read.masterKey)
            found = self.bookie.read_entry_soon(scope_id, ledger_id, entry_id)
        except BookieError as exc:
            reply(v3.read_response(request, status_for_error(exc)))
            return

        def respond(data: bytes) -> None:
            self.metrics.read_bytes.inc(len(data))
            if fence is None:
                try:
                    max_lac = self.bookie.last_add_confirmed(scope_id, ledger_id)
                except BookieError as exc:  # deleted while a read thread had it
                    reply(v3.read_response(request, status_for_error(exc)))
                    return
                reply(v3.read_response(request, pb.EOK, body=data, max_lac=max_lac))
            else:
                self._on_durable(
                    fence,
                    lambda: reply(v3.read_response(request, pb.EOK, body=data)),
                    lambda e: reply(v3.read_response(request, pb.EIO)),
                )

        self._when_read(found, respond, lambda exc: reply(v3.read_response(request, status_for_error(exc))))

    async def _v3_long_poll(self, request: pb.Request) -> None:
        start = _now_ms()
        read = request.readRequest
        scope_id, ledger_id, entry_id = v3.scope_id_of(read), read.ledgerId, read.entryId
        previous = read.previousLAC
        updated_at: int | None = None
        try:
            if read.HasField("timeOut"):
                changed = await self.bookie.wait_for_lac(scope_id, ledger_id, previous, read.timeOut)
                if changed:
                    updated_at = int(time.time() * 1000)
            piggyback = read.HasField("flag") and read.flag == pb.ReadRequest.ENTRY_PIGGYBACK
            if piggyback:
                if entry_id != -1:
                    resp = v3.read_response(request, pb.EBADREQ)
                else:
                    known = self.bookie.last_add_confirmed(scope_id, ledger_id)
                    if known > previous:
                        try:
                            data = await self._read_entry(scope_id, ledger_id, previous + 1)
                            resp = v3.read_response(
                                request,
                                pb.EOK,
                                body=data,
                                entry_id=previous + 1,
                                max_lac=known,
                                lac_update_timestamp=updated_at,
                            )
                        except NoSuchEntryError:
                            resp = v3.read_response(request, pb.EOK, max_lac=known, lac_update_timestamp=updated_at)
                    else:
                        resp = v3.read_response(request, pb.EOK, max_lac=known)
            else:
                data = await self._read_entry(scope_id, ledger_id, entry_id)
                resp = v3.read_response(
                    request, pb.EOK, body=data, max_lac=self.bookie.last_add_confirmed(scope_id, ledger_id)
                )
        except BookieError as exc:
            resp = v3.read_response(request, status_for_error(exc))
        self._send_v3(resp)
        self.metrics.observe_request("READ_ENTRY_LONG_POLL_REQUEST", _now_ms() - start, resp.status == pb.EOK)

    def _v3_batch_read(self, request: pb.Request) -> None:
        start = _now_ms()
        batch = request.batchReadRequest
        permit = self._take_permit()

        def reply(resp: pb.Response) -> None:
            self._release(permit)
            self._send_v3(resp)
            self.metrics.observe_request("BATCH_READ_ENTRY", _now_ms() - start, resp.status == pb.EOK)
            if resp.status == pb.EOK:
                self.metrics.batch_read_response_size.observe(resp.ByteSize() + 4)

        if not self._v3_version_ok(request, lambda s: v3.batch_read_response(request, s)):
            self._release(permit)
            return
        scope_id, ledger_id = v3.scope_id_of(batch), batch.ledgerId
        fencing = batch.HasField("flag") and batch.flag == pb.BatchReadRequest.FENCE_LEDGER
        fence = None
        try:
            if fencing:
                if not batch.HasField("masterKey"):
                    raise UnauthorizedAccessError("fencing read without a master key", ledger_id=ledger_id)
                fence = self.bookie.fence(scope_id, ledger_id, batch.masterKey)
            found = self._read_batch(scope_id, ledger_id, batch.startEntryId, batch.maxCount, batch.maxSize)
        except BookieError as exc:
            reply(v3.batch_read_response(request, status_for_error(exc)))
            return

        def respond(entries: list[bytes]) -> None:
            try:
                max_lac = self.bookie.last_add_confirmed(scope_id, ledger_id)
            except BookieError as exc:  # deleted while a read thread had it
                reply(v3.batch_read_response(request, status_for_error(exc)))
                return
            if fence is None:
                reply(v3.batch_read_response(request, pb.EOK, entries=entries, max_lac=max_lac))
            else:
                self._on_durable(
                    fence,
                    lambda: reply(v3.batch_read_response(request, pb.EOK, entries=entries, max_lac=max_lac)),
                    lambda e: reply(v3.batch_read_response(request, pb.EIO)),
                )

        self._when_read(found, respond, lambda exc: reply(v3.batch_read_response(request, status_for_error(exc))))

    def _v3_read_lac(self, request: pb.Request) -> None:
        start = _now_ms()
        sub = request.readLacRequest
        if not self._v3_version_ok(request, lambda s: v3.read_lac_response(request, s)):
            return
        # ReadLacProcessorV3 (4.17): each missing half sets a status (no last entry is an
        # IOException there, so EIO), and "neither found" overrides everything with ENOENTRY
        # -- an unknown ledger included.
        try:
            result = self.bookie.read_lac(v3.scope_id_of(sub), sub.ledgerId)
        except BookieError:
            result = None
        if result is None or (result.explicit_lac is None and result.last_entry is None):
            resp = v3.read_lac_response(request, pb.ENOENTRY)
        else:
            status = pb.EOK if result.last_entry is not None else pb.EIO
            resp = v3.read_lac_response(
                request, status, lac_body=result.explicit_lac, last_entry_body=result.last_entry
            )
        self._send_v3(resp)
        self.metrics.observe_request("READ_LAC", _now_ms() - start, resp.status == pb.EOK)

    def _v3_write_lac(self, request: pb.Request) -> None:
        start = _now_ms()
        sub = request.writeLacRequest

        def reply(status: int) -> None:
            self._release(permit)
            self._send_v3(v3.write_lac_response(request, status))
            self.metrics.observe_request("WRITE_LAC", _now_ms() - start, status == pb.EOK)

        if not self._v3_version_ok(request, lambda s: v3.write_lac_response(request, s)):
            return
        permit = self._take_permit()
        try:
            scope_id, ledger_id, lac = lac_header(sub.body)
            fut = self.bookie.write_lac(scope_id, ledger_id, sub.body, sub.masterKey, lac)
        except MalformedFrameError:
            reply(pb.EBADREQ)
            return
        except BookieError as exc:
            reply(status_for_error(exc))
            return
        self._on_durable(fut, lambda: reply(pb.EOK), lambda e: reply(pb.EIO))

    def _v3_force_ledger(self, request: pb.Request) -> None:
        start = _now_ms()

        def reply(status: int) -> None:
            self._release(permit)
            self._send_v3(v3.force_ledger_response(request, status))
            self.metrics.observe_request("FORCE_LEDGER", _now_ms() - start, status == pb.EOK)

        if not self._v3_version_ok(request, lambda s: v3.force_ledger_response(request, s)):
            return
        permit = self._take_permit()
        self._on_durable(self.bookie.force_ledger(), lambda: reply(pb.EOK), lambda e: reply(pb.EIO))

    def _v3_bookie_info(self, request: pb.Request) -> None:
        start = _now_ms()
        if not self._v3_version_ok(request, lambda s: v3.get_bookie_info_response(request, s)):
            return
        requested = request.getBookieInfoRequest.requested
        try:
            total, free = self.bookie.storage.disk_usage()
            resp = v3.get_bookie_info_response(
                request,
                pb.EOK,
                total_disk_capacity=total if requested & v3.TOTAL_DISK_CAPACITY else None,
                free_disk_space=free if requested & v3.FREE_DISK_SPACE else None,
            )
        except OSError:
            resp = v3.get_bookie_info_response(request, pb.EIO)
        self._send_v3(resp)
        self.metrics.observe_request("GET_BOOKIE_INFO", _now_ms() - start, resp.status == pb.EOK)

    def _v3_list_entries(self, request: pb.Request) -> None:
        start = _now_ms()
        sub = request.getListOfEntriesOfLedgerRequest
        if not self._v3_version_ok(request, lambda s: v3.get_list_of_entries_response(request, s)):
            return
        try:
            ids = self.bookie.entry_ids(v3.scope_id_of(sub), sub.ledgerId)
            resp = v3.get_list_of_entries_response(request, pb.EOK, availability=v3.encode_availability(ids))
        except NoSuchLedgerError:
            resp = v3.get_list_of_entries_response(request, pb.ENOLEDGER)
        except BookieError:
            resp = v3.get_list_of_entries_response(request, pb.EIO)
        self._send_v3(resp)
        self.metrics.observe_request("GET_LIST_OF_ENTRIES_OF_LEDGER", _now_ms() - start, resp.status == pb.EOK)

    def _v3_start_tls(self, request: pb.Request) -> None:
        # TLS is not configured on this bookie: BookieRequestProcessor answers EBADREQ.
        self._send_v3(v3.start_tls_response(request, pb.EBADREQ))

    def _v3_auth(self, request: pb.Request) -> None:
        self._send_v3(v3.auth_response(request, v2.AUTH_DISABLED_PLUGIN_NAME, b""))

    _V3_HANDLERS: dict[int, Callable[["_Connection", pb.Request], None]] = {
        pb.ADD_ENTRY: _v3_add,
        pb.READ_ENTRY: _v3_read,
        pb.READ_LAC: _v3_read_lac,
        pb.WRITE_LAC: _v3_write_lac,
        pb.FORCE_LEDGER: _v3_force_ledger,
        pb.GET_BOOKIE_INFO: _v3_bookie_info,
        pb.GET_LIST_OF_ENTRIES_OF_LEDGER: _v3_list_entries,
        pb.START_TLS: _v3_start_tls,
        pb.AUTH: _v3_auth,
        pb.BATCH_READ_ENTRY: _v3_batch_read,
    }

