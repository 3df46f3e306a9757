"""One TCP connection to one bookie, speaking either v2 or v3 (never both: docs/protocol.md §1).

An ``asyncio.Protocol``: bytes in go through the sans-IO ``FrameSplitter`` and
the v2/v3 decoders; every request waits in a table until its response comes
back, matched by the keys of :mod:`bkspark.protocol.correlation` (the Java
client's: ``(ledger, entry, opcode)`` for v2 adds and reads, several requests
may share one; ``(request id, 7)`` for v2 batch reads; ``txnId`` for v3).  A
response's non-OK return code becomes its typed error here, once
(:func:`correlation.response_error`), so every callback gets either a
successful response or an error: ``callback(response, error, arg)``.

A periodic sweep fails requests that outlived their timeout with
:class:`BookieTimeoutError`; a lost connection fails everything still waiting
with :class:`BookieUnavailableError`.  A connection that stayed silent for the
whole life of a request that timed out (not one byte came back since it was
sent) is dropped too: a peer that vanished without a FIN or an RST (a half-open
TCP connection) would otherwise keep taking requests that can never be
answered, and every retry or ensemble change that picks that bookie again would
time out on it for ever.  The next request opens a new connection.  Writes are coalesced: frames queued in
one loop iteration leave in one ``transport.write``.

A bulk send (:meth:`BookieConnection.send_v2_many`: a bulk append's adds to this bookie, a range read's first
reads) is one :class:`_Run` in the table, shared by its keys, with each key's arg beside it: no object per
request.  Its successful answers may also be handed over together: the adds of one run answered in one chunk
of bytes reach its ``many`` callback as one list of their args, in the order they came (docs/client.md, "Write
path"); a run of single reads' answers as one list of ``(arg, stored entry)`` pairs (docs/client.md, "Read
path").
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from typing import Any, Callable, Hashable, Sequence

from bkspark.errors import (
    BKError,
    BookieTimeoutError,
    BookieUnavailableError,
    ProtocolError,
)
from bkspark.protocol import correlation, v2, v3
from bkspark.protocol.framing import FrameSplitter

__all__ = ["BookieConnection", "Callback", "ManyCallback", "V2", "V3"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

V2 = "v2"
V3 = "v3"

#: ``callback(response, error, arg)``: ``error`` is None on success; on a bookie's non-OK
#: return code the response is given too (READ_LAC carries data beside ENOENTRY), after a
#: timeout or a lost connection it is None.  ``arg`` is what the sender passed: the hot paths
#: pass one shared bound method and a small context instead of a closure per request
#: (closures cost several GC-tracked objects each; see docs/client.md).
Callback = Callable[[Any, BaseException | None, Any], None]


class _Op:
    __slots__ = ("key", "sent", "deadline", "callback", "arg")

    def __init__(self, key: Any, sent: float, timeout: float, callback: Callback, arg: Any = None) -> None:
        self.key = key
        self.sent = sent
        self.deadline = sent + timeout
        self.callback = callback
        self.arg = arg


class _Run:
    """The requests of one bulk send: the table's value for each of their keys, with each key's own arg.

    ``many(args)``, when given, takes a list of successful answers at once: each add's arg (acknowledgements
    carry nothing else), each READENTRY's ``(arg, stored entry)``; every other outcome goes to ``callback`` one
    by one.
    """

    __slots__ = ("sent", "deadline", "callback", "many", "args")

    def __init__(
        self, sent: float, timeout: float, callback: Callback, many: "ManyCallback | None", args: dict[Any, Any]
    ) -> None:
        self.sent = sent
        self.deadline = sent + timeout
        self.callback = callback
        self.many = many
        #: Each key's arg, until that key is answered (or times out, or the connection is lost).
        self.args = args


#: ``many(args)``: several successful answers of one :class:`_Run`, in the order they came (see :class:`_Run`).
ManyCallback = Callable[[list[Any]], None]


class BookieConnection(asyncio.Protocol):
    """A pipelined request/response channel to one bookie."""

    def __init__(
        self,
        bookie_id: str,
        version: str,
        *,
        max_frame_size: int,
        on_lost: Callable[["BookieConnection", BaseException | None], None] | None = None,
        sweep_interval: float = 0.2,
    ) -> None:
        self.bookie_id = bookie_id
        self.version = version
        self.transport: asyncio.Transport | None = None
        self._splitter = FrameSplitter(max_frame_size)
        self._on_lost = on_lost
        self._ops: dict[Any, _Op | _Run] = {}  # first op per key (v2) or per txnId (v3)
        self._conflicts: dict[Any, deque[_Op]] = {}  # further v2 ops sharing a key
        self._count = 0
        self._txn = itertools.count(1)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_interval = sweep_interval
        self.closed = False
        self.lost_error: BaseException | None = None
        #: Monotonic time the last bytes arrived (a silent connection is dropped: see the module's docstring).
        self._last_received = _monotonic()
        self._loop = asyncio.get_running_loop()
        self.connected = self._loop.create_future()
        #: Set when a batch read was outstanding when the bookie hung up (pre-4.17 bookie).
        self.lost_during_batch_read = False
        #: Frames of the security handshake (bkspark/client/secure.py); None once it is over.
        self._hs_inbox: deque[bytes] | None = None
        self._hs_waiter: asyncio.Future[bytes] | None = None
        #: True once the connection runs inside TLS.
        self.tls = False

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(self._sweep_interval, self._sweep)
        if not self.connected.done():
            self.connected.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._last_received = _monotonic()
        try:
            bodies = self._splitter.feed(data)
            if self._hs_inbox is not None:
                self._handshake_frames(bodies)
                return
            if self.version == V2:
                self._dispatch_v2(bodies)
            else:
                for body in bodies:
                    self._dispatch_v3(v3.decode_response(body))
        except ProtocolError as exc:
            log.warning("bookie %s broke the protocol: %s", self.bookie_id, exc)
            self.abort(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        error = self.lost_error or BookieUnavailableError(
            "connection to bookie lost", bookie_id=self.bookie_id, error=str(exc) if exc else "closed by peer"
        )
        self.lost_error = error
        if self.version == V2 and any(correlation.is_batch_read_key(k) for k in self._ops):
            self.lost_during_batch_read = True
        if not self.connected.done():
            self.connected.set_exception(error)
        if self._hs_waiter is not None and not self._hs_waiter.done():
            self._hs_waiter.set_exception(error)
        self._fail_all(error)
        if self._on_lost is not None:
            self._on_lost(self, exc)

    # -- security handshake (START_TLS, AUTH): bkspark/client/secure.py drives it ----------

    def send_raw(self, frame: bytes) -> None:
        """Write a handshake frame now; its answer comes from :meth:`next_handshake_frame`."""
        if self._hs_inbox is None:
            self._hs_inbox = deque()
        if self.closed or self.transport is None:
            raise self._closed_error()
        self.transport.write(frame)

    def _handshake_frames(self, bodies: list[memoryview]) -> None:
        assert self._hs_inbox is not None
        self._hs_inbox.extend(bytes(b) for b in bodies)
        if self._hs_inbox and self._hs_waiter is not None and not self._hs_waiter.done():
            self._hs_waiter.set_result(self._hs_inbox.popleft())

    async def next_handshake_frame(self) -> bytes:
        """The next frame body the bookie sent during the handshake."""
        if self._hs_inbox:
            return self._hs_inbox.popleft()
        if self.closed:
            raise self._closed_error()
        self._hs_waiter = self._loop.create_future()
        return await self._hs_waiter

    async def upgrade_tls(self, loop: asyncio.AbstractEventLoop, ctx: Any, host: str, timeout: float) -> None:
        """Run the TLS handshake on this TCP connection (after the bookie's START_TLS EOK)."""
        assert self.transport is not None
        self.transport = await loop.start_tls(
            self.transport, self, ctx, server_hostname=host, ssl_handshake_timeout=timeout
        )
        self.tls = True

    def end_handshake(self) -> None:
        """Back to normal dispatch (no frame may be left over: the bookie sends nothing unasked)."""
        self._hs_inbox = None
        self._hs_waiter = None

    # -- sending ------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        self._out.append(frame)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Frames queued in one loop iteration leave together, at its end."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self.transport is None or self.closed or not out:
            return
        if len(out) == 1:
            self.transport.write(out[0])
        else:
            self.transport.writelines(out)

    def _register(self, key: Any, timeout: float, callback: Callback, arg: Any = None) -> None:
        self._enter(_Op(key, _monotonic(), timeout, callback, arg))
        self._count += 1

    def _enter(self, op: _Op) -> None:
        """The one home of the table rule: the first op of a key answers first, later ones wait in order."""
        if op.key in self._ops:
            self._conflicts.setdefault(op.key, deque()).append(op)
        else:
            self._ops[op.key] = op

    def _closed_error(self) -> BaseException:
        return self.lost_error or BookieUnavailableError("connection closed", bookie_id=self.bookie_id)

    def _check_open(self, callback: Callback, arg: Any) -> bool:
        if self.closed:
            callback(None, self._closed_error(), arg)
            return False
        return True

    def send_v2(self, key: Hashable, frame: bytes, timeout: float, callback: Callback, arg: Any = None) -> None:
        """Send a whole v2 frame under its :mod:`correlation` key; ``callback(response, error, arg)``."""
        if self.closed:
            callback(None, self._closed_error(), arg)
            return
        self._enter(_Op(key, _monotonic(), timeout, callback, arg))
        self._count += 1
        self._out.append(frame)
        if not self._flush_scheduled:  # checked here as well: one call less per frame on the add path
            self._schedule_flush()

    def send_v2_many(
        self, keys: "Sequence[Hashable]", frames: "Sequence[bytes]", args: "Sequence[Any]", timeout: float,
        callback: Callback, many: ManyCallback | None = None,
    ) -> None:
        """:meth:`send_v2` of each (key, frame, arg) of the three lists in order, with one deadline and one
        callback: a bulk append's frames for this bookie, a range read's first reads.

        Registered as one :class:`_Run` when no key is waiting already (the usual case); otherwise each request
        gets its own table entry and waits behind the earlier one, as :meth:`send_v2` does.  ``many``, when
        given, takes the args of successful answers that come together (see the module's docstring).
        """
        if self.closed:
            error = self._closed_error()
            for arg in args:
                callback(None, error, arg)
            return
        sent, ops = _monotonic(), self._ops
        by_key = dict(zip(keys, args))
        if len(by_key) == len(keys) and ops.keys().isdisjoint(by_key):
            ops.update(dict.fromkeys(by_key, _Run(sent, timeout, callback, many, by_key)))
        else:
            enter = self._enter
            for key, arg in zip(keys, args):
                enter(_Op(key, sent, timeout, callback, arg))
        self._count += len(keys)
        self._out.extend(frames)
        self._schedule_flush()

    def next_txn_id(self) -> int:
        return next(self._txn)

    def send_v3(self, request: "v3.pb.Request", timeout: float, callback: Callback, arg: Any = None) -> None:
        """Send a v3 request (its header's txnId must come from :meth:`next_txn_id`)."""
        if not self._check_open(callback, arg):
            return
        self._register(request.header.txnId, timeout, callback, arg)
        self._write(v3.encode_request(request))

    @property
    def pending(self) -> int:
        """Requests waiting for an answer."""
        return self._count

    # -- receiving ------------------------------------------------------------------

    def _pop(self, key: Any) -> tuple[_Op | _Run, Any] | None:
        """The op waiting for ``key`` and its arg, out of the table (the next one of that key moves up)."""
        op = self._ops.pop(key, None)
        if op is None:
            return None
        if self._conflicts:  # usually empty: one dict test instead of a lookup per answer
            self._next_of(key)
        self._count -= 1
        return op, (op.args.pop(key, None) if type(op) is _Run else op.arg)

    def _next_of(self, key: Any) -> None:
        """The table rule's second half: once the op of ``key`` is out, the next one waiting with that key (if
        any) takes its place."""
        more = self._conflicts.get(key)
        if more:
            self._ops[key] = more.popleft()
            if not more:
                del self._conflicts[key]

    def _dispatch_v2(self, bodies: "Sequence[bytes | memoryview]") -> None:
        """Decode and answer the v2 response frames of one chunk, in order (loop thread: the hot path of acks).

        Successful answers of a run with a ``many`` callback are collected and handed over together; the
        collection is handed over before any other answer's callback runs, and before a frame that does not
        decode ends the chunk (:class:`ProtocolError` then reaches :meth:`data_received`).  :meth:`_pop` is
        written out in the loop: one call less per answer.
        """
        decode, key_of, eok = v2.decode_response, correlation.v2_response_key, v2.EOK
        ops_pop, conflicts = self._ops.pop, self._conflicts
        run_many: ManyCallback | None = None
        run_args: list[Any] = []
        try:
            # Successful add acknowledgements come as their keys (ints) and successful single reads' answers as
            # (key, entry) pairs (no response object each), the rest as bodies.
            for item in correlation.v2_ok_answers(bodies):
                if type(item) is int:
                    key, entry, response, ok = item, None, None, True
                elif type(item) is tuple:
                    key, entry = item
                    response, ok = None, True
                else:
                    # A body the pass above left as it was: an error, or an answer cut across two reads of the
                    # socket (the splitter hands that one over as a view of its own buffer)
                    response, entry = decode(item), None
                    key = key_of(response)
                    if key is None:
                        continue  # AUTH responses: auth is disabled on the bookies we talk to
                    ok = response.rc == eok
                op = ops_pop(key, None)
                if op is None:
                    log.debug("unmatched v2 response from %s: %r", self.bookie_id, key)
                    continue
                if conflicts:
                    self._next_of(key)
                self._count -= 1
                if type(op) is _Run:
                    arg, many = op.args.pop(key, None), op.many
                else:
                    arg, many = op.arg, None
                if ok:
                    if many is not None:
                        if many is not run_many:
                            if run_args:
                                self._complete_many(run_many, run_args)  # type: ignore[arg-type]
                                run_args = []
                            run_many = many
                        if entry is None and type(response) is v2.ReadResponse:
                            entry = response.entry  # a read's answer the pass above left to decode
                        run_args.append(arg if entry is None else (arg, entry))
                        continue
                    error = None
                    if response is None:
                        response = (
                            correlation.v2_add_response(key) if entry is None
                            else correlation.v2_read_response(key, entry)
                        )
                else:
                    error = correlation.response_error(response, self.bookie_id)
                if run_args:
                    self._complete_many(run_many, run_args)  # type: ignore[arg-type]
                    run_args = []
                self._complete(op.callback, response, error, arg)
        finally:
            if run_args:
                self._complete_many(run_many, run_args)  # type: ignore[arg-type]

    def _dispatch_v3(self, response: "v3.pb.Response") -> None:
        found = self._pop(response.header.txnId)
        if found is None:
            log.debug("unmatched v3 response from %s: txn %s", self.bookie_id, response.header.txnId)
            return
        op, arg = found
        self._complete(op.callback, response, correlation.response_error(response, self.bookie_id), arg)

    @staticmethod
    def _complete(callback: Callback, response: Any, error: BaseException | None, arg: Any) -> None:
        try:
            callback(response, error, arg)
        except Exception:
            log.exception("bookie response callback failed")

    @staticmethod
    def _complete_many(many: ManyCallback, args: list[Any]) -> None:
        try:
            many(args)
        except Exception:
            log.exception("bookie response callback failed")

    # -- timeouts and failure ---------------------------------------------------------

    def _sweep(self) -> None:
        if self.closed:
            return
        now = time.monotonic()
        silent = False  # a request timed out and nothing at all came back since it was sent
        expired = [key for key, op in self._ops.items() if op.deadline <= now]
        for key in list(self._conflicts):
            for op in list(self._conflicts.get(key, ())):
                if op.deadline <= now:
                    self._conflicts[key].remove(op)
                    self._count -= 1
                    silent = silent or self._last_received < op.sent
                    self._complete(op.callback, None, self._timeout_error(), op.arg)
            if key in self._conflicts and not self._conflicts[key]:
                del self._conflicts[key]
        for key in expired:
            op = self._ops.get(key)
            if op is not None and op.deadline <= now:
                found = self._pop(key)
                if found is not None:
                    op, arg = found
                    silent = silent or self._last_received < op.sent
                    self._complete(op.callback, None, self._timeout_error(), arg)
        if silent and not self.closed:
            log.info("bookie %s: nothing received on this connection since a request that timed out: dropping it",
                     self.bookie_id)
            self.abort(BookieUnavailableError("bookie connection went silent", bookie_id=self.bookie_id))
            return
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_interval, self._sweep)

    def _timeout_error(self) -> BookieTimeoutError:
        return BookieTimeoutError("bookie did not answer in time", bookie_id=self.bookie_id)

    def _fail_all(self, error: BaseException) -> None:
        """Everything waiting fails with ``error``: the table's ops in the order they were sent, then the ops
        that waited behind one of them."""
        waiting: list[tuple[Callback, Any]] = [
            (op.callback, op.args.get(key) if type(op) is _Run else op.arg) for key, op in self._ops.items()
        ]
        for more in self._conflicts.values():
            waiting.extend((op.callback, op.arg) for op in more)
        self._ops.clear()
        self._conflicts.clear()
        self._count = 0
        for callback, arg in waiting:
            self._complete(callback, None, error, arg)

    def abort(self, error: BKError | None = None) -> None:
        """Drop the connection now; everything waiting fails with ``error``."""
        if error is not None and self.lost_error is None:
            self.lost_error = error if isinstance(error, BookieUnavailableError) else BookieUnavailableError(
                str(error), bookie_id=self.bookie_id
            )
        if self.transport is not None:
            self.transport.abort()
        else:
            self.connection_lost(None)

    def close(self) -> None:
        """Close gracefully (queued frames are flushed first); requests still waiting fail as closed by this client."""
        if self.lost_error is None:
            # connection_lost(None) follows a close of either side: without this, our own close would be reported as
            # the bookie's ("closed by peer"), as it was when a ZooKeeper blip dropped every connection.
            self.lost_error = BookieUnavailableError(
                "connection to bookie closed by this client", bookie_id=self.bookie_id
            )
        self._flush()
        if self.transport is not None and not self.closed:
            self.transport.close()
