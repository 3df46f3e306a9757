"""BookieConnection: response matching (v2 keys, v3 txnIds), coalesced writes, timeouts, loss."""

from __future__ import annotations

import asyncio
from typing import Any

from bkspark.client.connection import V2, V3, BookieConnection
from bkspark.errors import BookieTimeoutError, BookieUnavailableError, NoSuchEntryError
from bkspark.protocol.correlation import add_key, batch_read_key, read_key
from bkspark.protocol import v2, v3


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.protocol: BookieConnection | None = None

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append(bytes(data))

    def writelines(self, lines: Any) -> None:  # type: ignore[override]
        self.writes.append(b"".join(lines))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.protocol is not None
            self.protocol.connection_lost(None)

    def abort(self) -> None:
        self.close()


def _conn(version: str, sweep: float = 0.05) -> tuple[BookieConnection, FakeTransport]:
    conn = BookieConnection("b:1", version, max_frame_size=5 * 1024 * 1024, sweep_interval=sweep)
    t = FakeTransport()
    t.protocol = conn
    conn.connection_made(t)
    return conn, t


def test_v2_matching_by_key_with_conflicts_and_coalesced_writes() -> None:
    async def run() -> None:
        conn, t = _conn(V2)
        got: list[tuple[str, Any]] = []
        errors: list[BaseException | None] = []
        for tag in ("first", "second"):  # two reads with the same (ledger, entry, op)
            conn.send_v2(
                read_key(5, 1), v2.encode_read_request(5, 1), 5.0,
                lambda r, e, _a, tag=tag: (got.append((tag, r)), errors.append(e)),
            )
        conn.send_v2(add_key(5, 2), b"frame-add", 5.0, lambda r, e, _a: got.append(("add", r)))
        await asyncio.sleep(0)
        assert len(t.writes) == 1  # one transport write for the whole loop iteration
        assert conn.pending == 3
        conn.data_received(v2.encode_response(v2.AddResponse(0, 5, 2)))
        conn.data_received(v2.encode_response(v2.ReadResponse(0, 5, 1, b"one")))
        body = v2.encode_response(v2.ReadResponse(2, 5, 1))
        conn.data_received(body[:7])  # split across two chunks
        conn.data_received(body[7:])
        assert [g[0] for g in got] == ["add", "first", "second"]
        assert got[0][1].rc == 0 and bytes(got[1][1].entry) == b"one" and got[2][1].rc == 2
        # The non-OK rc reached the callback as its registered error, the response alongside.
        assert errors[0] is None and isinstance(errors[1], NoSuchEntryError) and errors[1].context["bookie_id"] == "b:1"
        assert conn.pending == 0
        # Batch reads are matched by request id.
        conn.send_v2(batch_read_key(77), b"x", 5.0, lambda r, e, _a: got.append(("batch", r)))
        conn.data_received(v2.encode_response(v2.BatchReadResponse(0, 5, 10, 77, [b"a", b"b"])))
        assert got[-1][0] == "batch" and [bytes(x) for x in got[-1][1].entries] == [b"a", b"b"]

    asyncio.run(run())


def test_v3_matching_by_txn_id() -> None:
    async def run() -> None:
        conn, t = _conn(V3)
        got: dict[int, Any] = {}
        reqs = [v3.read_lac_request(conn.next_txn_id(), 9) for _ in range(3)]
        for r in reqs:
            conn.send_v3(r, 5.0, lambda resp, e, _a, txn=r.header.txnId: got.__setitem__(txn, resp))
        for r in reversed(reqs):  # answers out of order
            conn.data_received(v3.encode_response(v3.read_lac_response(r, 403)))
        assert sorted(got) == [r.header.txnId for r in reqs]
        assert all(got[txn].header.txnId == txn for txn in got)

    asyncio.run(run())


def test_timeouts_and_connection_loss() -> None:
    async def run() -> None:
        conn, t = _conn(V2, sweep=0.02)
        errors: list[BaseException | None] = []
        conn.send_v2(read_key(1, 1), b"r", 0.05, lambda r, e, _a: errors.append(e))
        conn.send_v2(read_key(1, 1), b"r", 0.05, lambda r, e, _a: errors.append(e))  # a conflicting key times out too
        conn.data_received(v2.encode_response(v2.AddResponse(0, 9, 9)))  # the bookie still talks: not a silent one
        await asyncio.sleep(0.2)
        assert not conn.closed
        assert len(errors) == 2 and all(isinstance(e, BookieTimeoutError) for e in errors)
        conn.send_v2(batch_read_key(2), b"b", 5.0, lambda r, e, _a: errors.append(e))
        conn.send_v2(add_key(1, 3), b"a", 5.0, lambda r, e, _a: errors.append(e))
        t.close()  # the bookie hung up with a batch read outstanding (a pre-4.17 bookie does)
        assert conn.lost_during_batch_read
        assert all(isinstance(e, BookieUnavailableError) for e in errors[2:]) and len(errors) == 4
        conn.send_v2(add_key(1, 4), b"a", 5.0, lambda r, e, _a: errors.append(e))
        assert isinstance(errors[-1], BookieUnavailableError)  # closed: fails at once

    asyncio.run(run())


