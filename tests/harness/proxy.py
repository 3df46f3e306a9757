"""A fault-injecting TCP proxy for tests: one in front of each bookie, one in front of ZooKeeper.

asyncpg keeps a ``TCPFuzzingProxy`` for its whole suite; this is ours (docs/reliability.md, "The fault proxy").
Every connection accepted on :attr:`FaultProxy.port` is forwarded to ``target``; at any moment, from any thread,
a test may, in either direction (:class:`Direction`):

* ``delay(seconds)``      hold every chunk ``seconds`` before forwarding it (order kept, throughput not capped);
* ``rate(bytes_per_s)``   forward at most that many bytes a second;
* ``fragment(max_bytes)`` forward every chunk cut into pieces of 1 to ``max_bytes`` bytes (seeded sizes), each
                          written on its own: frames arrive cut at every kind of place, at full speed;
* ``blackhole()``         read and discard every byte (connections stay open: the peer hears nothing);
* ``drop()``              close every open connection cleanly (FIN both ways);
* ``reset()``             close every open connection with a TCP RST;
* ``half_open()``         close the server side of every connection but keep the client side open and silent
                          (the client believes it is connected, the server saw it go);
* ``refuse()``            reset every new connection at once (a server that is down);
* ``restore()``           lift every standing fault (delay, rate, black hole, refusal); open connections live on.

How clients reach a bookie through its proxy, with nothing patched: the bookie registers with a custom BookieId
equal to the proxy's address (``bookieId=127.0.0.1:<proxy port>``, BP-41) while it listens on its own port, and
clients run with ``bookieAddressResolverEnabled=false`` (Apache BookKeeper's setting, honoured by both its Java
client and bkspark's): a BookieId is then dialled as the ``host:port`` it spells, i.e. the proxy. ZooKeeper
clients simply connect to the ZooKeeper proxy's port.
"""

from __future__ import annotations

import asyncio
import enum
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

__all__ = ["Direction", "FaultProxy", "proxied_bookie_id"]

T = TypeVar("T")

#: Bytes read from a socket at a time.
_CHUNK = 65536
#: Seconds a control call waits for the proxy's loop to apply it.
_CONTROL_TIMEOUT = 10.0


class Direction(enum.Flag):
    """Which way a fault applies: UP is client -> server, DOWN is server -> client."""

    UP = enum.auto()
    DOWN = enum.auto()
    BOTH = UP | DOWN


def proxied_bookie_id(proxy: "FaultProxy") -> str:
    """The BookieId under which a bookie behind ``proxy`` registers, so that clients that do not resolve
    addresses (``bookieAddressResolverEnabled=false``) dial the proxy."""
    return f"127.0.0.1:{proxy.port}"


@dataclass
class _Faults:
    """Standing faults of one direction (read and written on the proxy's loop thread only)."""

    delay: float = 0.0
    rate: float | None = None
    blackhole: bool = False
    #: Largest piece a chunk is cut into (0: chunks go as they came); sizes drawn from ``rng``.
    fragment: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(0))


@dataclass(eq=False)
class _Link:
    """One proxied connection: the client's side and (once connected) the server's side."""

    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    server_writer: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    half_open: bool = False
    #: Sides whose peer closed while a black hole swallowed the close: closed when the black hole is lifted, as
    #: TCP sends a FIN again until it is acknowledged (a lifted black hole delivers it).
    swallowed_closes: list[asyncio.StreamWriter] = field(default_factory=list)


