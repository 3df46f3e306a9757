"""One client connection of the bookie: framing, v2/v3 detection, dispatch, the write buffer.

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
``serverWriteBufferHighWaterMark`` (until they drain under the low mark), or
while :class:`~bookie_server.admission.Admission` makes a request wait.

The class is put together from rooms, one concern each (docs/architecture.md, "The bookie"): this one
(framing, dispatch, the write buffer, the replies' plumbing, and the public methods the security hand-off of
:mod:`bookie_server.security` uses), :class:`~bookie_server.admission.Admission`,
:class:`~bookie_server.v2_handlers.V2Handlers` and :class:`~bookie_server.v3_handlers.V3Handlers`.  They share
one object's state, on the event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from bkspark.errors import BookieError, BookieIOError, FrameTooLargeError, ProtocolError, UnauthorizedAccessError
from bkspark.protocol import v2, v2_bulk, v3
from bkspark.protocol.detect import ProtocolDetector
from bkspark.protocol.framing import FrameSplitter
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb

from bookie_server.admission import WAITING_READS_PER_CONNECTION, Admission
from bookie_server.limits import InFlightGate
from bookie_server.reads import ReadAheadWait
from bookie_server.security import ConnectionSecurity
from bookie_server.v2_handlers import V2Handlers, runs
from bookie_server.v3_handlers import V3Handlers

if TYPE_CHECKING:
    from bookie_server.server import BookieServer

__all__ = ["Connection"]

T = TypeVar("T")

log = logging.getLogger("bookie_server.server")

_PB_REQUEST = pb.Request


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




class Connection(Admission, V2Handlers, V3Handlers, asyncio.Protocol):
    """One client connection: frame splitting, v2/v3 detection, dispatch."""

    def __init__(self, server: BookieServer) -> None:
        self.server = server
        self.bookie = server.bookie
        self.reads = server.bookie.reads
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
        #: Bytes of an unfinished frame this connection's splitter holds, as counted in the server's total.
        self._partial_bytes = 0
        #: ``waitTimeoutOnResponseBackpressureMs``: the timer started when writing paused, and whether it ran out
        #: (responses are dropped until the client reads again); responses dropped so far.
        self._response_timer: asyncio.TimerHandle | None = None
        self._dropping_responses = False
        self.responses_dropped = 0
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
        if limit and len(self.server.connections) >= limit:
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
        self.server.connections.add(self)
        self.metrics.connections.inc()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._response_timer is not None:
            self._response_timer.cancel()
            self._response_timer = None
        self._backlog.clear()
        self.server.partial_frame_bytes -= self._partial_bytes  # its unfinished frame goes with it
        self._partial_bytes = 0
        if self._rejected:
            return
        self.server.connections.discard(self)
        self.metrics.connections.dec()
        for task in list(self._tasks):
            task.cancel()

    def pause_writing(self) -> None:
        # A client that does not read its responses stops being read from (Netty's water marks).
        self._write_blocked = True
        wait_ms = self.conf.waitTimeoutOnResponseBackpressureMs
        if wait_ms >= 0 and self._response_timer is None:
            self._response_timer = self._loop.call_later(wait_ms / 1000.0, self._response_timed_out)
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._dropping_responses = False
        if self._response_timer is not None:
            self._response_timer.cancel()
            self._response_timer = None
        self._drain()

    def _response_timed_out(self) -> None:
        """The client read nothing for ``waitTimeoutOnResponseBackpressureMs`` while its responses waited (Java's
        response back-pressure, docs/bookie.md, "Limits"): with ``closeChannelOnResponseTimeout`` the connection is
        dropped at once, its queued responses with it; without, the responses made from now until the client reads
        again are dropped, and the connection stays."""
        self._response_timer = None
        if self.closed or not self._write_blocked:
            return
        close = self.conf.closeChannelOnResponseTimeout
        self.server.limit_log.hit(
            "waitTimeoutOnResponseBackpressureMs",
            "%s read no response for waitTimeoutOnResponseBackpressureMs=%d: %s",
            self.peer, self.conf.waitTimeoutOnResponseBackpressureMs,
            "closing it (closeChannelOnResponseTimeout=true)" if close else "dropping its responses until it reads",
        )
        if close:
            self.closed = True
            self._backlog.clear()
            if self.transport is not None:
                self.transport.abort()  # close() would wait for the queued responses to leave, which they do not
        else:
            self._dropping_responses = True

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
        held = self.splitter.buffered
        if held != self._partial_bytes and self._count_partial(held):
            return
        if not held:
            self.partial_since = None
        elif bodies or self.partial_since is None:
            self.partial_since = self.last_activity  # a new frame started (earlier ones completed)
        if bodies:
            if self.sec is None and self.detector.version == "v2":
                # A v2 connection's adds and plain single reads are decoded in two passes over the chunk, and each
                # run of them waits as one list or tuple (admitted and handled as a run); the rest are parsed in
                # their turn.
                self._backlog.extend(runs(v2_bulk.decode_plain_reads(v2_bulk.decode_add_requests(bodies))))
            else:
                self._backlog.extend(bodies)
            self._drain()

    def _count_partial(self, held: int) -> bool:
        """Count this connection's unfinished frame (``held`` bytes now) in the bookie-wide total; True when that
        growth took the total past ``serverPartialFramesMaxBytes`` and the connection was closed for it
        (docs/bookie.md, "Limits"): many clients each sending half of a large frame cannot make the bookie hold
        more, and the others go on being served."""
        grew = held > self._partial_bytes
        self.server.partial_frame_bytes += held - self._partial_bytes
        self._partial_bytes = held
        budget = self.conf.serverPartialFramesMaxBytes
        if not (grew and budget and self.server.partial_frame_bytes > budget):
            return False
        self.server.limit_log.hit(
            "serverPartialFramesMaxBytes",
            "closing %s: unfinished frames of all connections would hold %d bytes, over serverPartialFramesMaxBytes=%d",
            self.peer, self.server.partial_frame_bytes, budget,
        )
        self._backlog.clear()
        self.close()
        self.splitter = FrameSplitter(self.conf.nettyMaxFrameSizeBytes)  # its bytes freed now
        self.server.partial_frame_bytes -= held  # and uncounted now, not when the transport reports the loss
        self._partial_bytes = 0
        return True

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
                    # A run of v2 adds (`runs`): as many as the gate admits join the group, in order.
                    admitted = self._admit_adds(request)
                    if admitted == len(request):
                        backlog.popleft()
                        adds.extend(request)
                    elif admitted:
                        backlog[0] = request[admitted:]
                        adds.extend(request[:admitted])
                    continue  # the rest of a run the gate cut parks the connection on the next turn
                if type(request) is tuple:
                    # A run of plain v2 reads (`runs`): the gate admits a prefix, the adds before it go first.
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

    # -- output, and the public methods of the security hand-off (bookie_server/security.py) ----
    def close(self) -> None:
        """Close the connection (responses already given to the transport still leave)."""
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def _protocol_error(self, exc: BaseException) -> None:
        self._backlog.clear()
        self.metrics.protocol_errors.inc()
        log.warning("closing connection from %s: %s", self.peer, exc)
        self.close()

    def send(self, data: bytes) -> None:
        """Queue a response frame."""
        # Responses produced in one loop iteration leave in one write (one syscall, not one each),
        # unless they pass the high water mark: then they go to the transport now, which calls
        # pause_writing if they cannot leave.
        if self.closed:
            return
        if self._dropping_responses:
            self.responses_dropped += 1
            return
        if not self._out:
            self._loop.call_soon(self.flush)
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= self.conf.serverWriteBufferHighWaterMark:
            self.flush()

    def flush(self) -> None:
        """Hand the queued responses to the transport now (before a TLS handshake or a close, or when a group
        of adds waits for its answers)."""
        out, self._out = self._out, []
        self._out_bytes = 0
        if not self.closed and self.transport is not None and out:
            self.last_activity = time.monotonic()
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def send_v3(self, response: pb.Response) -> None:
        """Queue a v3 response."""
        self.send(v3.encode_response(response))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a coroutine for this connection; it is cancelled when the connection is lost."""
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    async def start_tls(self, ctx: ssl.SSLContext, timeout: float) -> None:
        """Upgrade this connection to TLS, server side, on the same socket (START_TLS answered EOK).  When the
        handshake fails the connection is dropped at once and the error raised: OSError, ConnectionError or
        asyncio.TimeoutError."""
        assert self.transport is not None
        try:
            upgraded = await self._loop.start_tls(
                self.transport, self, ctx, server_side=True, ssl_handshake_timeout=timeout
            )
        except (OSError, ConnectionError, asyncio.TimeoutError):
            self.closed = True
            self.transport.abort()
            raise
        assert upgraded is not None
        self.transport = upgraded

    def resume_after_tls(self, held: bytes) -> None:
        """Go on serving after the upgrade: the requests that came behind START_TLS (they waited in the backlog),
        then ``held``, the bytes that arrived while the handshake ran."""
        self._reading_paused = False  # start_tls resumed reading on the new transport
        self._drain()
        if held and not self.closed:
            self.data_received(held)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("request task failed for %s: %r", self.peer, task.exception())

    def _when_read(
        self, found: "T | asyncio.Future[T]", on_data: Callable[[T], None], on_error: Callable[[BookieError], None]
    ) -> None:
        """``on_data`` now for what memory held, or when the read threads bring it from disk
        (``BookieReads.read_entry_soon``; docs/bookie.md, "Reads"); ``on_error`` with the disk's error.  While
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
            # BookieReads._on_read_thread settles it with the bytes or a BookieError, never by cancelling it
            error = fut.exception()
            if error is None:
                on_data(fut.result())
            else:
                on_error(error)  # type: ignore[arg-type]

        found.add_done_callback(done)

    async def _read_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bytes:
        """An entry for a coroutine: from memory now, or awaited from a read thread."""
        found = self.reads.read_entry_soon(scope_id, ledger_id, entry_id)
        return (await found) if isinstance(found, asyncio.Future) else found

    def _start_fence(self, scope_id: int, ledger_id: int, master_key: bytes | None) -> asyncio.Future[None]:
        """Start fencing for a fencing read (v2 or v3); raises EUA for a read without a master key, or with a wrong
        one."""
        if master_key is None:
            raise UnauthorizedAccessError("fencing read without a master key", ledger_id=ledger_id)
        return self.bookie.fence(scope_id, ledger_id, master_key)

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