def test_a_silent_connection_is_dropped_after_a_timeout() -> None:
    """Half-open TCP (seed 135 of the campaign): nothing came back since a request that timed out was sent, so the
    connection is dropped and the next request opens a new one instead of timing out on it for ever."""

    async def run() -> None:
        conn, t = _conn(V2, sweep=0.02)
        errors: list[BaseException | None] = []
        conn.send_v2(add_key(1, 1), b"a", 0.05, lambda r, e, _a: errors.append(e))
        conn.send_v2(add_key(1, 2), b"a", 5.0, lambda r, e, _a: errors.append(e))  # not yet expired
        await asyncio.sleep(0.2)
        assert isinstance(errors[0], BookieTimeoutError)
        assert conn.closed and t.closed
        assert isinstance(errors[1], BookieUnavailableError) and "silent" in str(errors[1])

    asyncio.run(run())


# -- bulk sends: one run in the table for its keys ------------------------------------------------------------------


def _acks(*entries: tuple[int, int, int]) -> bytes:
    """One chunk of v2 add responses: (rc, ledger, entry) each."""
    return b"".join(v2.encode_response(v2.AddResponse(rc, ledger, entry)) for rc, ledger, entry in entries)


def test_a_bulk_send_answers_each_key_with_its_own_arg_and_hands_acks_over_together() -> None:
    async def run() -> None:
        conn, t = _conn(V2)
        events: list[tuple[str, Any]] = []
        keys = [add_key(7, e) for e in range(5)]
        conn.send_v2_many(
            keys, [b"f%d" % e for e in range(5)], [f"op{e}" for e in range(5)], 5.0,
            lambda r, e, a: events.append(("one", (a, type(e).__name__ if e else None))),
            lambda args: events.append(("many", list(args))),
        )
        assert conn.pending == 5 and len(conn._ops) == 5 and len({id(op) for op in conn._ops.values()}) == 1
        await asyncio.sleep(0)
        assert t.writes == [b"f0f1f2f3f4"]
        # Out of order, an error in the middle: the acks before it are handed over before the error's callback,
        # and the ones after it again together.
        conn.data_received(_acks((0, 7, 3), (0, 7, 0), (v2.EFENCED, 7, 1), (0, 7, 4)))
        assert events == [
            ("many", ["op3", "op0"]), ("one", ("op1", "LedgerFencedError")), ("many", ["op4"]),
        ]
        assert conn.pending == 1
        conn.data_received(_acks((0, 7, 2), (0, 7, 2)))  # a second answer for the same key matches nothing
        assert events[-1] == ("many", ["op2"]) and conn.pending == 0 and not conn._ops

    asyncio.run(run())


def test_a_bulk_send_whose_key_is_waiting_already_queues_behind_it() -> None:
    """The table's rule holds for bulk sends: the request sent first gets the first answer of its key."""

    async def run() -> None:
        conn, _t = _conn(V2)
        got: list[tuple[str, Any]] = []
        conn.send_v2(add_key(7, 1), b"a", 5.0, lambda r, e, a: got.append(("single", a)), "s1")
        conn.send_v2_many(
            [add_key(7, 0), add_key(7, 1)], [b"b", b"c"], ["r0", "r1"], 5.0,
            lambda r, e, a: got.append(("one", a)), lambda args: got.append(("many", list(args))),
        )
        assert conn.pending == 3
        conn.data_received(_acks((0, 7, 1)))
        assert got == [("single", "s1")]
        conn.data_received(_acks((0, 7, 1), (0, 7, 0)))
        # Sent one by one (the key was taken), so each answers through its own callback.
        assert got[1:] == [("one", "r1"), ("one", "r0")] and conn.pending == 0
        # Keys repeated within one bulk send go one by one too, in order.
        conn.send_v2_many([add_key(8, 0), add_key(8, 0)], [b"x", b"y"], ["d0", "d1"], 5.0,
                          lambda r, e, a: got.append(("dup", a)), lambda args: got.append(("many", list(args))))
        conn.data_received(_acks((0, 8, 0), (0, 8, 0)))
        assert got[3:] == [("dup", "d0"), ("dup", "d1")]
        # A single send of a key a run holds waits behind the run's request.
        conn.send_v2_many([add_key(9, 0)], [b"z"], ["run"], 5.0, lambda r, e, a: got.append(("one", a)),
                          lambda args: got.append(("many", list(args))))
        conn.send_v2(add_key(9, 0), b"a", 5.0, lambda r, e, a: got.append(("single", a)), "later")
        conn.data_received(_acks((0, 9, 0), (0, 9, 0)))
        assert got[5:] == [("many", ["run"]), ("single", "later")] and conn.pending == 0

    asyncio.run(run())