def _close_quietly(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except (ConnectionError, OSError, RuntimeError):
        pass


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with a TCP RST (SO_LINGER 0) rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class FaultProxy:
    """A TCP proxy to ``target`` (``(host, port)``, settable later through :attr:`target`) running its own
    asyncio loop on a daemon thread; see the module docstring for the faults. ``listen_port=0`` picks a free
    port. Use as a context manager or call :meth:`close`."""

    def __init__(self, target: tuple[str, int] | None = None, *, listen_port: int = 0, name: str = "proxy") -> None:
        self.target = target
        self.name = name
        self._faults = {Direction.UP: _Faults(), Direction.DOWN: _Faults()}
        self._refusing = False
        self._links: set[_Link] = set()
        self.connections_accepted = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(ready, listen_port), name=f"fault-proxy-{name}", daemon=True
        )
        self._thread.start()
        if not ready.wait(_CONTROL_TIMEOUT) or self._startup_error is not None:
            raise RuntimeError(f"fault proxy {name} did not start: {self._startup_error}")

    # -- loop thread ------------------------------------------------------------------------------------------------

    def _run(self, ready: threading.Event, listen_port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, "127.0.0.1", listen_port, reuse_address=True)
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor
            self._startup_error = exc
            ready.set()
            return
        ready.set()
        self._loop.run_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        if self._refusing or self.target is None:
            _rst(writer)
            return
        link = _Link(reader, writer)
        self._links.add(link)
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._links.discard(link)
            _rst(writer)
            return
        link.server_writer = server_writer
        if self._refusing:  # refused while we were connecting
            self._kill(link, rst=True)
            return
        link.tasks = [
            asyncio.ensure_future(self._pump(link, reader, server_writer, Direction.UP)),
            asyncio.ensure_future(self._pump(link, server_reader, writer, Direction.DOWN)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        self._links.discard(link)

    async def _pump(
        self, link: _Link, src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: Direction
    ) -> None:
        """Forward one direction: a reader task feeds (due time, bytes) into a queue that the writer drains, so a
        delay shifts every chunk without adding up across chunks."""
        faults = self._faults[direction]
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def write_side() -> None:
            while (item := await queue.get()) is not None:
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if faults.fragment and not faults.rate:
                    view = memoryview(data)
                    while view:
                        size = faults.rng.randint(1, faults.fragment)
                        dst.write(view[:size])
                        view = view[size:]
                        await dst.drain()
                        await asyncio.sleep(0)  # the next piece in a write of its own
                    data = b""
                while data:
                    if faults.rate:
                        step = max(1, int(faults.rate * 0.05))  # about 20 writes a second
                        piece, data = data[:step], data[step:]
                        dst.write(piece)
                        await dst.drain()
                        await asyncio.sleep(len(piece) / faults.rate)
                    else:
                        dst.write(data)
                        await dst.drain()
                        data = b""

        writer_task = asyncio.ensure_future(write_side())
        try:
            while data := await src.read(_CHUNK):
                if faults.blackhole or link.half_open:
                    continue
                queue.put_nowait((time.monotonic() + faults.delay, data))
            queue.put_nowait(None)
            await writer_task
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            writer_task.cancel()
            # A black hole or a half-open cut swallows the close too: the peer hears nothing at all (until the
            # black hole is lifted; a half-open cut stays cut).
            if faults.blackhole and not link.half_open:
                link.swallowed_closes.append(dst)
            elif not link.half_open:
                _close_quietly(dst)

    def _kill(self, link: _Link, rst: bool) -> None:
        for task in link.tasks:
            task.cancel()
        for writer in (link.client_writer, link.server_writer):
            if writer is None:
                continue
            if rst:
                _rst(writer)
            else:
                writer.close()
        self._links.discard(link)

    # -- control (any thread) ---------------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return self._submit(run())

    def _submit(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("fault proxy controlled from its own loop")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CONTROL_TIMEOUT)

    def _set(self, direction: Direction, **values: object) -> None:
        def apply() -> None:
            for d in (Direction.UP, Direction.DOWN):
                if d in direction:
                    for key, value in values.items():
                        setattr(self._faults[d], key, value)

        self._call(apply)

    def delay(self, seconds: float, direction: Direction = Direction.BOTH) -> None:
        """Hold every chunk ``seconds`` before forwarding it (0 lifts the delay)."""
        self._set(direction, delay=float(seconds))

    def rate(self, bytes_per_second: float | None, direction: Direction = Direction.BOTH) -> None:
        """Forward at most ``bytes_per_second`` (None lifts the cap)."""
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError("rate must be positive (use blackhole() to stop traffic)")
        self._set(direction, rate=bytes_per_second)

    def fragment(self, max_bytes: int, direction: Direction = Direction.BOTH, seed: int = 0) -> None:
        """Forward every chunk cut into pieces of 1 to ``max_bytes`` bytes, sizes drawn from ``seed``, each piece a
        write of its own (0 lifts it).  The peer's reads then end inside frames, wherever the cuts fall.  A byte-rate
        cap (:meth:`rate`) set as well takes over: it writes its own pieces."""
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self._set(direction, fragment=int(max_bytes), rng=random.Random(seed))

    def blackhole(self, direction: Direction = Direction.BOTH) -> None:
        """Discard every byte that arrives from now on (connections stay open)."""
        self._set(direction, blackhole=True)

    def drop(self) -> int:
        """Close every open connection with a FIN both ways; the number closed."""
        return self._call(lambda: self._kill_all(rst=False))

    def reset(self) -> int:
        """Close every open connection with a TCP RST both ways; the number reset."""
        return self._call(lambda: self._kill_all(rst=True))

    def half_open(self) -> int:
        """Close the server side of every open connection, keep the client side open and silent; the number cut."""

        def cut() -> int:
            links = [link for link in self._links if link.server_writer is not None and not link.half_open]
            for link in links:
                link.half_open = True
                assert link.server_writer is not None
                link.server_writer.close()
            return len(links)

        return self._call(cut)

    def refuse(self) -> None:
        """Reset every new connection at once, and every open one now (the server looks down)."""

        def apply() -> None:
            self._refusing = True
            self._kill_all(rst=True)

        self._call(apply)

    def restore(self) -> None:
        """Lift every standing fault: delay, rate, fragmenting, black hole, refusal (open connections live on; half-open ones
        stay cut, as a real half-open connection does). Open connections are healed too: their directions' faults
        are reset in place (each connection's pumps hold them), and a close a black hole swallowed is delivered."""

        def apply() -> None:
            self._refusing = False
            for d in (Direction.UP, Direction.DOWN):
                healed = _Faults()
                for f in fields(_Faults):
                    setattr(self._faults[d], f.name, getattr(healed, f.name))
            for link in self._links:
                while link.swallowed_closes:
                    _close_quietly(link.swallowed_closes.pop())

        self._call(apply)

    def _kill_all(self, rst: bool) -> int:
        links = list(self._links)
        for link in links:
            self._kill(link, rst)
        return len(links)

    @property
    def open_connections(self) -> int:
        """Connections being forwarded now."""
        return self._call(lambda: len(self._links))

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect: ``("127.0.0.1", port)``."""
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        """Stop listening, reset every connection and stop the loop thread."""
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            self._kill_all(rst=True)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self._submit(shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CONTROL_TIMEOUT)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaultProxy({self.name}: 127.0.0.1:{self.port} -> {self.target})"
