"""The bookie's listener: one asyncio event loop, v2 and v3 on one port, one :class:`Connection` per client.

The server owns what all connections share: the in-flight gates of adds, reads and long polls, the limit log,
the TLS/SASL set-up, and the sweeper that closes idle connections and ones stuck in a partial frame
(docs/bookie.md, "Limits").  What happens on one connection is in its rooms (docs/architecture.md, "The bookie"):

* :mod:`bookie_server.connection` -- framing, v2/v3 detection, dispatch, the write buffer;
* :mod:`bookie_server.admission` -- the bounds a connection waits for before dispatching a request;
* :mod:`bookie_server.v2_handlers` and :mod:`bookie_server.v3_handlers` -- the requests of each protocol;
* :mod:`bookie_server.security` -- START_TLS and SASL, through the connection's public hand-off methods.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from bkspark.config.bookie import BookieConfig

from bookie_server.bookie import Bookie
from bookie_server.connection import Connection
from bookie_server.limits import InFlightGate, LimitLog
from bookie_server.metrics import BookieMetrics
from bookie_server.security import BookieSecurity

__all__ = ["BookieServer"]

log = logging.getLogger("bookie_server.server")

#: Longest pause between two sweeps for idle connections and stalled partial frames.
_SWEEP_INTERVAL_S = 1.0


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
        self.connections: set[Connection] = set()
        #: Bytes of unfinished frames every connection's splitter holds together (``serverPartialFramesMaxBytes``).
        self.partial_frame_bytes = 0
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
            self._server = await loop.create_server(lambda: Connection(self), sock=sock)
        else:
            self._server = await loop.create_server(
                lambda: Connection(self), self.conf.bindAddress, self.conf.bookiePort, reuse_address=True, backlog=1024
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
            for conn in list(self.connections):
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
        for conn in list(self.connections):
            conn.close()
        await asyncio.sleep(0)


