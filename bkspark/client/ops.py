"""Single bookie requests: add, read, batch read, read LAC, over v2 or v3.

Each function picks the connection the protocol rules call for (v2 for data
unless configured otherwise or the scope id is not 0; v3 for READ_LAC), turns a
non-OK return code into the registered :mod:`bkspark.errors` class, and hands
back raw entry bytes: digest checks are the caller's business, because what to
verify (entry id or not) depends on the operation.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from bkspark.client.connection import OP_ADD, OP_BATCH_READ, OP_READ, V2, V3, BookieConnection, Callback
from bkspark.client.pool import BookiePool
from bkspark.errors import (
    BKError,
    IllegalOpError,
    MalformedFrameError,
    error_for_rc,
    error_for_status,
)
from bkspark.protocol import v2, v3

__all__ = ["BookieOps", "FLAG_DO_FENCING", "FLAG_RECOVERY_ADD", "FLAG_HIGH_PRIORITY", "v2_error"]

FLAG_DO_FENCING = 0x0001
FLAG_RECOVERY_ADD = 0x0002
FLAG_HIGH_PRIORITY = 0x0004

_EOK = 0


def v2_error(rc: int, bookie_id: str, **ctx: Any) -> BKError:
    """The registered error for a v2 ``rc`` from ``bookie_id``."""
    return error_for_rc(rc)(f"bookie answered rc={rc}", bookie_id=bookie_id, **ctx)


def _v3_error(status: int, bookie_id: str, **ctx: Any) -> BKError:
    return error_for_status(status)(f"bookie answered status={status}", bookie_id=bookie_id, **ctx)


class BookieOps:
    """Request primitives over a :class:`BookiePool`, shared by every ledger handle."""

    def __init__(self, pool: BookiePool, *, use_v2: bool, add_timeout: float, read_timeout: float) -> None:
        self.pool = pool
        self.use_v2 = use_v2
        self.add_timeout = add_timeout
        self.read_timeout = read_timeout

    def data_version(self, scope_id: int) -> str:
        """The connection kind adds and reads of this scope use."""
        return V2 if self.use_v2 and scope_id == 0 else V3

    def _with_conn(self, bookie_id: str, version: str, send: Callable[[BookieConnection], None], callback: Callback) -> None:
        """Run ``send(conn)`` now if connected, else once the connection is up."""
        conn = self.pool.ready(bookie_id, version)
        if conn is not None:
            send(conn)
            return

        async def connect_then_send() -> None:
            try:
                c = await self.pool.get(bookie_id, version)
            except BaseException as exc:  # noqa: BLE001 - handed to the callback
                callback(None, exc)
                return
            send(c)

        asyncio.ensure_future(connect_then_send())

    # -- add ------------------------------------------------------------------------

    def add(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        entry: bytes,
        flags: int,
        scope_id: int,
        callback: Callable[[BaseException | None], None],
        v2_frame: bytes | None = None,
    ) -> None:
        """Send one add; ``callback(None)`` on EOK, ``callback(error)`` otherwise.

        ``v2_frame`` lets the writer encode the (identical) v2 request once for
        the whole write set.
        """
        version = self.data_version(scope_id)

        def on_response(resp: Any, exc: BaseException | None) -> None:
            if exc is not None:
                callback(exc)
            elif version == V2:
                callback(None if resp.rc == _EOK else v2_error(resp.rc, bookie_id, entry_id=entry_id))
            else:
                try:
                    status = v3.response_status(resp)
                except MalformedFrameError as err:
                    callback(err)
                    return
                callback(None if status == _EOK else _v3_error(status, bookie_id, entry_id=entry_id))

        if version == V2:
            frame = v2_frame if v2_frame is not None else self.encode_v2_add(master_key, entry, flags)

            def send(conn: BookieConnection) -> None:
                conn.send_v2((ledger_id, entry_id, OP_ADD), frame, self.add_timeout, on_response)
        else:

            def send(conn: BookieConnection) -> None:
                req = v3.add_request(
                    conn.next_txn_id(), ledger_id, entry_id, master_key, entry, flags, scope_id=scope_id
                )
                conn.send_v3(req, self.add_timeout, on_response)

        self._with_conn(bookie_id, version, send, on_response)

    @staticmethod
    def encode_v2_add(master_key: bytes, entry: bytes, flags: int) -> bytes:
        return v2.encode_add_request(flags, master_key, entry)

    # -- read -------------------------------------------------------------------------

    def read(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        scope_id: int,
        callback: Callable[[bytes | memoryview | None, int | None, BaseException | None], None],
        *,
        flags: int = 0,
        master_key: bytes | None = None,
    ) -> None:
        """Read one stored entry (-1: the bookie's last); ``callback(data, max_lac, error)``."""
        version = self.data_version(scope_id)
        if version == V2 and scope_id != 0:
            callback(None, None, IllegalOpError("scope ids need the v3 protocol"))
            return

        def on_response(resp: Any, exc: BaseException | None) -> None:
            if exc is not None:
                callback(None, None, exc)
            elif version == V2:
                if resp.rc != _EOK:
                    callback(None, None, v2_error(resp.rc, bookie_id, ledger_id=ledger_id, entry_id=entry_id))
                else:
                    callback(resp.entry, None, None)
            else:
                try:
                    status = v3.response_status(resp)
                except MalformedFrameError as err:
                    callback(None, None, err)
                    return
                if status != _EOK:
                    callback(None, None, _v3_error(status, bookie_id, ledger_id=ledger_id, entry_id=entry_id))
                else:
                    r = resp.readResponse
                    callback(r.body, r.maxLAC if r.HasField("maxLAC") else None, None)

        if version == V2:
            frame = v2.encode_read_request(ledger_id, entry_id, flags, master_key if flags & FLAG_DO_FENCING else None)

            def send(conn: BookieConnection) -> None:
                conn.send_v2((ledger_id, entry_id, OP_READ), frame, self.read_timeout, on_response)
        else:

            def send(conn: BookieConnection) -> None:
                req = v3.read_request(
                    conn.next_txn_id(),
                    ledger_id,
                    entry_id,
                    flags,
                    master_key=master_key if flags & FLAG_DO_FENCING else None,
                    scope_id=scope_id,
                )
                conn.send_v3(req, self.read_timeout, on_response)

        self._with_conn(bookie_id, version, send, on_response)

    async def read_async(
        self, bookie_id: str, ledger_id: int, entry_id: int, scope_id: int, *, flags: int = 0, master_key: bytes | None = None
    ) -> tuple[bytes | memoryview, int | None]:
        """Awaitable :meth:`read`: ``(data, max_lac)`` or raises."""
        fut: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()

        def done(data: Any, max_lac: Any, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result((data, max_lac))

        self.read(bookie_id, ledger_id, entry_id, scope_id, done, flags=flags, master_key=master_key)
        return await fut

    async def long_poll_lac_async(
        self, bookie_id: str, ledger_id: int, scope_id: int, previous_lac: int, timeout_ms: int
    ) -> tuple[bytes | None, int | None]:
        """Long-poll LAC read over v3 (Java's ``readEntryWaitForLACUpdate`` with piggyback).

        The bookie answers once its LAC passes ``previous_lac`` or ``timeout_ms``
        ends: ``(entry previous_lac + 1 or None, the bookie's LAC or None)``.
        The request's own deadline is the poll's plus ``read_timeout``.
        """
        resp = await self.v3_call(
            bookie_id,
            lambda txn: v3.read_request(
                txn, ledger_id, -1, previous_lac=previous_lac, timeout_ms=timeout_ms, piggyback=True, scope_id=scope_id
            ),
            self.read_timeout + timeout_ms / 1000.0,
        )
        r = resp.readResponse
        body = r.body if r.HasField("body") and len(r.body) else None
        return body, (r.maxLAC if r.HasField("maxLAC") else None)

    # -- batch read -------------------------------------------------------------------

    def can_batch_read(self, bookie_id: str, scope_id: int) -> bool:
        """Whether this bookie can serve one batch request for this scope."""
        if not self.pool.supports_batch_read(bookie_id):
            return False
        if self.data_version(scope_id) == V2:
            return True
        return "batch-read-v3" in self.pool.extensions(bookie_id)

    async def batch_read_async(
        self, bookie_id: str, ledger_id: int, start: int, max_count: int, max_size: int, scope_id: int
    ) -> list[bytes | memoryview]:
        """One batch read: the stored entries from ``start`` on (possibly fewer than asked)."""
        version = self.data_version(scope_id)
        fut: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()

        def on_response(resp: Any, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            elif version == V2:
                if resp.rc != _EOK:
                    fut.set_exception(v2_error(resp.rc, bookie_id, ledger_id=ledger_id, entry_id=start))
                else:
                    fut.set_result(list(resp.entries))
            else:
                try:
                    status = v3.response_status(resp)
                except MalformedFrameError as err:
                    fut.set_exception(err)
                    return
                if status != _EOK:
                    fut.set_exception(_v3_error(status, bookie_id, ledger_id=ledger_id, entry_id=start))
                else:
                    fut.set_result(list(resp.batchReadResponse.entries))

        if version == V2:

            def send(conn: BookieConnection) -> None:
                request_id = conn.next_txn_id()
                frame = v2.encode_batch_read_request(ledger_id, start, request_id, max_count, max_size)
                conn.send_v2((request_id, OP_BATCH_READ), frame, self.read_timeout, on_response)
        else:

            def send(conn: BookieConnection) -> None:
                req = v3.batch_read_request(conn.next_txn_id(), ledger_id, start, max_count, max_size, scope_id=scope_id)
                conn.send_v3(req, self.read_timeout, on_response)

        self._with_conn(bookie_id, version, send, on_response)
        return await fut

    # -- read LAC (v3 only) -------------------------------------------------------------

    async def read_lac_async(
        self, bookie_id: str, ledger_id: int, scope_id: int
    ) -> tuple[bytes | None, bytes | None]:
        """READ_LAC: ``(explicit LAC blob or None, last entry or None)``; raises on errors."""
        fut: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()

        def on_response(resp: Any, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
                return
            try:
                status = v3.response_status(resp)
            except MalformedFrameError as err:
                fut.set_exception(err)
                return
            r = resp.readLacResponse
            lac_body = r.lacBody if r.HasField("lacBody") else None
            last = r.lastEntryBody if r.HasField("lastEntryBody") else None
            if status != _EOK and lac_body is None and last is None:
                fut.set_exception(_v3_error(status, bookie_id, ledger_id=ledger_id))
            else:
                fut.set_result((lac_body, last))

        def send(conn: BookieConnection) -> None:
            conn.send_v3(v3.read_lac_request(conn.next_txn_id(), ledger_id, scope_id=scope_id), self.read_timeout, on_response)

        self._with_conn(bookie_id, V3, send, on_response)
        return await fut

    # -- other v3-only operations ------------------------------------------------------------

    async def v3_call(self, bookie_id: str, build: Callable[[int], "v3.pb.Request"], timeout: float | None = None) -> Any:
        """Send ``build(txn_id)`` on the bookie's v3 connection; the response, or the status as an error."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def on_response(resp: Any, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
                return
            try:
                status = v3.response_status(resp)
            except MalformedFrameError as err:
                fut.set_exception(err)
                return
            if status != _EOK:
                fut.set_exception(_v3_error(status, bookie_id, operation=resp.header.operation))
            else:
                fut.set_result(resp)

        def send(conn: BookieConnection) -> None:
            conn.send_v3(build(conn.next_txn_id()), timeout or self.read_timeout, on_response)

        self._with_conn(bookie_id, V3, send, on_response)
        return await fut

    async def write_lac_async(
        self, bookie_id: str, ledger_id: int, lac: int, master_key: bytes, blob: bytes, scope_id: int
    ) -> None:
        """WRITE_LAC: store the explicit-LAC blob on one bookie."""
        await self.v3_call(
            bookie_id, lambda txn: v3.write_lac_request(txn, ledger_id, lac, master_key, blob, scope_id=scope_id),
            self.add_timeout,
        )

    async def force_ledger_async(self, bookie_id: str, ledger_id: int, scope_id: int) -> None:
        """FORCE_LEDGER: make the bookie fsync what it holds of the ledger."""
        await self.v3_call(bookie_id, lambda txn: v3.force_ledger_request(txn, ledger_id, scope_id=scope_id), self.add_timeout)

    async def bookie_info_async(self, bookie_id: str) -> tuple[int, int]:
        """GET_BOOKIE_INFO: ``(total disk capacity, free disk space)`` in bytes."""
        resp = await self.v3_call(bookie_id, lambda txn: v3.get_bookie_info_request(txn))
        info = resp.getBookieInfoResponse
        return info.totalDiskCapacity, info.freeDiskSpace

    async def list_entries_async(self, bookie_id: str, ledger_id: int, scope_id: int) -> list[int]:
        """GET_LIST_OF_ENTRIES_OF_LEDGER: the entry ids the bookie stores for the ledger."""
        resp = await self.v3_call(bookie_id, lambda txn: v3.get_list_of_entries_request(txn, ledger_id, scope_id=scope_id))
        return v3.decode_availability(resp.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger)
