"""Admission control of a bookie connection: the bounds a request waits for before it is dispatched.

A request that needs a permit of the server's in-flight gates (adds, reads, long polls:
``maxAddsInProgressLimit``, ``maxAddsInProgressBytes``, ``maxReadsInProgressLimit``,
``maxLongPollReadsInProgress``) or room in the write cache during a checkpoint parks its connection: the
connection stops dispatching, and is no longer read, until the gate frees (docs/bookie.md, "Limits").  A
connection's own reads on the read threads are bounded too (:data:`COLD_READS_PER_CONNECTION`), and the sweeper
closes connections idle for ``serverConnectionIdleTimeoutMs`` or stuck in a partial frame for
``serverPartialFrameTimeoutMs``.

:class:`Admission` is one room of :class:`~bookie_server.connection.Connection` (event-loop thread only); each
permit taken here goes back once, through :meth:`Admission._release` or the run releases, when the request is
answered.
"""

from __future__ import annotations

from collections.abc import Callable

from bkspark.errors import ProtocolError
from bkspark.protocol import v2, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb

from bookie_server.limits import InFlightGate

__all__ = ["COLD_READS_PER_CONNECTION", "WAITING_READS_PER_CONNECTION", "Admission"]

_PB_REQUEST = pb.Request

#: Reads of one connection waiting for the read threads before it stops dispatching its requests: each may
#: bring up to ``maxBatchReadSize`` bytes, so this bounds what a connection's cold reads hold
#: (docs/bookie.md, "Reads"), as the write buffer's marks bound its answers.
COLD_READS_PER_CONNECTION = 4

#: Reads of one connection waiting for a read-ahead already on a read thread, per ``dbStorage_readAheadCacheBatchSize``
#: (a waiter holds no entry while it waits): as many as its own cold reads' read-aheads could answer
#: (docs/bookie.md, "Reads").
WAITING_READS_PER_CONNECTION = COLD_READS_PER_CONNECTION

#: The v3 requests that wait for room in the write cache (they hold a permit of the adds gate), and how each is
#: refused once ``dbStorage_maxThrottleTimeMs`` has passed: its response builder and its metric's name.
_V3_THROTTLED = {
    pb.ADD_ENTRY: (v3.add_response, "ADD_ENTRY"),
    pb.WRITE_LAC: (v3.write_lac_response, "WRITE_LAC"),
    pb.FORCE_LEDGER: (v3.force_ledger_response, "FORCE_LEDGER"),
}

#: Configuration key of each gate, for the limit log.
_GATE_KEYS = {
    "adds": "maxAddsInProgressLimit",
    "reads": "maxReadsInProgressLimit",
    "long polls": "maxLongPollReadsInProgress",
}


class Admission:
    """The connection's permits, parking and timeouts (a room of :class:`~bookie_server.connection.Connection`)."""

    def _reads_held(self) -> bool:
        """True while the connection's reads waiting for the read threads, or for a read-ahead, are at their
        bound (docs/bookie.md, "Reads"): it dispatches no more until one is answered."""
        return (
            self._cold_run
            or self._cold_reads >= COLD_READS_PER_CONNECTION
            or self._waiting_reads >= self._waiting_limit
        )

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
            self._park_on_write_cache()
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
            self._park_on_write_cache()
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

    def _park(self, register: Callable[[Callable[[], None]], None], limit: str) -> Callable[[], bool]:
        """Stop dispatching until ``register``'s gate wakes the connection; returns a call that ends the wait early
        (False when the wake came first): the wake it then makes later does nothing."""
        self._parked = True
        self.server.limit_log.hit(limit, "%s reached: stopped reading requests from %s until it frees", limit, self.peer)
        waiting = [True]

        def wake() -> None:
            if waiting[0]:
                waiting[0] = False
                self._parked = False
                self._loop.call_soon(self._drain)

        def give_up() -> bool:
            if not waiting[0]:
                return False
            waiting[0] = False
            self._parked = False
            return True

        register(wake)
        return give_up

    def _park_on_write_cache(self) -> None:
        """Wait for the running checkpoint to make room in the write cache, at most ``dbStorage_maxThrottleTimeMs``
        (Java's DbLedgerStorage): then the adds at the head of the backlog are refused, as Java rejects them
        (v2 ETOOMANYREQUESTS, v3 EIO), and dispatching goes on (docs/bookie.md, "Limits")."""
        give_up = self._park(self.bookie.wait_write_cache, "dbStorage_writeCacheMaxSizeMb")
        throttle_ms = self.conf.dbStorage_maxThrottleTimeMs
        if throttle_ms > 0:
            self._loop.call_later(throttle_ms / 1000.0, self._throttle_expired, give_up)

    def _throttle_expired(self, give_up: Callable[[], bool]) -> None:
        """``dbStorage_maxThrottleTimeMs`` passed while the head of the backlog waited for the write cache."""
        if self.closed or not give_up():
            return
        head = self._backlog.popleft() if self._backlog else None
        self.server.limit_log.hit(
            "dbStorage_maxThrottleTimeMs",
            "write cache still full after dbStorage_maxThrottleTimeMs=%d: adds from %s refused",
            self.conf.dbStorage_maxThrottleTimeMs, self.peer,
        )
        if type(head) is list:  # a run of v2 adds
            refused = []
            for add in head:
                try:
                    refused.append(v2.encode_add_response(v2.ETOOMANYREQUESTS, add.ledger_id, add.entry_id, add.version))
                except ProtocolError:
                    refused.append(v2.encode_add_response(v2.EBADREQ, 0, 0, add.version))
                self.metrics.observe_request("ADD_ENTRY", float(self.conf.dbStorage_maxThrottleTimeMs), False)
            self.send(b"".join(refused))
        elif type(head) is _PB_REQUEST:
            op = head.header.operation  # type: ignore[attr-defined]
            build, name = _V3_THROTTLED.get(op, (None, ""))
            if build is None:
                self._backlog.appendleft(head)  # not a request that waits for the write cache: wait again
            else:
                self.send(v3.encode_response(build(head, pb.EIO)))
                self.metrics.observe_request(name, float(self.conf.dbStorage_maxThrottleTimeMs), False)
        elif head is not None:
            self._backlog.appendleft(head)
        self._loop.call_soon(self._drain)

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

