"""Single bookie requests: add, read, batch read, read LAC, over v2 or v3.

Each function picks the connection the protocol rules call for (v2 for data
unless configured otherwise or the scope id is not 0; v3 for READ_LAC) and
hands back raw entry bytes: digest checks are the caller's business, because
what to verify (entry id or not) depends on the operation.  Return codes are
already typed errors when a response gets here (the connection applies
:func:`bkspark.protocol.correlation.response_error`); :meth:`BookieOps._request`
is the one "response -> result, error -> exception, callback -> future" step
of every awaitable operation.

This is the only module that writes requests to a :class:`BookieConnection`:
the write and read paths call :meth:`BookieOps.add` and :meth:`BookieOps.read`,
whose hot path (v2, connection open) is one table insert and one buffered
write, with the caller's shared callback and context passed straight through.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, Sequence

from bkspark.client.connection import V2, V3, BookieConnection, Callback, ManyCallback
from bkspark.client.payloads import PackedPayloads
from bkspark.client.pool import BookiePool
from bkspark.errors import BadRequestError, BookieTimeoutError, BookieUnavailableError
from bkspark.protocol import v2, v2_bulk, v3
from bkspark.protocol.correlation import add_key, add_keys, batch_read_key, read_key, read_keys
from bkspark.protocol.digest import Digester, DigestType
from bkspark.protocol.service_info import BATCH_READ_V3_EXTENSION
from bkspark.protocol.speedups import speedups as _speedups
from bkspark.protocol.v2 import FLAG_DO_FENCING, FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD

__all__ = ["BookieOps", "FLAG_DO_FENCING", "FLAG_RECOVERY_ADD", "FLAG_HIGH_PRIORITY"]

log = logging.getLogger(__name__)


class BookieOps:
    """Request primitives over a :class:`BookiePool`, shared by every ledger handle (loop thread)."""

    def __init__(self, pool: BookiePool, *, use_v2: bool, add_timeout: float, read_timeout: float) -> None:
        self.pool = pool
        self.use_v2 = use_v2
        self.add_timeout = add_timeout
        self.read_timeout = read_timeout

    def data_version(self, scope_id: int) -> str:
        """The connection kind adds and reads of this scope use."""
        return V2 if self.use_v2 and scope_id == 0 else V3

    def _with_conn(
        self, bookie_id: str, version: str, send: Callable[[BookieConnection], None], callback: Callback, arg: Any = None
    ) -> None:
        """Run ``send(conn)`` now if connected, else once the connection is up (or fail ``callback``)."""
        conn = self.pool.ready(bookie_id, version)
        if conn is not None:
            send(conn)
            return

        async def connect_then_send() -> None:
            try:
                c = await self.pool.get(bookie_id, version)
            except BaseException as exc:  # noqa: BLE001 - handed to the callback
                callback(None, exc, arg)
                return
            send(c)

        asyncio.ensure_future(connect_then_send())

    def _send_v2(
        self, bookie_id: str, key: tuple[int, ...], frame: bytes, timeout: float, callback: Callback, arg: Any
    ) -> None:
        """The v2 hot path: straight to the open connection (one table insert, one buffered write)."""
        conn = self.pool.ready(bookie_id, V2)
        if conn is not None:
            conn.send_v2(key, frame, timeout, callback, arg)
            return
        self._with_conn(bookie_id, V2, lambda c: c.send_v2(key, frame, timeout, callback, arg), callback, arg)

    async def _request(
        self,
        bookie_id: str,
        version: str,
        send: Callable[[BookieConnection, Callback], None],
        result: Callable[[Any, BaseException | None], Any],
    ) -> Any:
        """Send one request and wait: ``result(response, error)`` gives the value or raises.

        ``result`` is called with the error too when a response came with it (a
        non-OK return code), so an operation may still use what the response carries.
        """
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def on_response(resp: Any, exc: BaseException | None, _arg: Any) -> None:
            if fut.done():
                return
            if exc is not None and resp is None:
                fut.set_exception(exc)
                return
            try:
                fut.set_result(result(resp, exc))
            except BaseException as err:  # noqa: BLE001 - handed to the waiter
                fut.set_exception(err)

        self._with_conn(bookie_id, version, lambda conn: send(conn, on_response), on_response)
        return await fut

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
        callback: Callback,
        arg: Any = None,
        v2_frame: bytes | None = None,
    ) -> None:
        """Send one add; ``callback(response, error, arg)`` on the loop thread, error None on EOK.

        ``v2_frame`` lets the writer encode the (identical) v2 request once for
        the whole write set (:meth:`encode_v2_add`).
        """
        if self.use_v2 and scope_id == 0:
            frame = v2_frame if v2_frame is not None else self.encode_v2_add(master_key, entry, flags)
            self._send_v2(bookie_id, add_key(ledger_id, entry_id), frame, self.add_timeout, callback, arg)
            return

        def send(conn: BookieConnection) -> None:
            req = v3.add_request(conn.next_txn_id(), ledger_id, entry_id, master_key, entry, flags, scope_id=scope_id)
            conn.send_v3(req, self.add_timeout, callback, arg)

        self._with_conn(bookie_id, V3, send, callback, arg)

    @staticmethod
    def add_keys(ledger_id: int, entry_ids: "Iterable[int]") -> list[int]:
        """The table keys of v2 adds of ``entry_ids`` (one list a bulk append shares among its bookies)."""
        return add_keys(ledger_id, entry_ids)

    def add_v2_many(
        self, bookie_id: str, keys: list[int], frames: list[bytes], args: "Sequence[Any]",
        callback: Callback, many: ManyCallback | None = None,
    ) -> None:
        """Several v2 adds to one bookie, in entry order: ``keys`` from :meth:`add_keys`, ``frames`` from
        :meth:`encode_v2_adds`; one connection lookup.  Each answers through ``callback(response, error, arg)``
        with its own arg, exactly as :meth:`add` would, except that ``many(args)``, when given, takes the args
        of acknowledgements that came together (:meth:`BookieConnection.send_v2_many`)."""
        self._send_v2_many(bookie_id, keys, frames, args, callback, self.add_timeout, many)

    def read_v2_many(
        self, bookie_id: str, ledger_id: int, entry_ids: "Sequence[int]", args: "Sequence[Any]", callback: Callback,
        many: ManyCallback | None = None,
    ) -> None:
        """v2 reads of ``entry_ids`` (no fencing, scope 0) from one bookie, sent together; one connection lookup.
        Each answers through ``callback(response, error, arg)`` with its own arg, exactly as :meth:`read` would,
        except that ``many(pairs)``, when given, takes the ``(arg, stored entry)`` of successful answers that came
        together (:meth:`BookieConnection.send_v2_many`)."""
        keys = read_keys(ledger_id, entry_ids)
        frames = [v2_bulk.encode_read_requests(ledger_id, entry_ids)]  # one buffer: the connection only queues them
        self._send_v2_many(bookie_id, keys, frames, args, callback, self.read_timeout, many)

    def _send_v2_many(
        self, bookie_id: str, keys: "Sequence[Any]", frames: "Sequence[bytes]", args: "Sequence[Any]",
        callback: Callback, timeout: float, many: ManyCallback | None = None,
    ) -> None:
        """The bulk v2 hot path: every request to the open connection, or all of them once it is open (or
        all failed with it)."""

        def send_all(conn: BookieConnection) -> None:
            conn.send_v2_many(keys, frames, args, timeout, callback, many)

        conn = self.pool.ready(bookie_id, V2)
        if conn is not None:
            send_all(conn)
            return

        def fail_all(_response: Any, error: BaseException | None, _arg: Any) -> None:
            for arg in args:
                callback(None, error, arg)

        self._with_conn(bookie_id, V2, send_all, fail_all)

    @staticmethod
    def encode_v2_add(master_key: bytes, entry: bytes, flags: int) -> bytes:
        return v2.encode_add_request(flags, master_key, entry)

    @staticmethod
    def encode_v2_adds(
        digester: Digester,
        master_key: bytes,
        flags: int,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        length: int,
        payloads: "Sequence[bytes] | PackedPayloads",
    ) -> list[bytes]:
        """The ADDENTRY frames of ``payloads`` as scope-0 entries ``first_entry_id, ...`` (``length``: the ledger's
        length before them).  A CRC32C ledger's list of bytes, or its :class:`PackedPayloads` straight from their
        buffer, is packaged by one compiled call when it was built (docs/architecture.md, "Compiled fast path");
        the loop below, one :meth:`Digester.package_entry` and one :meth:`encode_v2_add` per entry, is the
        reference and reports every error."""
        if _speedups is not None and digester.digest_type is DigestType.CRC32C:
            header = v2.add_request_header(flags)
            frames = None
            if type(payloads) is list:
                frames = _speedups.v2_add_frames(header, master_key, ledger_id, first_entry_id, lac, length, payloads)
            elif type(payloads) is PackedPayloads:
                frames = _speedups.v2_add_frames_packed(
                    header, master_key, ledger_id, first_entry_id, lac, length, payloads.data, payloads.bounds
                )
            if frames is not None:
                return frames  # type: ignore[no-any-return]
        out: list[bytes] = []
        for entry_id, payload in enumerate(payloads, first_entry_id):
            length += len(payload)
            out.append(v2.encode_add_request(flags, master_key, digester.package_entry(ledger_id, entry_id, lac, length, payload)))
        return out

    # -- read -------------------------------------------------------------------------

    def read(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        scope_id: int,
        callback: Callback,
        arg: Any = None,
        *,
        flags: int = 0,
        master_key: bytes | None = None,
    ) -> None:
        """Read one stored entry (-1: the bookie's last); ``callback(response, error, arg)``.

        The entry bytes of a successful response are :func:`correlation.read_body`.
        """
        key_for_fence = master_key if flags & FLAG_DO_FENCING else None
        if self.use_v2 and scope_id == 0:
            frame = v2.encode_read_request(ledger_id, entry_id, flags, key_for_fence)
            self._send_v2(bookie_id, read_key(ledger_id, entry_id), frame, self.read_timeout, callback, arg)
            return

        def send(conn: BookieConnection) -> None:
            req = v3.read_request(
                conn.next_txn_id(), ledger_id, entry_id, flags, master_key=key_for_fence, scope_id=scope_id
            )
            conn.send_v3(req, self.read_timeout, callback, arg)

        self._with_conn(bookie_id, V3, send, callback, arg)

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
        version = self.data_version(scope_id)
        if not self.pool.supports_batch_read(bookie_id, version):
            return False
        return version == V2 or BATCH_READ_V3_EXTENSION in self.pool.extensions(bookie_id)

    async def batch_read_async(
        self, bookie_id: str, ledger_id: int, start: int, max_count: int, max_size: int, scope_id: int
    ) -> Sequence[bytes | memoryview]:
        """One batch read: the stored entries from ``start`` on (possibly fewer than asked); over v2 a
        :class:`bkspark.protocol.v2.BatchItems`.

        A v3 bookie that turns out not to know our batch read is remembered in the
        pool, and :meth:`can_batch_read` says no from then on: Java >= 4.17 answers
        EBADREQ, Java < 4.17 fails to parse the request and closes the connection
        (docs/extensions.md §3.2).
        """
        timeout = self.read_timeout
        if self.data_version(scope_id) == V2:

            def send_v2(conn: BookieConnection, cb: Callback) -> None:
                request_id = conn.next_txn_id()
                frame = v2.encode_batch_read_request(ledger_id, start, request_id, max_count, max_size)
                conn.send_v2(batch_read_key(request_id), frame, timeout, cb)

            return await self._request(bookie_id, V2, send_v2, _v2_batch_entries)

        sent = False

        def send_v3(conn: BookieConnection, cb: Callback) -> None:
            nonlocal sent
            req = v3.batch_read_request(conn.next_txn_id(), ledger_id, start, max_count, max_size, scope_id=scope_id)
            sent = not conn.closed  # a closed connection fails the request before it leaves
            conn.send_v3(req, timeout, cb)

        try:
            return await self._request(bookie_id, V3, send_v3, _v3_batch_entries)
        except BookieTimeoutError:
            raise  # slow, not ignorant
        except (BadRequestError, BookieUnavailableError):
            if sent:  # EBADREQ, or a hang-up while our request was out (not a failed connect)
                log.info("bookie %s does not serve v3 batch reads: using single reads with it", bookie_id)
                self.pool.note_no_batch_read(bookie_id, V3)
            raise

    # -- read LAC (v3 only) -------------------------------------------------------------

    async def read_lac_async(
        self, bookie_id: str, ledger_id: int, scope_id: int
    ) -> tuple[bytes | None, bytes | None]:
        """READ_LAC: ``(explicit LAC blob or None, last entry or None)``; raises on errors.

        A bookie may answer a non-OK status and still carry one of the two: that counts.
        """

        def result(resp: Any, exc: BaseException | None) -> tuple[Any, Any]:
            r = resp.readLacResponse
            lac_body = r.lacBody if r.HasField("lacBody") else None
            last = r.lastEntryBody if r.HasField("lastEntryBody") else None
            if exc is not None and lac_body is None and last is None:
                raise exc
            return lac_body, last

        def send(conn: BookieConnection, cb: Callback) -> None:
            conn.send_v3(v3.read_lac_request(conn.next_txn_id(), ledger_id, scope_id=scope_id), self.read_timeout, cb)

        return await self._request(bookie_id, V3, send, result)  # type: ignore[no-any-return]

    # -- other v3-only operations ------------------------------------------------------------

    async def v3_call(self, bookie_id: str, build: Callable[[int], "v3.pb.Request"], timeout: float | None = None) -> Any:
        """Send ``build(txn_id)`` on the bookie's v3 connection; the response, or the status as an error."""

        def send(conn: BookieConnection, cb: Callback) -> None:
            conn.send_v3(build(conn.next_txn_id()), timeout or self.read_timeout, cb)

        return await self._request(bookie_id, V3, send, _ok_response)

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


def _ok_response(resp: Any, exc: BaseException | None) -> Any:
    if exc is not None:
        raise exc
    return resp


def _v2_batch_entries(resp: Any, exc: BaseException | None) -> Sequence[Any]:
    if exc is not None:
        raise exc
    return resp.entries  # type: ignore[no-any-return] - a BatchItems: cut into views only if the reader asks


def _v3_batch_entries(resp: Any, exc: BaseException | None) -> list[Any]:
    if exc is not None:
        raise exc
    return list(resp.batchReadResponse.entries)
