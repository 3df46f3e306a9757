"""The harness's fault proxy in front of a real ZooKeeper: every fault, each direction, and restore.

ZooKeeper's four-letter words make a small real protocol: ``ruok`` is answered ``imok`` and the server closes.
Timings are only checked from below (a delay holds at least that long).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.harness.deadline import GENEROUS
from tests.harness.proxy import Direction, FaultProxy
from tests.harness.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.fault]


@pytest.fixture
def proxy(zookeeper: ZooKeeperServer) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", zookeeper.port), name="zk") as p:
        yield p


def _ruok(proxy: FaultProxy, timeout: float = 5.0) -> bytes:
    with socket.create_connection(proxy.address, timeout=timeout) as sock:
        sock.sendall(b"ruok")
        chunks = []
        while data := sock.recv(100):
            chunks.append(data)
        return b"".join(chunks)


def test_forwards_both_ways(proxy: FaultProxy) -> None:
    assert _ruok(proxy) == b"imok"
    assert proxy.connections_accepted == 1


@pytest.mark.parametrize("direction", [Direction.UP, Direction.DOWN])
def test_delay_holds_traffic_in_one_direction(proxy: FaultProxy, direction: Direction) -> None:
    proxy.delay(0.6, direction)
    started = time.monotonic()
    assert _ruok(proxy) == b"imok"
    assert time.monotonic() - started >= 0.6
    proxy.restore()
    assert _ruok(proxy) == b"imok"


def test_rate_caps_bytes_per_second(proxy: FaultProxy) -> None:
    proxy.rate(40, Direction.DOWN)  # 4 bytes at 40 B/s: at least 0.1 s
    started = time.monotonic()
    assert _ruok(proxy) == b"imok"
    assert time.monotonic() - started >= 0.09


@pytest.mark.parametrize("direction", [Direction.UP, Direction.DOWN])
def test_fragment_forwards_every_byte_in_order(proxy: FaultProxy, direction: Direction) -> None:
    proxy.fragment(1, direction)  # one byte a write: ZooKeeper reads "ruok" (or the client "imok") in pieces
    assert _ruok(proxy) == b"imok"
    proxy.fragment(3, direction, seed=7)
    assert _ruok(proxy) == b"imok"
    with pytest.raises(ValueError):
        proxy.fragment(-1)
    proxy.restore()
    assert _ruok(proxy) == b"imok"


@pytest.mark.parametrize("direction", [Direction.UP, Direction.DOWN])
def test_blackhole_swallows_everything(proxy: FaultProxy, direction: Direction) -> None:
    proxy.blackhole(direction)
    with pytest.raises(socket.timeout):
        _ruok(proxy, timeout=1.0)
    proxy.restore()
    assert _ruok(proxy) == b"imok"


def _open_connection(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=5.0)
    deadline = time.monotonic() + 10
    while proxy.open_connections < 1:  # the proxy has connected to ZooKeeper
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return sock


def test_reset_sends_rst(proxy: FaultProxy) -> None:
    with _open_connection(proxy) as sock:
        assert proxy.reset() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(10)


def test_drop_closes_cleanly(proxy: FaultProxy) -> None:
    with _open_connection(proxy) as sock:
        assert proxy.drop() == 1
        assert sock.recv(10) == b""


def test_half_open_leaves_the_client_connected_to_nobody(proxy: FaultProxy) -> None:
    with _open_connection(proxy) as sock:
        assert proxy.half_open() == 1
        sock.sendall(b"ruok")  # the client can still send...
        sock.settimeout(1.0)
        with pytest.raises(socket.timeout):  # ...and never hears back, not even a close
            sock.recv(10)


def test_refuse_resets_new_connections_until_restored(proxy: FaultProxy) -> None:
    proxy.refuse()
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        reply = _ruok(proxy)
        if reply == b"":  # the RST may surface as an empty read on some kernels
            raise ConnectionResetError
    proxy.restore()
    assert _ruok(proxy) == b"imok"


@pytest.fixture
def echo_proxy() -> Iterator[FaultProxy]:
    """A proxy in front of an echo server that keeps its connections open (ZooKeeper closes after a word) and
    closes its side when the client's close reaches it."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the proxy's reset at the end
            while data := conn.recv(100):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        with FaultProxy(server.getsockname(), name="echo") as p:
            yield p
    finally:
        server.close()


def _echo(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(100)


@pytest.mark.parametrize("fault", ["blackhole", "delay"])
def test_restore_heals_connections_opened_before_it(echo_proxy: FaultProxy, fault: str) -> None:
    """A connection open across a fault carries traffic again once it is lifted (the soak's clients kept theirs,
    and stayed black-holed or delayed for ever, while each connection's pumps held the faults of before)."""
    with socket.create_connection(echo_proxy.address, timeout=GENEROUS) as sock:
        assert _echo(sock, b"a") == b"a"
        if fault == "blackhole":
            echo_proxy.blackhole()
            sock.settimeout(0.5)
            with pytest.raises(socket.timeout):
                _echo(sock, b"lost")
            sock.settimeout(GENEROUS)
        else:
            echo_proxy.delay(600)  # far beyond the deadline: a connection still delayed fails the test
        echo_proxy.restore()
        assert _echo(sock, b"b") == b"b"


def test_a_close_a_black_hole_swallowed_is_delivered_when_it_is_lifted(echo_proxy: FaultProxy) -> None:
    """A client that closes inside a black hole: the server hears nothing until the black hole is lifted, then
    the close (TCP sends a FIN again until it is acknowledged); the server's side is not left open for ever."""
    sock = socket.create_connection(echo_proxy.address, timeout=GENEROUS)
    assert _echo(sock, b"a") == b"a"
    echo_proxy.blackhole(Direction.UP)
    sock.close()
    time.sleep(0.5)
    assert echo_proxy.open_connections == 1  # the server still holds its side
    echo_proxy.restore()
    deadline = time.monotonic() + GENEROUS
    while echo_proxy.open_connections:
        assert time.monotonic() < deadline, "the swallowed close never reached the server"
        time.sleep(0.05)
