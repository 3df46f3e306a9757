"""Connections to every bookie the client talks to, opened on demand and reopened after loss.

One v2 connection per bookie for data (adds, reads, batch reads) and one v3
connection per bookie for what v2 cannot express (READ_LAC, WRITE_LAC,
FORCE_LEDGER, GET_BOOKIE_INFO, GET_LIST_OF_ENTRIES) and for scope ids != 0,
as the Java client keeps its "v3 enforced" pool beside the v2 one.  With
``useV2WireProtocol=false`` everything goes over the v3 connection.

Addresses come from the :class:`BookieRegistry` (BP-41); a connection that
fails makes the registry forget the cached address so the next attempt
re-reads the bookie's registration.  The pool also remembers which bookies
cannot serve batch reads: pre-4.17 bookies close the connection on v2 opcode 7,
and bookies without our v3 batch read answer EBADREQ or hang up (``BookieOps``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Protocol

from bkspark.client.connection import V2, V3, BookieConnection
from bkspark.client.secure import secure_connection
from bkspark.security.auth import ClientSecurity
from bkspark.errors import BookieUnavailableError, ClientClosedError

__all__ = ["AddressResolver", "BookiePool"]

log = logging.getLogger(__name__)


class AddressResolver(Protocol):
    """What the pool needs from the registry (so tests can pass a dict-backed fake)."""

    def resolve(self, bookie_id: str) -> tuple[str, int]: ...

    def forget(self, bookie_id: str) -> None: ...

    def extensions(self, bookie_id: str) -> frozenset[str]: ...


class BookiePool:
    """Per-bookie v2 / v3 connections, owned by the client's event loop."""

    def __init__(
        self,
        resolver: AddressResolver,
        *,
        max_frame_size: int,
        connect_timeout: float = 10.0,
        executor: concurrent.futures.Executor | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.resolver = resolver
        #: Where the (blocking, ZooKeeper-backed) address resolution runs; None: the loop's default.
        self.executor = executor
        #: START_TLS and SASL before a connection is used (docs/security.md); None: plain connections.
        self.security = security if security is not None and security.enabled else None
        self.max_frame_size = max_frame_size
        self.connect_timeout = connect_timeout
        self._conns: dict[tuple[str, str], BookieConnection] = {}
        self._connecting: dict[tuple[str, str], asyncio.Future[BookieConnection]] = {}
        #: Bookies that cannot serve batch reads, per connection kind (v2: pre-4.17 hung up on
        #: opcode 7; v3: EBADREQ or a hang-up on our v3 batch read).
        self.batch_unsupported: dict[str, set[str]] = {V2: set(), V3: set()}
        #: bookie id -> monotonic time of its last failure (read ordering, quarantine-like hints).
        self.failure_history: dict[str, float] = {}
        self._closed = False

    def ready(self, bookie_id: str, version: str) -> BookieConnection | None:
        """The open connection, if there is one (hot path: no await)."""
        conn = self._conns.get((bookie_id, version))
        if conn is not None and not conn.closed:
            return conn
        return None

    async def get(self, bookie_id: str, version: str) -> BookieConnection:
        """An open connection of the given version; raises :class:`BookieUnavailableError`."""
        if self._closed:
            raise ClientClosedError("client is closed")
        key = (bookie_id, version)
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(bookie_id, version))
            self._connecting[key] = pending
            pending.add_done_callback(lambda _f, k=key: self._connecting.pop(k, None))
        return await asyncio.shield(pending)

    async def _connect(self, bookie_id: str, version: str) -> BookieConnection:
        loop = asyncio.get_running_loop()
        try:
            host, port = await loop.run_in_executor(self.executor, self.resolver.resolve, bookie_id)
        except BookieUnavailableError:
            self.note_failure(bookie_id)
            raise
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: BookieConnection(
                        bookie_id, version, max_frame_size=self.max_frame_size, on_lost=self._lost
                    ),
                    host,
                    port,
                ),
                self.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            self.resolver.forget(bookie_id)
            self.note_failure(bookie_id)
            raise BookieUnavailableError(
                "cannot connect to bookie", bookie_id=bookie_id, address=f"{host}:{port}", error=str(exc) or type(exc).__name__
            ) from None
        if self.security is not None:
            try:
                await secure_connection(conn, self.security, host, self.connect_timeout)
            except BookieUnavailableError:
                self.note_failure(bookie_id)
                raise
        if self._closed:
            conn.close()
            raise ClientClosedError("client is closed")
        self._conns[(bookie_id, version)] = conn
        return conn

    def _lost(self, conn: BookieConnection, exc: BaseException | None) -> None:
        key = (conn.bookie_id, conn.version)
        if self._conns.get(key) is conn:
            del self._conns[key]
        if conn.lost_during_batch_read:
            # A pre-4.17 bookie closes the connection on v2 opcode 7 (docs/protocol.md §2).
            log.info("bookie %s hung up on a batch read: using single reads with it", conn.bookie_id)
            self.note_no_batch_read(conn.bookie_id, V2)
        self.resolver.forget(conn.bookie_id)

    def note_failure(self, bookie_id: str) -> None:
        self.failure_history[bookie_id] = time.monotonic()

    def failures_since(self, window_s: float) -> dict[str, int]:
        """Recent failures as the placement policy expects them (bookie -> ordinal, older first)."""
        now = time.monotonic()
        recent = sorted((t, b) for b, t in self.failure_history.items() if now - t <= window_s)
        return {b: i for i, (_, b) in enumerate(recent)}

    def note_no_batch_read(self, bookie_id: str, version: str) -> None:
        """Remember that ``bookie_id`` cannot serve batch reads over ``version`` (until it re-registers)."""
        self.batch_unsupported[version].add(bookie_id)

    def supports_batch_read(self, bookie_id: str, version: str = V2) -> bool:
        return bookie_id not in self.batch_unsupported[version]

    def extensions(self, bookie_id: str) -> frozenset[str]:
        try:
            return self.resolver.extensions(bookie_id)
        except Exception:
            return frozenset()

    def drop(self, bookie_id: str) -> None:
        """Close both connections to a bookie (its registration changed: it restarted or moved).

        A restarted bookie may have been upgraded, so its "no batch reads" mark goes too.
        """
        for version in (V2, V3):
            self.batch_unsupported[version].discard(bookie_id)
            conn = self._conns.pop((bookie_id, version), None)
            if conn is not None:
                conn.close()

    async def close(self) -> None:
        """Close every connection; requests still waiting fail."""
        self._closed = True
        for fut in list(self._connecting.values()):
            fut.cancel()
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.sleep(0)