def test_a_bulk_sends_unanswered_keys_time_out_or_fail_with_the_connection_each_with_its_arg() -> None:
    async def run() -> None:
        conn, t = _conn(V2, sweep=0.02)
        got: list[tuple[Any, str]] = []
        conn.send_v2_many([add_key(3, e) for e in range(3)], [b"a"] * 3, ["t0", "t1", "t2"], 0.05,
                          lambda r, e, a: got.append((a, type(e).__name__)), lambda args: got.append((args, "acked")))
        conn.send_v2_many([read_key(3, e) for e in range(2)], [b"r"] * 2, ["l0", "l1"], 5.0,
                          lambda r, e, a: got.append((a, type(e).__name__)))
        conn.data_received(_acks((0, 3, 1)))
        await asyncio.sleep(0.2)
        assert not conn.closed  # the bookie answered after the requests were sent: not a silent connection
        assert got[0] == (["t1"], "acked") and sorted(got[1:]) == [("t0", "BookieTimeoutError"), ("t2", "BookieTimeoutError")]
        assert conn.pending == 2
        conn.data_received(v2.encode_response(v2.ReadResponse(0, 3, 1, b"one")))
        assert got[-1] == ("l1", "NoneType") and conn.pending == 1
        t.close()
        assert got[-1] == ("l0", "BookieUnavailableError") and conn.pending == 0

    asyncio.run(run())


def test_acks_before_a_frame_that_does_not_decode_are_handed_over_before_the_connection_fails() -> None:
    async def run() -> None:
        conn, t = _conn(V2)
        got: list[tuple[Any, str]] = []
        conn.send_v2_many([add_key(4, e) for e in range(3)], [b"a"] * 3, ["a0", "a1", "a2"], 5.0,
                          lambda r, e, a: got.append((a, type(e).__name__)), lambda args: got.append((args, "acked")))
        bad = (4).to_bytes(4, "big") + b"\xff\xff\xff\xff"  # a v2 header of no known opcode
        conn.data_received(_acks((0, 4, 0), (0, 4, 1)) + bad)
        assert got[0] == (["a0", "a1"], "acked")
        assert got[1:] == [("a2", "BookieUnavailableError")] and conn.closed and t.closed

    asyncio.run(run())


def test_acks_and_answers_cut_across_reads_of_the_socket_reach_their_run() -> None:
    """A frame cut across two reads of the socket comes out of the splitter as a view of its own buffer, which the
    pass over successful answers leaves to be decoded: it must still reach its run's ``many`` callback (it once
    met a variable of the previous frame, or none, and failed the connection), at every cut."""

    async def run() -> None:
        adds = _acks(*((0, 6, e) for e in range(4)))
        reads = b"".join(v2.encode_response(v2.ReadResponse(0, 6, e, b"payload-%d" % e)) for e in range(3))
        for data, keys, want in (
            (adds, [add_key(6, e) for e in range(4)], [f"a{e}" for e in range(4)]),
            (reads + adds, [read_key(6, e) for e in range(3)] + [add_key(6, e) for e in range(4)],
             [(f"r{e}", b"payload-%d" % e) for e in range(3)] + [f"a{e}" for e in range(4)]),
        ):
            for cut in range(1, len(data)):
                conn, _t = _conn(V2)
                got: list[Any] = []
                errors: list[Any] = []
                args = [f"r{e}" for e in range(3)][: len(keys) - 4] + [f"a{e}" for e in range(4)]
                conn.send_v2_many(keys, [b"f"] * len(keys), args, 5.0,
                                  lambda r, e, a: errors.append((a, e)), lambda many: got.extend(many))
                conn.data_received(data[:cut])
                conn.data_received(data[cut:])
                assert not conn.closed and not errors, (cut, errors)
                assert [(x[0], bytes(x[1])) if type(x) is tuple else x for x in got] == want, cut
                assert conn.pending == 0

    asyncio.run(run())


def test_a_close_of_our_own_is_not_reported_as_the_bookies() -> None:
    """Requests waiting on a connection this client closes fail as closed by the client, and one the bookie closes
    as closed by the peer: the 'closed by peer' of a ZooKeeper blip was our own close (docs/reliability.md)."""

    async def run() -> None:
        errors: list[BaseException | None] = []
        ours, _ = _conn(V2)
        ours.send_v2(read_key(1, 1), b"r", 5.0, lambda r, e, _a: errors.append(e))
        ours.close()
        theirs, t = _conn(V2)
        theirs.send_v2(read_key(1, 1), b"r", 5.0, lambda r, e, _a: errors.append(e))
        t.close()  # the bookie hung up
        assert [type(e) for e in errors] == [BookieUnavailableError, BookieUnavailableError]
        assert "closed by this client" in str(errors[0]) and "peer" not in str(errors[0])
        assert "closed by peer" in str(errors[1])

    asyncio.run(run())
