"""The bookie-wide byte budget of unfinished frames (``serverPartialFramesMaxBytes``; docs/bookie.md, "Limits"),
against a real Python bookie process with raw sockets: many clients each sending half of a large frame cannot make
the bookie hold more than the budget; the connection that takes the total past it is closed with a log line, and
the bookie goes on serving the others."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from bkspark.protocol import v2
from tests.harness.netns import wait_until
from tests.harness.python_bookie import LedgerEntries, PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration]

ENTRIES = LedgerEntries(b"partial-frames")
BUDGET = 4 * 1024 * 1024
#: Each half-sent frame: a 4 MiB frame's length prefix and its first 1 MiB.
HALF = 1024 * 1024
CLIENTS = 12


def closed_by_peer(sock: socket.socket) -> bool:
    """True once the bookie has closed the connection (end of stream or reset)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_half_sent_frames_beyond_the_budget_close_their_connections_and_others_are_served(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """12 clients each send half of a 4 MiB frame (12 MiB unfinished) to a bookie with a 4 MiB budget and a 10-minute
    partial-frame timeout: the old code held all 12 MiB until that timeout; now the connections past the budget are
    closed at once, the counted bytes stay within it, and a client adding and reading meanwhile is served, a 2 MiB
    entry included once the half frames are gone."""
    conf = {"serverPartialFramesMaxBytes": BUDGET, "serverPartialFrameTimeoutMs": 600000, "flushInterval": 1000}
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=conf) as cluster:
        cluster.start_all()
        port = cluster.bookies[0].port
        attackers: list[socket.socket] = []
        try:
            for _ in range(CLIENTS):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(struct.pack(">i", 4 * 1024 * 1024) + b"\0" * HALF)
                attackers.append(sock)
            with RawBookieConnection(port) as good:
                for eid in range(20):
                    assert good.call_v2(ENTRIES.add_request(1, eid)).rc == v2.EOK
                    resp = good.call_v2(v2.encode_read_request(1, eid))
                    assert resp.rc == v2.EOK and bytes(resp.entry) == ENTRIES.entry(1, eid)
            wait_until(
                lambda: sum(map(closed_by_peer, attackers)) >= CLIENTS - BUDGET // HALF,
                timeout=60, what="the connections past the budget closed",
            )
            open_ones = [s for s in attackers if not closed_by_peer(s)]
            assert len(open_ones) * HALF <= BUDGET
            assert "serverPartialFramesMaxBytes" in cluster.log_tail(0, 400)
            assert (cluster.metric(0, "bookkeeper_server_LIMIT_HITS_total", limit="serverPartialFramesMaxBytes") or 0) >= 1
        finally:
            for sock in attackers:
                sock.close()
        # The budget is given back with the connections: a large frame fits again.
        big = LedgerEntries(b"partial-frames", max_payload=2 * 1024 * 1024)
        eid = next(e for e in range(100) if len(big.entry(2, e)) > HALF)
        with RawBookieConnection(port) as good:
            wait_until(lambda: good.call_v2(big.add_request(2, eid)).rc == v2.EOK, timeout=60, what="a 2 MiB add")
            assert bytes(good.call_v2(v2.encode_read_request(2, eid)).entry) == big.entry(2, eid)
