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
